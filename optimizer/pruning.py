"""Pruners for few, noisy, expensive trials.

Each benchmark chunk sends the same prompts in every trial, so chunk ``i`` of one trial pairs with chunk ``i`` of
another. ``RatioToBestPruner`` compares a running trial with the best completed one chunk by chunk and stops it
when it is worse by more than the noise allows: ``mean(ratio) < 1 - min_gap - z * noise / sqrt(k)``. The noise is
the chunk-to-chunk spread measured on completed trials, so it adapts to the workload (a concurrency-1 run of long
requests is steadier than a short one at concurrency 64).

Chunks of one launch share that launch's luck: on some machines the same configuration relaunched measures 15-30 %
apart. So the margin also holds the noise *between* launches (the running trial and the best are two launches):
``z * sqrt(2 * chunk_noise^2 / k + 2 * launch_noise^2)``. The launch noise is what the study measured from repeated
launches (study user attribute ``launch_noise``, written by a confirmation), else the pruner's prior
(``pruner.launch_noise``, 0 by default: within-launch noise only), or the spread the structured sampler's model
finds between launches when that is larger (``search:launch_noise_estimate``: the study's own launches scatter far
more than the model assumes).
"""

from __future__ import annotations

import math
import statistics

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from .study.records import BASELINE, LAUNCH_NOISE, LAUNCH_NOISE_ESTIMATE


def _plan(study: optuna.Study):  # noqa: ANN202 - optimizer.objective.Plan, imported late (no import cycle)
    from .levels import study_plan

    plan = study_plan(study)
    return plan if plan is not None and plan.interleave else None


def _worse_at_every_level(study: optuna.Study, trial: FrozenTrial, plan, threshold) -> bool:  # noqa: ANN001
    """A study over several load levels answers each level: prune a trial only when, at every level it has
    chunks of, it trails that level's best complete trial (so it cannot be any level's answer)."""
    from .levels import trial_levels

    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.number != trial.number and t.intermediate_values and all(v <= 0 for v in t.constraints.values())
    ]
    by_level: dict[int, list[int]] = {}
    for step in trial.intermediate_values:
        by_level.setdefault(plan.level_of_step(step), []).append(step)
    if not by_level:
        return False
    for level, steps in by_level.items():
        best = max(done, key=lambda t: trial_levels(t).get(level, {}).get("tok_per_s") or 0.0, default=None)
        if best is None:
            return False
        ratios = [
            trial.intermediate_values[s] / best.intermediate_values[s] for s in steps if best.intermediate_values.get(s)
        ]
        if not ratios or statistics.fmean(ratios) >= threshold(len(ratios)):
            return False
    return True


def _best_complete(study: optuna.Study, current: FrozenTrial) -> FrozenTrial | None:
    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.number == current.number or not t.intermediate_values or t.value is None:
            continue
        if any(v > 0 for v in t.constraints.values()) if hasattr(t, "constraints") else False:
            continue
        if best is None or t.value > best.value:  # type: ignore[operator]
            best = t
    return best


def chunk_noise(study: optuna.Study, default: float = 0.05) -> float:
    """Pooled relative spread of chunk tok/s within completed trials (sample std / mean).

    A study whose objective aggregates several load levels reports every level's chunks (``Plan.step``); the
    spread is measured within each level, never across loads.
    """
    plan = _plan(study)
    spreads = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        groups: dict[int, list[float]] = {}
        for step, v in t.intermediate_values.items():
            if v and v > 0:
                groups.setdefault(plan.level_of_step(step) if plan is not None else 0, []).append(v)
        for vals in groups.values():
            if len(vals) < 3:
                continue
            mean = statistics.fmean(vals)
            spreads.append(statistics.stdev(vals) / mean)
    if not spreads:
        return default
    return max(0.01, statistics.median(spreads))


def launch_noise(study: optuna.Study, prior: float = 0.0) -> float:
    """One sigma of the launch-to-launch noise (relative): measured by the study when it has relaunches, else the
    prior."""
    measured = study.user_attrs.get(LAUNCH_NOISE)
    if isinstance(measured, dict) and isinstance(measured.get("sigma"), (int, float)) and measured["sigma"] >= 0:
        return float(measured["sigma"])
    # the structured sampler's residuals, when they show launches scattering far more than assumed
    modelled = study.user_attrs.get(LAUNCH_NOISE_ESTIMATE)
    return max(prior, float(modelled)) if isinstance(modelled, (int, float)) else prior


class RatioToBestPruner(BasePruner):
    def __init__(
        self,
        *,
        n_startup_trials: int = 2,
        n_startup_steps: int = 1,
        min_gap: float = 0.02,
        z: float = 2.5,
        launch_noise: float = 0.0,
    ) -> None:
        self.n_startup_trials = n_startup_trials
        self.n_startup_steps = n_startup_steps
        self.min_gap = min_gap
        self.z = z
        self.launch_noise = launch_noise

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if trial.user_attrs.get(BASELINE):
            return False
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len([t for t in done if t.intermediate_values]) < self.n_startup_trials:
            return False
        chunk = chunk_noise(study)
        launch = launch_noise(study, self.launch_noise)

        def threshold(k: int) -> float:
            # Chunk noise is relative within a trial; a ratio of two noisy chunks has sqrt(2) times that spread,
            # and averages out over k chunks. Launch noise is shared by all chunks of a launch: it never does.
            return 1.0 - self.min_gap - self.z * math.sqrt(2 * chunk**2 / k + 2 * launch**2)

        plan = _plan(study)
        if plan is not None:
            rounds = len(trial.intermediate_values) // max(1, len(plan._active()))
            return rounds > self.n_startup_steps and _worse_at_every_level(study, trial, plan, threshold)
        best = _best_complete(study, trial)
        if best is None:
            return False
        ratios = []
        for step, value in trial.intermediate_values.items():
            ref = best.intermediate_values.get(step)
            if ref and ref > 0:
                ratios.append(value / ref)
        k = len(ratios)
        if k <= self.n_startup_steps:
            return False
        return statistics.fmean(ratios) < threshold(k)


class GuardedPruner(BasePruner):
    """Wraps an Optuna pruner: never prunes the baseline, and only prunes a trial that trails the best trial's
    same chunks by at least ``min_gap`` (a statistical test alone may prune a trial that is 0.5 % worse)."""

    def __init__(self, inner: BasePruner, min_gap: float = 0.02) -> None:
        self.inner = inner
        self.min_gap = min_gap

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if trial.user_attrs.get(BASELINE):
            return False
        if not self.inner.prune(study, trial):
            return False
        best = _best_complete(study, trial)
        if best is None:
            return True
        pairs = [
            (v, best.intermediate_values[s])
            for s, v in trial.intermediate_values.items()
            if s in best.intermediate_values and best.intermediate_values[s] > 0
        ]
        if not pairs:
            return True
        return statistics.fmean(v / r for v, r in pairs) < 1.0 - self.min_gap


def make_pruner(
    name: str,
    *,
    p_threshold: float = 0.1,
    n_startup_steps: int = 1,
    n_startup_trials: int = 2,
    min_gap: float = 0.02,
    launch_noise: float = 0.0,
) -> BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "ratio":
        return RatioToBestPruner(
            n_startup_trials=n_startup_trials,
            n_startup_steps=n_startup_steps,
            min_gap=min_gap,
            launch_noise=launch_noise,
        )
    if name == "wilcoxon":
        return GuardedPruner(
            optuna.pruners.WilcoxonPruner(p_threshold=p_threshold, n_startup_steps=n_startup_steps), min_gap
        )
    if name == "median":
        return GuardedPruner(
            optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=n_startup_steps), min_gap
        )
    raise ValueError(f"unknown pruner {name!r}")


def study_pruner(cfg) -> optuna.pruners.BasePruner:  # noqa: ANN001 - optimizer.settings.StudyConfig (no import cycle)
    """The pruner a study file asks for (``pruner:``), with every setting it states."""
    p = cfg.pruner
    return make_pruner(
        p.name,
        p_threshold=p.p_threshold,
        n_startup_steps=p.n_startup_steps,
        n_startup_trials=p.n_startup_trials,
        min_gap=p.min_gap,
        launch_noise=p.launch_noise,
    )
