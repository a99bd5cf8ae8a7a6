"""The confirmation's statistics on known numbers: intervals, the cheaper of an equivalent pair, the verdicts."""

from __future__ import annotations

import math

from optimizer.verdict import Arm, decide, launch_noise, ratio, t_interval


def arm(label, runs, cost=(3, 4, 1), baseline=False, trial=None):
    return Arm(label, trial, label, cost, baseline=baseline, runs=dict(enumerate(runs)))


def test_t_interval_on_logs():
    iv = t_interval([math.log(100), math.log(102), math.log(98)])
    assert iv.known and iv.n == 3
    assert 94 < math.exp(iv.lo) < 100 < math.exp(iv.hi) < 106  # t(2) = 4.30: three launches say little
    assert not t_interval([1.0]).known and t_interval([]).n == 0


def test_significant_gain_and_runner_up():
    base = arm("baseline", [100, 101, 99], cost=(0, 0, 0), baseline=True)
    a = arm("trial 1", [130, 131, 129], trial=1)
    b = arm("trial 2", [110, 111, 109], trial=2)
    v = decide([base, a, b])
    assert v.winner is a and v.significant is True and v.equivalent == [a]
    assert 0.28 < math.exp(v.gain.mean) - 1 < 0.31 and math.exp(v.gain.lo) > 1
    assert any(line.startswith("runner-up trial 2 is slower") for line in v.lines)


def test_equivalent_pair_prefers_the_cheaper():
    base = arm("baseline", [100, 101, 99], cost=(0, 0, 0), baseline=True)
    big = arm("trial 1", [131, 128, 130], cost=(5, 8, 4), trial=1)  # fastest on average, bigger tree
    small = arm("trial 2", [129, 130, 128], cost=(2, 3, 1), trial=2)
    v = decide([base, big, small])
    assert v.fastest is big and v.winner is small and [a.label for a in v.equivalent] == ["trial 1", "trial 2"]
    assert any("equivalent within the noise" in line and "trial 2" in line for line in v.lines)


def test_no_significant_gain_when_the_interval_includes_zero():
    base = arm("baseline", [100, 92, 108], cost=(0, 0, 0), baseline=True)
    a = arm("trial 1", [104, 95, 109], trial=1)
    v = decide([base, a])
    assert v.significant is False and v.gain.lo < 0 < v.gain.hi
    assert any(line.startswith("no significant gain over the baseline") for line in v.lines)


def test_interleaved_rounds_cancel_drift():
    # every launch of round r runs 10 % slower than round r-1 (the machine heats up): the per-round ratio is exact
    base = arm("baseline", [100, 90, 81], cost=(0, 0, 0), baseline=True)
    a = arm("trial 1", [120, 108, 97.2], trial=1)
    r = ratio(a, base)
    assert abs(math.exp(r.mean) - 1.2) < 1e-9 and r.hi - r.lo < 1e-9


def test_launch_noise_pools_within_configuration_spread():
    sigma, df = launch_noise([arm("a", [100, 110, 90]), arm("b", [50, 50]), arm("c", [70])])
    assert df == 3 and 0.05 < sigma < 0.1
    assert launch_noise([arm("a", [100])]) == (None, 0)
