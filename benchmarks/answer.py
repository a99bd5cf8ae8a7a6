"""The answer in the restarts a user waits for: the search until it stops itself, plus the confirmation.

Each run is the real driver (``optimizer.study.Driver``, the default structured sampler and ratio pruner) then the
real ``Confirmer``, with the in-process model executor (``optimizer.simexec``): the profile's boot times, the
benchmark time at the true tok/s, the launch noise given. Two behaviours in the same run, on the same seeds:

- ``new``: the defaults: the search stops itself (``budget.stop_below_gain_pct``, the budget a ceiling), then the
  sequential confirmation (``confirm.sequential``: rounds stop once the verdict is decided; the search's launches
  count; up to ``rounds`` rounds of the baseline and the best ``top``);
- ``known``: the same on a host whose noise an earlier study measured (stored: the true launch noise, 10 degrees
  of freedom): the pruner and the confirmation start from it;
- ``today``: the behaviour before: the whole budget spent, then the fixed confirmation (``rounds`` x (``top`` + 1)
  relaunches, every one).

Per run: restarts to the exported answer (every launch of the search and of the confirmation), the exported
answer's true tok/s as a fraction of the optimum (the confirmed winner, else the best single launch), the
wall-clock on the model's clock, whether the summary says the top configurations could not be told apart (new: the
verdict was not decided within the ceiling; today: the verdict's equivalent group has more than one), and whether
the search stopped itself. Apart from ``known``, each run is a new host: nothing is known of its noise (the stated
prior, and the confirmation measures it before it decides anything).

``python -m benchmarks.answer --seeds 20`` (``--family`` names the generated families, comma-separated, each a
module with ``landscape(seed)`` and a tuple of seeds: by default both held-out halves, ``FAMILIES``);
``benchmarks/run.py`` runs it as its ``answer`` section.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import optuna

from benchmarks import parallel
from benchmarks.strategies import _config, landscape_seed, space_for, truth
from optimizer.confirm import NUMBER_BASE as CONFIRM_NUMBER_BASE
from optimizer.confirm import RESULT_ATTR as CONFIRM_RESULT
from optimizer.confirm import Confirmer
from optimizer.hosts.config import local_host
from optimizer.pruning import study_pruner
from optimizer.settings import STOP_BELOW_GAIN_PCT
from optimizer.simexec import ModelExecutor
from optimizer.study import Driver, Progress, hostnoise, make_sampler, search_answer

KIMI = "kimi-k2.5-8x-rtxpro6000"
SCENARIOS = (
    (KIMI, 1),
    ("llama-3.1-8b-h100", 1),
    ("glm-4.7-flash-h200", 1),
    ("glm-4.7-flash-h200", 32),
)
NOISES = (0.03, 0.20)
HOSTS = (1, 4)
MODES = ("new", "known", "today")
BUDGET = 30  # the README's study file: budget: {trials: 30}
ROUNDS, TOP = 3, 2  # confirm: {rounds: 3, top: 2}
WITHIN = 0.98
#: the generated families, one run per landscape: the held-out halves of the family the search was built around
#: and of the out-of-family landscapes (built apart from it)
FAMILIES = ("benchmarks.landscapes:HELD_OUT", "benchmarks.landscapes_ood:HELD_OUT")


def run_one(
    profile: Any,
    concurrency: int,
    seed: int,
    *,
    hosts: int,
    noise: float,
    mode: str,
    stop_pct: float = STOP_BELOW_GAIN_PCT,
    budget: int = BUDGET,
    space: Any = None,
    tr: dict[str, Any] | None = None,
) -> dict[str, Any]:
    space = space or space_for(profile)
    tr = tr or truth(profile, space, concurrency)
    cfg = _config("structured", seed, budget, concurrency)
    with tempfile.TemporaryDirectory(prefix="answer-") as tmp:  # a new host: no stored noise
        new = mode in ("new", "known")
        cfg = cfg.model_copy(
            update={
                "studies_dir": tmp,
                "budget": cfg.budget.model_copy(update={"stop_below_gain_pct": stop_pct if new else None}),
                "confirm": cfg.confirm.model_copy(update={"rounds": ROUNDS, "top": TOP, "sequential": new}),
            }
        )
        names = [f"h{i}" for i in range(hosts)]
        if mode == "known":  # an earlier study on these hosts measured their noise
            for n in names:
                hostnoise.save(tmp, hostnoise.identity(n, {}, None), "earlier", noise, 10)
        study = optuna.create_study(
            direction="maximize",
            sampler=make_sampler(cfg, space),
            pruner=study_pruner(cfg),
        )
        ex = ModelExecutor(profile, names, cfg.workload, seed=seed + 1000, launch_noise=noise)
        host_cfgs = [local_host(n) for n in names]
        driver = Driver(cfg, space, host_cfgs, ex, progress=Progress(lambda s: None), study=study, confirm_follows=True)
        driver.run()
        search_clock = ex.clock
        verdict = Confirmer(cfg, space, host_cfgs, ex, study, early=driver.relaunch).run(ROUNDS, TOP)
    total = len(ex.ledger.launches)
    # the search's own launches; relaunches (early ones included) belong to the confirmation
    search = sum(1 for launch in ex.ledger.launches if launch[0] < CONFIRM_NUMBER_BASE)
    trials = study.get_trials(deepcopy=False)

    def true_of(number: int | None) -> float:
        if number is None:
            return 0.0
        loc = tr["table"].locate_trial(trials[number])
        return float(tr["values"][loc]) if loc is not None else 0.0

    unconfirmed = search_answer(study)
    exported = verdict.winner.trial if verdict is not None and verdict.winner is not None else None
    if exported is None and unconfirmed is not None:
        exported = unconfirmed.number
    if new:
        apart = bool(verdict is not None and verdict.decided is None and (verdict.open or verdict.apart))
    else:
        apart = bool(verdict is not None and len(verdict.equivalent) > 1)
    return {
        "seed": seed,
        "hosts": hosts,
        "noise": noise,
        "mode": mode,
        "search_launches": search,
        "confirm_launches": total - search,
        "restarts": total,
        "stopped_itself": driver.search_settled,
        "exported_true": true_of(exported) / tr["optimum"],
        "unconfirmed_true": true_of(unconfirmed.number if unconfirmed else None) / tr["optimum"],
        "could_not_tell_apart": apart,
        "decided": None if verdict is None else verdict.decided,
        "rounds": None if verdict is None else (study.user_attrs.get(CONFIRM_RESULT) or {}).get("rounds"),
        "search_h": search_clock / 3600,
        "wall_h": ex.clock / 3600,
    }


_TRUTH: dict[Any, Any] = {}


def _job(args: tuple) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(logging.ERROR)
    land_ref, profile, conc, seed, kw = args
    if land_ref is not None:  # a generated landscape: rebuilt in the worker (profiles are not all picklable)
        module, seed_k = land_ref
        land = importlib.import_module(module).landscape(seed_k)
        profile, conc = land.profile, land.concurrency
        seed = landscape_seed(seed, seed_k)  # the landscape's own stream: see strategies.landscape_seed
    key = (getattr(profile, "name", profile), conc, land_ref)
    if key not in _TRUTH:  # one truth per scenario and process: 50,000 candidates take seconds
        space = space_for(profile)
        _TRUTH[key] = (space, truth(profile, space, conc))
    space, tr = _TRUTH[key]
    r = run_one(profile, conc, seed, space=space, tr=tr, **kw)
    r["landscape"] = None if land_ref is None else land_ref[1]
    return r


def family_seeds_of(family: str) -> tuple[str, tuple[int, ...]]:
    """``module:SEEDS`` -> the module's name and its landscape seeds; ValueError naming what is allowed."""
    module, _, attr = family.partition(":")
    try:
        found = importlib.import_module(module) if module else None
    except ImportError:
        found = None
    seeds = getattr(found, attr, None) if attr else None
    if not isinstance(seeds, tuple) or not seeds or not hasattr(found, "landscape"):
        raise ValueError(
            f"family {family!r}: expected module:SEEDS, a module with landscape(seed) and a tuple of seeds, "
            f"for example {FAMILIES[0]} or {FAMILIES[1]}"
        )
    return module, tuple(int(k) for k in seeds)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rs = rows
    return {
        "runs": len(rs),
        "restarts_median": statistics.median(r["restarts"] for r in rs),
        "restarts_p90": _pct([r["restarts"] for r in rs], 0.9),
        "search_median": statistics.median(r["search_launches"] for r in rs),
        "confirm_median": statistics.median(r["confirm_launches"] for r in rs),
        "within_2pct": sum(r["exported_true"] >= WITHIN for r in rs),
        "within_or_told": sum(r["exported_true"] >= WITHIN or r["could_not_tell_apart"] for r in rs),
        "exported_true_median": statistics.median(r["exported_true"] for r in rs),
        "exported_true_min": min(r["exported_true"] for r in rs),
        "wall_h_median": statistics.median(r["wall_h"] for r in rs),
        "stopped_itself": sum(bool(r["stopped_itself"]) for r in rs),
        "could_not_tell_apart": sum(bool(r["could_not_tell_apart"]) for r in rs),
    }


def run(
    seeds: int = 20,
    scenarios=SCENARIOS,
    families: tuple[str, ...] = FAMILIES,
    family_seeds: int | None = None,
    noises=NOISES,
    hosts=HOSTS,
    modes=MODES,
    stop_pct: float = STOP_BELOW_GAIN_PCT,
    log=print,
    family: str | None | bool = False,
) -> dict[str, Any]:
    """Every scenario (``seeds`` seeds) and each family's landscapes (one run each, the first ``family_seeds`` of
    them) at each noise, number of hosts and behaviour. ``family`` (one family, or None for none) is the keyword of
    the commands recorded in docs/answer.md before both families ran; it replaces ``families``."""
    if family is not False:
        families = () if family is None else (str(family),)
    t0 = time.time()
    work: list[tuple] = []
    groups: list[tuple[str, int | None]] = []
    for profile, conc in scenarios:
        groups.append((profile, conc))
        for noise in noises:
            for n in hosts:
                for mode in modes:
                    for seed in range(seeds):
                        kw = dict(hosts=n, noise=noise, mode=mode, stop_pct=stop_pct)
                        work.append(((profile, conc), None, profile, conc, seed, kw))
    for family in families:
        module, fam_seeds = family_seeds_of(family)
        fam_seeds = fam_seeds[: family_seeds or None]
        groups.append((family, None))
        for noise in noises:
            for n in hosts:
                for mode in modes:
                    for k in fam_seeds:
                        kw = dict(hosts=n, noise=noise, mode=mode, stop_pct=stop_pct)
                        work.append(((family, None), (module, k), None, 0, 0, kw))
    # on benchmarks.parallel's workers (``set_jobs``), in submission order: the same for any number of jobs
    rows = parallel.pmap(_job, [(w[1:],) for w in work])
    for w, r in zip(work, rows):
        r["group"] = w[0][0] if w[0][1] is None else f"{w[0][0]} c{w[0][1]}"
    out: dict[str, Any] = {
        "budget": BUDGET,
        "rounds": ROUNDS,
        "top": TOP,
        "stop_below_gain_pct": stop_pct,
        "seeds": seeds,
        "families": list(families),
        "summary": [],
        "rows": rows,
    }
    for g in dict.fromkeys(r["group"] for r in rows):
        for noise in noises:
            for n in hosts:
                for mode in modes:
                    rs = [r for r in rows if (r["group"], r["noise"], r["hosts"], r["mode"]) == (g, noise, n, mode)]
                    if rs:
                        out["summary"].append({"group": g, "noise": noise, "hosts": n, "mode": mode, **summarise(rs)})
    out["seconds"] = round(time.time() - t0, 1)
    log(table(out))
    return out


def table(res: dict[str, Any]) -> str:
    lines = [
        f"The answer in restarts (budget {res['budget']} launches; confirmation up to {res['rounds']} rounds of the "
        f"baseline and the top {res['top']}; new: stop below {res['stop_below_gain_pct']:g} % + sequential "
        "confirmation on a new host; known: the same on a host whose noise is stored; today: the budget + the fixed "
        "confirmation)",
        "| scenario | noise | hosts | behaviour | restarts median (p90) | search + confirmation (median) | "
        "exported within 2 % | or told apart | exported true (median, min) | wall-clock h (median) | "
        "stopped itself |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        lines.append(
            f"| {s['group']} | {s['noise']:.0%} | {s['hosts']} | {s['mode']} | {s['restarts_median']:.0f} "
            f"({s['restarts_p90']:.0f}) | {s['search_median']:.0f} + {s['confirm_median']:.0f} | "
            f"{s['within_2pct']}/{s['runs']} | {s['within_or_told']}/{s['runs']} | "
            f"{s['exported_true_median']:.1%}, {s['exported_true_min']:.1%} | {s['wall_h_median']:.2f} | "
            f"{s['stopped_itself']}/{s['runs']} |"
        )
    return "\n".join(lines)


def section_answer(args: argparse.Namespace) -> dict[str, Any]:
    """``benchmarks/run.py``'s ``answer`` section, with the noise floor of the Kimi target beneath it: the most any
    search can export within 2 % in a given number of restarts (``benchmarks.noise_floor``)."""
    from benchmarks import noise_floor

    res = run(seeds=getattr(args, "answer_seeds", None) or args.seeds, log=lambda s: print(s, flush=True))
    floors = [noise_floor.report(KIMI, noise) for noise in NOISES]
    for f in floors:
        print(f["line"], flush=True)
    res["noise_floor"] = [
        {k: f[k] for k in ("profile", "noise", "gap", "decides", "restarts_for_95", "sequential_restarts_for_95")}
        | {"bound": {str(n): round(p, 4) for n, p in f["bound"].items()}}
        for f in floors
    ]
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.answer", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument(
        "--scenarios", default="all", help="all, kimi, others (the three but Kimi) or none (the families only)"
    )
    ap.add_argument("--family", default=",".join(FAMILIES), help="module:SEEDS[,module:SEEDS...], or 'none'")
    ap.add_argument("--family-seeds", type=int, help="only the family's first N landscapes")
    ap.add_argument("--noises", default="0.03,0.20")
    ap.add_argument("--hosts", default="1,4")
    ap.add_argument("--modes", default="new,known,today")
    ap.add_argument("--stop-pct", type=float, default=STOP_BELOW_GAIN_PCT)
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args(argv)
    scen = {"all": SCENARIOS, "kimi": SCENARIOS[:1], "others": SCENARIOS[1:], "none": ()}[a.scenarios]
    families = () if a.family == "none" else tuple(f for f in a.family.split(",") if f)
    for family in families:
        try:
            family_seeds_of(family)
        except ValueError as e:
            ap.error(f"--family: {e}")
    parallel.set_jobs(a.jobs)
    try:
        res = run(
            seeds=a.seeds,
            scenarios=scen,
            families=families,
            family_seeds=a.family_seeds,
            noises=tuple(float(x) for x in a.noises.split(",")),
            hosts=tuple(int(x) for x in a.hosts.split(",")),
            modes=tuple(a.modes.split(",")),
            stop_pct=a.stop_pct,
        )
    finally:
        parallel.shutdown()
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
