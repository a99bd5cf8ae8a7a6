"""Live terminal progress: a real Driver over a real journal study, drawn by rich into a recording console; the plain
log lines when output is not a terminal (and rich when it is, checked under a real pseudo-terminal)."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from test_report_study import build_study

from optimizer.app import make_progress
from optimizer.events import ChunkEvent, PhaseEvent, TrialResult
from optimizer.hosts.config import local_host
from optimizer.progress import MAX_REFRESH_PER_SECOND, RichProgress, fmt_duration
from optimizer.space import load_space
from optimizer.study import Active, Driver, Progress

ROOT = Path(__file__).resolve().parent.parent


def _driver(tmp_path: Path, n: int | None = None) -> Driver:
    study, cfg = build_study(tmp_path, n=n)
    cfg = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"trials": 20})})
    space = load_space(ROOT / "search_spaces" / "demo.yaml")
    driver = Driver(cfg, space, [local_host("gpu-a"), local_host("gpu-b")], executor=None, study=study)
    driver.boot_times, driver.bench_times = [90.0, 86.0], [80.0]
    # two trials in flight
    for host, values in (
        (
            "gpu-a",
            {
                "speculative-algorithm": "EAGLE3",
                "speculative-num-steps": 3,
                "speculative-eagle-topk": 4,
                "speculative-num-draft-tokens": 8,
            },
        ),
        (
            "gpu-b",
            {
                "speculative-algorithm": "EAGLE3",
                "speculative-num-steps": 1,
                "speculative-eagle-topk": 1,
                "NCCL_PROTO": "LL",
            },
        ),
    ):
        trial = study.ask()
        cand = space.candidate(values)
        driver.active[trial.number] = Active(trial=trial, candidate=cand, key=cand.key(), spec=None, host=host)
        driver.busy[host] = trial.number
    return driver


def _console() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=150, record=True, color_system="truecolor")


def test_rich_progress_shows_hosts_best_gain_trials_and_eta(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    console = _console()
    prog = RichProgress(console)
    a, b = sorted(driver.active)
    prog.start(driver)
    try:
        now = time.time()
        for ev in (
            PhaseEvent(trial=a, host="gpu-a", phase="booting", t=now - 75, detail="weights_loaded"),
            PhaseEvent(trial=b, host="gpu-b", phase="benchmarking", t=now - 12),
            ChunkEvent(trial=b, host="gpu-b", index=2, tok_per_s=181.25, completed=16, failed=0, wall_s=20.0),
        ):
            if isinstance(ev, PhaseEvent):  # what Driver._handle does before it passes the event on
                driver.host_phase[ev.host] = (ev.phase, ev.trial, ev.t)
            prog.event(driver, ev)
        prog.note(driver, "[gpu-c] quarantined after 3 host faults")
        prog.finished(driver, driver.study.get_trials()[3])
        console.print(prog.render())
    finally:
        prog.stop(driver)
    out = console.export_text()
    assert "gpu-a" in out and "booting (weights_loaded)" in out and "1m15s" in out
    assert "benchmarking" in out and "#2 181.2 tok/s" in out
    config_a = driver.active[a].candidate.short()
    assert config_a and config_a in out
    assert "best EAGLE3 s2 k1 d3 algo=Ring proto=LL 188.5 tok/s (trial 3)" in out
    assert "+86.6% over baseline" in out and "(baseline 101.0 tok/s)" in out
    assert "12 launched, 6 left of 20" in out  # 12 launches stored, 2 in flight
    # ETA from the measured boot (88 s) and benchmark (80 s) times: 6 launches on 2 hosts = 3 x 168 s
    assert "ETA 8m2" in out or "ETA 8m3" in out
    assert "trial 3 complete: EAGLE3 s2 k1 d3 algo=Ring proto=LL  188.5 tok/s (+86.6%)" in out
    assert "quarantined after 3 host faults" in out

    # a finished trial clears the host's row
    driver.host_phase["gpu-b"] = ("idle", None, time.time())
    prog.event(driver, TrialResult(trial=b, host="gpu-b", status="complete"))
    text = Console(file=io.StringIO(), width=150, record=True)
    text.print(prog.render())
    assert "181.2" not in text.export_text()


def test_refresh_is_capped_at_four_per_second(tmp_path: Path) -> None:
    driver = _driver(tmp_path, n=2)
    prog = RichProgress(_console(), refresh_per_second=50)
    assert prog.refresh_per_second == MAX_REFRESH_PER_SECOND == 4
    calls = []
    render = prog.render
    prog.render = lambda: calls.append(time.time()) or render()  # type: ignore[method-assign]
    prog.start(driver)
    time.sleep(1.6)
    prog.stop(driver)
    # rich's refresh thread at 4/s, plus the first draw and the final one
    assert 3 <= len(calls) <= 4 * 1.6 + 3, len(calls)


def test_plain_lines_when_not_a_terminal_and_rich_on_one() -> None:
    assert type(make_progress(plain=True)) is Progress
    assert type(make_progress(plain=False)) is Progress  # pytest captures stdout: not a terminal
    lines: list[str] = []
    Progress(printer=lines.append).event(None, PhaseEvent(trial=1, host="h", phase="benchmarking"))  # type: ignore
    assert lines == ["[h] trial 1: benchmarking"]
    # on a real pseudo-terminal the same call picks the live display
    code = "from optimizer.app import make_progress; print(type(make_progress(plain=False)).__name__)"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=slave, stderr=slave, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(master)
    assert b"RichProgress" in out, out


def test_fmt_duration() -> None:
    assert [fmt_duration(x) for x in (None, 5, 75, 3725)] == ["?", "5s", "1m15s", "1h02m"]
