"""How much of a study went to rows of near-identical launches that the data had already rejected.

A launch is ``(tree, settings, status)``: ``tree`` the (steps, topk, draft tokens) SGLang ran (``None`` for the
baseline, no speculation), ``settings`` a hashable value of every other searched parameter (custom all-reduce, the
NCCL variables, ...), ``status`` what the launch ended as (``complete``, ``pruned``, ``failed`` or ``infeasible``).

Definitions
  - Two launches are *near-identical* when they have the same settings and either both are the baseline, or both
    speculate with the same topk, steps within 1 of each other and draft tokens within a factor 1.5
    (``max(d1, d2) <= 1.5 * min(d1, d2)``).
  - A *row* is a maximal stretch of consecutive launches (in the order they ended) in which every launch is
    near-identical to the one before it. Near-identity is checked between neighbours, so a row can drift: draft
    tokens 7, 8, 9, ..., 21 at topk 8 is one row although 7 and 21 are far apart; that drift, one step at a time
    into a region that keeps answering no, is what the measure is for.
  - ``near_identical_streak_share`` is the number of launches that were pruned, failed or infeasible and lie in a
    row of ``min_run`` (5) or more launches, over the number of launches. Completed launches in such a row are not
    counted (they taught something) but they do not break the row.
  - ``same_settings=False`` is a looser variant for reading a study, not the measure itself: the settings are
    ignored, so the same tree relaunched with NCCL variables that change nothing (a single GPU) forms a row too.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from optimizer.samplers.candidates import TREE_PARAMS
from optimizer.sglang import flags as sgl
from optimizer.study import records as R

Tree = tuple[int, int, int] | None
Launch = tuple[Tree, Hashable, str]

REJECTED = frozenset({"pruned", "failed", "fail", "infeasible"})
MIN_RUN = 5


def near_identical(
    a: Launch, b: Launch, *, steps_within: int = 1, draft_factor: float = 1.5, same_settings: bool = True
) -> bool:
    (ta, sa, _), (tb, sb, _) = a, b
    if same_settings and sa != sb:
        return False
    if ta is None or tb is None:
        return ta is None and tb is None
    (s1, k1, d1), (s2, k2, d2) = ta, tb
    return k1 == k2 and abs(s1 - s2) <= steps_within and max(d1, d2) <= draft_factor * min(d1, d2)


def rows(launches: Sequence[Launch], same_settings: bool = True) -> list[tuple[int, int]]:
    """The rows as (start, end) index ranges, end exclusive, covering the launches in order."""
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(launches) + 1):
        if i == len(launches) or not near_identical(launches[i - 1], launches[i], same_settings=same_settings):
            out.append((start, i))
            start = i
    return out


def near_identical_streak_share(
    launches: Sequence[Launch], min_run: int = MIN_RUN, same_settings: bool = True
) -> float:
    """Share of the launches that were pruned or failed inside a row of ``min_run`` or more near-identical
    configurations (see the module docstring); 0.0 for no launches."""
    if not launches:
        return 0.0
    wasted = 0
    for a, b in rows(launches, same_settings):
        if b - a >= min_run:
            wasted += sum(1 for _, _, status in launches[a:b] if status in REJECTED)
    return wasted / len(launches)


def launches_from_study(study: Any, executor: Any, space: Any = None) -> list[Launch]:
    """The launches of a study run with ``optimizer.simexec.ModelExecutor``, in the order they ended.

    ``executor.ledger.launches`` holds (trial number, end time, status); the tree comes from the trial's recorded
    flags (as SGLang resolves them), the settings from its parameter values other than the tree's (the baseline's
    from its recorded baseline parameters). With ``space`` (an ``optimizer.space.SearchSpace``), a setting a trial
    does not carry is filled with the space's default, and the architecture's auto tree is used.
    """
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    arch = space.model.architecture if space is not None else None
    other_names = [n for n in space.params if n not in TREE_PARAMS] if space is not None else None
    out: list[Launch] = []
    for number, _, status in sorted(executor.ledger.launches, key=lambda x: x[1]):
        t = trials.get(number)
        if t is None:
            continue
        ua = t.user_attrs
        flags = dict(ua.get(R.FLAGS) or {})
        params = dict((ua.get(R.BASELINE_PARAMS) if ua.get(R.BASELINE) else t.params) or {})
        if sgl.algorithm(flags) is None:
            tree: Tree = None
        else:
            tree = tuple(int(x) for x in sgl.resolved_triple(flags, architecture=arch))  # type: ignore[assignment]
        if other_names is not None:
            settings: Hashable = tuple(str(_value(space, params, n)) for n in other_names)
        else:
            settings = tuple(sorted((k, str(v)) for k, v in params.items() if k not in TREE_PARAMS))
        out.append((tree, settings, status))
    return out


def _value(space: Any, params: dict[str, Any], name: str) -> Any:
    v = params.get(name)
    if v is None:
        v = space.default_value(name)
    if v is None:
        v = space.params[name].values()[0]
    return v


def study_streak_share(study: Any, executor: Any, space: Any = None, min_run: int = MIN_RUN) -> float:
    return near_identical_streak_share(launches_from_study(study, executor, space), min_run)
