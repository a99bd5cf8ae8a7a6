"""Confirm an exported adaptive schedule: relaunch it, SGLang's default adaptive config and the best static
configuration in interleaved rounds (``A B C, A B C, ...``, each round with its own prompt order, as
``optimizer.confirm`` does for the top trials), and compare them level by level with ``optimizer.verdict``.

Arms, all with the study's server command, ``server.env`` and workload (every level measured after each boot):

- ``tuned schedule``: ``best-adaptive.json`` with the anchor's flags and environment (``optimizer.adaptive_export``);
- ``SGLang default adaptive``: the same flags and environment with ``--speculative-adaptive`` and no config file;
- ``static best``: the study's objective best trial as it was launched.

Runs are stored as one study user attribute (``adaptive:confirm``), never as trials: the sampler and the launch
budget do not see them. Per level: each arm's geometric mean tok/s with its 95 % interval (launch noise pooled
over the arms) and the tuned schedule's per-round ratio to each other arm.
"""

from __future__ import annotations

import math
import queue
from pathlib import Path
from typing import Any

import optuna

from .adaptive_export import STEM, adaptive_flags, default_adaptive_flags, schedule
from .candidate import Candidate
from .confirm import NUMBER_BASE, relaunch_spec
from .events import TrialResult
from .objective import parse_levels
from .study import records as R
from .verdict import Arm, launch_noise, ratio

RESULT_ATTR = R.ADAPTIVE_CONFIRM
#: trial numbers of these launches: above the confirmation's own range
NUMBER_OFFSET = NUMBER_BASE + 500_000
ARMS = ("tuned schedule", "SGLang default adaptive", "static best")


def arm_candidates(study: optuna.Study, out_dir: Path) -> list[tuple[str, Candidate]] | None:
    """The three arms' candidates (None when the study has no schedule or no exported JSON)."""
    sched = schedule(study)
    json_path = (out_dir / f"{STEM}.json").absolute()
    if sched is None or not json_path.exists():
        return None
    anchor = sched["anchor"]
    flags = dict(anchor.user_attrs.get(R.FLAGS) or {})
    env = dict(anchor.user_attrs.get(R.ENV) or {})
    tuned = adaptive_flags(flags, str(json_path), sched["config"])
    default = default_adaptive_flags(tuned)
    done = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    best = max((t for t in done if t.value is not None), key=lambda t: float(t.value), default=None)  # type: ignore[arg-type]
    if best is None:
        return None
    static = Candidate(flags=dict(best.user_attrs.get(R.FLAGS) or {}), env=dict(best.user_attrs.get(R.ENV) or {}))
    return [
        (ARMS[0], Candidate(flags=tuned, env=env)),
        (ARMS[1], Candidate(flags=default, env=env)),
        (ARMS[2], static),
    ]


def confirm_schedule(
    cfg: Any, hosts: list[Any], executor: Any, study: optuna.Study, out_dir: Path, *, rounds: int = 3, say=print
) -> dict[str, Any] | None:
    """Run the interleaved relaunches on the study's executor; store and return the per-level comparison."""
    arms = arm_candidates(study, out_dir)
    if arms is None:
        say("adaptive confirmation: no exported schedule to confirm")
        return None
    config = schedule(study)["config"]  # type: ignore[index]
    names = [h.name if hasattr(h, "name") else str(h) for h in hosts]
    todo = [(r, i) for r in range(rounds) for i in range(len(arms))]
    runs: list[dict[str, Any]] = []
    pending = list(todo)
    active: dict[int, tuple[int, int, str]] = {}
    busy: set[str] = set()
    seq = 0
    while pending or active:
        for host in [h for h in names if h not in busy]:
            if not pending:
                break
            rnd, arm = pending.pop(0)
            number = NUMBER_OFFSET + seq
            spec = relaunch_spec(cfg, number, arms[arm][1], rnd, cfg.study_dir / "confirm-adaptive" / f"{seq:04d}")
            seq += 1
            active[number] = (rnd, arm, host)
            busy.add(host)
            executor.submit(host, spec)
        try:
            ev = executor.events.get(timeout=0.2)
        except queue.Empty:
            continue
        if not isinstance(ev, TrialResult) or ev.trial not in active:
            continue
        rnd, arm, host = active.pop(ev.trial)
        busy.discard(host)
        levels = parse_levels((ev.metrics or {}).get(R.LEVELS) or {}) if ev.status == "complete" else {}
        if not levels and ev.status == "complete" and (ev.metrics or {}).get(R.TOK_PER_S) is not None:
            levels = {cfg.workload.levels[0]: {"tok_per_s": ev.metrics[R.TOK_PER_S], "complete": True}}
        runs.append(
            {
                "round": rnd,
                "arm": ARMS[arm],
                "status": ev.status,
                "boot_s": ev.boot_s,
                "reason": (ev.reason or "")[:300],
                "levels": {str(c): m.get("tok_per_s") for c, m in levels.items() if m.get("complete")},
            }
        )
        say(f"adaptive confirmation {len(runs)}/{len(todo)} (round {rnd + 1}/{rounds}): {ARMS[arm]} {ev.status}")
    result = {"rounds": rounds, "config": config, "runs": runs, "levels": _compare(runs, rounds)}
    study.set_user_attr(RESULT_ATTR, result)
    for c, row in result["levels"].items():
        say(
            f"adaptive confirmation c{c}: "
            + ", ".join(f"{a} {row['arms'][a]['tok_per_s']}" for a in ARMS if row["arms"].get(a))
            + "; tuned vs default "
            + str(row.get("tuned_vs_default"))
            + ", tuned vs static "
            + str(row.get("tuned_vs_static"))
        )
    return result


def _compare(runs: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    levels = sorted({c for r in runs for c in r["levels"]}, key=int)
    out: dict[str, Any] = {}
    for c in levels:
        arms = {a: Arm(label=a, trial=None, config=a, cost=(0, 0, 0)) for a in ARMS}
        for r in runs:
            v = r["levels"].get(c)
            if r["status"] == "complete" and isinstance(v, (int, float)) and v > 0:
                arms[r["arm"]].runs[int(r["round"])] = float(v)
        sigma, df = launch_noise(list(arms.values()))
        for a in arms.values():
            a.pooled = (sigma, df) if sigma is not None else None
        row: dict[str, Any] = {"launch_noise": sigma, "df": df, "arms": {}}
        for name, a in arms.items():
            if a.runs:
                iv = a.tok_per_s
                row["arms"][name] = {
                    "tok_per_s": round(math.exp(iv.mean), 2),
                    "ci": [round(math.exp(iv.lo), 2), round(math.exp(iv.hi), 2)] if iv.known else None,  # type: ignore[arg-type]
                    "launches": len(a.runs),
                }
        for other, key in ((ARMS[1], "tuned_vs_default"), (ARMS[2], "tuned_vs_static")):
            if arms[ARMS[0]].runs and arms[other].runs:
                iv = ratio(arms[ARMS[0]], arms[other])
                if iv.n:
                    row[key] = {
                        "gain": round(math.exp(iv.mean) - 1, 4),
                        "ci": [round(math.exp(iv.lo) - 1, 4), round(math.exp(iv.hi) - 1, 4)] if iv.known else None,  # type: ignore[arg-type]
                    }
        out[c] = row
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m optimizer.adaptive_confirm --config study.yaml [--rounds 3] [--executor thread|ray]``: confirm
    the exported schedule of an existing per-level study (run ``export`` first), then print the comparison."""
    import argparse
    import json

    from .app import make_executor, open_existing, read_hosts
    from .hosts.config import local_host
    from .settings import load_study

    ap = argparse.ArgumentParser(prog="python -m optimizer.adaptive_confirm", description=main.__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--executor", choices=("ray", "thread"), default="thread")
    args = ap.parse_args(argv)
    cfg = load_study(args.config)
    study = open_existing(cfg)
    hosts = read_hosts(cfg.hosts) if cfg.hosts else [local_host()]
    ex = make_executor(args.executor, hosts, cfg)
    try:
        result = confirm_schedule(cfg, hosts, ex, study, cfg.study_dir, rounds=args.rounds)
    finally:
        ex.shutdown()
    if result is None:
        return 1
    print(json.dumps(result["levels"], indent=2))
    return 0


__all__ = ["ARMS", "RESULT_ATTR", "arm_candidates", "confirm_schedule", "main"]


if __name__ == "__main__":
    raise SystemExit(main())
