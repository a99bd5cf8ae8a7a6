"""Answers per load level, read from a study's storage alone: the best configuration at each concurrency the
workload measured, its gain over the baseline at that level, and the Pareto front of tok/s against p99 ITL.

A trial's figures per level live in its ``levels`` user attribute (``{"32": {"tok_per_s": ..., "complete": true,
...}}``). A level counts for a trial when every chunk of it was measured, also when the trial was pruned later
(the objective level runs first, see ``Plan.order``), and when it meets that level's latency limits. Trials that
could not run, failed or duplicate another never count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .objective import PARETO_METRIC, Limit, Objective, Plan, parse_levels
from .sglang import adaptive
from .sglang import flags as sgl
from .study import records as R

BASELINE_ATTR, PLAN_ATTR, LEVELS_ATTR = R.BASELINE, R.PLAN, R.LEVELS


def plan_record(plan: Plan, limits: dict[Any, Limit]) -> dict[str, Any]:
    return {
        "levels": plan.levels,
        "chunks": plan.chunks,
        "objective": plan.objective.model_dump(mode="json", exclude_none=True),
        "limits": {str(k): v.model_dump(exclude_none=True) for k, v in limits.items()},
    }


def study_plan(study: optuna.Study) -> Plan | None:
    """The plan a study ran with; None for a single-level study (or one older than per-level answers)."""
    rec = study.user_attrs.get(PLAN_ATTR)
    if not isinstance(rec, dict) or not rec.get("levels"):
        return None
    limits: dict[Any, Limit] = {}
    for k, v in (rec.get("limits") or {}).items():
        limits["all" if k == "all" else int(k)] = Limit(**v)
    return Plan(list(rec["levels"]), Objective(**(rec.get("objective") or {})), limits, int(rec.get("chunks", 1)))


def trial_levels(t: FrozenTrial) -> dict[int, dict[str, Any]]:
    return parse_levels(t.user_attrs.get(LEVELS_ATTR) or {})


def _counts(t: FrozenTrial) -> bool:
    ua = t.user_attrs
    if t.state not in (TrialState.COMPLETE, TrialState.PRUNED) or ua.get(R.DUPLICATE_OF) is not None:
        return False
    return ua.get(R.OUTCOME) in ("complete", "pruned")


@dataclass
class LevelAnswer:
    level: int
    best: FrozenTrial | None
    tok_per_s: float | None
    baseline_tok_per_s: float | None
    measured: int  # trials with a complete, limit-meeting measurement at this level
    over_limit: int  # trials measured at this level that broke its latency limits
    best_speculative: FrozenTrial | None = None  # the fastest speculative configuration at this level
    speculative_tok_per_s: float | None = None

    @property
    def gain(self) -> float | None:
        if self.tok_per_s is None or not self.baseline_tok_per_s:
            return None
        return self.tok_per_s / self.baseline_tok_per_s - 1.0

    @property
    def speculation_wins(self) -> bool:
        """The best is a speculative configuration (not the baseline, nor a 'none' configuration of the space)."""
        if self.best is None:
            return False
        flags = self.best.user_attrs.get(R.FLAGS) or {}
        return not self.best.user_attrs.get(BASELINE_ATTR) and bool(flags.get("speculative-algorithm"))

    def verdict(self) -> str:
        if self.best is None:
            return "no configuration measured at this level meets its limits" if self.over_limit else "not measured"
        if not self.speculation_wins:
            base = f" ({self.baseline_tok_per_s:.1f} tok/s)" if self.baseline_tok_per_s else ""
            spec, v = self.best_speculative, self.speculative_tok_per_s
            if spec is not None and v is not None and self.baseline_tok_per_s and v > self.baseline_tok_per_s:
                return (
                    f"serve without speculation at this load ({self.best.user_attrs.get(R.CONFIG)}); the best "
                    f"speculative configuration, trial {spec.number}, measured {v:.1f} tok/s "
                    f"({v / self.baseline_tok_per_s - 1:+.1%} over the baseline{base})"
                )
            return f"no speculative configuration beats the baseline{base}: serve without speculation at this load"
        return ""

    def row(self) -> dict[str, Any]:
        ua = self.best.user_attrs if self.best is not None else {}
        m = trial_levels(self.best).get(self.level, {}) if self.best is not None else {}
        return {
            "concurrency": self.level,
            "trial": None if self.best is None else self.best.number,
            "config": ua.get(R.CONFIG),
            "tok_per_s": None if self.tok_per_s is None else round(self.tok_per_s, 2),
            "baseline_tok_per_s": None if self.baseline_tok_per_s is None else round(self.baseline_tok_per_s, 2),
            "gain_over_baseline": None if self.gain is None else round(self.gain, 4),
            "speculation_wins": self.speculation_wins,
            "ttft_ms_p99": m.get("ttft_ms_p99"),
            "itl_ms_p99": m.get("itl_ms_p99"),
            "accept_length": m.get("accept_length"),
            "measured": self.measured,
            "over_limit": self.over_limit,
            "note": self.verdict(),
            "file": f"best-c{self.level}.yaml" if self.best is not None else None,
        }


def level_answers(study: optuna.Study, plan: Plan) -> list[LevelAnswer]:
    trials = [t for t in study.get_trials(deepcopy=False) if _counts(t)]
    out = []
    for c in plan.levels:
        best: FrozenTrial | None = None
        best_v = None
        base_v = None
        spec: FrozenTrial | None = None
        spec_v = None
        measured = over = 0
        for t in trials:
            m = trial_levels(t).get(c)
            if not m or not m.get("complete") or m.get("tok_per_s") is None:
                continue
            v = float(m["tok_per_s"])
            if t.user_attrs.get(BASELINE_ATTR) and base_v is None:
                base_v = v  # the gain is against the baseline even when the baseline breaks a limit
            if any(x > 0 for x in plan.violations(c, m).values()):
                over += 1
                continue
            measured += 1
            if best_v is None or v > best_v:
                best, best_v = t, v
            if (t.user_attrs.get(R.FLAGS) or {}).get("speculative-algorithm") and (spec_v is None or v > spec_v):
                spec, spec_v = t, v
        out.append(LevelAnswer(c, best, best_v, base_v, measured, over, spec, spec_v))
    return out


def is_adaptive(t: FrozenTrial) -> bool:
    """The trial ran SGLang's adaptive mode (``--speculative-adaptive``, supported by its other flags)."""
    flags = t.user_attrs.get(R.FLAGS) or {}
    return adaptive.effective(flags, sgl.algorithm(flags))


def best_by_kind(
    trials: list[FrozenTrial], plan: Plan, concurrency: int, kinds: Callable[[FrozenTrial], tuple[Any, ...]]
) -> dict[Any, tuple[float, FrozenTrial]]:
    """At one load level, the fastest complete measurement within the limits for each kind a trial counts as
    (``kinds(trial)``: static or adaptive, chain or tree, ...): kind -> (tok/s, trial)."""
    best: dict[Any, tuple[float, FrozenTrial]] = {}
    for t in trials:
        m = trial_levels(t).get(concurrency)
        if not m or not m.get("complete") or m.get("tok_per_s") is None:
            continue
        if any(x > 0 for x in plan.violations(concurrency, m).values()):
            continue
        v = float(m["tok_per_s"])
        for kind in kinds(t):
            if kind not in best or v > best[kind][0]:
                best[kind] = (v, t)
    return best


def adaptive_rows(study: optuna.Study, plan: Plan) -> list[dict[str, Any]]:
    """Per level, the best static configuration next to the best launch in SGLang's adaptive mode (empty when the
    study measured no adaptive launch): does the tuned static answer beat SGLang's own adaptation here?"""
    trials = [t for t in study.get_trials(deepcopy=False) if _counts(t)]
    if not any(is_adaptive(t) for t in trials):
        return []
    rows = []
    for c in plan.levels:
        best = best_by_kind(trials, plan, c, lambda t: (is_adaptive(t),))
        st, ad = best.get(False), best.get(True)
        rows.append(
            {
                "concurrency": c,
                "static_trial": st[1].number if st else None,
                "static_config": st[1].user_attrs.get(R.CONFIG) if st else None,
                "static_tok_per_s": round(st[0], 2) if st else None,
                "adaptive_trial": ad[1].number if ad else None,
                "adaptive_config": ad[1].user_attrs.get(R.CONFIG) if ad else None,
                "adaptive_tok_per_s": round(ad[0], 2) if ad else None,
                "adaptive_vs_static": round(ad[0] / st[0] - 1.0, 4) if st and ad and st[0] else None,
            }
        )
    return rows


def adaptive_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Plain-text rows: SGLang's adaptive mode next to the best static configuration, level by level."""
    if not rows:
        return []
    lines = [f"{'conc':>5}  {'best static':32s} {'tok/s':>9}  {'adaptive mode':32s} {'tok/s':>9} {'vs static':>9}"]
    for r in rows:
        st = "" if r["static_tok_per_s"] is None else f"{r['static_tok_per_s']:.1f}"
        ad = "" if r["adaptive_tok_per_s"] is None else f"{r['adaptive_tok_per_s']:.1f}"
        vs = "" if r["adaptive_vs_static"] is None else f"{r['adaptive_vs_static']:+.1%}"
        lines.append(
            f"{r['concurrency']:>5}  {str(r['static_config'] or '-')[:32]:32s} {st:>9}  "
            f"{str(r['adaptive_config'] or 'no complete measurement')[:32]:32s} {ad:>9} {vs:>9}"
        )
    return lines


def pareto_front(study: optuna.Study, plan: Plan) -> list[dict[str, Any]]:
    """Trials no other trial beats on both tok/s (higher) and p99 ITL (lower) at the plan's level, by tok/s."""
    level = plan.level if plan.level is not None else plan.levels[-1]
    points = []
    for t in study.get_trials(deepcopy=False):
        if not _counts(t):
            continue
        m = trial_levels(t).get(level)
        if not m or not m.get("complete") or m.get("tok_per_s") is None or m.get(PARETO_METRIC) is None:
            continue
        points.append((float(m["tok_per_s"]), float(m[PARETO_METRIC]), t))
    front = [
        p for p in points if not any(q[0] >= p[0] and q[1] <= p[1] and (q[0] > p[0] or q[1] < p[1]) for q in points)
    ]
    front.sort(key=lambda p: -p[0])
    return [
        {
            "concurrency": level,
            "trial": t.number,
            "config": t.user_attrs.get(R.CONFIG),
            "tok_per_s": round(tps, 2),
            "itl_ms_p99": round(itl, 3),
            "baseline": bool(t.user_attrs.get(BASELINE_ATTR)),
        }
        for tps, itl, t in front
    ]


def pareto_points(study: optuna.Study, plan: Plan) -> list[tuple[float, float, int, str]]:
    """Every counted trial's (tok/s, p99 ITL, number, config) at the plan's level, for the report's plot."""
    level = plan.level if plan.level is not None else plan.levels[-1]
    out = []
    for t in study.get_trials(deepcopy=False):
        m = trial_levels(t).get(level) if _counts(t) else None
        if m and m.get("complete") and m.get("tok_per_s") is not None and m.get(PARETO_METRIC) is not None:
            out.append((float(m["tok_per_s"]), float(m[PARETO_METRIC]), t.number, str(t.user_attrs.get(R.CONFIG))))
    return out


def table_lines(answers: list[LevelAnswer]) -> list[str]:
    """Plain-text rows for the terminal summary."""
    lines = [f"{'conc':>5}  {'best configuration':40s} {'tok/s':>9} {'baseline':>9} {'gain':>7}"]
    for a in answers:
        r = a.row()
        cfg = str(r["config"] or "-")[:40]
        tps = "" if r["tok_per_s"] is None else f"{r['tok_per_s']:.1f}"
        base = "" if r["baseline_tok_per_s"] is None else f"{r['baseline_tok_per_s']:.1f}"
        gain = "" if r["gain_over_baseline"] is None else f"{r['gain_over_baseline']:+.1%}"
        lines.append(f"{a.level:>5}  {cfg:40s} {tps:>9} {base:>9} {gain:>7}")
        if r["note"]:
            lines.append(f"{'':>7}{r['note']}")
    return lines


#: flat metrics copied from the objective's level onto the trial, so notes, report and export read them as before
_FLAT = (
    "tok_per_s",
    "requests_per_s",
    "ttft_ms_mean",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_mean",
    "itl_ms_p50",
    "itl_ms_p99",
    "e2e_ms_mean",
    "e2e_ms_p50",
    "e2e_ms_p99",
    "tokens_per_chunk",
)


def per_level_metrics(metrics: dict[str, Any], plan: Plan) -> dict[int, dict[str, Any]]:
    """A result's figures by level: a single-level run's flat figures are its one level's."""
    if LEVELS_ATTR in metrics:
        return parse_levels(metrics[LEVELS_ATTR])
    if not metrics or metrics.get("tok_per_s") is None:
        return {}
    return {plan.levels[0]: {**metrics, "complete": True}}


@dataclass
class Outcome:
    """What the driver tells Optuna for a completed trial."""

    value: float | None  # the objective (tok/s); None when a level it needs is missing
    values: list[float] | None  # a Pareto study's [tok/s, p99 ITL]
    constraints: dict[str, float]  # latency limits: measured / limit - 1 (> 0 breaks it)
    flat: dict[str, Any]  # figures of the objective to store as plain user attributes


def baseline_levels(study: optuna.Study) -> dict[int, float]:
    """The baseline trial's tok/s at each level it measured in full (for ``aggregate: gain``)."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(BASELINE_ATTR) and t.state == TrialState.COMPLETE and not t.user_attrs.get("duplicate_of"):
            return {
                c: float(m["tok_per_s"]) for c, m in trial_levels(t).items() if m.get("complete") and m.get("tok_per_s")
            }
    return {}


def judge(
    metrics: dict[str, Any], plan: Plan, baseline: dict[int, float] | None = None, *, is_baseline: bool = False
) -> Outcome:
    """The objective, the latency constraints and the flat figures of a completed trial's metrics.

    Limits at every measured level count: a configuration that breaks a limit at any load it was measured at is
    not one to deploy, so it cannot be the objective's best (each level's own answer only checks its own limits).
    """
    per = per_level_metrics(metrics, plan)
    if plan.objective.aggregate == "gain" and is_baseline:
        baseline = {c: float(m["tok_per_s"]) for c, m in per.items() if m.get("tok_per_s")}  # its own gain is 1
    value = plan.value(per, baseline)
    constraints: dict[str, float] = {}
    for c in plan.levels:
        if c in per:
            constraints.update(plan.violations(c, per[c]))
        elif plan.limits.get(c):
            constraints.update({f"c{c}_{k}": 1.0 for k, _ in plan.limits[c]})  # not measured: not shown to hold
    flat: dict[str, Any] = {}
    if plan.multi_level:
        if plan.level is not None and plan.level in per:
            flat = {k: per[plan.level].get(k) for k in _FLAT if per[plan.level].get(k) is not None}
        if value is not None:
            flat["tok_per_s"] = value
        src = per.get(plan.level) if plan.level is not None else None
        if src and src.get("accept_length") is not None:
            flat["accept_length"] = src["accept_length"]
    return Outcome(value, plan.pareto_values(per) if plan.pareto else None, constraints, flat)
