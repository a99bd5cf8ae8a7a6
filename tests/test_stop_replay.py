"""``benchmarks.stop_replay``: a stop rule replayed on a search recorded with the stop rule off is exact."""

from __future__ import annotations

import json

import pytest

from benchmarks import stop_replay
from benchmarks.landscapes_ood import landscape
from benchmarks.out_of_family import run_one


@pytest.mark.parametrize("k, run_seed", [(3025, 0), (3014, 0)])
def test_the_samplers_own_rule_replayed_stops_where_the_search_stopped_itself(k, run_seed, tmp_path, capsys) -> None:
    stopped = run_one(landscape(k), "structured", run_seed, stop_replay.BUDGET)
    assert stopped["launches"] < stop_replay.BUDGET  # it stopped itself: the replay has a stop to find
    recorded = stop_replay.record_one("ood-held-out", k, run_seed)
    assert sum(r["launched"] for r in recorded["rows"]) == stop_replay.BUDGET  # the budget spent
    for r in recorded["rows"]:  # what the sampler stored is its rule on what it stored besides (rounded)
        if r["chooser"] == "model" and r["expected_gain"] is not None:
            assert r["expected_gain"] == pytest.approx(stop_replay.revealed(r), abs=1e-4)
    _, rule = stop_replay.RULES["sampler"]
    replayed = stop_replay.replay(recorded["rows"], rule)
    assert replayed["launches"] == stopped["launches"]
    assert replayed["final"] == pytest.approx(stopped["final_fraction"], abs=1e-4)
    assert (replayed["reached"] is not None) == (stopped["restarts"] is not None)
    # a rule that never calls the gain small spends the whole budget, and the answer is then the recorded last one
    never = stop_replay.replay(recorded["rows"], lambda r: 1.0)
    assert never["launches"] == stop_replay.BUDGET and never["final"] == recorded["rows"][-1]["answer_true"]
    # the command line: every rule's line, the sampler's with the launches of the run that stopped itself
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps([recorded]))
    assert stop_replay.main(["replay", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: 1 searches" and len(out) == 1 + len(stop_replay.RULES)
    assert "sampler (" in out[1] and f"launches mean {stopped['launches']:.1f}" in out[1]


def test_replay_refuses_a_file_that_is_not_recorded_searches(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"strategies": {}}))
    with pytest.raises(SystemExit) as e:
        stop_replay.main(["replay", str(bad)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a list of recorded searches" in err and "stop_replay record" in err
