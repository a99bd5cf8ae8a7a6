"""Ground truth: the expected tok/s of every configuration of a search space, and which ones fail."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from ..space import load_space
from .profiles import load_profile


def _cand_parts(c: Any) -> tuple[dict[str, Any], dict[str, str]]:
    if isinstance(c, Mapping):
        return dict(c.get("flags", {})), dict(c.get("env", {}))
    return dict(c.flags), dict(c.env)


def ground_truth(
    profile_name: str, candidates: Iterable[Any], concurrency: int = 1, categories: Mapping[str, float] | None = None
) -> dict:
    """Evaluate every candidate (``Candidate`` objects or ``{"flags":..., "env":...}`` mappings)."""
    prof = load_profile(profile_name)
    configs = []
    best = None
    for cand in candidates:
        flags, env = _cand_parts(cand)
        env = {k: str(v) for k, v in env.items() if v is not None and str(v) != "unset"}
        ev = prof.evaluate(flags, env, concurrency, categories)
        row = {
            "flags": flags,
            "env": env,
            # crash_serving: the rate until the crash; other failures never serve
            "tok_per_s": round(ev.tok_per_s, 4) if ev.ok or ev.failure == "crash_serving" else 0.0,
            "accept_length": round(ev.accept_length, 4),
            "step_ms": round(ev.step_ms, 4),
            "boot_s": round(ev.boot_s, 2),
            "failure": ev.failure,
            "message": ev.message if ev.failure else "",
            "crash_after_requests": ev.crash_after_requests,
        }
        configs.append(row)
        if ev.ok and (best is None or ev.tok_per_s > best["tok_per_s"]):
            best = row
    return {
        "profile": profile_name,
        "concurrency": concurrency,
        "categories": dict(categories or prof.default_categories),
        "configs": configs,
        "best": best,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m optimizer.sim truth", description="Expected tok/s of every configuration of a search space."
    )
    ap.add_argument("--profile", required=True)
    ap.add_argument("--space", required=True, help="search-space YAML (optimizer.space format)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--out", default="-")
    args = ap.parse_args(argv)
    space = load_space(args.space)
    result = ground_truth(args.profile, space.grid(), args.concurrency)
    text = json.dumps(result, indent=1, default=str)
    if args.out == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
        best = result["best"]
        top = best["tok_per_s"] if best else None
        print(f"{len(result['configs'])} configurations; best {top} tok/s -> {args.out}")
    return 0
