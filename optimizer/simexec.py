"""An in-process executor that runs trials against the simulator's performance model on a simulated clock.

The driver is the same code that drives real servers; only the executor differs. Each trial's events (boot,
chunks, result) are scheduled at the times a real launch would take (the profile's real boot time, the benchmark
time at the true tok/s, SGLang's ~5.5 s shutdown) and handed out in time order. So a 20-seed comparison of
samplers and pruners finishes in minutes while counting restarts and wall-clock as a real cluster would.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import queue
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .events import ChunkEvent, PhaseEvent, TrialResult
from .loadgen.client import schedule as run_order
from .loadgen.workload import Workload
from .sglang import adaptive
from .sglang import flags as sgl
from .sglang.logs import FAST_SHUTDOWN_S
from .sglang.logs import SHUTDOWN_S as STOP_S
from .sim.model import BOOT_FAILURES, Profile, nccl_warn_lines
from .sim.profiles import load_profile
from .study import records as R
from .trial import TrialSpec

CATEGORY_MIX = {"chat": 0.25, "code": 0.25, "math": 0.25, "summarization": 0.25}


@dataclass
class Ledger:
    """What the simulated cluster spent."""

    boot_s: float = 0.0
    bench_s: float = 0.0
    bench_full_s: float = 0.0  # benchmark time had no trial been pruned
    launches: list[tuple[int, float, str]] = field(default_factory=list)  # (trial, end time, status)


class ModelExecutor:
    """A simulated cluster behind the driver's ``optimizer.executors.Executor`` interface."""

    def __init__(
        self,
        profile: str | Profile,
        hosts: list[str],
        workload: Workload,
        *,
        seed: int = 0,
        boot_timeout_s: float = 1800.0,
        categories: dict[str, float] | None = None,
        launch_noise: float | None = None,
    ) -> None:
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        if launch_noise is not None:  # the spread of the per-launch speed factor, instead of the profile's
            self.profile = dataclasses.replace(self.profile, launch_noise=launch_noise)
        self.hosts = list(hosts)
        self.workload = workload
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.boot_timeout_s = boot_timeout_s
        self.categories = categories or CATEGORY_MIX
        self.clock = 0.0
        self.free_at = {h: 0.0 for h in hosts}
        self.heap: list[tuple[float, int, Any]] = []
        self.seq = itertools.count()
        self.pending_chunks: dict[int, list[tuple[float, float]]] = {}  # trial -> [(t, chunk seconds)]
        self.trial_host: dict[int, str] = {}
        self.stop_s: dict[int, float] = {}  # per trial: SGLang's stop, or the search boot's fast stop
        self.level_results: dict[int, list[tuple[float, int, dict[str, Any]]]] = {}  # trial -> (t, level, metrics)
        self.accept: dict[int, float | None] = {}
        self.histogram: dict[int, list[int] | None] = {}  # trial -> the warm-up's accept histogram (chains)
        self.host_facts: dict[int, dict[str, Any]] = {}  # what the probes would read from the simulator's log
        self.ledger = Ledger()
        self.events = self  # the driver reads events.get(timeout=...)

    # ------------------------------------------------------------------ executor interface
    def host_names(self) -> list[str]:
        return list(self.hosts)

    def reap_orphans(self) -> dict[str, list[int]]:
        return {h: [] for h in self.hosts}

    def cancel_all(self) -> None:
        pass

    def kill_servers(self, timeout_s: float = 10.0) -> None:
        pass  # simulated servers need no killing

    def join(self, timeout_s: float) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def _hang_s(self, spec: TrialSpec, ev: Any) -> float:
        """How long a NCCL init hang holds the host: until the readiness check gives up on the distributed init
        (``dist_init_timeout_s`` after its begin line, which ``ev.boot_s`` reaches), or at the boot timeout."""
        if spec.dist_init_timeout_s is None:
            return self.boot_timeout_s
        return min(self.boot_timeout_s, ev.boot_s + spec.dist_init_timeout_s)

    def _push(self, t: float, ev: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), ev))

    def get(self, timeout: float | None = None) -> Any:
        if not self.heap:
            raise queue.Empty
        t, _, ev = heapq.heappop(self.heap)
        self.clock = max(self.clock, t)
        if isinstance(ev, ChunkEvent):
            chunks = self.pending_chunks.get(ev.trial)
            if chunks:
                chunks.pop(0)
        return ev

    def submit(self, host: str, spec: TrialSpec) -> None:
        w = spec.workload
        n = spec.number
        self.trial_host[n] = host
        t0 = max(self.clock, self.free_at[host])
        # what the server is launched with: the candidate's flags and the search boot's (graph sizes, no warm-up)
        flags, env = {**dict(spec.candidate.flags), **dict(spec.boot_flags)}, dict(spec.candidate.env)
        stop_s = FAST_SHUTDOWN_S if spec.fast_stop else STOP_S
        self.stop_s[n] = stop_s
        order = list(spec.level_order or w.levels)
        evs = {c: self.profile.evaluate(flags, env, c, self.categories) for c in order}
        ev = evs[order[0]]
        self._push(t0, PhaseEvent(trial=n, host=host, phase="starting", t=t0))
        result = TrialResult(trial=n, host=host, status="complete", t_start=t0, stop_s=stop_s)
        if ev.failure in BOOT_FAILURES:
            wait = self._hang_s(spec, ev) if ev.failure == "nccl_hang" else ev.boot_s
            t_end = t0 + wait + stop_s
            self.ledger.boot_s += wait
            # the kind the real readiness check gives each (a NCCL capture failure reads "Capture cuda graph failed")
            kind = {"nccl_hang": "timeout", "nccl_invalid": "cuda_graph"}.get(ev.failure, ev.failure)
            result.status, result.kind = "infeasible", kind
            result.reason = f"{result.kind}: {ev.message}"[:300]
            if ev.failure == "nccl_invalid":
                env = {k: str(v) for k, v in spec.candidate.env.items() if str(v) != "unset"}
                result.evidence = nccl_warn_lines(env, 1)
            self._finish(host, result, t_end)
            return
        boot = ev.boot_s
        self.ledger.boot_s += boot
        result.boot_s = boot
        t = t0 + boot
        self._push(t, PhaseEvent(trial=n, host=host, phase="warming_up", t=t))
        lf = self.profile.launch_factor(self.rng)  # one launch: one speed factor for every level
        first = w.for_level(order[0])
        rate0 = max(ev.tok_per_s * lf, 1e-6)
        warmup_s = (
            w.warmup_requests * w.max_tokens / max(rate0 / max(1, min(first.concurrency, w.warmup_requests)), 1e-6)
        )
        t += warmup_s
        self.ledger.bench_full_s += warmup_s
        schedule = []
        levels_done: list[tuple[float, int, dict[str, Any]]] = []
        all_values: list[float] = []
        crash_at = ev.crash_after_requests
        requests_done = 0
        crashed = False
        values: dict[int, list[float]] = {c: [] for c in order}
        for level, i in run_order(order, w.chunks, spec.interleave):
            lw = w.for_level(level)
            lev = evs[level]
            rate = max(lev.tok_per_s * lf, 1e-6)
            chunk_tokens = lw.requests_per_chunk * w.max_tokens
            chunk_s = chunk_tokens / rate
            self.ledger.bench_full_s += chunk_s
            if crash_at is not None and requests_done + lw.requests_per_chunk > crash_at:
                crashed = True
                t += chunk_s / 2
                break
            requests_done += lw.requests_per_chunk
            t += chunk_s
            value = self.profile.chunk_tok_per_s(lev, chunk_tokens, self.rng, launch_factor=lf)
            values[level].append(value)
            all_values.append(value)
            schedule.append((t, chunk_s))
            self._push(
                t,
                ChunkEvent(
                    trial=n,
                    host=host,
                    index=i,
                    tok_per_s=value,
                    completed=lw.requests_per_chunk,
                    failed=0,
                    wall_s=chunk_s,
                    t=t,
                    level=level,
                ),
            )
            if i == w.chunks - 1:
                levels_done.append((t, level, self._level_metrics(lev, values[level], lw, w.chunks)))
        self.pending_chunks[n] = schedule
        self.level_results[n] = levels_done
        self.accept[n] = ev.accept_length if ev.triple else None
        self.histogram[n] = self._histogram(n, flags, ev, w)
        self.host_facts[n] = {R.PCIE_ONLY: True} if self.profile.pcie_only_allreduce(flags) else {}
        if crashed:
            result.status, result.kind = "infeasible", "crash_serving"
            result.reason = f"crash_serving: {ev.message}"[:300]
        else:
            result.metrics = {
                "tok_per_s": float(np.mean(all_values)) if all_values else 0.0,
                "accept_length": ev.accept_length if ev.triple else None,
                R.ACCEPT_HISTOGRAM: self.histogram[n],
                "completed": len(all_values) * w.requests_per_chunk,
                "failed": 0,
                "chunks_run": len(all_values),
                "true_tok_per_s": ev.tok_per_s,
                R.HOST_FACTS: self.host_facts[n],
            }
            if w.multi_level:
                result.metrics["levels"] = {str(c): m for _, c, m in levels_done}
        self.ledger.bench_s += t - (t0 + boot)
        self._finish(host, result, t + stop_s)

    def _histogram(self, n: int, flags: dict, ev: Any, w: Workload) -> list[int] | None:
        """What SGLang's per-request histograms of the warm-up's native requests add up to (the client sends them
        beside the warm-up): verify steps that accepted 0..steps drafts, drawn from the profile's chain
        acceptance. None for trees, adaptive mode, without speculation or without a warm-up."""
        algo = flags.get(sgl.ALGO)
        if not ev.triple or w.warmup_requests <= 0 or adaptive.effective(flags, algo):
            return None
        survival = self.profile.accept_survival(str(algo) if algo else None, ev.triple, self.categories)
        if not survival:
            return None
        s = np.array([1.0, *survival, 0.0])
        exact = np.clip(s[:-1] - s[1:], 0.0, None)
        steps = max(1, round(w.warmup_requests * w.max_tokens / max(ev.accept_length, 1.0)))
        rng = np.random.default_rng([self.seed, n])  # its own stream: the chunks' noise stays as it was
        return [int(v) for v in rng.multinomial(steps, exact / exact.sum())]

    def _level_metrics(self, ev: Any, values: list[float], lw: Workload, planned: int) -> dict[str, Any]:
        """One level's figures as the client reports them. Latencies are the model's: ITL is the cycle time
        over the tokens a step yields (p99: the category that accepts least); TTFT is not modelled."""
        per = ev.per_category_accept or {}
        worst = min(per.values()) if per else max(ev.accept_length, 1.0)
        return {
            "tok_per_s": float(np.mean(values)) if values else 0.0,
            "true_tok_per_s": ev.tok_per_s,
            "accept_length": ev.accept_length if ev.triple else None,
            "itl_ms_mean": ev.step_ms / max(ev.accept_length, 1.0),
            "itl_ms_p99": ev.step_ms / max(worst, 1.0),
            "ttft_ms_p99": None,
            "completed": len(values) * lw.requests_per_chunk,
            "failed": 0,
            "chunks_run": len(values),
            "chunks_planned": planned,
            "complete": len(values) >= planned,
        }

    def _finish(self, host: str, result: TrialResult, t_end: float) -> None:
        result.t_end = t_end
        self.free_at[host] = t_end
        self._push(t_end, result)
        self.ledger.launches.append((result.trial, t_end, result.status))

    def prune(self, trial: int) -> None:
        """Drop the trial's future chunks and its result; it ends now (plus the server's stop)."""
        left = self.pending_chunks.pop(trial, [])
        if not left:
            return
        unspent = sum(s for _, s in left)
        self.ledger.bench_s -= unspent
        kept = []
        for t, seq, ev in self.heap:
            if getattr(ev, "trial", None) == trial and isinstance(ev, (ChunkEvent, TrialResult)):
                continue
            kept.append((t, seq, ev))
        heapq.heapify(kept)
        self.heap = kept
        host = self.trial_host[trial]
        t_end = self.clock + self.stop_s.get(trial, STOP_S)
        self.free_at[host] = t_end
        self.ledger.launches = [x for x in self.ledger.launches if x[0] != trial]
        res = TrialResult(trial=trial, host=host, status="pruned", t_end=t_end, stop_s=self.stop_s.get(trial, STOP_S))
        # a pruned server still answered /get_server_info: its accept length so far is known
        res.metrics = {
            "accept_length": self.accept.get(trial),
            R.ACCEPT_HISTOGRAM: self.histogram.get(trial),
            R.HOST_FACTS: self.host_facts.get(trial, {}),
        }
        done = [(c, m) for t, c, m in self.level_results.get(trial, []) if t <= self.clock]
        if self.workload.multi_level and done:
            res.metrics["levels"] = {str(c): m for c, m in done}
        self._push(t_end, res)
        self.ledger.launches.append((trial, t_end, "pruned"))
