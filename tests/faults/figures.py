"""The fault-injection suite's figures: every test adds to one process-wide tally; the last test of the suite
(tests/test_fuzz_zz_summary.py) prints it and writes studies/faults/results.json.

Counts: ``kills`` (driver, actor, server and SSH faults injected), ``kills_survived`` (the study went on and its
storage was intact afterwards), ``completed_lost`` (COMPLETE trials missing or changed after a kill: must be 0),
``orphans`` (server processes of a test's study alive after it ended: must be 0), ``fuzz_cases``,
``injections_executed`` (shell metacharacters that ran: must be 0), ``secrets_leaked`` (must be 0).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

FIGURES: Counter = Counter()
DETAIL: dict[str, Counter] = {}

MARKER = "SGLANG_OPTIMIZER_TRIAL"


def add(section: str, **counts: int) -> None:
    for k, v in counts.items():
        FIGURES[k] += v
        DETAIL.setdefault(section, Counter())[k] += v


def study_servers(study: str | None = None) -> list[int]:
    """Pids of live processes whose environment carries the trial marker (of ``study``, or of any study).

    For the tests' orphan count only: the product finds its servers through pid files, never like this."""
    out = []
    want = None if study is None else f"{MARKER}={study}/".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] in "ZX":
            continue
        for item in env.split(b"\0"):
            if (want is None and item.startswith(MARKER.encode() + b"=")) or (want and item.startswith(want)):
                out.append(int(name))
                break
    return out
