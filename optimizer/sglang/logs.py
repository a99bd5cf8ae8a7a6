"""What SGLang's server log says, and what each line means (docs/sglang.md): the ready line, the fatal lines (ranked:
the most specific cause first) and the start-up phases. The readiness check reads these; the simulator writes them.

Wording is SGLang 0.5.17's (tests/data/sglang-0.5.17-h200/server_logs.txt).
"""

from __future__ import annotations

import re

READY_LINE = "The server is fired up and ready to roll!"

# ---------------------------------------------------------------------- fatal lines
NOT_ENOUGH_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."
CUDA_GRAPH_FAILED = "Capture cuda graph failed"
SCHEDULER_EXCEPTION = "Scheduler hit an exception"
CHILD_SIGQUIT = "Received sigquit from a child process"  # ". It usually means the child failed."
SCHEDULER_DIED = "scheduler died during initialization"
ILLEGAL_MEMORY_ACCESS = "illegal memory access"  # in "CUDA error: an illegal memory access was encountered"
WARMUP_FAILED = "Initialization failed. warmup error"

#: (kind, pattern), most specific first: SGLang logs the root cause (e.g. 'Not enough memory') inside the traceback
#: that follows 'Scheduler hit an exception', so a watcher keeps the best-ranked line it has seen. A Python
#: traceback alone is not fatal (SGLang logs handled ones), but one that ends in ValueError/AssertionError during
#: start-up is a rejected flag combination.
FATAL_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("oom", re.compile(re.escape(NOT_ENOUGH_MEMORY.rstrip(".")))),  # with or without the full stop,
    ("oom", re.compile(r"CUDA out of memory|torch\.OutOfMemoryError")),
    ("cuda_graph", re.compile(re.escape(CUDA_GRAPH_FAILED))),
    ("scheduler", re.compile(re.escape(SCHEDULER_EXCEPTION))),
    ("child_died", re.compile(re.escape(CHILD_SIGQUIT))),
    ("scheduler", re.compile(re.escape(SCHEDULER_DIED))),
    ("port", re.compile(r"address already in use|is not available in", re.IGNORECASE)),
    ("illegal_memory", re.compile(re.escape(ILLEGAL_MEMORY_ACCESS))),
    ("warmup", re.compile(re.escape(WARMUP_FAILED))),
    ("invalid", re.compile(r"^(ValueError|AssertionError)\b", re.MULTILINE)),
]

# ---------------------------------------------------------------------- start-up phases
SERVER_ARGS = "server_args="
DIST_INIT_BEGIN = "Init torch distributed begin"
#: Follows the begin line within a second on one GPU (0.06 s recorded) and seconds with TP 8; a NCCL init that
#: hangs logs nothing after the begin line, so its absence for minutes is a hang (``server.dist_init_timeout_s``).
DIST_INIT_END = "Init torch distributed ends"
LOAD_WEIGHT_END = "Load weight end"
MEMORY_POOL_END = "Memory pool end"
CUDA_GRAPH_BEGIN = "Capture cuda graph begin"
CUDA_GRAPH_END = "Capture cuda graph end"
HTTP_UP = "Uvicorn running"  # uvicorn's own line: the port is open, /health answers 503 until warm-up ends

#: (phase, the text of the first line that marks it), in boot order: the boot-time breakdown in notes and reports.
#: Kept for readers that match plain text; ``BootMarker`` below is what the readiness check runs (it also knows the
#: draft's weights, each graph capture and SGLang 0.5.17's per-graph capture lines).
BOOT_PHASES: list[tuple[str, str]] = [
    ("server_args", SERVER_ARGS),
    ("dist_init", DIST_INIT_BEGIN),
    ("weights_loaded", LOAD_WEIGHT_END),
    ("memory_pool", MEMORY_POOL_END),
    ("cuda_graph_begin", CUDA_GRAPH_BEGIN),
    ("cuda_graph_end", CUDA_GRAPH_END),
    ("http_up", HTTP_UP),
    ("ready_line", READY_LINE),
]

#: Every boot mark, in boot order. A mark is the time (seconds since launch) its line was first seen; the phase a
#: mark *ends* is named in ``BOOT_PHASE_LABELS``. Checked against the recorded 0.5.17 logs
#: (tests/data/sglang-0.5.17-h200/server_logs.txt, docs/validation/h200-trial6-server.log):
#: the first line after the interpreter and the launcher's imports (the ``launch_server`` UserWarning, a flag's
#: deprecation warning or the first timestamped line), ``server_args=``, the scheduler's ``Init torch distributed
#: begin`` / ``ends`` (NCCL), ``Load weight begin`` / ``end`` once for the target and once for the draft,
#: ``Memory pool end`` (KV cache), ``Capture <target|draft> <prefill|decode|verify|extend> CUDA graph end`` per
#: graph, ``Uvicorn running``, the ready line (after SGLang's own warm-up request) and the first ``/health`` 200
#: (set by the readiness check, not read from the log).
BOOT_PHASE_NAMES: tuple[str, ...] = (
    "imports",
    "server_args",
    "dist_init",
    "dist_init_end",
    "weights_begin",
    "weights_loaded",
    "draft_weights_loaded",
    "memory_pool",
    "cuda_graph_begin",
    "graph_target_prefill",
    "graph_target_decode",
    "graph_target_verify",
    "graph_draft_prefill",
    "graph_draft_decode",
    "graph_draft_extend",
    "cuda_graph_end",
    "http_up",
    "ready_line",
    "health",
)
#: What each mark ends, for people.
BOOT_PHASE_LABELS: dict[str, str] = {
    "imports": "interpreter and imports",
    "server_args": "argument parsing",
    "dist_init": "scheduler start (spawn, imports, CUDA init)",
    "dist_init_end": "NCCL init",
    "weights_begin": "model init",
    "weights_loaded": "target weights",
    "draft_weights_loaded": "draft model init and weights",
    "memory_pool": "KV cache",
    "cuda_graph_begin": "before graph capture",
    "graph_target_prefill": "graph: target prefill",
    "graph_target_decode": "graph: target decode",
    "graph_target_verify": "graph: target verify",
    "graph_draft_prefill": "graph: draft prefill",
    "graph_draft_decode": "graph: draft decode",
    "graph_draft_extend": "graph: draft extend",
    "cuda_graph_end": "graph capture (rest)",
    "http_up": "HTTP server start",
    "ready_line": "warm-up",
    "health": "first /health 200",
}

_FIRST_OUTPUT = re.compile(
    r"sglang\.launch_server' is still supported|is deprecated and will be removed|^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
)
_GRAPH_BEGIN = re.compile(r"Capture (?:\w+ )*cuda graph begin", re.IGNORECASE)
_GRAPH_END = re.compile(r"Capture (target|draft) (prefill|decode|verify|extend) CUDA graph end")
#: ``[2026-11-30 07:00:44 TP1]``: a line of another tensor-parallel rank than 0 (each rank logs its own weights).
_OTHER_RANK = re.compile(r"^\[[^\]]*\bTP[1-9]\d*\b[^\]]*\]")
_SIMPLE_MARKS = (
    ("server_args", SERVER_ARGS),
    ("dist_init", DIST_INIT_BEGIN),
    ("dist_init_end", DIST_INIT_END),
    ("memory_pool", MEMORY_POOL_END),
    ("http_up", HTTP_UP),
    ("ready_line", READY_LINE),
)


class BootMarker:
    """Reads a boot's log line by line and names the boot marks each line sets (each mark once).

    The target's and the draft's weights both log ``Load weight begin`` / ``end``: the first pair is the target's,
    the second the draft's (rank 0's lines only, so TP > 1 does not count a rank's line as the draft)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.weight_ends = 0

    def _mark(self, name: str, out: list[str]) -> None:
        if name not in self.seen:
            self.seen.add(name)
            out.append(name)

    def feed(self, line: str) -> list[str]:
        out: list[str] = []
        # the first line before the server args; a log that starts with them has no separate imports phase
        if not self.seen and SERVER_ARGS not in line and _FIRST_OUTPUT.search(line):
            self._mark("imports", out)
        for name, needle in _SIMPLE_MARKS:
            if name not in self.seen and needle in line:
                self._mark(name, out)
        other_rank = bool(_OTHER_RANK.match(line))
        if "Load weight begin" in line and not other_rank and self.weight_ends == 0:
            self._mark("weights_begin", out)
        if LOAD_WEIGHT_END in line and not other_rank:
            self.weight_ends += 1
            self._mark("weights_loaded" if self.weight_ends == 1 else "draft_weights_loaded", out)
        if _GRAPH_BEGIN.search(line):
            self._mark("cuda_graph_begin", out)
        m = _GRAPH_END.search(line)
        if m:
            self._mark(f"graph_{m.group(1)}_{m.group(2)}", out)
        if CUDA_GRAPH_END.lower() in line.lower():
            self._mark("cuda_graph_end", out)
        return out


# ---------------------------------------------------------------------- what the machine is
#: Logged by SGLang's custom all-reduce (custom_all_reduce.py) when the tensor-parallel group has more than two GPUs
#: and they are not all linked by NVLink: NCCL then carries every all-reduce, and its protocol and algorithm can
#: change the verify pass by a third (docs/search.md). Not logged when custom all-reduce is disabled by flag.
PCIE_ONLY_ALLREDUCE = "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs."

# ---------------------------------------------------------------------- shutdown
#: Seconds from SIGTERM to the launcher's exit: it logs "Sleeping 5 seconds before crash diagnostics", then kills
#: its tree (exit status -9). Recorded: 5.3-5.9 s, every time.
SHUTDOWN_S = 5.5
#: Logged by the launcher once a scheduler has exited (after SIGTERM: 0.2-0.85 s after it); then it only sleeps
#: 5 s "to let GPU activity settle" before crash diagnostics. Once this line is there, GPU memory is already free
#: (0.35 s after SIGTERM on the recorded H200), so a fast stop may SIGKILL the group instead of waiting.
SCHEDULER_GONE_LINES = (
    "Sleeping 5 seconds before crash diagnostics",
    "No live scheduler processes found",
)
#: A stop that SIGKILLs the group as soon as ``SCHEDULER_GONE_LINES`` shows: SIGTERM, the scheduler's exit
#: (0.2-0.85 s recorded), one poll, the kill.
FAST_SHUTDOWN_S = 1.0
