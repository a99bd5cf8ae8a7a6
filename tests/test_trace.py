"""``python -m benchmarks.trace``: one search launch by launch, the same run the house check scores."""

from __future__ import annotations

import pytest

from benchmarks import landscapes_ood, trace
from benchmarks.landscapes_ood import landscape
from benchmarks.out_of_family import run_one


def test_a_trace_is_the_run_the_house_check_scores_launch_by_launch() -> None:
    out = trace.trace(2001, run_seed=0, budget=6)
    rows = out["rows"]
    # the same landscape, run seed and budget through the out-of-family check: the same launches, the same score
    checked = run_one(landscape(2001), "structured", 0, 6)
    seen = [(r["params"].get("speculative-num-steps"), r["state"]) for r in rows]
    assert len(rows) >= checked["launches"] == out["score"]["launches"]
    assert out["score"]["restarts"] == checked["restarts"]
    assert out["final"] == pytest.approx(checked["final_fraction"])
    assert rows[0]["params"] == {} and rows[0]["chooser"] == ""  # the baseline comes first, from the driver
    model_rows = [r for r in rows if r["chooser"] == "model"]
    assert model_rows, seen
    for r in model_rows:  # what the model stored when it chose the launch
        assert r["predicted"] > 0 and r["promised"] >= r["gain"] >= 0 and 0 <= r["p_improve"] <= 1
    for r in rows:
        assert 0.0 <= r["true"] <= 1.0 + 1e-9
        assert r["answer_true"] is None or 0.0 < r["answer_true"] <= 1.0 + 1e-9
    assert rows[-1]["answer_true"] == pytest.approx(out["final"])
    text = trace.render(out)
    lines = text.splitlines()
    assert lines[0].startswith("landscape 2001: optimum")
    assert len(lines) == len(rows) + 3
    assert lines[1].endswith("| baseline")
    assert lines[-2].startswith("stop: the search")
    assert f"launches {checked['launches']}" in lines[-1]


def test_a_landscape_no_generator_owns_is_refused_with_the_allowed_ranges(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        trace.main(["500"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "landscape 500" in err and "0-29" in err and "3000-3029" in err and "from 2000 up" in err
    # a fresh draw of the out-of-family generator (benchmarks.out_of_family --landscapes FIRST-LAST) can be traced
    assert trace.landscape_module(4042) is landscapes_ood and trace.landscape_module(3007) is landscapes_ood


def test_the_model_view_sets_every_launch_and_the_fastest_trees_against_the_truth(capsys) -> None:
    out = trace.trace(2001, run_seed=0, budget=6)
    rows = trace.model_against_truth(2001, out["study"], out["truth"], top=3)
    table, values, opt = out["truth"]["table"], out["truth"]["values"], out["truth"]["optimum"]
    launched = {table.locate_trial(t) for t in out["study"].get_trials(deepcopy=False)} - {None}
    assert sum(r["launches"] > 0 for r in rows) <= len(launched)
    assert rows[0]["true"] == pytest.approx(1.0)  # the optimum's tree is among the fastest three
    assert [r["true"] for r in rows] == sorted((r["true"] for r in rows), reverse=True)
    fastest_trees = [r["tree"] for r in rows if r["launches"] == 0]
    assert len(fastest_trees) == len({tuple(t) for t in fastest_trees if t})  # one row per tree, at its best settings
    base = next(r for r in rows if r["tree"] is None)
    assert base["launches"] == 1 and base["accept_true"] == base["accept_predicted"] == 1.0
    assert base["step_error"] == pytest.approx(1.0)  # the step times are relative to the baseline's
    for r in rows:
        assert r["predicted"] > 0 and r["accept_predicted"] >= 1.0
        if r["tree"] is not None and r["true"] > 0:
            steps, topk, draft = r["tree"]
            assert 1.0 < r["accept_true"] <= min(steps + 1, draft)
            assert r["step_error"] > 0
    assert max(r["true"] * opt for r in rows) == pytest.approx(float(values.max()))
    assert trace.main(["2001", "--budget", "4", "--model"]) == 0
    printed = capsys.readouterr().out
    assert "the model fitted to every launch, against the truth" in printed
    assert "baseline      launched  1" in printed
