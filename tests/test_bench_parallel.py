"""`make bench` on several worker processes gives the same figures as on one: every run is seeded explicitly,
rebuilt from picklable arguments in its worker, and its result is gathered in submission order."""

from __future__ import annotations

import json

import pytest

from benchmarks import answer, parallel
from benchmarks.landscapes import landscape
from benchmarks.strategies import compare, compare_family

SCENARIO = [("llama-3.1-8b-h100", 1)]
BUDGETS = {"structured": 8, "random": 8, "grid": 12}


def _figures(jobs: int) -> tuple[dict, dict, dict, list[str]]:
    lines: list[str] = []
    parallel.set_jobs(jobs)
    try:
        scen = compare(seeds=2, budgets=BUDGETS, scenarios=SCENARIO, log=lines.append, strategies=tuple(BUDGETS))
        fam = compare_family(
            "held-out", (1000, 1001), budget=8, log=lines.append, strategies=("structured",), landscape_fn=landscape
        )
        # the answer section: the search until it stops itself, then the confirmation (one profile, one landscape)
        ans = answer.run(
            seeds=2, scenarios=SCENARIO, family_seeds=1, noises=(0.03,), hosts=(1,), modes=("new",), log=lines.append
        )
    finally:
        parallel.set_jobs(1)
    for out in (scen, fam, ans):
        out.pop("seconds")
    return scen, fam, ans, lines


@pytest.fixture(scope="module")
def one_and_two():
    return _figures(1), _figures(2)


def test_one_job_and_two_jobs_give_the_same_restarts(one_and_two):
    (scen1, fam1, ans1, lines1), (scen2, fam2, ans2, lines2) = one_and_two
    assert json.dumps(scen1, sort_keys=True) == json.dumps(scen2, sort_keys=True)
    assert json.dumps(fam1, sort_keys=True) == json.dumps(fam2, sort_keys=True)
    assert json.dumps(ans1, sort_keys=True) == json.dumps(ans2, sort_keys=True)
    assert lines1 == lines2  # the same log, in the same order
    row = scen1["scenarios"][0]
    assert set(row["strategies"]) == set(BUDGETS) and row["strategies"]["structured"]["runs"] == 2
    assert len(fam1["strategies"]["structured"]["restarts_each"]) == 2
    assert fam1["landscapes"] == [1000, 1001]
    # two seeds of the profile, then the first landscape of each held-out family (the family and out-of-family)
    assert len(ans1["rows"]) == 4 and all(r["restarts"] > 0 for r in ans1["rows"])
    assert [r["landscape"] for r in ans1["rows"]] == [None, None, 1000, 3000]
    assert [s["group"] for s in ans1["summary"]][1:] == list(answer.FAMILIES)


def test_results_come_back_in_submission_order():
    parallel.set_jobs(2)
    try:
        assert parallel.pmap(_slow_square, [(3, 0.3), (2, 0.0), (1, 0.1)]) == [9, 4, 1]
    finally:
        parallel.set_jobs(1)
    assert parallel.pmap(_slow_square, [(5, 0.0)]) == [25]


def _slow_square(x: int, wait_s: float) -> int:
    import time

    time.sleep(wait_s)
    return x * x


def test_a_benchmark_run_is_a_new_host_whatever_this_machine_stored(tmp_path, monkeypatch):
    """A confirmation stores a host's launch noise under ``studies/hosts`` and a later study on that host adopts it
    for the pruner. Benchmark runs name their simulated hosts h0, h1, ...: a noise stored by an earlier benchmark
    (or study) in the working directory changed every later figure. Each run now starts from an empty store."""
    import warnings

    import optuna

    from benchmarks.landscapes_ood import landscape as ood
    from benchmarks.out_of_family import run_one
    from optimizer.study import hostnoise

    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    monkeypatch.chdir(tmp_path)
    land = ood(3002)

    def outcome() -> list:
        r = run_one(land, "tpe", 0, 12)
        return [status for _, _, status in r["launches_seen"]]

    clean = outcome()
    hostnoise.save(tmp_path / "studies", hostnoise.identity("h0", {}, None), "earlier", 0.19, 8)
    assert (tmp_path / "studies" / "hosts").exists()
    assert outcome() == clean


@pytest.mark.parametrize(
    "family", ["benchmarks.nothing:HELD_OUT", "benchmarks.landscapes:NOPE", "benchmarks.landscapes"]
)
def test_a_family_that_is_not_module_and_seeds_is_refused_before_any_run(family, capsys):
    with pytest.raises(SystemExit) as e:
        answer.main(["--family", f"{answer.FAMILIES[0]},{family}", "--scenarios", "none"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert repr(family) in err and "module:SEEDS" in err and answer.FAMILIES[1] in err


def test_the_one_family_keyword_of_the_recorded_commands_still_runs_that_family_alone():
    """docs/answer.md records commands written when the answer section ran one family (``family=...``)."""
    quiet = dict(seeds=0, scenarios=(), family_seeds=1, noises=(0.03,), hosts=(1,), modes=("new",), log=lambda s: None)
    ans = answer.run(family=answer.FAMILIES[1], **quiet)
    assert [r["landscape"] for r in ans["rows"]] == [3000] and ans["families"] == [answer.FAMILIES[1]]
    assert answer.run(family=None, **quiet)["rows"] == []
