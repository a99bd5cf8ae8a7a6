"""One search, launch by launch: what the model predicted and promised, what the launch measured, and the truth.

``python -m benchmarks.trace LANDSCAPE [--run-seed 0] [--budget 30] [--spend-budget] [--model]`` runs one study the
way ``benchmarks.out_of_family`` and ``make bench``'s family rows do (``strategies.driver_task``: the landscape's own
launch noise and its own stream of the run seed) on a generated landscape: 0-29 and 1000-1029 are
``benchmarks/landscapes.py``'s family, 2000-2029 and 3000-3029 ``benchmarks/landscapes_ood.py``'s. It prints one
line per trial, in trial order:

- the state (COMPL, PRUNE, FAIL), who chose it (``model`` or the ``explorer``), the tree and the settings;
- ``true``: the configuration's true tok/s as a share of the optimum (0 where it cannot serve);
- ``meas``: what the launch measured (the mean of its chunks where it was pruned), as a share of the optimum;
- ``pred``, ``gain``, ``promised``, ``p_imp``: the model's prediction, the expected gain the stop rule judges, the
  plain expected improvement, and the chance to measure above the best, as stored on the trial;
- ``wrong`` and ``z``: the calibration record after this trial (``samplers.calibration.assess``: surprise plus
  misses, the recent z-scores' RMS);
- ``answer``: the true value of the study's answer after this launch (``records.search_answer``).

and then why the search stopped. ``--model`` adds the throughput model fitted to every launch of the study against
the landscape's truth (:func:`model_against_truth`): for each configuration launched and the fastest few trees of
the space, its true and predicted tok/s, its true and predicted accept length, and how far the predicted step time
is off (both relative to the baseline at the default settings). It tells which half of the model is wrong where a
search goes astray (docs/out-of-family.md, "Where the tree landscapes go wrong"). The docs' traces ("a seed-0
trace", docs/answer.md and docs/out-of-family.md) are this command's output.
"""

from __future__ import annotations

import argparse
import logging
import math
import warnings
from collections import Counter
from typing import Any

import numpy as np
import optuna

from benchmarks import landscapes, landscapes_ood
from benchmarks import strategies as S
from optimizer.samplers import calibration as C
from optimizer.samplers import structured as ST
from optimizer.study import records as R


def landscape_module(k: int) -> Any:
    """The generator that owns landscape seed ``k``."""
    for module in (landscapes, landscapes_ood):
        if k in module.TUNING or k in module.HELD_OUT:
            return module
    if k >= landscapes_ood.TUNING[0]:  # a fresh draw of the out-of-family generator (--landscapes FIRST-LAST)
        return landscapes_ood
    raise ValueError(
        f"landscape {k}: not a generated landscape; allowed: {landscapes.TUNING[0]}-{landscapes.TUNING[-1]}, "
        f"{landscapes.HELD_OUT[0]}-{landscapes.HELD_OUT[-1]} (benchmarks/landscapes.py), "
        f"{landscapes_ood.TUNING[0]}-{landscapes_ood.TUNING[-1]}, "
        f"{landscapes_ood.HELD_OUT[0]}-{landscapes_ood.HELD_OUT[-1]} and any fresh draw from "
        f"{landscapes_ood.TUNING[0]} up (benchmarks/landscapes_ood.py)"
    )


def run_landscape(
    k: int, run_seed: int = 0, budget: int = 30, spend_budget: bool = False
) -> tuple[optuna.Study, dict[str, Any], dict[str, Any]]:
    """The default search once on generated landscape ``k``, as the out-of-family check and the family rows run it
    (the landscape's own launch noise and stream): the study, the truth and the run's score (``strategies.score``)."""
    where = (landscape_module(k).landscape, k)
    prof, space, conc, noise, _ = S._setting(where)
    tr = S._truth(where, conc)
    keep: dict[str, Any] = {}
    score = S.run_driver(
        prof,
        conc,
        "structured",
        S.landscape_seed(run_seed, k),
        budget,
        space,
        tr,
        launch_noise=noise,
        spend_budget=spend_budget,
        keep=keep,
    )
    return keep["study"], tr, score


def trace(k: int, run_seed: int = 0, budget: int = 30, spend_budget: bool = False) -> dict[str, Any]:
    """Run the default search once on landscape ``k`` and return its rows (one dict per trial), the stop record
    and the run's score (``strategies.score``)."""
    study, tr, score = run_landscape(k, run_seed, budget, spend_budget)
    table, values, opt = tr["table"], tr["values"], tr["optimum"]
    trials = study.get_trials(deepcopy=False)
    answers = S.answers_after(study)
    rows = []
    for n, t in enumerate(trials):
        loc = table.locate_trial(t)
        ua = t.user_attrs
        measured = C._measured(t)
        cal = C.assess(trials[: n + 1])
        answer = answers.get(t.number)
        answer_loc = table.locate_trial(trials[answer]) if answer is not None else None
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "chooser": ua.get(C.CHOOSER, ""),
                "params": dict(t.params),
                "true": float(values[loc]) / opt if loc is not None else 0.0,
                "measured": (measured or 0.0) / opt,
                "predicted": float(ua.get(C.PREDICTED) or 0.0) / opt,
                "gain": float(ua.get(C.EXPECTED_GAIN) or 0.0),
                "promised": float(ua.get(C.PROMISED_GAIN) or 0.0),
                "p_improve": float(ua.get(C.P_IMPROVE) or 0.0),
                "wrongness": cal.wrongness,
                "z_rms": cal.z_rms,
                "answer_true": float(values[answer_loc]) / opt if answer_loc is not None else None,
            }
        )
    return {
        "landscape": k,
        "optimum": tr["optimum_config"],
        "rows": rows,
        "stop": study.user_attrs.get(R.SEARCH_STOP),
        "score": score,
        "final": score["final_true"] / opt if opt > 0 else 0.0,
        "study": study,
        "truth": tr,
    }


def model_against_truth(k: int, study: optuna.Study, tr: dict[str, Any], top: int = 6) -> list[dict[str, Any]]:
    """The structured sampler's throughput model, fitted to all of ``study``'s launches on landscape ``k``, against
    the truth: one row per configuration launched (with how many launches and the settings it changed from the
    defaults) and per tree among the ``top`` truly fastest (at its best settings), fastest first. ``step_error`` is the predicted step time (the tree's and the
    settings' part) over the true one, each relative to the baseline at the default settings (1: right; above 1:
    the model thinks it slower than it is)."""
    prof, space, conc, _, _ = S._setting((landscape_module(k).landscape, k))
    table, values, opt = tr["table"], tr["values"], tr["optimum"]
    trials = study.get_trials(deepcopy=False)
    obs = ST._collect(table, trials, -1)[0]
    model = ST.fit_model(table, trials, obs, concurrency=conc, tp=ST.tp_size(space), adaptive_settings="auto")[0]
    launches = Counter((o.i, o.j) for o in obs)
    defaults = dict(zip(table.other_names, table.default_other))
    best: dict[int, int] = {}  # tree -> its best settings column, for the truly fastest trees
    for flat in np.argsort(values, axis=None)[::-1]:
        i, j = np.unravel_index(int(flat), values.shape)
        best.setdefault(int(i), int(j))
        if len(best) >= top:
            break
    base = int(np.flatnonzero(~table.spec)[0])
    j0 = table.other_values.index(tuple(table.default_other))  # the baseline's settings

    def true_accept(i: int) -> float:
        if not table.spec[i]:
            return 1.0
        steps, topk, draft = (int(x) for x in table.trees[i])
        return float(prof.accept_length(str(table.algos[i]), (steps, topk, draft)))

    def predicted(i: int, j: int) -> float:
        return math.exp(model.mean_log_tps(i, j))

    rows = []
    for i, j in set(launches) | set(best.items()):
        if values[i, j] <= 0:  # cannot serve: no step time to compare
            step_error = None
        else:
            true_step = true_accept(i) / values[i, j] * values[base, j0]
            step_error = model.accept_length(i) / predicted(i, j) * predicted(base, j0) / true_step
        rows.append(
            {
                "tree": [int(x) for x in table.trees[i]] if table.spec[i] else None,
                "settings": {n: v for n, v in table.params(i, j).items() if n in defaults and v != defaults[n]},
                "launches": launches[(i, j)],
                "true": float(values[i, j]) / opt,
                "predicted": predicted(i, j) / opt,
                "accept_true": true_accept(i),
                "accept_predicted": model.accept_length(i),
                "step_error": step_error,
            }
        )
    rows.sort(key=lambda r: -r["true"])
    return rows


def render_model(rows: list[dict[str, Any]]) -> str:
    lines = [
        "the model fitted to every launch, against the truth (tok/s as shares of the optimum; step time: predicted /"
        " true, each relative to the baseline)"
    ]
    for r in rows:
        tree = "baseline" if r["tree"] is None else "({}, {}, {})".format(*r["tree"])
        settings = " ".join(f"{k}={v}" for k, v in r["settings"].items())
        step = "-" if r["step_error"] is None else f"{r['step_error']:.2f}"
        lines.append(
            f"{tree:13s} launched {r['launches']:2d} true {r['true']:.3f} pred {r['predicted']:.3f}"
            f" accept {r['accept_true']:.2f} pred {r['accept_predicted']:.2f} step {step} | {settings or 'defaults'}"
        )
    return "\n".join(lines)


def _short(params: dict[str, Any]) -> str:
    names = {
        "speculative-num-steps": "steps",
        "speculative-eagle-topk": "topk",
        "speculative-num-draft-tokens": "draft",
        "disable-custom-all-reduce": "car-off",
    }
    return " ".join(f"{names.get(k, k)}={v}" for k, v in params.items() if k != "speculative-algorithm")


def render(out: dict[str, Any]) -> str:
    lines = [f"landscape {out['landscape']}: optimum {out['optimum']}"]
    for r in out["rows"]:
        answer = "-" if r["answer_true"] is None else f"{r['answer_true']:.3f}"
        lines.append(
            f"{r['number']:2d} {r['state'][:5]:5s} {r['chooser'][:8]:8s} true {r['true']:.3f} meas {r['measured']:.3f}"
            f" pred {r['predicted']:.3f} gain {r['gain']:.3f} promised {r['promised']:.3f} p_imp {r['p_improve']:.2f}"
            f" wrong {r['wrongness']:.1f} z {r['z_rms']:.2f} answer {answer} | {_short(r['params']) or 'baseline'}"
        )
    stop = out["stop"] or {}
    lines.append(f"stop: {stop.get('text', 'no stop record')}")
    sc = out["score"]
    restarts = "never" if sc["restarts"] is None else sc["restarts"]
    lines.append(
        f"restarts to 98 %: {restarts}; launches {sc['launches']}; final answer {out['final']:.3f} of the optimum"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.trace", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "landscape",
        type=int,
        help="a generated landscape's seed (0-29, 1000-1029; 2000 and up: the out-of-family generator)",
    )
    ap.add_argument("--run-seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=30)
    ap.add_argument("--spend-budget", action="store_true", help="the stop rule off")
    ap.add_argument("--model", action="store_true", help="then the fitted model against the truth")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(logging.ERROR)
    try:
        out = trace(args.landscape, args.run_seed, args.budget, args.spend_budget)
    except ValueError as e:
        ap.error(str(e))
    print(render(out))
    if args.model:
        print(render_model(model_against_truth(args.landscape, out["study"], out["truth"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
