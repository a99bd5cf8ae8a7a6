"""The study's one answer: the trial that is exported, its tok/s and interval, its gain over the baseline, the
configurations equivalent to it (each with its own verdict), why it is the answer, and the line that deploys it.

The terminal's last lines, ``summary.json`` (``answer``), the report's headline and the study's dashboard note all
read :func:`study_answer`, so they cannot disagree. optuna-dashboard's own "Best Trial" badge shows the trial with
the highest single value; where that is another trial, :func:`badge_note` says which trial is the answer and why.

A confirmed answer is the confirmation's winner (``optimizer.verdict``: the cheapest of the configurations whose
intervals overlap the fastest's); without a confirmation it is the completed launch the search's model estimates
fastest (``records.search_answer``: its own measurement pulled toward what related launches measured; the fastest
single launch where no estimate was stored), marked as not confirmed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from .study import records as R
from .study.records import baseline_trial, search_answer
from .verdict import CONFIDENCE


def _tps(v: float | None, ci: Any, level: float = CONFIDENCE) -> str:
    if v is None:
        return "not measured"
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        return f"{v:.1f} tok/s ({level:.0%} CI {ci[0]:.1f}-{ci[1]:.1f})"
    return f"{v:.1f} tok/s"


def ci_level(conf: Mapping[str, Any] | None) -> float:
    """The level of a confirmation's intervals: the sequential verdict's are 90 % (its one-sided 95 % bounds)."""
    level = (conf or {}).get("interval_level")
    return float(level) if isinstance(level, (int, float)) else CONFIDENCE


def gain_verdict(gain: float | None, gain_ci: Any, *, confirmed: bool, level: float = CONFIDENCE) -> str:
    """'significant gain +6.7% (95% CI +0.5% to +13.0%)' and the like, for one configuration."""
    if gain is None:
        return "gain over the baseline not known (no baseline measured)"
    if not confirmed:
        return f"{gain:+.1%} over the baseline in one launch (not confirmed)"
    if not (isinstance(gain_ci, (list, tuple)) and len(gain_ci) == 2 and None not in gain_ci):
        return f"{gain:+.1%} over the baseline (too few paired rounds to judge it)"
    interval = f"{gain:+.1%} ({level:.0%} CI {gain_ci[0]:+.1%} to {gain_ci[1]:+.1%})"
    if gain_ci[0] > 0:
        return f"significant gain over the baseline: {interval}"
    if gain_ci[1] < 0:
        return f"significantly slower than the baseline: {interval}"
    return f"no significant gain over the baseline: {interval}"


def dashboard_best(study: optuna.Study) -> int | None:
    """The trial optuna-dashboard's "Best Trial" badge shows: the highest value of a COMPLETE trial."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE and t.value is not None]
    return max(done, key=lambda t: t.value).number if done else None  # type: ignore[arg-type, return-value]


def study_answer(study: optuna.Study) -> dict[str, Any] | None:
    """The exported answer, read from storage alone; None when no configuration completed."""
    attrs = study.user_attrs
    conf = attrs.get(R.CONFIRM_RESULT) if isinstance(attrs.get(R.CONFIRM_RESULT), Mapping) else None
    winner = (conf or {}).get("winner") or {}
    trials = study.get_trials(deepcopy=False)
    best = search_answer(study)
    if isinstance(winner.get("trial"), int) and 0 <= winner["trial"] < len(trials):
        best = trials[winner["trial"]]
    else:
        winner = {}
    if best is None:
        return None
    base = baseline_trial(study)
    base_v = base.value if base is not None else None
    confirmed = bool(winner)
    level = ci_level(conf)
    if confirmed:
        value, ci, gain, gain_ci = winner.get("tok_per_s"), winner.get("ci"), winner.get("gain"), winner.get("gain_ci")
    else:
        value, ci, gain_ci = best.value, None, None
        gain = best.value / base_v - 1.0 if base_v and best.value is not None else None  # type: ignore[operator]
    alternatives = []
    if confirmed:
        arms = {a.get("trial"): a for a in conf.get("arms") or [] if isinstance(a, Mapping)}  # type: ignore[union-attr]
        for n in conf.get("equivalent_trials") or []:  # type: ignore[union-attr]
            a = arms.get(n)
            if a is None or n == best.number:
                continue
            alternatives.append(
                {
                    "trial": n,
                    "config": a.get("config"),
                    "tok_per_s": a.get("tok_per_s"),
                    "ci": a.get("ci"),
                    "gain": a.get("gain"),
                    "gain_ci": a.get("gain_ci"),
                    "verdict": gain_verdict(a.get("gain"), a.get("gain_ci"), confirmed=True, level=level),
                }
            )
    no_speculation = bool(best.user_attrs.get(R.BASELINE))
    if no_speculation:
        verdict = (
            "no speculative configuration gained significantly over the baseline in the confirmation: "
            "serve without speculation"
            if confirmed
            else "no speculative configuration measured above the baseline: serve without speculation"
        )
    else:
        verdict = gain_verdict(gain, gain_ci, confirmed=confirmed, level=level)
    if confirmed and alternatives:
        why = (
            f"confirmed over {winner.get('launches')} launches each: the configurations listed are equivalent "
            "within the launch noise and "
            + (
                "share one tree; this is the fastest of them"
                if conf.get("picked") == "fastest"  # type: ignore[union-attr]
                else "this is the cheapest of them (fewer steps, then fewer draft tokens)"
            )
        )
    elif confirmed and no_speculation:
        why = (
            f"confirmed over {winner.get('launches')} launches: the search's answer, no speculation, which no "
            "configuration's relaunches overturned"
        )
    elif confirmed:
        why = f"confirmed over {winner.get('launches')} launches: the fastest configuration of the confirmation"
    else:
        why = f"{_unconfirmed_why(study, best)} (not confirmed: `python -m optimizer confirm` relaunches it)"
    badge = dashboard_best(study)
    return {
        "trial": best.number,
        "config": best.user_attrs.get(R.CONFIG),
        "tok_per_s": value,
        "ci": ci,
        "ci_level": level,
        "gain": None if gain is None else round(gain, 4),
        "gain_ci": gain_ci,
        "confirmed": confirmed,
        "launches": winner.get("launches", 1) if confirmed else 1,
        "verdict": verdict,
        "why": why,
        "alternatives": alternatives,
        "baseline": None if base is None else {"trial": base.number, "tok_per_s": base_v},
        "launch_noise": (conf or {}).get("launch_noise"),
        "dashboard_best_trial": badge,
        "flags": best.user_attrs.get(R.FLAGS) or {},
        "env": best.user_attrs.get(R.ENV) or {},
    }


def _unconfirmed_why(study: optuna.Study, best: Any) -> str:
    est = study.user_attrs.get(R.ESTIMATE)
    if not (isinstance(est, Mapping) and est.get("trial") == best.number):
        return "the fastest single launch of the study"
    text = (
        f"the fastest of the study's launches by the search's model ({est.get('tok_per_s'):.1f} tok/s estimated from "
        "its launch and those of related configurations)"
    )
    badge = dashboard_best(study)
    if badge is not None and badge != best.number:
        text += f"; trial {badge} measured higher once, but the model puts it lower"
    return text


def headline(ans: Mapping[str, Any]) -> str:
    """One line: 'answer: trial 7 EAGLE3 s2 k1 d3: 96.4 tok/s (95% CI 94.4-98.5), confirmed over 3 launches'."""
    how = f"confirmed over {ans['launches']} launches" if ans["confirmed"] else "one launch, not confirmed"
    return f"answer: trial {ans['trial']} {ans['config']}: {_tps(ans['tok_per_s'], ans['ci'], ans.get('ci_level', CONFIDENCE))}, {how}"


def deploy_command(study_dir: Any) -> str:
    return f"bash {shlex.quote(str(study_dir))}/best.sh --port 30000"


def badge_note(ans: Mapping[str, Any]) -> str | None:
    """Where optuna-dashboard's "Best Trial" badge shows another trial than the answer: which one is the answer."""
    badge = ans.get("dashboard_best_trial")
    if badge is None or badge == ans["trial"]:
        return None
    return (
        f'The dashboard\'s "Best Trial" badge shows trial {badge}, the highest single launch; the exported answer '
        f"is trial {ans['trial']}: {ans['why']}."
    )


def answer_lines(ans: Mapping[str, Any] | None, study_dir: Any) -> list[str]:
    """The terminal's last lines: the answer, its interval and verdict, the equivalent alternatives with their
    own verdicts, why this one, and the line that deploys it."""
    if ans is None:
        return ["no configuration completed: nothing to deploy"]
    lines = [headline(ans), f"  {ans['verdict']}"]
    if ans.get("baseline"):
        b = ans["baseline"]
        lines[-1] += f" (baseline: trial {b['trial']}, {b['tok_per_s']:.1f} tok/s in the study)"
    for a in ans.get("alternatives") or []:
        lines.append(
            f"  equivalent: trial {a['trial']} {a['config']}: {_tps(a['tok_per_s'], a['ci'], ans.get('ci_level', CONFIDENCE))}; {a['verdict']}"
        )
    lines.append(f"  why trial {ans['trial']}: {ans['why']}")
    if isinstance(ans.get("launch_noise"), (int, float)):
        lines.append(f"  launch-to-launch noise {ans['launch_noise']:.1%}")
    lines.append(f"deploy: {deploy_command(study_dir)}")
    return lines
