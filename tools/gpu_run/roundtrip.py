#!/usr/bin/env python3
"""Boots a study's exported files unchanged (``bash best.sh``) a few times and measures each launch with the
study's own workload: boot seconds to the first ``/health`` 200, tok/s, accept length. Also checks that the
plain ``--config`` with a refused key in it fails as SGLang says. Run from the repository root on the GPU host:

    python3 tools/gpu_run/roundtrip.py --study-dir studies/h200x2 --config tools/gpu_run/study_tp2.yaml \\
        --launches 3 --out /tmp/out/roundtrip.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from optimizer.loadgen.client import run_benchmark  # noqa: E402
from optimizer.settings import load_study  # noqa: E402
from optimizer.sglang import config_file  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=40)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def launch(study_dir: Path, workload, log: Path, boot_timeout: float) -> dict:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.time()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["bash", str(study_dir / "best.sh"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    row: dict = {"log": log.name}
    try:
        while True:
            if proc.poll() is not None:
                row.update(outcome=f"exited with status {proc.returncode} while booting")
                return row
            if time.time() - t0 > boot_timeout:
                row.update(outcome="boot timeout")
                return row
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        row["boot_s"] = round(time.time() - t0, 1)
        res = run_benchmark(base, workload)
        metrics = res.to_metrics()
        row["tok_per_s"] = round(float(metrics.get("tok_per_s") or 0.0), 1)
        row["chunks_tok_per_s"] = [round(c.tok_per_s, 1) for c in res.chunks]
        try:
            info = httpx.get(base + "/server_info", timeout=5).json()
            states = info.get("internal_states") or [{}]
            row["accept_length"] = states[0].get("avg_spec_accept_length")
        except (httpx.HTTPError, ValueError):
            row["accept_length"] = None
        row["outcome"] = "complete" if res.completed and not res.failed else f"{res.failed} requests failed"
        return row
    finally:
        stop(proc)


def refused_key_check(study_dir: Path, out: Path) -> dict:
    """The old export (every flag in best.yaml, the refused ones too) against real SGLang."""
    summary = json.loads((study_dir / "summary.json").read_text())
    flags = dict(summary["best"]["flags"])
    refused = [k for k in flags if config_file.refusal(k)]
    bad = out / "all-in-config.yaml"
    bad.write_text(yaml.safe_dump(flags, sort_keys=False))
    res = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--config", str(bad), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = (res.stderr.strip().splitlines() or [""])[-1]
    return {
        "refused_keys": refused,
        "returncode": res.returncode,
        "last_line": last,
        "expected": "ValueError: " + (config_file.refusal(refused[0]) if refused else ""),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study-dir", type=Path, required=True)
    ap.add_argument("--config", required=True, help="the study file (for its workload)")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--boot-timeout", type=float, default=600)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    cfg = load_study(a.config)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "best_sh": (a.study_dir / "best.sh").read_text(),
        "best_yaml": (a.study_dir / "best.yaml").read_text(),
    }
    result["refused_key_check"] = refused_key_check(a.study_dir, a.out.parent)
    print(json.dumps(result["refused_key_check"]), flush=True)
    rows = []
    for i in range(a.launches):
        row = launch(a.study_dir, cfg.workload, a.out.parent / f"roundtrip-{i}.log", a.boot_timeout)
        rows.append(row)
        print(json.dumps(row), flush=True)
        result["launches"] = rows
        a.out.write_text(json.dumps(result, indent=1))
    tps = [r["tok_per_s"] for r in rows if r.get("tok_per_s")]
    if tps:
        result["spread"] = {"min": min(tps), "max": max(tps), "max_over_min": round(max(tps) / min(tps) - 1, 4)}
    a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
