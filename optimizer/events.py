"""Events a running trial sends to the driver (through a Ray actor's streaming generator, or in-process).

Plain picklable dataclasses: they cross process boundaries. The driver owns the study and is the only writer of
storage; events are how it learns what each host is doing. Progress displays consume the same stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

# Phases a host goes through for one trial, in order.
PHASES = ("stopping", "starting", "booting", "warming_up", "benchmarking", "stopping_server", "done")


@dataclass
class PhaseEvent:
    trial: int
    host: str
    phase: str
    t: float = field(default_factory=time.time)
    detail: str = ""


@dataclass
class ChunkEvent:
    """One benchmark chunk finished: ``tok_per_s`` is what the driver reports as an intermediate value.

    ``index`` counts chunks within the load ``level`` (the concurrency it ran at)."""

    trial: int
    host: str
    index: int
    tok_per_s: float
    completed: int
    failed: int
    wall_s: float
    t: float = field(default_factory=time.time)
    level: int = 1


@dataclass
class TrialResult:
    """How a trial ended. ``status`` is one of:

    - ``complete``: benchmarked; ``metrics`` holds the final figures.
    - ``pruned``: stopped on the driver's request after ``metrics``' chunks.
    - ``infeasible``: the configuration cannot run (rejected at start-up, OOM, capture failure, hang, crash);
      ``reason``/``kind``/``log_tail`` say why. Recorded as a constraint violation, not a FAIL.
    - ``host_fault``: the host was at fault (unreachable, port taken, command missing); the trial is re-queued.
    - ``cancelled``: the study is stopping (Ctrl-C).
    """

    trial: int
    host: str
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    kind: str = ""
    log_tail: str = ""
    boot_s: float | None = None
    boot_phases: dict[str, float] = field(default_factory=dict)
    #: seconds from SIGTERM until the server's process group was gone (None: nothing was stopped)
    stop_s: float | None = None
    t_start: float = 0.0
    t_end: float = 0.0
    log_path: str = ""
    records_path: str = ""
    #: server log lines that may prove one setting fatal (``optimizer.sglang.fatal_settings``)
    evidence: list[str] = field(default_factory=list)
