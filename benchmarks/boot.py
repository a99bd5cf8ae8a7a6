"""Wall-clock to the exported answer with and without the search boot (issue 23; docs/boot.md).

The real driver with the in-process model executor (``benchmarks.strategies.run_driver``, reused as it is), on the
Kimi-K2.5 / 8x RTX PRO 6000 profile at concurrency 1 (12-minute boots), each seed twice: the search boot off
(every search launch boots as production: SGLang's decode graph sizes up to ``cuda-graph-max-bs``, its warm-up,
the 5.5 s stop) and on (the default: graph sizes the benchmark reaches, no warm-up, the fast stop). The sampler's
choices do not depend on time, so both arms of a seed launch the same configurations: the difference is what the
search boot saves. The exported answer comes after the confirmation, which boots the production flags in both
arms: modelled as ``rounds`` x (baseline + ``top`` best) production launches (boot, the study's benchmark at the
configuration's true tok/s, SGLang's stop), the same for both arms.

``python -m benchmarks.boot [--seeds 5] [--budget 40]``; ``make bench`` runs it as its ``boot`` section.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
import warnings
from typing import Any

import optuna

from benchmarks import strategies
from optimizer.loadgen.workload import Workload
from optimizer.sglang.logs import SHUTDOWN_S
from optimizer.sim.profiles import load_profile

KIMI = "kimi-k2.5-8x-rtxpro6000"
_patch = threading.Lock()


def _run(search_boot: bool, profile: str, concurrency: int, seed: int, budget: int, space, tr) -> dict[str, Any]:
    """``strategies.run_driver`` with the study's ``server.search_boot`` switched on or off."""
    with _patch:  # run_driver builds its study config with strategies._config: wrap it for this call
        original = strategies._config

        def config(*a: Any, **k: Any) -> Any:
            cfg = original(*a, **k)
            cfg.server.search_boot.enabled = search_boot
            return cfg

        strategies._config = config
        try:
            return strategies.run_driver(profile, concurrency, "structured", seed, budget, space, tr)
        finally:
            strategies._config = original


def confirmation_s(profile: str, space, tr, concurrency: int, rounds: int = 3, top: int = 2) -> float:
    """The confirmation's wall-clock on production boots: baseline and ``top`` configurations (the optimum's cost
    stands for theirs), ``rounds`` times each."""
    prof = load_profile(profile)
    w = Workload(**dict(strategies.WORKLOAD, concurrency=concurrency))
    table, (i, j) = tr["table"], tr["optimum_ij"]
    best = space.candidate(table.params(i, j))
    base = space.baseline()
    total = 0.0
    for cand, n in ((base, 1), (best, top)):
        ev = prof.evaluate(dict(cand.flags), dict(cand.env), concurrency)
        tokens = (w.warmup_requests + w.chunks * w.requests_per_chunk) * w.max_tokens
        total += n * (prof.boot_seconds(dict(cand.flags)) + tokens / max(ev.tok_per_s, 1e-6) + SHUTDOWN_S)
    return rounds * total


def compare(seeds: int = 5, budget: int = 40, profile: str = KIMI, concurrency: int = 1, log=print) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(logging.ERROR)
    space = strategies.space_for(profile)
    tr = strategies.truth(profile, space, concurrency)
    confirm = confirmation_s(profile, space, tr, concurrency)
    runs = []
    for seed in range(seeds):
        t0 = time.time()
        off = _run(False, profile, concurrency, seed, budget, space, tr)
        on = _run(True, profile, concurrency, seed, budget, space, tr)
        runs.append({"seed": seed, "production_boot": off, "search_boot": on})
        log(
            f"  seed {seed}: search {off['clock_s'] / 3600:.2f} h -> {on['clock_s'] / 3600:.2f} h "
            f"({off['launches']} / {on['launches']} launches) in {time.time() - t0:.0f} s"
        )

    def arm(name: str) -> dict[str, Any]:
        clocks = [r[name]["clock_s"] for r in runs]
        reached = [r[name]["wall_s"] for r in runs if r[name]["wall_s"] is not None]
        return {
            "search_h_median": round(statistics.median(clocks) / 3600, 3),
            "to_answer_h_median": round((statistics.median(clocks) + confirm) / 3600, 3),
            "to_target_h_median": round(statistics.median(reached) / 3600, 3) if reached else None,
            "launches_median": statistics.median(r[name]["launches"] for r in runs),
        }

    off, on = arm("production_boot"), arm("search_boot")
    saved = [1 - r["search_boot"]["clock_s"] / r["production_boot"]["clock_s"] for r in runs]
    same = sum(r["search_boot"]["launches"] == r["production_boot"]["launches"] for r in runs)
    out = {
        "profile": profile,
        "concurrency": concurrency,
        "budget": budget,
        "seeds": seeds,
        "confirmation_h": round(confirm / 3600, 3),
        "production_boot": off,
        "search_boot": on,
        "search_saving_median": round(statistics.median(saved), 4),
        "to_answer_saving": round(1 - on["to_answer_h_median"] / off["to_answer_h_median"], 4),
        "same_launch_count": f"{same}/{seeds}",
        "runs": runs,
    }
    log(
        f"  to the exported answer (search + {confirm / 3600:.2f} h confirmation): "
        f"{off['to_answer_h_median']:.2f} h -> {on['to_answer_h_median']:.2f} h "
        f"(-{100 * out['to_answer_saving']:.1f} %; the search alone -{100 * out['search_saving_median']:.1f} %)"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    out = compare(seeds=args.seeds, budget=args.budget)
    text = json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
