#!/usr/bin/env python3
"""Issue 24 on a real GPU: can SGLang's default adaptive config boot, and what does its adaptive mode cost?

On the H200 with Triton attention, ``--speculative-adaptive`` with SGLang's default config (launch state 3 steps,
extra states 0, 1 and 7) died in the CUDA-graph capture of the 7-step state (``docs/adaptive.md``). The states SGLang
captured without trouble were all shallower than the launch's. Each arm below is one real trial of the optimizer
(``optimizer.trial.run_trial``: start, readiness, benchmark at every level, stop), in this order:

- ``default-launch-7``: SGLang's default config launched at ``--speculative-num-steps 7``, so the launch's state is
  the deepest and the extra states (0, 1, 3) are shallower;
- ``static-3``: the static 3-step chain, the like-for-like reference (the same simulated acceptance);
- ``default-eager``: SGLang's default config with the decode CUDA graphs off (``--cuda-graph-backend-decode
  disabled``: no capture at all);
- ``static-7``: the static 7-step chain, to see whether 8 tokens per request capture at all on this backend;
- ``default``: SGLang's default config as a user launches it (no step count), to see the failure again.

Every server gets the same simulated accept length (``SGLANG_SIMULATE_ACC_LEN``, one value per server: 2.655, the
3-step value of the published chat curve), so wherever adaptive mode settles on 3 steps it runs the chain ``static-3``
runs. Writes ``--out`` after every arm (partial results survive a lost machine), with each arm's boot seconds, tok/s
per level, accept length, and its adaptive log lines.

    python3 tools/gpu_run/adaptive_probe.py --out /tmp/adaptive-probe.json   # tools/gpu_run/adaptive_probe.sh
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from optimizer.candidate import Candidate  # noqa: E402
from optimizer.hosts.local import LocalHost  # noqa: E402
from optimizer.loadgen.workload import Workload  # noqa: E402
from optimizer.trial import TrialSpec, run_trial  # noqa: E402

EAGLE3 = {"speculative-algorithm": "EAGLE3"}
ADAPTIVE = {**EAGLE3, "speculative-adaptive": True}
ARMS = {
    "default-launch-7": {**ADAPTIVE, "speculative-num-steps": 7},
    "static-3": {**EAGLE3, "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4},
    "default-eager": {**ADAPTIVE, "cuda-graph-backend-decode": "disabled"},
    "static-7": {**EAGLE3, "speculative-num-steps": 7, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 8},
    "default": dict(ADAPTIVE),
}
LINES = re.compile(
    r"(AdaptiveSpeculativeParams initialized.*|Built adaptive runtime state.*|Adaptive spec params updated.*"
    r"|Switch adaptive runtime state.*|speculative_adaptive disabled.*|CUDA error.*|\w*Error: .*)"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default="tools/gpu_run/space_adaptive.yaml", help="its fixed flags")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--levels", default="1,16")
    ap.add_argument("--accept-length", default="2.655")
    ap.add_argument("--chunks", type=int, default=3)
    ap.add_argument("--requests-per-chunk", type=int, default=4)
    ap.add_argument("--boot-timeout-s", type=float, default=400.0)
    ap.add_argument("--deadline-s", type=float, default=0.0, help="start no arm after this many seconds (0: none)")
    ap.add_argument("--command", default="bash tools/gpu_run/launch_sglang.sh", help="the server command")
    ap.add_argument("--work", default="studies/adaptive-probe")
    ap.add_argument("--out", default="/tmp/adaptive-probe.json")
    args = ap.parse_args()

    t_start = time.time()
    fixed = dict(yaml.safe_load((REPO / args.space).read_text())["fixed"])
    levels = [int(x) for x in args.levels.split(",")]
    workload = Workload(
        concurrency=levels,
        max_tokens=128,
        chunks=args.chunks,
        requests_per_chunk=args.requests_per_chunk,
        warmup_requests=2,
    )
    work = REPO / args.work
    work.mkdir(parents=True, exist_ok=True)
    host = LocalHost("gpu", work / "state")
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "fixed": fixed, "levels": levels, "arms": []}
    for n, arm in enumerate(filter(None, args.arms.split(","))):
        if args.deadline_s and time.time() - t_start > args.deadline_s:
            result["arms"].append({"arm": arm, "status": "not run (deadline)"})
            continue
        flags = {**fixed, **ARMS[arm]}
        trial_dir = work / f"{n:02d}-{arm}"
        spec = TrialSpec(
            number=n,
            candidate=Candidate(flags=flags, env={"SGLANG_SIMULATE_ACC_LEN": args.accept_length}),
            command=shlex.split(args.command),
            workload=workload,
            trial_dir=str(trial_dir),
            boot_timeout_s=args.boot_timeout_s,
            stop_timeout_s=60.0,
            study="adaptive-probe",
            protected=True,
        )
        t0 = time.time()
        r = run_trial(host, spec, lambda ev: None)
        m = r.metrics or {}
        per_level = m.get("levels") or {str(levels[0]): m}
        lines = []
        for log in sorted(trial_dir.rglob("*.log")):
            lines += [x.group(1)[:240] for x in LINES.finditer(log.read_text(errors="replace"))]
        row = {
            "arm": arm,
            "flags": ARMS[arm],
            "status": r.status,
            "reason": (r.reason or "")[:400],
            "boot_s": r.boot_s,
            "wall_s": round(time.time() - t0, 1),
            "tok_per_s": {c: (v or {}).get("tok_per_s") for c, v in per_level.items()},
            "accept_length": {c: (v or {}).get("accept_length") for c, v in per_level.items()},
            "adaptive_lines": _counted(lines),
        }
        result["arms"].append(row)
        print(f"[adaptive_probe] {arm:<18} {r.status:<10} boot {r.boot_s} s tok/s {row['tok_per_s']}", flush=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def _counted(lines: list[str]) -> list[str]:
    """Each distinct line once, with how often it came, in order of first appearance."""
    counts: dict[str, int] = {}
    firsts: dict[str, str] = {}
    for x in lines:
        key = re.sub(r"\d+\.\d+", "#", x)
        counts[key] = counts.get(key, 0) + 1
        firsts.setdefault(key, x)
    return [f"{counts[k]} x {v}" for k, v in firsts.items()]


if __name__ == "__main__":
    raise SystemExit(main())
