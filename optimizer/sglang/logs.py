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
BOOT_PHASE_NAMES: tuple[str, ...] = tuple(name for name, _ in BOOT_PHASES)

# ---------------------------------------------------------------------- what the machine is
#: Logged by SGLang's custom all-reduce (custom_all_reduce.py) when the tensor-parallel group has more than two GPUs
#: and they are not all linked by NVLink: NCCL then carries every all-reduce, and its protocol and algorithm can
#: change the verify pass by a third (docs/search.md). Not logged when custom all-reduce is disabled by flag.
PCIE_ONLY_ALLREDUCE = "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs."

# ---------------------------------------------------------------------- shutdown
#: Seconds from SIGTERM to the launcher's exit: it logs "Sleeping 5 seconds before crash diagnostics", then kills
#: its tree (exit status -9). Recorded: 5.3-5.9 s, every time.
SHUTDOWN_S = 5.5
