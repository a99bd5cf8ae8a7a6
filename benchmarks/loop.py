"""Overheads of the real loop against simulator processes, and trials per hour with 1, 2 and 4 hosts."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from optimizer.errors import BootError
from optimizer.events import PhaseEvent
from optimizer.hosts.local import LocalHost
from optimizer.readiness import wait_ready
from optimizer.sglang.logs import NOT_ENOUGH_MEMORY
from optimizer.study import records as R

ROOT = Path(__file__).resolve().parents[1]
KIMI = "kimi-k2.5-8x-rtxpro6000"


def sim_argv(port: int, *extra: str, profile: str = KIMI, time_scale: float = 0.002) -> list[str]:
    return [
        sys.executable,
        "-m",
        "optimizer.sim",
        "--sim-profile",
        profile,
        "--sim-time-scale",
        str(time_scale),
        "--model-path",
        "m",
        "--tp-size",
        "8",
        "--attention-backend",
        "flashinfer",
        *extra,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def readiness_overhead(work: Path, repeats: int = 5, poll_s: float = 0.25) -> dict[str, Any]:
    """Time from /health first answering 200 (seen by a 5 ms side poller) to wait_ready returning."""
    host = LocalHost("bench", work / "ready")
    delays = []
    for i in range(repeats):
        port = host.pick_port()
        server = host.start(sim_argv(port), {}, work / f"ready-{i}.log", port)
        first: list[float] = []

        def side() -> None:
            with httpx.Client(trust_env=False, timeout=2) as c:
                while not first:
                    try:
                        if c.get(server.base_url + "/health").status_code == 200:
                            first.append(time.time())
                            return
                    except httpx.TransportError:
                        pass
                    time.sleep(0.005)

        th = threading.Thread(target=side, daemon=True)
        th.start()
        try:
            wait_ready(server, boot_timeout_s=60, poll_s=poll_s)
            noticed = time.time()
            th.join(5)
            if first:
                delays.append(max(0.0, noticed - first[0]))
        finally:
            server.stop(10)
    return {"poll_s": poll_s, "mean_s": statistics.fmean(delays), "max_s": max(delays), "runs": len(delays)}


def crash_overhead(work: Path, repeats: int = 5) -> dict[str, Any]:
    """Time from a fatal line reaching the log (seen by a 5 ms side watcher) to wait_ready raising."""
    host = LocalHost("bench", work / "crash")
    delays = []
    kinds = []
    for i in range(repeats):
        port = host.pick_port()
        log = work / f"crash-{i}.log"
        # A tree too big for the profile's memory: SGLang's 'Not enough memory' at boot.
        argv = sim_argv(
            port,
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            "d",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "4",
            "--speculative-num-draft-tokens",
            "16",
        )
        server = host.start(argv, {}, log, port)
        seen: list[float] = []

        def side() -> None:
            while not seen:
                try:
                    if NOT_ENOUGH_MEMORY.rstrip(".") in log.read_text(errors="replace"):
                        seen.append(time.time())
                        return
                except OSError:
                    pass
                time.sleep(0.005)

        th = threading.Thread(target=side, daemon=True)
        th.start()
        try:
            try:
                wait_ready(server, boot_timeout_s=60, poll_s=0.25)
            except BootError as exc:
                noticed = time.time()
                kinds.append(exc.kind)
                th.join(5)
                if seen:
                    delays.append(max(0.0, noticed - seen[0]))
        finally:
            server.stop(10)
    return {"mean_s": statistics.fmean(delays), "max_s": max(delays), "runs": len(delays), "kinds": kinds}


class _Timeline:
    """Collects phase times per trial from the driver's events."""

    def __init__(self) -> None:
        self.phases: dict[int, dict[str, float]] = {}

    def start(self, driver: Any) -> None: ...
    def note(self, driver: Any, text: str) -> None: ...
    def finished(self, driver: Any, frozen: Any) -> None: ...
    def stop(self, driver: Any) -> None: ...

    def event(self, driver: Any, ev: Any) -> None:
        if isinstance(ev, PhaseEvent):
            self.phases.setdefault(ev.trial, {}).setdefault(ev.phase, ev.t)


def run_study(
    work: Path,
    name: str,
    hosts: int,
    trials: int,
    *,
    executor: str = "thread",
    profile: str = KIMI,
    seed: int = 0,
    pruner: str = "none",
    workload: dict | None = None,
    space: str = "search_spaces/demo.yaml",
    step_scale: float = 1.0,
) -> dict[str, Any]:
    from optimizer.executors import RayExecutor, ThreadExecutor
    from optimizer.hosts.config import local_host
    from optimizer.settings import parse_study
    from optimizer.space import load_space
    from optimizer.study import Driver

    cfg = parse_study(
        {
            "study": name,
            "studies_dir": str(work / "studies"),
            "space": str(ROOT / space),
            "dedup": True,
            "server": {
                "command": [
                    "{python}",
                    "-m",
                    "optimizer.sim",
                    "--sim-profile",
                    profile,
                    "--sim-time-scale",
                    "0.002",
                    "--sim-step-scale",
                    str(step_scale),
                ],
                "boot_timeout_s": 20,
            },
            "workload": workload or {"max_tokens": 32, "chunks": 2, "requests_per_chunk": 2, "warmup_requests": 1},
            "budget": {"trials": trials},
            "sampler": {"seed": seed},
            "pruner": {"name": pruner},
        },
        "bench",
    )
    hs = [local_host(f"h{i}") for i in range(hosts)]
    ex: Any = (
        RayExecutor(hs, cfg.study_dir.absolute()) if executor == "ray" else ThreadExecutor(hs, cfg.study_dir.absolute())
    )
    timeline = _Timeline()
    t0 = time.time()
    try:
        study = Driver(cfg, load_space(cfg.space), hs, ex, progress=timeline).run()  # type: ignore[arg-type]
    finally:
        ex.shutdown()
    wall = time.time() - t0
    launched = [t for t in study.get_trials() if t.user_attrs.get(R.LAUNCHED)]
    return {
        "wall_s": wall,
        "launched": len(launched),
        "study": study,
        "timeline": timeline.phases,
        "trials_per_hour": 3600 * len(launched) / wall,
    }


def orchestration_overhead(work: Path, trials: int = 6) -> dict[str, Any]:
    """Per trial: wall time not spent booting, benchmarking or stopping the server (driver, Ray, ask/tell)."""
    r = run_study(work, "overhead", 1, trials, executor="ray")
    study = r["study"]
    launched = sorted(
        (t for t in study.get_trials() if t.user_attrs.get(R.LAUNCHED)), key=lambda t: t.user_attrs[R.T_START]
    )
    busy = 0.0
    for t in launched:
        busy += t.user_attrs[R.T_END] - t.user_attrs[R.T_START]  # start -> server stopped (boot+bench+stop)
    idle = r["wall_s"] - busy
    return {
        "trials": len(launched),
        "wall_s": r["wall_s"],
        "per_trial_s": idle / max(1, len(launched)),
        "note": "wall clock of the study minus the sum of the trials' own spans (launch to server stopped), "
        "per trial; includes Ray start-up and actor creation once",
    }


# Every configuration boots and benchmarks in about the same time, so only the number of hosts differs.
UNIFORM_SPACE = """
name: uniform
baseline: false
fixed: {model-path: m, speculative-draft-model-path: d, tp-size: 8, attention-backend: flashinfer}
parameters:
  speculative-algorithm: {type: categorical, choices: [EAGLE3]}
  speculative-num-steps: {type: int, low: 1, high: 4}
  speculative-eagle-topk: {type: categorical, choices: [1]}
  NCCL_ALGO: {type: categorical, choices: [unset, Ring]}
  NCCL_P2P_LEVEL: {type: categorical, choices: [unset, SYS]}
"""


def trials_per_hour(work: Path, trials: int = 12) -> dict[str, Any]:
    space = work / "uniform.yaml"
    space.write_text(UNIFORM_SPACE)
    run_study(work, "tph-warmup", 1, 2, executor="ray", space=str(space))  # Ray workers and imports warm
    out = {}
    for n in (1, 2, 4):
        r = run_study(work, f"tph{n}", n, trials, executor="ray", seed=0, space=str(space))
        out[str(n)] = {"trials_per_hour": r["trials_per_hour"], "wall_s": r["wall_s"], "launched": r["launched"]}
    base = out["1"]["trials_per_hour"]
    for v in out.values():
        v["speedup"] = v["trials_per_hour"] / base
    return out
