"""What a profile's one unavoidable comparison costs any search, under launch noise.

On a profile whose configurations within 2 % of the optimum all share some settings, a search whose answer is
within 2 % must have chosen those settings over the best configuration that lacks them (the *contender*). Grant a
search everything else (it knows every other effect exactly, and that the deciding settings act the same on every
tree): it still learns the deciding settings' effect only from launches, each of which measures the true tok/s
times a launch factor with spread ``noise``. Our sampler has no prior reason to prefer one side (the settings'
priors are symmetric). Two bounds follow, with ``gap = log(best within 2 % / contender)``:

- A search that decides after a fixed number of restarts ``n`` is right with probability at most
  ``P(n) = Phi(gap / (noise * sqrt(4 / n)))`` (``p_correct``; a simulation agrees, ``p_correct_simulated``).
- A search that stops as soon as its evidence suffices (a sequential test) can do with fewer on average, but to be
  right with probability ``w`` it needs at least Wald's bound of launches on average (``sequential_restarts``):
  ``((2w - 1) * ln(w / (1 - w))) / (gap^2 / (2 noise^2))``, each launch worth ``gap^2 / (2 noise^2)`` nats.

Every restart counts, the baseline's and the confirmation's included, and a real search must also find the tree
and the other settings; the within-launch noise of the benchmark would lower the bounds further.

Kimi (``benchmarks.answer.KIMI``): the configurations within 2 % are the 2- and 3-step chains with
``NCCL_PROTO=LL NCCL_ALGO=Ring``; the contender is the 2-step chain with ``LL`` and ``NCCL_ALGO`` unset or
``Tree`` (97.1 %). At 3 % launch noise a fixed 10 restarts are right at most 0.94 of the time and 95 % needs 12;
a sequential search needs at least 5.4 restarts on average for 95 %. So issue 22's target (a median of 10
restarts and 19 of 20 runs within 2 %) is open only to a search that decides the ``Ring`` question sequentially
and finds the chain and protocol in the few restarts left (docs/answer.md).

``python -m benchmarks.noise_floor [--profile NAME] [--noise 0.03] [--restarts 6,8,10,12,14,20]``; ``make bench``
prints it in its ``answer`` section.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
from scipy.stats import norm

from benchmarks.strategies import TARGET, _truth

RESTARTS = (6, 8, 10, 12, 14, 16, 20)
WANTED = 0.95  # 19 of 20 runs


def _params(table: Any, i: int, j: int) -> dict[str, Any]:
    return {k: v for k, v in table.params(i, j).items() if k != "speculative-algorithm"}


def deciding_choice(tr: dict[str, Any]) -> dict[str, Any]:
    """The settings every configuration within 2 % of the optimum shares and the best configuration outside lacks:
    ``within`` (how many), ``shared`` (name -> value), ``contender`` (its parameters and its share of the optimum),
    ``decides`` (the shared settings the contender lacks, name -> (shared value, contender's value)) and ``gap``."""
    table, values, opt = tr["table"], tr["values"], tr["optimum"]
    valid = table.valid & (values > 0)
    # settings columns that measure alike on every tree are one server (an idle setting: custom all-reduce on a
    # PCIe-only box): keep the first of each
    seen: set[bytes] = set()
    for j in range(values.shape[1]):
        key = np.where(valid[:, j], np.round(values[:, j], 9), -1.0).tobytes()
        if key in seen:
            valid[:, j] = False
        seen.add(key)
    cells = [(float(values[i, j]), int(i), int(j)) for i, j in zip(*np.nonzero(valid))]
    inside = [c for c in cells if c[0] >= TARGET * opt]
    outside = [c for c in cells if c[0] < TARGET * opt]
    if not outside:
        raise ValueError("every configuration is within 2 % of the optimum: nothing to decide")
    first = _params(table, inside[0][1], inside[0][2])
    shared = {k: v for k, v in first.items() if all(_params(table, i, j).get(k) == v for _, i, j in inside)}
    best_out = max(outside)
    contender = _params(table, best_out[1], best_out[2])
    decides = {k: (v, contender.get(k)) for k, v in shared.items() if contender.get(k) != v}
    best_in = max(inside)[0]
    return {
        "within": len(inside),
        "shared": shared,
        "contender": contender,
        "contender_fraction": best_out[0] / opt,
        "decides": decides,
        "gap": math.log(best_in / best_out[0]),
    }


def p_correct(gap: float, noise: float, restarts: int) -> float:
    """The chance that ``restarts`` launches, split evenly between two configurations ``gap`` apart (log scale),
    keep the faster one when each launch carries a launch factor of spread ``noise``."""
    return float(norm.cdf(gap / (noise * math.sqrt(4.0 / restarts))))


def p_correct_simulated(gap: float, noise: float, restarts: int, runs: int = 200_000, seed: int = 0) -> float:
    """``p_correct`` by simulation, with the launch factor the benchmarks draw (normal around 1, clipped to
    0.6-1.4; ``benchmarks.strategies.run_driver``) on an odd split where ``restarts`` is odd."""
    rng = np.random.default_rng(seed)
    a, b = (restarts + 1) // 2, restarts // 2
    fa = np.clip(rng.normal(1.0, noise, (runs, a)), 0.6, 1.4)
    fb = np.clip(rng.normal(1.0, noise, (runs, b)), 0.6, 1.4)
    fast, slow = np.exp(gap) * fa.mean(axis=1), fb.mean(axis=1)
    return float(np.mean(fast > slow))


def sequential_restarts(gap: float, noise: float, wanted: float = WANTED) -> float:
    """Wald's lower bound on the mean restarts of any sequential test that tells the two sides apart with error
    ``1 - wanted`` either way: the evidence it must gather, ``(2 wanted - 1) ln(wanted / (1 - wanted))`` nats, over
    what one launch carries, ``gap^2 / (2 noise^2)``."""
    evidence = (2 * wanted - 1) * math.log(wanted / (1 - wanted))
    return evidence / (gap**2 / (2 * noise**2))


def restarts_needed(gap: float, noise: float, wanted: float = WANTED) -> int:
    """The fewest (even) restarts for which ``p_correct`` reaches ``wanted``."""
    n = 4.0 * (norm.ppf(wanted) * noise / gap) ** 2
    return max(2, 2 * math.ceil(n / 2))


def _settings(d: dict[str, Any], keys) -> str:
    return " ".join(f"{k}={d[k]}" for k in keys)


def report(profile: str, noise: float, restarts=RESTARTS, concurrency: int = 1) -> dict[str, Any]:
    """The deciding choice on ``profile`` and the bound at ``noise`` for each number of restarts, with a line."""
    tr = _truth(profile, concurrency)  # cached per process: the answer section asks once per noise
    d = deciding_choice(tr)
    bound = {n: p_correct(d["gap"], noise, n) for n in restarts}
    need = restarts_needed(d["gap"], noise)
    sequential = sequential_restarts(d["gap"], noise)
    decides = ", ".join(f"{k}={a} over {b}" for k, (a, b) in d["decides"].items()) or "nothing shared"
    line = (
        f"noise floor, {profile} at {noise:.0%} launch noise: the {d['within']} distinct configurations within 2 % share "
        f"{_settings(d['shared'], d['shared'])}; the best outside is {d['contender_fraction']:.1%} "
        f"({_settings(d['contender'], d['contender'])}), so a search must choose {decides}, "
        f"{math.expm1(d['gap']):.1%} apart. Even knowing everything else, a fixed n restarts choose right at most "
        + ", ".join(f"{p:.2f} ({n})" for n, p in bound.items())
        + f", and {WANTED:.0%} needs {need}; a search that stops once its evidence suffices needs at least "
        f"{sequential:.1f} on average for {WANTED:.0%} (benchmarks/noise_floor.py)"
    )
    return {
        **d,
        "profile": profile,
        "noise": noise,
        "bound": bound,
        "restarts_for_95": need,
        "sequential_restarts_for_95": sequential,
        "line": line,
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.answer import KIMI

    ap = argparse.ArgumentParser(prog="python -m benchmarks.noise_floor", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=KIMI)
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--restarts", default=",".join(map(str, RESTARTS)))
    a = ap.parse_args(argv)
    r = report(a.profile, a.noise, tuple(int(x) for x in a.restarts.split(",")))
    print(r["line"])
    for n, p in r["bound"].items():
        print(f"  {n:3d} restarts: at most {p:.3f} (simulated {p_correct_simulated(r['gap'], a.noise, n):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
