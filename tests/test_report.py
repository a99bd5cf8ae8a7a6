"""The offline report: written by the project's own command, self-contained, and rendered by a real Chromium."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState
from test_report_study import SECRET, build_study, distinct_colours, open_page

from optimizer.report import FIGURES, render_figures, write_report
from optimizer.study import open_storage

ROOT = Path(__file__).resolve().parent.parent


def test_report_command_renders_offline_in_chromium(tmp_path: Path) -> None:
    build_study(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "optimizer", "report", "--study", "ui", "--studies-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "ui" / "report.html"
    assert f"wrote {path}" in proc.stdout
    doc = path.read_text()

    # self-contained: plotly.js inlined once, nothing loaded from the network
    assert not re.search(r"<script[^>]+src=", doc), "the report loads a script from elsewhere"
    assert not re.search(r"<link[^>]+href=", doc)
    assert doc.count("* plotly.js v") == 1, "plotly.js must be inlined exactly once"
    assert doc.count("Plotly.newPlot(") == len(FIGURES), "a plot is missing (or was replaced by a message)"
    assert SECRET not in doc, "a secret reached the report"
    # header: best configuration and its gain over the baseline; counts per outcome; the trial table
    assert "EAGLE3 s2 k1 d3 algo=Ring proto=LL" in doc and "+86.6%" in doc
    for oc in ("complete", "pruned", "infeasible", "duplicate", "failed"):
        assert f">{oc}</span>" in doc
    assert "pruned after chunk 1" in doc and "CUDA graph capture failed" in doc

    # a real browser renders every plot (plotly draws one .main-svg per figure, plus overlays)
    dom, png = open_page(path.as_uri(), "report.png", budget_ms=15000)
    assert dom.count('class="main-svg"') >= len(FIGURES), dom[:2000]
    for key, _, _ in FIGURES:
        block = dom[dom.index(f'id="fig-{key}"') :]
        assert 'class="main-svg"' in block[:200000], f"plot {key} did not render"
    assert "baseline (no speculation)" in dom  # the baseline line on the history
    assert "#4 pruned" in dom  # the pruned trial is marked on the intermediate values
    assert distinct_colours(png) > 1000, f"{png} looks blank"
    # the check tells a blank page apart: an empty page has a colour or two
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    dom, png = open_page(blank.as_uri(), "blank.png", size="400,300", budget_ms=500)
    assert "main-svg" not in dom and distinct_colours(png) < 5


def test_report_for_studies_with_little_or_nothing(tmp_path: Path) -> None:
    # no trial at all
    empty = optuna.create_study(study_name="empty", storage=open_storage(str(tmp_path / "e.log")), direction="maximize")
    doc = write_report(empty, tmp_path / "empty" / "report.html").read_text()
    assert "no feasible trial yet" in doc and "not shown" in doc

    # the baseline only, and a study whose trials all failed or are infeasible
    base, _ = build_study(tmp_path, name="one", n=1)
    shown = {k: not isinstance(f, str) for k, _, f in render_figures(base)}
    assert shown["history"] and shown["boot"] and shown["timeline"]
    assert not shown["importances"] and not shown["contour"] and not shown["parallel"]
    assert "101.0" in write_report(base, tmp_path / "one" / "report.html").read_text()

    bad = optuna.create_study(study_name="bad", storage=open_storage(str(tmp_path / "b.log")), direction="maximize")
    for i in range(3):
        t = bad.ask()
        t.suggest_int("speculative-num-steps", 1, 5)
        t.set_user_attr("outcome", "infeasible" if i else "failed")
        t.set_constraint("server", 1.0)
        if i:
            bad.tell(t, 0.0)
        else:
            bad.tell(t, state=TrialState.FAIL)
    doc = write_report(bad, tmp_path / "bad" / "report.html").read_text()
    assert "no feasible trial yet" in doc and doc.count("Plotly.newPlot(") >= 1


def test_history_marks_the_baseline_and_pruned_trials(tmp_path: Path) -> None:
    study, _ = build_study(tmp_path, n=6)
    figs = {k: f for k, _, f in render_figures(study)}
    hist = figs["history"]
    assert any("baseline" in (a.text or "") for a in hist.layout.annotations)
    assert {tr.name for tr in hist.data} >= {"complete", "infeasible", "pruned", "best so far"}
    inter = figs["intermediate"]
    assert any(a.text == "#4 pruned" for a in inter.layout.annotations)
    timeline = figs["timeline"]
    assert {tr.y[0] for tr in timeline.data} == {"gpu-a", "gpu-b"}
    boot = figs["boot"]
    assert "weights_loaded" in {tr.name for tr in boot.data}
