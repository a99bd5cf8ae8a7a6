"""The confirmation's statistics on known numbers: intervals, the cheaper of an equivalent pair, the verdicts."""

from __future__ import annotations

import math

from optimizer.verdict import Arm, decide, launch_noise, pool, ratio, rounds_to_settle, settle, t_interval


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


def seq_arm(label, runs, evidence=(), cost=(3, 4, 1), baseline=False, trial=None):
    """An arm of the sequential confirmation: relaunches by round, and the search's own launches as evidence."""
    return Arm(label, trial, label, cost, baseline=baseline, runs=dict(enumerate(runs)), evidence=list(evidence))


def test_a_stated_prior_only_raises_the_measured_noise():
    # 17.7 % measured over 2 degrees of freedom: a stated 5 % must not read it as 13 % over 4
    assert pool((0.177, 2), (0.05, 2), floor=True) == (0.177, 2)
    low, df = pool((0.01, 2), (0.05, 2), floor=True)  # two launches that happened to agree: the prior lifts it
    assert 0.03 < low < 0.05 and df == 4
    known, df = pool((0.177, 2), (0.05, 2))  # a host's stored noise is a measurement: pooled both ways
    assert known < 0.14 and df == 4


def test_a_runner_up_is_not_made_the_winner_by_its_own_search_launch():
    # trial 2 was confirmed because its search launch measured high (130); trial 1, the study's best, counts only
    # its relaunch. Read with that lucky launch, trial 2 would be a significant winner after one round.
    base = seq_arm("baseline", [91], evidence=[90], cost=(0, 0, 0), baseline=True)
    best = seq_arm("trial 1", [100], trial=1)
    lucky = seq_arm("trial 2", [108], evidence=[130], trial=2)
    v = decide([base, best, lucky], prior=(0.05, 30), paired=False, more=2)
    assert v.winner is lucky
    assert v.decided is None and best in v.open  # one more round for the two
    assert v.as_dict()["winner"]["launches"] == 1  # its relaunch: the search launch it was picked for is not its own
    assert any(line.startswith("confirmed best: trial 2") and "1 launches" in line for line in v.lines)


def test_the_search_answer_stands_until_the_relaunches_overturn_it():
    """Undecided, the search's answer (the study's best the plan selected) stays the winner even where another
    configuration measured a little faster; once the relaunches settle that the other is faster, it wins."""
    base = seq_arm("baseline", [91], evidence=[90], cost=(0, 0, 0), baseline=True)
    answer = seq_arm("trial 1", [100], trial=1)
    other = seq_arm("trial 2", [102], evidence=[101], trial=2)
    v = decide([base, answer, other], prior=(0.05, 30), paired=False, more=2, standing=answer)
    assert v.decided is None and v.winner is answer and any(a is other for a in [*v.open, *v.apart])
    assert v.lines[0].startswith("confirmed best: trial 1") and "did not overturn" in v.lines[0]
    assert any(line.startswith("trial 2 measured fastest") for line in v.lines)
    assert decide([base, answer, other], prior=(0.05, 30), paired=False, more=2).winner is other  # ranked alone

    answer = seq_arm("trial 1", [100, 99, 101, 100], trial=1)
    other = seq_arm("trial 2", [120, 121, 119, 120], evidence=[121], trial=2)
    v = decide([base, answer, other], prior=(0.02, 30), paired=False, standing=answer)
    assert v.decided == "winner" and v.winner is other  # settled: the relaunches overturned it


def test_no_speculation_stands_when_it_is_the_search_answer_until_a_gain_is_significant():
    """The search's answer was the baseline: a speculative configuration that measured a little faster in a few noisy
    relaunches does not replace it (Kimi at 20 % launch noise exported a tree at 62 % of the optimum that way); a
    significant gain does, and no gain worth having decides the verdict."""
    import optuna

    from optimizer.answer import study_answer
    from optimizer.study import records as R

    base = seq_arm("baseline", [100, 97], evidence=[99], cost=(0, 0, 0), baseline=True, trial=0)
    tree = seq_arm("trial 1", [101], evidence=[108], trial=1)
    v = decide([base, tree], prior=(0.05, 30), paired=False, more=2, standing=base)
    assert v.winner is base and v.decided is None and tree in v.open
    assert v.lines[0].startswith("confirmed best: no speculation (baseline)") and "did not overturn" in v.lines[0]
    assert any(line.startswith("trial 1") and "no significant gain over the baseline" in line for line in v.lines)
    assert decide([base, tree], prior=(0.05, 30), paired=False, more=2).winner is tree  # without it: the tree

    study = optuna.create_study(direction="maximize")
    for n, value in enumerate((99.0, 108.0)):
        attrs = {R.CONFIG: f"config {n}", R.OUTCOME: R.COMPLETE, R.LAUNCHED: True}
        if n == 0:
            attrs[R.BASELINE] = True
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
    study.set_user_attr(R.CONFIRM_RESULT, v.as_dict())
    ans = study_answer(study)
    assert ans["trial"] == 0 and ans["confirmed"] and "serve without speculation" in ans["verdict"]
    assert "no configuration's relaunches overturned" in ans["why"] and "fastest configuration" not in ans["why"]

    slow = seq_arm("trial 1", [99, 100, 98, 99], evidence=[100], trial=1)
    v = decide([base, slow], prior=(0.01, 30), paired=False, standing=base)
    assert v.winner is base and v.decided == "no gain"  # settled: no gain of 2 % or more
    fast = seq_arm("trial 1", [120, 121, 119, 120], evidence=[121], trial=1)
    v = decide([base, fast], prior=(0.02, 30), paired=False, standing=base)
    assert v.winner is fast and v.significant is True  # overturned by a significant gain


def test_the_sequential_verdicts_lines_say_what_was_decided():
    # decided at one-sided 95 %: the winner beats trial 2 and gains over the baseline. The lines must not call the
    # two "equivalent within the noise" or the gain "not significant" (two-sided 95 % intervals said both)
    base = seq_arm("baseline", [100, 100], cost=(0, 0, 0), baseline=True)
    win = seq_arm("trial 1", [109.4, 109.4], trial=1)
    other = seq_arm("trial 2", [100, 100], trial=2)
    v = decide([base, win, other], prior=(0.05, 30), paired=False)
    assert v.decided == "winner" and v.winner is win and v.equivalent == [win] and v.significant is True
    assert not any("equivalent within the noise" in line or "no significant gain" in line for line in v.lines)
    assert any(line.startswith("gain over the baseline +9.4% (90% CI") for line in v.lines)
    assert v.as_dict()["interval_level"] == 0.9


def test_a_group_that_shares_one_tree_exports_its_fastest_and_says_so():
    """Two equivalent configurations of one tree (NCCL settings apart): the faster is exported. The lines said "the
    cheapest of them (fewer steps, then fewer draft tokens)", which is no reason where the trees are the same; the
    README's own demo printed it."""
    import optuna

    from optimizer.answer import study_answer
    from optimizer.study import records as R

    base = seq_arm("baseline", [100, 101], cost=(0, 0, 0), baseline=True, trial=0)
    ring = seq_arm("trial 1", [109, 108], cost=(2, 3, 1), trial=1)
    plain = seq_arm("trial 2", [108, 109], cost=(2, 3, 1), trial=2)
    v = decide([base, ring, plain], prior=(0.05, 2), paired=False)
    assert len(v.equivalent) == 2, v.lines
    line = next(line for line in v.lines if line.startswith("equivalent within the noise"))
    assert "they share one tree, and the fastest" in line and "cheapest" not in line
    assert v.as_dict()["picked"] == "fastest"

    study = optuna.create_study(direction="maximize")
    for n, value in enumerate((100.0, 109.0, 108.0)):
        attrs = {R.CONFIG: f"config {n}", R.OUTCOME: R.COMPLETE, R.LAUNCHED: True}
        if n == 0:
            attrs[R.BASELINE] = True
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
    study.set_user_attr(R.CONFIRM_RESULT, v.as_dict())
    why = study_answer(study)["why"]
    assert "share one tree; this is the fastest of them" in why and "cheapest" not in why

    # different trees: the cheaper is exported, as before
    small = seq_arm("trial 2", [108, 109], cost=(1, 2, 1), trial=2)
    v = decide([base, ring, small], prior=(0.05, 2), paired=False)
    assert v.as_dict()["picked"] == "cheapest"
    assert any("the cheapest (trial 2" in line for line in v.lines)


def test_futility_projects_the_test_it_will_apply():
    """Another round is worth it only if the t-test that will judge it could settle the comparison were the means to
    hold: with the noise known over 2 degrees of freedom, one more launch each of two configurations 2 % apart
    settles nothing at t(4) = 2.13 (the normal quantile, 1.64, would have asked for the round); with the noise known
    over 30, the same round can settle it."""
    winner, runner_up = arm("trial 1", [100, 100], trial=1), arm("trial 2", [98, 98], trial=2)
    for a in (winner, runner_up):
        a.pooled = (0.0257, 2)
    assert settle(winner, [runner_up], None, 0.02, more=1) == ([], [runner_up], None)  # could not be told apart
    for a in (winner, runner_up):
        a.pooled = (0.0257, 30)
    assert settle(winner, [runner_up], None, 0.02, more=1) == ([winner, runner_up], [], None)  # one more round
    assert settle(winner, [runner_up], None, 0.02, more=0) == ([], [runner_up], None)  # no launches left


def test_an_undecided_verdict_says_how_many_rounds_would_decide_it_if_the_means_held():
    """``rounds_to_settle``: the fewest further rounds for which ``settle``'s own projection settles every open
    comparison; the confirmation prints it, so a user knows what ``confirm --confirm-rounds N`` would cost."""
    base = seq_arm("baseline", [90, 91], cost=(0, 0, 0), baseline=True)
    winner, runner_up = seq_arm("trial 1", [100, 101], trial=1), seq_arm("trial 2", [99, 100], trial=2)
    v = decide([base, winner, runner_up], prior=(0.03, 30), paired=False, more=0)
    assert v.decided is None and v.winner is winner and runner_up in v.apart
    k = rounds_to_settle(v)
    assert k is not None and k > 1
    # the same projection as the futility rule: k more launches each settle the pair, k - 1 do not
    judged = winner.relaunched()
    assert runner_up in settle(judged, [runner_up], base, 0.02, more=k)[0]
    assert runner_up in settle(judged, [runner_up], base, 0.02, more=k - 1)[1]
    # a decided verdict has no count
    clear = decide(
        [base, seq_arm("trial 1", [120, 121], trial=1), seq_arm("trial 2", [90, 90], trial=2)],
        prior=(0.01, 30),
        paired=False,
    )
    assert clear.decided is not None and rounds_to_settle(clear) is None
    # at 20 % noise, 1 % apart: more than SETTLE_HORIZON rounds
    far = [base, seq_arm("trial 1", [100, 101], trial=1), seq_arm("trial 2", [99, 100], trial=2)]
    assert rounds_to_settle(decide(far, prior=(0.2, 30), paired=False)) is None
