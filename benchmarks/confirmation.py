"""Does confirmation pick a winner that is truly near the optimum, at low and at high launch-to-launch noise?

For each seed and each launch noise (one sigma of the per-launch speed factor: 3 % and 20 %), the real driver
runs a study on the Kimi profile with the in-process model executor (``optimizer.simexec``), then the real
``Confirmer`` relaunches the baseline and the study's best ``top`` configurations ``rounds`` times each. Scored
against the simulator's ground truth:

- unconfirmed winner: the study's best single launch; confirmed winner: the confirmation's verdict;
- within 2 %: the winner's true tok/s is at least 98 % of the true optimum of the space;
- optimum pruned: a launch of the true optimum was pruned during the study, with a pruner that knows only the
  noise within a launch (as before any relaunch), one that learns the launch noise from 2 relaunches of the
  baseline (``confirm.baseline_relaunches``; those 2 restarts are counted with the study's), and one told it;
- cost: confirmation launches and their share of the study's launches.

``python -m benchmarks.confirmation --seeds 20`` (about 2 minutes on 2 cores); ``benchmarks/run.py`` runs it as
its ``confirmation`` section.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import optuna

from benchmarks.strategies import new_host
from optimizer.confirm import Confirmer
from optimizer.hosts.config import local_host
from optimizer.pruning import study_pruner
from optimizer.settings import parse_study
from optimizer.simexec import CATEGORY_MIX, ModelExecutor
from optimizer.space import load_space
from optimizer.study import Driver, Progress, make_sampler, search_answer
from optimizer.study import records as R

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "kimi-k2.5-8x-rtxpro6000"
SPACE = ROOT / "search_spaces" / "demo.yaml"
NOISES = (0.03, 0.20)
WORKLOAD = dict(concurrency=1, max_tokens=256, warmup_requests=2, chunks=8, requests_per_chunk=4)
WITHIN = 0.98
#: What the pruner knows of the noise between launches: nothing, what 2 baseline relaunches measured, the truth.
MODES = ("unknown", "relaunches", "known")
MODE_TEXT = {"unknown": "unknown (0)", "relaunches": "from 2 baseline relaunches", "known": "known"}


def truth(space: Any) -> dict[str, float]:
    from optimizer.sim.profiles import load_profile

    prof = load_profile(PROFILE)
    out = {}
    for cand in space.grid():
        if any(c.value > 0 for c in space.checks(cand)):
            continue
        ev = prof.evaluate(dict(cand.flags), dict(cand.env), WORKLOAD["concurrency"], CATEGORY_MIX)
        out[cand.key(architecture=space.model.architecture)] = ev.tok_per_s if ev.ok else 0.0
    return out


def one(
    seed: int, noise: float, *, trials: int, rounds: int, top: int, space: Any, values: dict, pruner_noise: str
) -> dict:
    cfg = parse_study(
        {
            "study": f"confirm-{seed}",
            "budget": {"trials": trials},
            "workload": WORKLOAD,
            "sampler": {"seed": seed},
            "pruner": {"launch_noise": noise if pruner_noise == "known" else 0.0},
            "confirm": {
                "rounds": rounds,
                "top": top,
                "baseline_relaunches": 2 if pruner_noise == "relaunches" else 0,
            },
        },
        "<bench>",
    )
    study = optuna.create_study(
        direction="maximize",
        sampler=make_sampler(cfg, space),
        pruner=study_pruner(cfg),
    )
    ex = ModelExecutor(PROFILE, ["h0"], cfg.workload, seed=seed + 1000, launch_noise=noise)
    hosts = [local_host("h0")]
    with new_host(cfg) as cfg:  # a confirmation stores the host's noise: never in this machine's store
        Driver(cfg, space, hosts, ex, progress=Progress(lambda s: None), study=study).run()
        study_launches = len(ex.ledger.launches)
        clock0 = ex.clock
        verdict = Confirmer(cfg, space, hosts, ex, study).run(rounds, top)
    opt = max(values.values())

    def true_of(trial_number: int | None) -> float:
        if trial_number is None:
            return 0.0
        t = study.trials[trial_number]
        return values.get(t.user_attrs.get(R.CANDIDATE_KEY), 0.0)

    unconfirmed = search_answer(study)
    arms_true = [true_of(a.trial) / opt for a in (verdict.arms if verdict else []) if not a.baseline]
    confirmed = verdict.winner.trial if verdict and verdict.winner else None
    opt_keys = {k for k, v in values.items() if v >= opt - 1e-9}
    pruned_opt = any(
        t.user_attrs.get(R.CANDIDATE_KEY) in opt_keys and t.user_attrs.get(R.OUTCOME) == "pruned" for t in study.trials
    )
    return {
        "seed": seed,
        "noise": noise,
        "pruner_noise": pruner_noise,
        "prune_saving": 1.0 - ex.ledger.bench_s / ex.ledger.bench_full_s if ex.ledger.bench_full_s else 0.0,
        "unconfirmed_true": true_of(unconfirmed.number if unconfirmed else None) / opt,
        "confirmed_true": true_of(confirmed) / opt if confirmed is not None else 0.0,
        "optimum_pruned": pruned_opt,
        "best_arm_true": max(arms_true, default=0.0),
        "study_launches": study_launches,
        "confirm_launches": len(ex.ledger.launches) - study_launches,
        "confirm_hours": (ex.clock - clock0) / 3600,
        "significant": None if verdict is None else verdict.significant,
        "equivalent": 0 if verdict is None else len(verdict.equivalent),
        "noise_estimate": None if verdict is None else verdict.noise,
    }


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for noise, mode in sorted({(r["noise"], r["pruner_noise"]) for r in rows}, key=lambda x: (x[0], MODES.index(x[1]))):
        rs = [r for r in rows if r["noise"] == noise and r["pruner_noise"] == mode]
        est = [r["noise_estimate"] for r in rs if r["noise_estimate"] is not None]
        out.append(
            {
                "launch_noise": noise,
                "pruner_noise": mode,
                "prune_saving_mean": statistics.fmean(r["prune_saving"] for r in rs),
                "seeds": len(rs),
                "unconfirmed_within_2pct": sum(r["unconfirmed_true"] >= WITHIN for r in rs),
                "confirmed_within_2pct": sum(r["confirmed_true"] >= WITHIN for r in rs),
                # the most confirmation can do: one of the configurations it relaunched is within 2 %
                "an_arm_within_2pct": sum(r["best_arm_true"] >= WITHIN for r in rs),
                "unconfirmed_true_median": statistics.median(r["unconfirmed_true"] for r in rs),
                "confirmed_true_median": statistics.median(r["confirmed_true"] for r in rs),
                "optimum_pruned": sum(r["optimum_pruned"] for r in rs),
                "study_launches_median": statistics.median(r["study_launches"] for r in rs),
                "confirm_launches_median": statistics.median(r["confirm_launches"] for r in rs),
                "confirm_hours_median": statistics.median(r["confirm_hours"] for r in rs),
                "significant_gain": sum(bool(r["significant"]) for r in rs),
                "noise_estimate_median": statistics.median(est) if est else None,
            }
        )
    return out


_CACHE: dict[str, Any] = {}


def one_task(seed: int, noise: float, trials: int, rounds: int, top: int, pruner_noise: str) -> dict:
    """``one`` with the space and its truth built once per process: a unit of parallel work (benchmarks.parallel)."""
    if not _CACHE:
        _CACHE["space"] = space = load_space(str(SPACE))
        _CACHE["values"] = truth(space)
    return one(
        seed,
        noise,
        trials=trials,
        rounds=rounds,
        top=top,
        space=_CACHE["space"],
        values=_CACHE["values"],
        pruner_noise=pruner_noise,
    )


def run(seeds: int = 20, trials: int = 14, rounds: int = 3, top: int = 2, noises=NOISES) -> dict:
    from benchmarks.parallel import pmap, quiet

    quiet()
    t0 = time.time()
    rows = pmap(one_task, [(s, n, trials, rounds, top, k) for n in noises for k in MODES for s in range(seeds)])
    return {
        "profile": PROFILE,
        "space": "search_spaces/demo.yaml",
        "trials": trials,
        "rounds": rounds,
        "top": top,
        "summary": summarise(rows),
        "rows": rows,
        "seconds": time.time() - t0,
    }


def table(res: dict) -> str:
    lines = [
        f"confirmation on {res['profile']} ({res['space']}, {res['trials']} launches, then {res['rounds']} rounds of "
        f"the baseline and the top {res['top']})",
        "| launch noise | pruner's launch noise | winner within 2 % of the optimum: unconfirmed / confirmed "
        "(a relaunched one was) | "
        "true value (median) unconfirmed / confirmed | optimum pruned | benchmark time saved by pruning | "
        "confirmation launches (median) | noise estimated (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        est = s["noise_estimate_median"]
        lines.append(
            f"| {s['launch_noise']:.0%} | {MODE_TEXT[s['pruner_noise']]} | "
            f"{s['unconfirmed_within_2pct']}/{s['seeds']} / "
            f"{s['confirmed_within_2pct']}/{s['seeds']} ({s['an_arm_within_2pct']}) | {s['unconfirmed_true_median']:.1%} / "
            f"{s['confirmed_true_median']:.1%} | {s['optimum_pruned']}/{s['seeds']} | {s['prune_saving_mean']:.0%} | "
            f"{s['confirm_launches_median']:.0f} (+{s['confirm_launches_median'] / s['study_launches_median']:.0%} "
            f"of the study's {s['study_launches_median']:.0f}), {s['confirm_hours_median']:.1f} h | "
            + ("-" if est is None else f"{est:.1%}")
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.confirmation", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=14)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top", type=int, default=2)
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args(argv)
    res = run(a.seeds, a.trials, a.rounds, a.top)
    print(table(res))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
