"""The driver dies (SIGKILL, at 20 seeded-random points) or is interrupted (Ctrl-C, twice) in the middle of a
study; the same command run again continues it.

Everything is real: ``python -m optimizer optimize`` subprocesses, simulator servers in their own process groups,
the Optuna journal file. Only the driver process is killed, never its group: the servers it leaves behind must be
found by the next run through its pid files. The tests count servers through the trial marker in
``/proc/*/environ`` (their own check; the product never looks for processes that way).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults.driver import ROOT, SPACE, Run, children_of, load_trials, optimize_argv
from faults.figures import add, study_servers
from optuna.trial import TrialState

from optimizer.study.resume import chosen_params

KILLS = 20
EVENTS = ["early", "starting", "warming_up", "benchmarking", "chunk", " complete"]


def _snapshot(journal: Path, study: str) -> dict[int, tuple]:
    return {t.number: (t.state, t.value, dict(t.user_attrs)) for t in load_trials(journal, study)}


def _wait_gone(study: str, timeout_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = study_servers(study)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _kill_chain(tmp_path: Path, study: str, kills: int, seed: int, executor: str, events: list[str] = EVENTS) -> dict:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    studies = tmp_path / "studies"
    journal = studies / study / "journal.log"
    rng = random.Random(seed)
    kept: dict[int, float] = {}  # COMPLETE trials seen so far -> value
    interrupted: set[int] = set()  # trials RUNNING when a driver died
    lost = survived = reaped = unresumed = 0
    phases: dict[str, int] = {}
    strays: list[int] = []
    for i in range(kills + 1):
        launched = sum(1 for s in _snapshot(journal, study).values() if s[2].get("launched"))
        waiting = sum(1 for s in _snapshot(journal, study).values() if s[0] == TrialState.WAITING)
        final = i == kills
        run = Run(
            optimize_argv(studies, study, space, launched + (waiting + 1 if final else 2), executor=executor),
            tmp_path / f"run-{i}.log",
        )
        if final:
            rc = run.wait(240)
            assert rc == 0, run.text()[-3000:]
        else:
            event = rng.choice(events)
            if event == "early":
                time.sleep(rng.uniform(0.3, 2.5))
            else:
                # the n-th occurrence of a phase line, then a little more: kills land all over the trial
                run.wait_for(event, rng.randint(1, 2), timeout_s=10)
                time.sleep(rng.uniform(0.0, 0.3))
            before_kill = run.text()
            phases[event] = phases.get(event, 0) + 1
            if executor == "ray":
                strays = children_of(run.proc.pid)
            run.kill_driver()
            assert "Traceback" not in before_kill, before_kill[-3000:]
        text = run.text()
        reaped += sum(int(n) for n in re.findall(r"stopped (\d+) server\(s\) left by a previous run", text))
        snap = _snapshot(journal, study)
        # Every trial that was COMPLETE after an earlier kill is still there, COMPLETE, with the same value.
        lost_now = sum(
            1 for n, v in kept.items() if n not in snap or snap[n][0] != TrialState.COMPLETE or snap[n][1] != v
        )
        lost += lost_now
        if i > 0:
            unresumed += 1
        if lost_now == 0 and "launches left" in text:
            survived += unresumed  # a later run resumed the study from intact storage after these kills
            unresumed = 0
        kept.update({n: s[1] for n, s in snap.items() if s[0] == TrialState.COMPLETE})
        interrupted |= {n for n, s in snap.items() if s[0] == TrialState.RUNNING}
        for pid in strays:  # Ray processes the killed driver started itself (not servers: those are counted)
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    trials = load_trials(journal, study)
    by_number = {t.number: t for t in trials}
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    # what waits when the budget is spent is only the warm start's queue, never a re-queued trial
    assert all(t.user_attrs.get("warm_start") for t in trials if t.state == TrialState.WAITING)
    for n in interrupted:
        t = by_number[n]
        assert t.state == TrialState.FAIL and t.user_attrs.get("outcome") == "interrupted", (n, t.user_attrs)
        again = [x for x in trials if x.user_attrs.get("requeued_from") == n]
        intended = chosen_params(t)  # None: killed while its parameters were being suggested
        if intended and not t.user_attrs.get("requeued_from"):
            assert len(again) == 1, f"trial {n} re-queued {len(again)} times"
            # the copy carries the whole configuration, even where a later kill cut its own suggestion short
            assert chosen_params(again[0]) == intended
        elif intended:  # a re-queued copy that was stopped too is not re-queued a second time
            assert not again and "not re-queued a second time" in t.user_attrs["failure_reason"], (n, t.user_attrs)
        elif not t.user_attrs.get("baseline"):  # the baseline has no parameters: asked again
            assert not again and "chooses again" in t.user_attrs["failure_reason"], (n, t.user_attrs)
    orphans = _wait_gone(study, 5.0)
    pid_files = list((studies / study / "hosts").glob("*/run/*.json"))
    return {
        "kills": kills,
        "survived": survived,
        "lost": lost,
        "orphans": len(orphans),
        "reaped": reaped,
        "interrupted": len(interrupted),
        "complete": len(kept),
        "phases": phases,
        "pid_files": pid_files,
        "orphan_pids": orphans,
    }


def test_driver_sigkilled_at_20_random_points_resumes_without_loss(tmp_path):
    study = "faults-kill"
    res = _kill_chain(tmp_path, study, KILLS, seed=20261130, executor="thread")
    add(
        "driver_kills",
        kills=res["kills"],
        kills_survived=res["survived"],
        completed_lost=res["lost"],
        orphans=res["orphans"],
        servers_reaped=res["reaped"],
        trials_requeued=res["interrupted"],
    )
    print(f"driver kills: {res}")
    assert res["lost"] == 0
    assert res["orphans"] == 0, res["orphan_pids"]
    assert not res["pid_files"]
    assert res["survived"] == KILLS
    assert res["complete"] >= 3
    assert res["interrupted"] >= 3 and res["reaped"] >= 3  # kills did land while trials and servers ran


def test_driver_sigkilled_with_ray_executor_resumes(tmp_path, ray_runtime):
    # ray_runtime: the session's own runtime is up; the driver subprocess starts its own (as `make optimize`).
    study = "faults-kill-ray"
    res = _kill_chain(tmp_path, study, 1, seed=5, executor="ray", events=["benchmarking"])
    add(
        "driver_kills_ray",
        kills=res["kills"],
        kills_survived=res["survived"],
        completed_lost=res["lost"],
        orphans=res["orphans"],
        servers_reaped=res["reaped"],
        trials_requeued=res["interrupted"],
    )
    print(f"driver kills (ray): {res}")
    assert res["lost"] == 0 and res["orphans"] == 0 and res["survived"] == 1
    assert not res["pid_files"]


# ------------------------------------------------------------------------------------------------------ Ctrl-C

LONGER = ["--chunks", "4", "--requests-per-chunk", "4", "--max-tokens", "64"]  # a benchmark of ~2 s


def _start(tmp_path: Path, study: str, trials: int = 3) -> tuple[Run, Path]:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    studies = tmp_path / "studies"
    return (
        Run(optimize_argv(studies, study, space, trials, extra=LONGER), tmp_path / "run.log"),
        studies / study / "journal.log",
    )


@pytest.mark.parametrize("phase", ["booting", "benchmarking"])
def test_ctrl_c_stops_gracefully(tmp_path, phase):
    study = f"faults-int-{phase}"
    run, journal = _start(tmp_path, study)
    needle = "trial 1: starting" if phase == "booting" else "trial 0: benchmarking"
    assert run.wait_for(needle, 1, 30), run.text()[-2000:]
    time.sleep(0.3)
    assert study_servers(study), "a server should be running"
    os.kill(run.proc.pid, signal.SIGINT)
    rc = run.wait(60)
    text = run.text()
    assert rc == 130, text[-3000:]
    assert "Traceback" not in text
    assert "stopping: servers are being stopped" in text
    left = _wait_gone(study, 2.0)
    trials = load_trials(journal, study)
    running = [t.number for t in trials if t.state == TrialState.RUNNING]
    marked = [t for t in trials if t.state == TrialState.FAIL]
    add("ctrl_c", kills=1, kills_survived=int(not running and not left), orphans=len(left))
    assert not left and not running
    assert marked and all(t.user_attrs.get("failure_reason") for t in marked)
    if phase == "booting":
        return
    # storage is consistent: the same command resumes and finishes the study
    done = Run(
        optimize_argv(tmp_path / "studies", study, tmp_path / "space.yaml", 3, extra=LONGER), tmp_path / "resume.log"
    )
    assert done.wait(120) == 0, done.text()[-3000:]
    trials = load_trials(journal, study)
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert not study_servers(study)


def test_second_ctrl_c_forces(tmp_path):
    study = "faults-int-twice"
    run, journal = _start(tmp_path, study)
    assert run.wait_for("trial 0: benchmarking", 1, 30), run.text()[-2000:]
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.wait_for("stopping:", 1, 10)
    os.kill(run.proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    rc = run.wait(30)
    took = time.monotonic() - t0
    text = run.text()
    left = _wait_gone(study, 5.0)
    add("ctrl_c", kills=1, kills_survived=int(not left), orphans=len(left))
    assert rc == 130, text[-3000:]
    assert took < 15
    assert "Traceback" not in text, text[-3000:]
    assert not left
    # a trial the forced stop recorded says what became of it: re-queued, or the baseline asked again
    stopped = [t for t in load_trials(journal, study) if t.user_attrs.get("outcome") == "interrupted"]
    for t in stopped:
        assert t.user_attrs["failure_reason"].endswith(("; re-queued", "; asked again")), t.user_attrs
    # whatever the forced stop left RUNNING is resumed by the next run
    done = Run(
        optimize_argv(tmp_path / "studies", study, tmp_path / "space.yaml", 3, extra=LONGER), tmp_path / "resume.log"
    )
    assert done.wait(120) == 0, done.text()[-3000:]
    assert not [t for t in load_trials(journal, study) if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_ctrl_c_while_starting_up(tmp_path):
    """Ctrl-C before the driver's handler is in place (imports, storage, resume): exit 130, no traceback."""
    study = "faults-int-early"
    run, journal = _start(tmp_path, study)
    time.sleep(1.0)
    os.kill(run.proc.pid, signal.SIGINT)
    rc = run.wait(30)
    text = run.text()
    left = _wait_gone(study, 5.0)
    add("ctrl_c", kills=1, kills_survived=int(not left), orphans=len(left))
    assert rc == 130, (rc, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    assert not left


def test_second_driver_on_a_live_study_is_refused(tmp_path):
    """Two drivers on one study would reap each other's servers: the second is refused while the first lives."""
    study = "faults-two-drivers"
    first, journal = _start(tmp_path, study, trials=2)
    try:
        assert first.wait_for("trial 0: starting", 1, 30), first.text()[-2000:]
        second = Run(
            optimize_argv(tmp_path / "studies", study, tmp_path / "space.yaml", 2, extra=LONGER),
            tmp_path / "second.log",
        )
        rc = second.wait(60)
        assert rc == 1 and "being run by another driver" in second.text(), (rc, second.text()[-2000:])
        assert "Traceback" not in second.text()
        assert first.proc.poll() is None and study_servers(study)  # the first driver and its server live on
        assert first.wait(120) == 0, first.text()[-3000:]
    finally:
        if first.proc.poll() is None:
            first.kill_driver()
    left = _wait_gone(study, 5.0)
    add("two_drivers", orphans=len(left))
    assert not left


CTRL_C_INSIDE_PYRUN = """
import ctypes, sys
from optimizer.signals import SigtermAsCtrlC, exit_process

def command():
    # A Ctrl-C that lands in code CPython runs with PyRun_* (some modules' imports do) and travels on as
    # KeyboardInterrupt to the command's handler: CPython remembers it and ends the process by SIGINT at exit.
    ctypes.pythonapi.PyRun_SimpleString(b"raise KeyboardInterrupt")
    raise KeyboardInterrupt

with SigtermAsCtrlC() as term:
    rc = term.run(command)
if sys.argv[1] == "sys.exit":
    sys.exit(rc)
exit_process(rc)
"""


def test_ctrl_c_that_passed_through_pyrun_code_still_exits_130(tmp_path):
    """The start-up Ctrl-C that once exited by signal (-2) instead of 130 on a loaded machine, made to happen on
    purpose: Python's own ``sys.exit`` turns the handled interrupt into death by SIGINT, the product's exit does not.
    Run with ``-m``, as the product is (``python -c`` exits inside ``sys.exit`` before CPython looks)."""
    (tmp_path / "ctrl_c_in_pyrun.py").write_text(CTRL_C_INSIDE_PYRUN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

    def run(how: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "ctrl_c_in_pyrun", how]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)

    plain = run("sys.exit")
    assert plain.returncode == -signal.SIGINT, plain  # what CPython does: the reason for exit_process
    ours = run("exit_process")
    assert ours.returncode == 130, ours
    assert ours.stderr.strip().endswith("interrupted"), ours.stderr
