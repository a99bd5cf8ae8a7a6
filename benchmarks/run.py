"""`make bench`: the efficiency benchmark. Prints a table and writes studies/bench/results.json.

python -m benchmarks.run                 # everything, its independent runs on every core (--jobs)
python -m benchmarks.run --quick         # `make bench-quick`: the default sampler's restarts only, fewer seeds
python -m benchmarks.run --seeds 5       # fewer seeds for the strategy comparison
python -m benchmarks.run --only strategies,loop
python -m benchmarks.run --only pcie     # the settings models on generated PCIe-only machines (not in the default)
python -m benchmarks.run --jobs 1        # one process: the same figures, slower

Parallel sections (``--jobs N`` worker processes, default one per core; benchmarks/parallel.py): strategies (the
scenarios and every family of ``FAMILIES``), confirmation, per_level, pcie and the model-clock part of hosts. Each
of their runs is seeded explicitly and simulated on the model's clock, and the results are gathered in the order
they were submitted, so every figure is the same for any number of jobs. Sections that time real processes (loop,
the measured trials per hour of hosts, client, accuracy, e2e) run alone, with the pool idle: a timing needs a
quiet machine.
python -m benchmarks.run --only adaptive # the tuned adaptive schedule against SGLang's default and the static best
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "studies" / "bench" / "results.json"
QUICK_OUT = ROOT / "studies" / "bench" / "quick.json"
SECTIONS = (
    "strategies",
    "loop",
    "hosts",
    "client",
    "accuracy",
    "e2e",
    "confirmation",
    "per_level",
    "adaptive",
    "answer",
    "boot",
)
OPTIONAL = ("pcie",)  # run only when named in --only
QUICK_SEEDS = 10  # --quick: seeds per scenario (the families keep every landscape, one run each)


@dataclass(frozen=True)
class Family:
    """A family of generated landscapes to report: ``module`` exposes ``landscape(seed) -> Landscape`` and the
    tuple of generator seeds named ``seeds``."""

    name: str
    module: str
    seeds: str

    def load(self) -> tuple[tuple[int, ...], Any]:
        mod = importlib.import_module(self.module)
        return tuple(getattr(mod, self.seeds)), mod.landscape


#: The families the strategies section (and --quick) reports, in this order; one line adds one, e.g.
#: ``Family("out-of-family", "benchmarks.landscapes_ood", "HELD_OUT")``.
FAMILIES = (
    Family("tuning", "benchmarks.landscapes", "TUNING"),
    Family("held-out", "benchmarks.landscapes", "HELD_OUT"),
    # another generator's forms (benchmarks/landscapes_ood.py): the search was not built around them
    Family("out-of-family tuning", "benchmarks.landscapes_ood", "TUNING"),
    Family("out-of-family", "benchmarks.landscapes_ood", "HELD_OUT"),
)


def log(msg: str) -> None:
    print(msg, flush=True)


def section_strategies(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.strategies import FAMILY_STRATEGIES, STRATEGIES, compare, compare_family

    chosen = args.strategies.split(",") if args.strategies else None
    out = compare(seeds=args.seeds, log=log, strategies=tuple(chosen or STRATEGIES))
    fam = tuple(s for s in (chosen or FAMILY_STRATEGIES) if s != "grid")
    out["families"] = []
    wanted = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
    unknown = set(wanted or ()) - {f.name for f in FAMILIES} - {"none"}
    if unknown:
        raise SystemExit(f"unknown families {sorted(unknown)}; known: {', '.join(f.name for f in FAMILIES)}")
    for family in FAMILIES:
        if wanted is not None and family.name not in wanted:
            continue
        seeds, landscape_fn = family.load()
        out["families"].append(compare_family(family.name, seeds, log=log, strategies=fam, landscape_fn=landscape_fn))
    return out


def section_pcie() -> dict[str, Any]:
    """The settings models on generated PCIe-only machines (the tuning half's and PCIE_EXTRA's), 2 seeds each, with
    the default's runs compared one by one against each other model's."""
    from benchmarks.landscapes import pcie_only_seeds
    from benchmarks.strategies import compare_family

    strategies = ("structured", "structured-fixed", "structured-adaptive")
    out = compare_family("pcie-only", pcie_only_seeds(), runs_per_landscape=2, log=log, strategies=strategies)
    mine = out["strategies"]["structured"]["restarts_each"]
    for other in strategies[1:]:
        theirs = out["strategies"][other]["restarts_each"]
        out["strategies"][other]["against_default"] = cmp = {
            "default_better": sum(a < b for a, b in zip(mine, theirs)),
            "default_worse": sum(a > b for a, b in zip(mine, theirs)),
            "mean_restarts": [statistics.fmean(mine), statistics.fmean(theirs)],
        }
        log(
            f"  default against {other}: better in {cmp['default_better']} runs, worse in {cmp['default_worse']}; "
            f"mean restarts {cmp['mean_restarts'][0]:.2f} against {cmp['mean_restarts'][1]:.2f}"
        )
    return out


def section_per_level(args: argparse.Namespace) -> dict[str, Any]:
    """Per-level answers (several load levels measured after each boot) against single-level studies."""
    from benchmarks.per_level import compare

    return compare(seeds=min(args.seeds, args.per_level_seeds), log=log)


def section_adaptive(args: argparse.Namespace) -> dict[str, Any]:
    """One adaptive server (the exported schedule, SGLang's default config) against static answers, per level."""
    from benchmarks.adaptive import compare

    return compare(args.adaptive_seeds, log=log)


def section_loop(work: Path) -> dict[str, Any]:
    from benchmarks.loop import crash_overhead, orchestration_overhead, readiness_overhead

    out = {"readiness": readiness_overhead(work), "crash": crash_overhead(work)}
    log(
        f"  readiness noticed {out['readiness']['mean_s']:.3f} s after /health turned 200 "
        f"(max {out['readiness']['max_s']:.3f})"
    )
    log(f"  crash noticed {out['crash']['mean_s']:.3f} s after the fatal line (max {out['crash']['max_s']:.3f})")
    out["orchestration"] = orchestration_overhead(work)
    log(f"  orchestration {out['orchestration']['per_trial_s']:.2f} s per trial")
    return out


def section_hosts(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.landscapes import TUNING
    from benchmarks.loop import trials_per_hour
    from benchmarks.strategies import wall_clock_by_hosts, wall_clock_family

    measured = trials_per_hour(work)
    for n, v in measured.items():
        log(
            f"  {n} host(s): {v['trials_per_hour']:.0f} trials/h measured on time-scaled simulators "
            f"(x{v['speedup']:.2f})"
        )
    # With real boot times (10-15 min restarts): wall-clock to 98 % on the model's clock, 1, 2 and 4 hosts.
    model = {p: wall_clock_by_hosts(p, seeds=args.host_seeds, log=log) for p in ("kimi-k2.5-8x-rtxpro6000",)}
    log("  tuning landscapes (one run each):")
    family = wall_clock_family(TUNING, log=log)
    return {"measured": measured, "model_clock": model, "family_clock": family}


def section_client() -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "client_ceiling.py"), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    data = json.loads(line[-1]) if line else {"error": res.stderr[-2000:]}
    log(f"  client ceiling: {json.dumps(data)[:300]}")
    return data


def section_accuracy(args: argparse.Namespace) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sim_accuracy.py"), "--seconds", str(args.accuracy_seconds)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    rows = [ln for ln in res.stdout.splitlines() if "truth" in ln or "worst" in ln]
    for ln in rows:
        log("  " + ln)
    return {"lines": rows, "seconds": args.accuracy_seconds, "rc": res.returncode}


def section_e2e(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A smaller run through real simulator processes, checked against the in-process model run."""
    from benchmarks.loop import run_study
    from benchmarks.strategies import make_sampler, new_host, true_value, truth
    from optimizer.pruning import make_pruner
    from optimizer.space import load_space

    prof = "llama-3.1-8b-h100"
    space = load_space(ROOT / "search_spaces" / "demo.yaml")
    workload = {"max_tokens": 64, "chunks": 4, "requests_per_chunk": 2, "warmup_requests": 1}
    out = []
    import optuna

    from optimizer.hosts.config import local_host
    from optimizer.settings import parse_study
    from optimizer.simexec import ModelExecutor
    from optimizer.study import Driver, Progress, search_answer

    tr = truth(prof, space, 1)
    for seed in range(args.e2e_seeds):
        real = run_study(
            work,
            f"e2e{seed}",
            1,
            args.e2e_trials,
            executor="thread",
            profile=prof,
            seed=seed,
            pruner="ratio",
            workload=workload,
        )
        rb = search_answer(real["study"])
        cfg = parse_study(
            {"study": "m", "budget": {"trials": args.e2e_trials}, "workload": workload, "sampler": {"seed": seed}},
            "bench",
        )
        study = optuna.create_study(direction="maximize", sampler=make_sampler(cfg, space), pruner=make_pruner("ratio"))
        ex = ModelExecutor(prof, ["h0"], cfg.workload, seed=seed)
        with new_host(cfg) as cfg:
            Driver(cfg, space, [local_host("h0")], ex, progress=Progress(lambda s: None), study=study).run()
        mb = search_answer(study)
        row = {
            "seed": seed,
            "real_best_true_frac": true_value(tr, rb) / tr["optimum"],
            "model_best_true_frac": true_value(tr, mb) / tr["optimum"],
            "real_outcomes": _counts(real["study"]),
            "model_outcomes": _counts(study),
            "real_wall_s": real["wall_s"],
        }
        log(
            f"  seed {seed}: best found {row['real_best_true_frac']:.1%} of optimum through processes, "
            f"{row['model_best_true_frac']:.1%} in-process; outcomes {row['real_outcomes']} vs {row['model_outcomes']}"
        )
        out.append(row)
    return {"profile": prof, "space": "search_spaces/demo.yaml", "trials": args.e2e_trials, "runs": out}


def section_confirmation(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.confirmation import run, table

    res = run(seeds=args.seeds)
    log(table(res))
    return res


def _counts(study: Any) -> dict[str, int]:
    from optimizer.study import records as R

    out: dict[str, int] = {}
    for t in study.get_trials():
        k = t.user_attrs.get(R.OUTCOME, t.state.name.lower())
        out[k] = out.get(k, 0) + 1
    return out


def print_table(results: dict[str, Any]) -> None:
    if results.get("answer"):
        from benchmarks.answer import table as answer_table

        log("\n" + answer_table(results["answer"]))
    if results.get("confirmation"):
        from benchmarks.confirmation import table

        log("\n" + table(results["confirmation"]))
    s = results.get("strategies")
    if s:
        log(f"\nRestarts to 98% of the true optimum (median / p90 over {s['seeds']} seeds; censored at the budget)")
        log("  in streaks: mean share of a run's launches pruned or failed in a row of 5+ near-identical ones")
        log(
            f"{'profile':28s} {'conc':>4s} {'strategy':19s} {'median':>7s} {'p90':>7s} {'reached':>8s} "
            f"{'wall h':>7s} {'prune saved':>11s} {'opt pruned':>10s} {'in streaks':>10s}"
        )
        for row in s["scenarios"]:
            for name, v in row["strategies"].items():
                log(
                    f"{row['profile']:28s} {row['concurrency']:4d} {name:19s} {v['restarts_median']:7.1f} "
                    f"{v['restarts_p90']:7.1f} {v['reached']:>4d}/{s['seeds']:<3d} {v['wall_h_median']:7.1f} "
                    f"{v['prune_saving_mean']:11.0%} {v['optimum_pruned_runs']:>10d} "
                    f"{v.get('streak_share_mean', 0.0):10.1%}"
                )
            grid = row["strategies"].get("grid")
            log(
                f"{'':28s} optimum {row['optimum_tok_per_s']:.1f} tok/s ({row['optimum_config']}), "
                f"baseline {row['baseline_tok_per_s']:.1f}"
                + (f"; full grid {grid['full_grid_wall_h']:.0f} h" if grid else "")
            )
        for fam in s.get("families", []):
            label = f"{fam['name']} family ({len(fam['landscapes'])})"
            for name, v in fam["strategies"].items():
                log(
                    f"{label:28s} {'-':>4s} {name:19s} {v['restarts_median']:7.1f} {v['restarts_p90']:7.1f} "
                    f"{v['reached']:>4d}/{v['runs']:<3d} {'':>7s} {v['prune_saving_mean']:11.0%} "
                    f"{v['optimum_pruned_runs']:>10d} {v.get('streak_share_mean', 0.0):10.1%}"
                )
            log(
                f"{'':28s} budget {fam['budget']} launches; in {fam['baseline_within_target']} landscapes no "
                f"speculation is already within 2 % of the optimum"
            )
    pl = results.get("per_level")
    if pl:
        s2 = pl["summary"]
        log(
            f"\nPer-level answers ({pl['profile']}, levels {pl['levels']}, median restarts to 98 % over "
            f"{pl['seeds']} seeds, budget {pl['budget']})"
        )
        for c in pl["levels"]:
            ans = s2.get("objective_level_answers_median", {}).get(str(c), {})
            log(
                f"  objective level {c:>3}: per-level study {s2['objective_level_median'][str(c)]:5.1f}   "
                f"single-level study {s2['single_median'][str(c)]:5.1f}   answers at the end: "
                + ", ".join(f"c{x} {v:.1%}" for x, v in ans.items())
            )
        log(
            f"  every level at 98 % (objective gain): per-level study {s2['multi_median']:.1f}; single-level studies "
            f"{s2['single_sum_of_levels']:.1f} in all (hardest one {s2['single_max_of_levels']:.1f})"
        )
    if results.get("adaptive"):
        log("\nOne adaptive server per level (fractions of each level's optimum, median; benchmarks/adaptive.py)")
        from benchmarks.adaptive import print_rows

        print_rows(results["adaptive"], log)
    h = results.get("hosts", {}).get("model_clock")
    if h:
        for prof, v in h.items():
            log(f"\nWall-clock to 98% with 1, 2, 4 hosts ({prof}, real boot times, median over {v['seeds']} seeds)")
            for n, w in v["hosts"].items():
                log(
                    f"  {n} host(s): {w['wall_h_median']:.2f} h (x{w['wall_fraction_of_one_host']:.2f}), "
                    f"restarts {w['restarts_median']:.1f}"
                )
    f = results.get("hosts", {}).get("family_clock")
    if f:
        log(f"\nWall-clock to 98% with 1, 2, 4 hosts ({len(f['landscapes'])} tuning landscapes, median)")
        for n, w in f["hosts"].items():
            log(
                f"  {n} host(s): {w['wall_h_median']:.2f} h (x{w['wall_fraction_of_one_host']:.2f}; per landscape "
                f"x{w['landscape_fraction_median']:.2f}), restarts {w['restarts_median']:.1f}"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=None, help="seeds per scenario (default 20; --quick: 10)")
    ap.add_argument("--only", default=None, help=f"comma list of sections (default: {','.join(SECTIONS)})")
    ap.add_argument(
        "--jobs", type=int, default=None, help="worker processes for the parallel sections (default: one per core)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the default sampler's restarts on the scenarios and every family, fewer seeds (writes quick.json)",
    )
    ap.add_argument("--strategies", default="", help="strategies section: a comma list (default: all of them)")
    ap.add_argument(
        "--families", default="", help="strategies section: a comma list of FAMILIES' names, or none (default: all)"
    )
    ap.add_argument("--accuracy-seconds", type=float, default=10.0)
    ap.add_argument("--e2e-seeds", type=int, default=2)
    ap.add_argument("--host-seeds", type=int, default=10)
    ap.add_argument("--e2e-trials", type=int, default=10)
    ap.add_argument("--per-level-seeds", type=int, default=5)
    ap.add_argument("--adaptive-seeds", type=int, default=5)
    ap.add_argument("--out", default=None, help=f"results file (default {OUT.relative_to(ROOT)}; --quick: quick.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.only = args.only or "strategies"
        args.strategies = args.strategies or "structured"
    args.seeds = args.seeds or (QUICK_SEEDS if args.quick else 20)
    args.only = args.only or ",".join(SECTIONS)
    args.out = args.out or str(QUICK_OUT if args.quick else OUT)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(k, "1")  # one BLAS thread per process: the same arithmetic in this one and the workers
    from benchmarks import parallel

    jobs = parallel.set_jobs(args.jobs)
    warnings.filterwarnings("ignore")
    import optuna

    optuna.logging.set_verbosity(logging.ERROR)
    only = set(args.only.split(","))
    out_path = Path(args.out)
    results: dict[str, Any] = {}
    if out_path.exists():
        try:
            results = json.loads(out_path.read_text())
        except json.JSONDecodeError:
            results = {}
    results["machine"] = {"cpus": os.cpu_count(), "jobs": jobs, "python": sys.version.split()[0]}
    results["date"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t_all = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        if only & {"loop", "hosts"}:
            import ray

            ray.init(
                num_cpus=2,
                resources={f"host:h{i}": 1 for i in range(4)},
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        try:
            for name in SECTIONS + OPTIONAL:
                if name not in only:
                    continue
                log(f"== {name}")
                t0 = time.time()
                if name == "strategies":
                    results[name] = section_strategies(args)
                elif name == "loop":
                    results[name] = section_loop(work)
                elif name == "hosts":
                    results[name] = section_hosts(work, args)
                elif name == "client":
                    results[name] = section_client()
                elif name == "accuracy":
                    results[name] = section_accuracy(args)
                elif name == "e2e":
                    results[name] = section_e2e(work, args)
                elif name == "per_level":
                    results[name] = section_per_level(args)
                elif name == "adaptive":
                    results[name] = section_adaptive(args)
                elif name == "answer":
                    from benchmarks.answer import section_answer

                    results[name] = section_answer(args)
                elif name == "boot":  # wall-clock to the exported answer with and without the search boot
                    from benchmarks.boot import compare as boot_compare

                    results[name] = boot_compare(seeds=min(args.seeds, 5), log=log)
                elif name == "pcie":
                    results[name] = section_pcie()
                elif name == "confirmation":
                    results[name] = section_confirmation(args)
                results.setdefault("section_seconds", {})[name] = round(time.time() - t0, 1)
                out_path.parent.mkdir(parents=True, exist_ok=True)
                out_path.write_text(json.dumps(results, indent=2, default=str))
        finally:
            parallel.shutdown()
    results["total_seconds"] = round(time.time() - t_all, 1)
    out_path.write_text(json.dumps(results, indent=2, default=str))
    print_table(results)
    log(f"\nwrote {out_path} in {results['total_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
