"""Stop rules replayed on recorded searches: exact, and seconds instead of a rerun.

The stop rule never changes which configuration the search launches next, only when it stops: the driver reads
``StructuredSampler.confident`` before each ask. A search run with the stop rule off (``spend_budget``) therefore
records every launch the search would have made, and a stop rule that reads only what the sampler stored with
each trial (the expected gain, the promised gain) and the calibration record after it can be replayed on that
record exactly: the launches it would have spent and the true value of the study's answer when it stopped.
``replay`` with the sampler's own rule gives the launches and the final answer of a run with the stop rule on
(``tests/test_stop_replay.py`` checks this).

``python -m benchmarks.stop_replay record SET --out FILE [--run-seeds 0,1,2] [--seeds 30]`` records spend-budget
searches (budget 30; SET: ``ood-held-out``, ``ood-tuning``, ``family-held-out``, ``family-tuning`` with each
landscape's own launch noise and stream, or ``kimi``, ``--seeds`` seeds from ``--first-seed`` at ``--noise``, 3 %
by default: replay a rule at 20 % too, where a rule that ignores the launch noise never stops);
``python -m benchmarks.stop_replay replay FILE...`` prints, for every rule of ``RULES``, the mean and median
launches, the runs whose answer at the stop is within 2 % of the optimum and the runs whose answer reached 98 %
by then.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from benchmarks import landscapes, landscapes_ood, parallel
from benchmarks import strategies as S
from benchmarks.answer import KIMI
from benchmarks.trace import run_landscape
from optimizer.samplers import calibration as C
from optimizer.samplers.structured import CONFIDENT_ASKS, EXPECTED_GAIN
from optimizer.settings import STOP_BELOW_GAIN_PCT
from optimizer.study import records as R

BUDGET = 30
KIMI_NOISE = 0.03
SETS = {
    "ood-held-out": landscapes_ood.HELD_OUT,
    "ood-tuning": landscapes_ood.TUNING,
    "family-held-out": landscapes.HELD_OUT,
    "family-tuning": landscapes.TUNING,
}

Rule = Callable[[dict[str, Any]], float]
#: name -> (what it is, the gain it compares with the threshold for a model-chosen trial's record)
RULES: dict[str, tuple[str, Rule]] = {
    "sampler": (
        "the sampler's own, as it stored it: what one launch can reveal through the launch noise",
        lambda r: r["expected_gain"],
    ),
    "promised": ("the plain expected improvement", lambda r: r["promised_gain"]),
    "promised-narrowed": (
        "the plain expected improvement times the recent z-scores' RMS, clipped to [0.5, 1] (tried, not kept)",
        lambda r: r["promised_gain"] * min(1.0, max(0.5, r["z_rms"])),
    ),
}


def revealed(r: dict[str, Any]) -> float:
    """The sampler's rule recomputed from what it stored: promised x (1 - noise / predicted sd), the sd being
    hypot(the model's spread, the noise) (``structured.revealed_gain``)."""
    return r["promised_gain"] * (1.0 - r["launch_noise"] / r["predicted_sd"])


def rows_of(study: optuna.Study, tr: dict[str, Any]) -> list[dict[str, Any]]:
    """Per trial, in trial order: what the stop rule can read after it, and the true value of the answer then."""
    table, values, opt = tr["table"], tr["values"], tr["optimum"]
    trials = study.get_trials(deepcopy=False)
    history = S.answers_after(study)
    rows, answer, before = [], 0.0, C.Calibration()
    for n, t in enumerate(trials):
        if t.number in history:
            loc = table.locate_trial(trials[history[t.number]])
            answer = float(values[loc]) / opt if loc is not None else 0.0
        cal = C.assess(trials[: n + 1])
        ua = t.user_attrs
        rows.append(
            {
                "launched": bool(ua.get(R.LAUNCHED)) or n == 0,
                "chooser": ua.get(C.CHOOSER, ""),
                "expected_gain": ua.get(EXPECTED_GAIN),
                "promised_gain": ua.get(C.PROMISED_GAIN),
                "launch_noise": ua.get(C.LAUNCH_NOISE),
                "predicted_sd": ua.get(C.PRED_LOG_SD),
                "z_rms": before.z_rms,  # the record the sampler had when it chose this trial
                "calibrated": cal.calibrated,  # the record after it: the sampler's when it chooses the next trial
                "answer_true": answer,
            }
        )
        before = cal
    return rows


def record_one(where: str, k: int | None, run_seed: int, kimi_noise: float = KIMI_NOISE) -> dict[str, Any]:
    """One spend-budget search (a unit of parallel work): Kimi (``k`` None, at ``kimi_noise``) or landscape ``k``
    (at its own launch noise)."""
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(logging.ERROR)
    keep: dict[str, Any] = {}
    if k is None:
        _, space, _, _, _ = S._setting(KIMI)
        tr = S._truth(KIMI, 1)
        S.run_driver(
            KIMI, 1, "structured", run_seed, BUDGET, space, tr, launch_noise=kimi_noise, spend_budget=True, keep=keep
        )
        study = keep["study"]
    else:
        study, tr, _ = run_landscape(k, run_seed, BUDGET, spend_budget=True)
    return {"set": where, "landscape": k, "run_seed": run_seed, "rows": rows_of(study, tr)}


def replay(rows: list[dict[str, Any]], rule: Rule, threshold: float = STOP_BELOW_GAIN_PCT / 100.0) -> dict[str, Any]:
    """Where a stop rule would have stopped this search: its launches, the answer's true value then (a share of
    the optimum) and the launch after which the answer was first within 98 % (None: not by the stop). The driver's
    check, mirrored: before each ask, stop once ``CONFIDENT_ASKS`` model choices in a row had a gain below the
    threshold and the calibration record before the last choice called the model calibrated."""
    low, launches, reached = 0, 0, None
    for n, r in enumerate(rows):
        launches += r["launched"]
        if reached is None and r["answer_true"] >= S.TARGET:
            reached = launches
        if r["chooser"] == C.MODEL and r["expected_gain"] is not None:
            low = low + 1 if rule(r) < threshold else 0
        calibrated_before = rows[n - 1]["calibrated"] if n > 0 else True
        if r["chooser"] and low >= CONFIDENT_ASKS and calibrated_before and n + 1 < len(rows):
            return {"launches": launches, "final": r["answer_true"], "reached": reached}
    return {"launches": launches, "final": rows[-1]["answer_true"], "reached": reached}


def summary(runs: list[dict[str, Any]], rule: Rule) -> dict[str, Any]:
    out = [replay(r["rows"], rule) for r in runs]
    launches = [o["launches"] for o in out]
    return {
        "runs": len(out),
        "launches_mean": statistics.fmean(launches),
        "launches_median": statistics.median(launches),
        "final_within_2pct": sum(o["final"] >= S.TARGET for o in out),
        "reached": sum(o["reached"] is not None for o in out),
    }


def record(where: str, run_seeds: tuple[int, ...], kimi_noise: float = KIMI_NOISE) -> list[dict[str, Any]]:
    if where == "kimi":
        work = [(where, None, s, kimi_noise) for s in run_seeds]
    else:
        work = [(where, k, rs) for rs in run_seeds for k in SETS[where]]
    return parallel.pmap(record_one, work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.stop_replay", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record spend-budget searches")
    rec.add_argument("set", choices=[*SETS, "kimi"])
    rec.add_argument("--out", required=True)
    rec.add_argument("--run-seeds", default="0", help="landscapes: run seeds, comma-separated")
    rec.add_argument("--seeds", type=int, default=30, help="kimi: how many seeds")
    rec.add_argument("--first-seed", type=int, default=0, help="kimi: the first seed")
    rec.add_argument("--noise", type=float, default=KIMI_NOISE, help="kimi: the launch noise (0.03: 3 %%)")
    rec.add_argument("--jobs", type=int, default=None)
    rep = sub.add_parser("replay", help="replay every rule of RULES on recorded searches")
    rep.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        if a.set == "kimi":
            seeds = tuple(range(a.first_seed, a.first_seed + a.seeds))
        else:
            seeds = tuple(int(x) for x in a.run_seeds.split(",") if x.strip())
        parallel.set_jobs(a.jobs)
        try:
            runs = record(a.set, seeds, a.noise)
        finally:
            parallel.shutdown()
        Path(a.out).write_text(json.dumps(runs))
        print(f"{len(runs)} searches recorded in {a.out}")
        return 0
    for f in a.files:
        try:
            runs = json.loads(Path(f).read_text())
            if not isinstance(runs, list) or not all("rows" in r for r in runs):
                raise ValueError("not a list of recorded searches")
        except (OSError, ValueError) as e:
            ap.error(f"{f}: {e} (write one with: python -m benchmarks.stop_replay record SET --out {f})")
        print(f"{f}: {len(runs)} searches")
        for name, (what, rule) in RULES.items():
            s = summary(runs, rule)
            print(
                f"  {name} ({what}): launches mean {s['launches_mean']:.1f}, median {s['launches_median']:.1f}; "
                f"final answer within 2 %: {s['final_within_2pct']}/{s['runs']}; reached 98 %: {s['reached']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
