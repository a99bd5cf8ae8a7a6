"""The search's answer before any confirmation: among the completed launches, the one the throughput model
estimates fastest.

The fastest single launch is a poor answer where launches of one configuration scatter by 5-20 %: a configuration
measured high by luck keeps the lead, however many launches of its neighbours say otherwise. The throughput model
(``ThroughputModel``: accept length x step time, fitted to every launch, pruned ones included, with its noise
widened to what the launches showed) estimates each completed configuration from its own measurement and from
what launches of related trees and settings measured, so a lucky launch is pulled back toward its neighbours.

Measured with ``benchmarks/strategies.py``'s ``run_driver`` (default sampler, one run per landscape, budget 30),
incumbent = this estimate against incumbent = the fastest single launch (median restarts to 98 %, runs reached,
runs whose final answer is within 2 %): out-of-family tuning half 9.5 / 22 / 17 against 15 / 18 / 12; held-out
family 4 / 29 / 29 both; the four profiles (10 seeds, budget 40) 2.5 / 40 / 40 against 2.5 / 40 / 38.

The driver calls :func:`store` after every launch: the estimate goes on the study (``search:estimate``), with the
answer after each launch so far (``history``: [launch's trial, answer's trial] pairs), so the report, the export
and the benchmarks read the answer from storage alone (``records.search_answer``).
"""

from __future__ import annotations

import math

import optuna

from ..space import SearchSpace
from ..study import records as R
from .candidates import build_table
from .structured import _collect, fit_model, tp_size


def estimates(
    trials: list[optuna.trial.FrozenTrial],
    space: SearchSpace,
    *,
    concurrency: int,
    gpu_sm: int = 90,
    adaptive_settings: bool | str = "auto",
) -> dict[int, float]:
    """Trial number -> the model's estimate of its tok/s (the objective's unit), for every completed, feasible,
    non-duplicate launch the candidate table can place."""
    table = build_table(space, gpu_sm=gpu_sm)
    obs = _collect(table, trials, -1)[0]
    model = fit_model(
        table, trials, obs, concurrency=concurrency, tp=tp_size(space), adaptive_settings=adaptive_settings
    )[0]
    out: dict[int, float] = {}
    for t in trials:
        if not R.answerable(t) or R.outcome(t) != R.COMPLETE:
            continue
        loc = table.locate_trial(t)
        if loc is not None:
            out[t.number] = math.exp(model.mean_log_tps(*loc))
    return out


def store(
    study: optuna.Study,
    space: SearchSpace,
    *,
    concurrency: int,
    gpu_sm: int = 90,
    adaptive_settings: bool | str = "auto",
    after: int | None = None,
) -> int | None:
    """Fit, store the estimate on the study with the answer after trial ``after`` (the launch that just ended)
    appended to its history; return the answer's trial number. Ties (one configuration launched twice) go to the
    higher measurement."""
    trials = study.get_trials(deepcopy=False)
    est = estimates(trials, space, concurrency=concurrency, gpu_sm=gpu_sm, adaptive_settings=adaptive_settings)
    if not est:
        return None
    best = max(est, key=lambda n: (round(est[n], 6), trials[n].value or 0.0))
    old = study.user_attrs.get(R.ESTIMATE)
    history = list(old.get("history") or []) if isinstance(old, dict) else []
    if after is not None:
        history.append([after, best])
    study.set_user_attr(
        R.ESTIMATE,
        {
            "trial": best,
            "tok_per_s": round(est[best], 3),
            "estimates": {str(n): round(v, 3) for n, v in sorted(est.items())},
            "history": history,
        },
    )
    return best
