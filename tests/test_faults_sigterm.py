"""SIGTERM (as ``kill``, ``timeout``, CI and ``ray job stop`` send it) stops a study as Ctrl-C does, with either
executor: the servers are stopped, the running trials recorded, the driver exits with 143, and the same command
resumes the study.

Everything is real: ``python -m optimizer optimize`` subprocesses (with Ray, the driver starts its own runtime, whose
``ray.init`` installs Ray's own SIGTERM handlers), simulator servers in their own process groups, the journal file.
The servers are counted through the trial marker in ``/proc/*/environ`` (the tests' own check).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from faults.driver import SPACE, Run, children_of, load_trials, optimize_argv
from faults.figures import add, study_servers
from optuna.trial import TrialState

LONGER = ["--chunks", "4", "--requests-per-chunk", "4", "--max-tokens", "64"]  # a benchmark of ~2 s


def _wait_gone(study: str, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := study_servers(study)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _catches_sigterm(pid: int) -> bool:
    """True once the process has a SIGTERM handler (bit 15 of SigCgt in /proc/<pid>/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def _argv(tmp_path: Path, study: str, executor: str, trials: int = 2) -> list[str]:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    return optimize_argv(tmp_path / "studies", study, space, trials, executor=executor, extra=LONGER)


def _cleanup(run: Run) -> None:
    """A failed assertion must not leave the driver, its own Ray runtime or its servers behind."""
    strays = children_of(run.proc.pid) if run.proc.poll() is None else []
    if run.proc.poll() is None:
        run.kill_driver()
    for pid in strays:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("executor", ["thread", "ray"])
def test_sigterm_mid_trial_stops_servers_records_the_trial_and_resumes(tmp_path, executor):
    study = f"faults-term-{executor}"
    journal = tmp_path / "studies" / study / "journal.log"
    run = Run(_argv(tmp_path, study, executor), tmp_path / "run.log")
    try:
        assert run.wait_for("trial 0: benchmarking", 1, 90), run.text()[-2000:]
        time.sleep(0.3)
        assert study_servers(study), "a server should be running"
        os.kill(run.proc.pid, signal.SIGTERM)
        rc = run.wait(60)
    finally:
        _cleanup(run)
    text = run.text()
    left = _wait_gone(study, 2.0)
    trials = load_trials(journal, study)
    running = [t.number for t in trials if t.state == TrialState.RUNNING]
    add("sigterm", kills=1, kills_survived=int(not running and not left), orphans=len(left))
    assert rc == 143, (rc, text[-3000:])
    assert "SIGTERM: stopping as on Ctrl-C" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert "SIGTERM received at time" not in text, text[-3000:]  # Ray's C++ handler (a stack dump) was replaced
    assert not left, f"servers left running: {left}"
    assert not running
    stopped = trials[0]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs.get("failure_reason"), stopped.user_attrs
    assert not list((tmp_path / "studies" / study / "hosts").glob("*/run/*.json"))

    # the same command resumes and finishes the study
    done = Run(_argv(tmp_path, study, executor), tmp_path / "resume.log")
    try:
        rc = done.wait(180)
    finally:
        _cleanup(done)
    assert rc == 0, done.text()[-3000:]
    trials = load_trials(journal, study)
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert [t for t in trials if t.state == TrialState.COMPLETE]
    assert not _wait_gone(study, 2.0)


def test_second_sigterm_forces(tmp_path):
    study = "faults-term-twice"
    journal = tmp_path / "studies" / study / "journal.log"
    run = Run(_argv(tmp_path, study, "thread"), tmp_path / "run.log")
    try:
        assert run.wait_for("trial 0: benchmarking", 1, 30), run.text()[-2000:]
        os.kill(run.proc.pid, signal.SIGTERM)
        assert run.wait_for("stopping:", 1, 10), run.text()[-2000:]
        os.kill(run.proc.pid, signal.SIGTERM)
        t0 = time.monotonic()
        rc = run.wait(30)
        took = time.monotonic() - t0
    finally:
        _cleanup(run)
    text = run.text()
    left = _wait_gone(study, 5.0)
    add("sigterm", kills=1, kills_survived=int(not left), orphans=len(left))
    assert rc == 143, (rc, text[-3000:])
    assert took < 15
    assert "SIGTERM again: forcing the stop" in text and "Traceback" not in text, text[-3000:]
    assert not left
    assert not [t for t in load_trials(journal, study) if t.state == TrialState.RUNNING]


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_while_starting_up(tmp_path, sigint):
    """SIGTERM as soon as the command handles it (imports, storage, resume: before the driver's own handler):
    exit 143, no traceback, no server. Also when SIGINT is ignored, as for a background job of a shell script
    (``python -m optimizer optimize ... &``), where Ctrl-C's path would not be reached through SIGINT."""
    study = f"faults-term-early-{sigint}"
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if sigint == "ignored" else None  # inherited by the child
    try:
        run = Run(_argv(tmp_path, study, "thread"), tmp_path / "run.log")
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
    try:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(run.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(run.proc.pid, signal.SIGTERM)
        rc = run.wait(30)
    finally:
        _cleanup(run)
    text = run.text()
    left = _wait_gone(study, 5.0)
    add("sigterm", kills=1, kills_survived=int(not left), orphans=len(left))
    assert rc == 143, (rc, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    assert not left
