"""Wait until a server is ready, while watching its process and its log.

Three things end the wait: ``/health`` answers 200 (ready), the process exits or logs one of SGLang's fatal lines
(a crash: noticed within one poll, well under 2 s), or the hard boot timeout passes (NCCL init hangs print
nothing). The log is read incrementally, so the cost per poll does not grow with the log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .errors import BootError
from .hosts.base import ServerHandle
from .sglang import endpoints
from .sglang.logs import DIST_INIT_END, FATAL_PATTERNS, BootMarker


def log_tail(path: Path, max_bytes: int = 4000) -> str:
    """The last bytes of a log file, cut at a line start."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    if size > max_bytes and "\n" in data:
        data = data.split("\n", 1)[1]
    return data


class LogWatcher:
    """Reads a growing log file incrementally; finds fatal lines and start-up phases (first occurrence of each,
    seconds since launch)."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path = path
        self.t0 = t0
        self.offset = 0
        self.partial = ""
        self.phases: dict[str, float] = {}
        self.fatal: tuple[str, str] | None = None
        self.fatal_rank = len(FATAL_PATTERNS)
        self.dist_init_ended = False
        self.marker = BootMarker()

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", "replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        now = time.time() - self.t0
        for line in lines:
            if DIST_INIT_END in line:
                self.dist_init_ended = True
            for name in self.marker.feed(line):
                self.phases.setdefault(name, round(now, 3))
            # Keep the most specific fatal line seen: SGLang logs the root cause (e.g. 'Not enough memory') inside
            # the traceback that follows 'Scheduler hit an exception'.
            for rank, (kind, pat) in enumerate(FATAL_PATTERNS):
                if rank >= self.fatal_rank:
                    break
                if pat.search(line):
                    self.fatal, self.fatal_rank = (kind, line.strip()), rank
                    break


@dataclass
class Ready:
    boot_s: float
    phases: dict[str, float] = field(default_factory=dict)
    polls: int = 0


def wait_ready(
    server: ServerHandle,
    *,
    boot_timeout_s: float,
    poll_s: float = 0.25,
    t0: float | None = None,
    fatal_grace_s: float = 1.0,
    cancel: Callable[[], bool] | None = None,
    on_phase: Callable[[str], None] | None = None,
    dist_init_timeout_s: float | None = None,
) -> Ready:
    """Block until ``/health`` is 200; raise BootError(kind=crash|fatal|timeout|cancelled) otherwise.

    With ``dist_init_timeout_s``, a boot whose log began the distributed init that long ago and never ended it is a
    hang (NCCL init logs nothing more): it ends then, not at ``boot_timeout_s``.

    After a fatal line the server gets ``fatal_grace_s`` to exit by itself (SGLang's launcher kills its tree), so
    the reason and the log tail are complete; the caller stops it either way.
    """
    t0 = time.time() if t0 is None else t0
    watcher = LogWatcher(server.log_path, t0)
    deadline = t0 + boot_timeout_s
    polls = 0
    seen_503 = False
    fatal_at: float | None = None
    # /health on a real server runs a 1-token generation and takes ~1 s once ready: allow for it, but keep the
    # connect timeout short so a refused or hung port does not slow the loop down.
    timeout = httpx.Timeout(5.0, connect=min(1.0, poll_s * 4))
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        while True:
            watcher.poll()
            rc = server.returncode()
            if rc is not None:
                watcher.poll()
                tail = log_tail(server.log_path)
                kind, line = watcher.fatal or ("crash", _exit_line(rc, tail))
                tail = tail or f"(the server wrote nothing to {server.log_path} before it exited)"
                raise BootError(_reason(kind, line, rc), kind=kind, log_tail=tail)
            if watcher.fatal is not None:
                if fatal_at is None:
                    fatal_at = time.time()
                elif time.time() - fatal_at >= fatal_grace_s:
                    kind, line = watcher.fatal
                    raise BootError(_reason(kind, line, None), kind=kind, log_tail=log_tail(server.log_path))
            if cancel is not None and cancel():
                raise BootError("stopped while booting", kind="cancelled", log_tail=log_tail(server.log_path))
            began = watcher.phases.get("dist_init")
            if (
                dist_init_timeout_s is not None
                and began is not None
                and not watcher.dist_init_ended
                and time.time() - t0 - began > dist_init_timeout_s
            ):
                raise BootError(
                    f"no '{DIST_INIT_END}' {dist_init_timeout_s:.0f} s after the distributed init began (a hang at "
                    "NCCL init)",
                    kind="timeout",
                    log_tail=log_tail(server.log_path),
                )
            if time.time() > deadline:
                raise BootError(
                    f"not ready after {boot_timeout_s:.0f} s (no fatal line: a hang, e.g. at NCCL init)",
                    kind="timeout",
                    log_tail=log_tail(server.log_path),
                )
            polls += 1
            started = time.time()
            try:
                resp = client.get(server.base_url + endpoints.HEALTH)
                if resp.status_code == 200:
                    watcher.poll()
                    boot_s = round(time.time() - t0, 3)
                    watcher.phases.setdefault("health", boot_s)
                    return Ready(boot_s=boot_s, phases=dict(watcher.phases), polls=polls)
                if resp.status_code == 503 and not seen_503:
                    seen_503 = True
                    watcher.phases.setdefault("http_up", round(time.time() - t0, 3))
                    if on_phase:
                        on_phase("warming_up")
            except httpx.TransportError:
                pass
            time.sleep(max(0.0, poll_s - (time.time() - started)))


def _reason(kind: str, line: str, rc: int | None) -> str:
    tail = f" (exit status {rc})" if rc is not None and "exit" not in line else ""
    return f"{kind}: {clip(line, 600)}{tail}"


#: Words of a log line that say what went wrong, for a server that exited without one of SGLang's fatal lines.
_ERROR_WORDS = re.compile(r"Error|error:|No module named|not found|No such file|Errno|Exception|refused|denied")


def failing_line(tail: str) -> str:
    """The line of a log tail that says why the process ended: the last one naming an error, else the last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if _ERROR_WORDS.search(ln):
            return ln
    return lines[-1] if lines else ""


def _exit_line(rc: int, tail: str) -> str:
    line = failing_line(tail)
    return f"server exited with status {rc} before it was ready" + (f": {clip(line, 300)}" if line else "")


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word boundary (never mid-flag) and marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else text[:limit]) + " …"
