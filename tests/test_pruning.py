"""The pruners on a real in-memory Optuna study: completed trials are added with their chunk values, a running
trial reports chunks, and ``trial.should_prune()`` asks the study's pruner exactly as the driver does."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from optimizer.pruning import GuardedPruner, RatioToBestPruner, chunk_noise, make_pruner
from optimizer.study import records as R

STEADY = (1.0, 1.01, 0.99, 1.0)  # chunk-to-chunk spread about 0.8 %
NOISY = (1.0, 1.12, 0.88, 1.05)  # about 10 %


def study_with(pruner: optuna.pruners.BasePruner, *completed: tuple[float, tuple[float, ...]]) -> optuna.Study:
    """A study with completed trials of the given value and chunk shape (chunk i = value * shape[i])."""
    study = optuna.create_study(direction="maximize", pruner=pruner)
    for value, shape in completed:
        add_complete(study, value, [value * s for s in shape])
    return study


def add_complete(study: optuna.Study, value: float, chunks: list[float], **attrs) -> None:
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=value,
            params={"steps": 1},
            distributions={"steps": IntDistribution(1, 8)},
            intermediate_values=dict(enumerate(chunks)),
            user_attrs=attrs,
        )
    )


def running(study: optuna.Study, chunks: list[float], **attrs) -> optuna.Trial:
    trial = study.ask()
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    for step, v in enumerate(chunks):
        trial.report(v, step)
    return trial


# ---------------------------------------------------------------------------------------------- chunk noise
def test_chunk_noise_is_the_median_relative_spread_of_completed_trials() -> None:
    study = study_with(optuna.pruners.NopPruner(), (100.0, STEADY), (200.0, NOISY), (150.0, NOISY))
    want = statistics.median(
        statistics.stdev([v * s for s in shape]) / statistics.fmean([v * s for s in shape])
        for v, shape in ((100.0, STEADY), (200.0, NOISY), (150.0, NOISY))
    )
    assert chunk_noise(study) == pytest.approx(want)
    assert chunk_noise(study) == pytest.approx(statistics.stdev(NOISY) / statistics.fmean(NOISY))


def test_chunk_noise_defaults_without_data_and_has_a_floor() -> None:
    assert chunk_noise(optuna.create_study(direction="maximize")) == 0.05
    assert chunk_noise(optuna.create_study(direction="maximize"), default=0.2) == 0.2
    # fewer than three chunks say nothing about the spread
    assert chunk_noise(study_with(optuna.pruners.NopPruner(), (100.0, (1.0, 1.5)))) == 0.05
    # identical chunks: the noise never reads as zero (a zero would prune on any deficit)
    assert chunk_noise(study_with(optuna.pruners.NopPruner(), (100.0, (1.0, 1.0, 1.0)))) == 0.01


def test_chunk_noise_is_measured_within_each_load_level_block() -> None:
    """Levels of very different throughput in one trial (an aggregate objective: the levels take turns, even
    steps at one load, odd steps at another) are not noise."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(R.PLAN, {"levels": [1, 64], "chunks": 3, "objective": {"aggregate": "gain"}})
    add_complete(study, 1000.0, [100.0, 1000.0, 101.0, 1010.0, 99.0, 990.0])
    assert chunk_noise(study) == pytest.approx(0.01)
    mixed = optuna.create_study(direction="maximize")
    add_complete(mixed, 1000.0, [100.0, 101.0, 99.0, 1000.0, 1010.0, 990.0])
    assert chunk_noise(mixed) > 0.5  # without the plan the blocks would read as one very noisy trial


# ---------------------------------------------------------------------------------------------- ratio to best
def test_a_clearly_worse_trial_is_pruned_and_a_close_one_is_not() -> None:
    study = study_with(RatioToBestPruner(), (100.0, STEADY), (90.0, STEADY))
    worse = running(study, [70.0, 71.0])
    assert worse.should_prune()
    close = running(study, [99.0 * s for s in STEADY[:3]])
    assert not close.should_prune()
    better = running(study, [120.0, 121.0, 119.0])
    assert not better.should_prune()


def test_the_noise_decides_how_far_behind_is_far_enough() -> None:
    """90 % of the best after two chunks: pruned when completed trials are steady, kept when they are noisy
    (threshold 1 - min_gap - z * noise * sqrt(2) / sqrt(k))."""
    steady = study_with(RatioToBestPruner(), (100.0, STEADY), (80.0, STEADY))
    noisy = study_with(RatioToBestPruner(), (100.0, NOISY), (80.0, NOISY))
    chunks = [90.0 * NOISY[0], 90.0 * NOISY[1]]
    noise = chunk_noise(noisy) * math.sqrt(2)
    assert statistics.fmean(c / r for c, r in zip(chunks, (100.0, 112.0))) > 1 - 0.02 - 2.5 * noise / math.sqrt(2)
    assert running(steady, chunks).should_prune()
    assert not running(noisy, chunks).should_prune()


def test_nothing_is_pruned_before_the_startup_trials_and_steps() -> None:
    one = study_with(RatioToBestPruner(n_startup_trials=2), (100.0, STEADY))
    assert not running(one, [10.0, 10.0, 10.0]).should_prune()
    two = study_with(RatioToBestPruner(n_startup_trials=2, n_startup_steps=1), (100.0, STEADY), (90.0, STEADY))
    assert not running(two, [10.0]).should_prune()  # one paired chunk: too early
    assert running(two, [10.0, 10.0]).should_prune()


def test_the_baseline_is_never_pruned() -> None:
    study = study_with(RatioToBestPruner(), (100.0, STEADY), (90.0, STEADY))
    assert not running(study, [10.0, 10.0, 10.0], **{R.BASELINE: True}).should_prune()


def test_the_reference_is_the_best_feasible_trial() -> None:
    """A faster trial that violated a constraint is no reference: compared with the feasible best (100), a trial
    at 99 is close enough; compared with the infeasible 200 it would be pruned."""
    study = study_with(RatioToBestPruner(), (100.0, STEADY), (90.0, STEADY))
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=200.0,
            params={"steps": 2},
            distributions={"steps": IntDistribution(1, 8)},
            intermediate_values={0: 200.0, 1: 200.0, 2: 200.0},
            constraints={"server": 1.0},
        )
    )
    assert not running(study, [99.0, 100.0, 98.0]).should_prune()


def test_only_chunks_that_pair_with_the_best_count() -> None:
    """The best trial has chunks 0-2; a running trial's step 7 pairs with nothing and is ignored."""
    study = study_with(RatioToBestPruner(), (100.0, STEADY[:3]), (90.0, STEADY[:3]))
    trial = study.ask()
    trial.report(10.0, 7)
    trial.report(100.0, 0)
    assert not trial.should_prune()  # one paired chunk, at 100 %: k = 1 is within the start-up steps


# ---------------------------------------------------------------------------------------------- guarded pruners
def test_the_guard_keeps_a_trial_within_min_gap_of_the_best() -> None:
    always = optuna.pruners.ThresholdPruner(lower=1e12)  # Optuna's own pruner, told to prune everything
    study = study_with(GuardedPruner(always, min_gap=0.02), (100.0, STEADY))
    assert not running(study, [99.0, 100.0, 98.5]).should_prune()  # 1 % behind
    assert running(study, [90.0, 91.0, 89.0]).should_prune()  # 10 % behind
    assert not running(study, [50.0, 50.0], **{R.BASELINE: True}).should_prune()


def test_the_guard_never_prunes_what_the_inner_pruner_keeps() -> None:
    study = study_with(GuardedPruner(optuna.pruners.NopPruner()), (100.0, STEADY))
    assert not running(study, [10.0, 10.0, 10.0]).should_prune()


def test_without_a_reference_the_guard_defers_to_the_inner_pruner() -> None:
    study = optuna.create_study(direction="maximize", pruner=GuardedPruner(optuna.pruners.ThresholdPruner(lower=50)))
    assert running(study, [10.0]).should_prune()
    assert not running(study, [60.0]).should_prune()


def test_make_pruner_builds_each_name_and_rejects_others() -> None:
    assert isinstance(make_pruner("none"), optuna.pruners.NopPruner)
    ratio = make_pruner("ratio", n_startup_trials=3, n_startup_steps=2, min_gap=0.05)
    assert isinstance(ratio, RatioToBestPruner)
    assert (ratio.n_startup_trials, ratio.n_startup_steps, ratio.min_gap) == (3, 2, 0.05)
    wilcoxon = make_pruner("wilcoxon", min_gap=0.03)
    assert isinstance(wilcoxon, GuardedPruner) and isinstance(wilcoxon.inner, optuna.pruners.WilcoxonPruner)
    assert wilcoxon.min_gap == 0.03
    median = make_pruner("median")
    assert isinstance(median, GuardedPruner) and isinstance(median.inner, optuna.pruners.MedianPruner)
    with pytest.raises(ValueError, match="unknown pruner 'hyperband'"):
        make_pruner("hyperband")
