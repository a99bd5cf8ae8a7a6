"""The fewest restarts any search needs on a profile (benchmarks/noise_floor.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import noise_floor as NF
from benchmarks.answer import KIMI


class _Table:
    """Two trees x three settings columns; the third column measures like the first (an idle setting)."""

    columns = [
        {"NCCL_ALGO": "Ring", "car": "on"},
        {"NCCL_ALGO": "Tree", "car": "on"},
        {"NCCL_ALGO": "Ring", "car": "off"},
    ]

    def __init__(self) -> None:
        self.valid = np.ones((2, 3), dtype=bool)

    def params(self, i: int, j: int) -> dict:
        return {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 2 + i, **self.columns[j]}


def test_the_deciding_choice_is_what_every_answer_within_2pct_shares_and_the_best_outside_lacks() -> None:
    values = np.array([[100.0, 96.0, 100.0], [99.0, 90.0, 99.0]])
    d = NF.deciding_choice({"table": _Table(), "values": values, "optimum": 100.0})
    assert d["within"] == 2  # (2, Ring) and (3, Ring); the idle column's copies count once
    assert d["shared"] == {"NCCL_ALGO": "Ring", "car": "on"}
    assert d["decides"] == {"NCCL_ALGO": ("Ring", "Tree")}
    assert d["contender_fraction"] == pytest.approx(0.96)
    assert d["gap"] == pytest.approx(math.log(100 / 96))
    with pytest.raises(ValueError, match="nothing to decide"):
        NF.deciding_choice({"table": _Table(), "values": np.full((2, 3), 100.0), "optimum": 100.0})


@pytest.mark.parametrize(("gap", "noise", "n"), [(0.03, 0.03, 10), (0.03, 0.03, 4), (0.05, 0.1, 20)])
def test_the_bound_agrees_with_a_simulation_of_the_even_split(gap: float, noise: float, n: int) -> None:
    assert NF.p_correct(gap, noise, n) == pytest.approx(NF.p_correct_simulated(gap, noise, n, runs=100_000), abs=0.01)


def test_more_restarts_choose_right_more_often_and_the_count_for_95pct_is_the_first_that_reaches_it() -> None:
    bounds = [NF.p_correct(0.03, 0.03, n) for n in range(2, 40, 2)]
    assert bounds == sorted(bounds) and bounds[0] > 0.5 and bounds[-1] < 1.0
    need = NF.restarts_needed(0.03, 0.03)
    assert need % 2 == 0
    assert NF.p_correct(0.03, 0.03, need) >= 0.95 > NF.p_correct(0.03, 0.03, need - 2)


def test_a_sequential_test_needs_fewer_launches_on_average_but_no_fewer_than_walds_bound() -> None:
    """Wald's sequential probability ratio test on the same choice (every other effect known, one side launched
    until the evidence suffices, thresholds ln 19 either way): right about 95 % of the time, on fewer launches than
    the fixed design needs, and on no fewer on average than ``sequential_restarts``."""
    gap, noise = 0.03, 0.03
    rng = np.random.default_rng(1)
    bound = NF.sequential_restarts(gap, noise)
    counts, wrong = [], 0
    for _ in range(4000):
        llr, n = 0.0, 0
        while abs(llr) < math.log(19):
            x = rng.normal(0.0, noise)  # the faster side's launch, relative to what it would measure if it were ahead
            llr += (2 * x * gap + gap**2) / (2 * noise**2)
            n += 1
        counts.append(n)
        wrong += llr < 0
    assert wrong / 4000 < 0.06
    assert bound <= np.mean(counts) <= 1.6 * bound < NF.restarts_needed(gap, noise)


def test_on_kimi_the_search_must_choose_ring_which_a_fixed_ten_restarts_get_right_at_most_94pct_of_the_time() -> None:
    r = NF.report(KIMI, 0.03, restarts=(10, 12))
    assert r["shared"]["NCCL_PROTO"] == "LL" and r["shared"]["NCCL_ALGO"] == "Ring"
    assert set(r["decides"]) == {"NCCL_ALGO"} and r["decides"]["NCCL_ALGO"][0] == "Ring"
    assert r["bound"][10] < 0.95 <= r["bound"][12]
    assert r["restarts_for_95"] == 12 and 5 < r["sequential_restarts_for_95"] < 6
    assert "NCCL_ALGO=Ring over" in r["line"] and "95% needs 12" in r["line"] and "at least 5.4 on average" in r["line"]
