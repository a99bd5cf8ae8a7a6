"""``python -m benchmarks.trace``: one search launch by launch, the same run the house check scores."""

from __future__ import annotations

import pytest

from benchmarks import trace
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
        trace.main(["5000"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "landscape 5000" in err and "0-29" in err and "3000-3029" in err
