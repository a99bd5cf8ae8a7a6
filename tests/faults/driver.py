"""Run the product's command (``python -m optimizer optimize ...``) as a subprocess in its own process group, and
read its study back from the journal file as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
KIMI = "kimi-k2.5-8x-rtxpro6000"

SPACE = """\
name: faults
fixed: {model-path: m, speculative-draft-model-path: d, tp-size: 8, attention-backend: flashinfer,
        max-running-requests: 8, cuda-graph-max-bs: 8}
parameters:
  speculative-algorithm: {type: categorical, choices: [EAGLE3]}
  speculative-num-steps: {type: int, low: 1, high: 5}
  speculative-eagle-topk: {type: categorical, choices: [1, 2]}
  speculative-num-draft-tokens: {type: int, low: 2, high: 8, when: "topk > 1"}
  NCCL_PROTO: {type: categorical, choices: [unset, LL]}
"""


def optimize_argv(
    studies: Path, study: str, space: Path, trials: int, *, executor: str = "thread", extra: list[str] | None = None
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "optimizer",
        "optimize",
        "--study",
        study,
        "--studies-dir",
        str(studies),
        "--space",
        str(space),
        "--trials",
        str(trials),
        "--executor",
        executor,
        "--profile",
        KIMI,
        "--time-scale",
        "0.002",
        "--step-scale",
        "0.1",
        "--boot-timeout",
        "20",
        "--max-tokens",
        "24",
        "--chunks",
        "2",
        "--requests-per-chunk",
        "2",
        "--plain",
        "--seed",
        "0",
        *(extra or []),
    ]


class Run:
    """One driver process; its output goes to ``log`` (unbuffered, so the test can follow its phases)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.fh = open(log, "wb")
        full = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_DEDUP_LOGS": "0", **(env or {})}
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=self.fh,
            stderr=subprocess.STDOUT,
            env=full,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for(self, needle: str, count: int = 1, timeout_s: float = 30.0) -> bool:
        """True once ``needle`` occurs ``count`` times in the output; False if the process ended or time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.text().count(needle) >= count:
                return True
            if self.proc.poll() is not None:
                return self.text().count(needle) >= count
            time.sleep(0.02)
        return False

    def wait(self, timeout_s: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self.fh.close()

    def kill_driver(self) -> None:
        """SIGKILL the driver process only (not its group: the servers live in their own groups anyway)."""
        try:
            os.kill(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.wait(30)


def load_trials(journal: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    if not journal.exists():
        return []
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    try:
        return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    except KeyError:
        return []


def children_of(pid: int) -> list[int]:
    """Descendants of ``pid`` (by parent pid), for cleaning up what a killed driver started itself."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            parents[int(name)] = int(stat[stat.rfind(")") + 2 :].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c, pp in parents.items():
            if pp == p and c not in out:
                out.append(c)
                todo.append(c)
    return out
