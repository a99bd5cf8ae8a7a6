"""One trial on one host, with no Optuna and no Ray inside: start, wait, benchmark, always clean up.

``run_trial`` turns everything that can go wrong into a ``TrialResult``: a host fault (re-queue elsewhere), an
infeasible configuration (reason + log tail), a pruned or cancelled run. It never raises for server behaviour.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .boot import asked_with_search_boot, flag_argv
from .candidate import Candidate
from .errors import BootError, HostError
from .events import ChunkEvent, PhaseEvent, TrialResult
from .hosts.base import Host
from .loadgen.client import BenchResult, ChunkResult, run_benchmark
from .loadgen.workload import Workload
from .readiness import log_tail, wait_ready
from .redact import redact_log, redact_mapping
from .sglang import fatal_settings
from .sglang.logs import ILLEGAL_MEMORY_ACCESS, SCHEDULER_EXCEPTION

Emit = Callable[[Any], None]


@dataclass
class TrialSpec:
    number: int
    candidate: Candidate
    command: list[str]
    workload: Workload
    trial_dir: str
    extra_args: list[str] = field(default_factory=list)
    server_env: dict[str, str] = field(default_factory=dict)
    boot_timeout_s: float = 1800.0
    dist_init_timeout_s: float | None = None
    poll_s: float = 0.25
    stop_timeout_s: float = 30.0
    study: str = ""
    #: Never prune this trial (the baseline: every gain is measured against it).
    protected: bool = False
    #: The order the workload's load levels run in after the boot (empty: as listed); ``interleave``: they take
    #: turns chunk by chunk instead of level after level.
    level_order: list[int] = field(default_factory=list)
    interleave: bool = False
    #: The search boot's additions (``optimizer/boot.py``): flags after the candidate's, environment under the
    #: candidate's, and the fast stop. Empty for the confirmation and anything exported: production as configured.
    boot_flags: dict[str, Any] = field(default_factory=dict)
    boot_env: dict[str, str] = field(default_factory=dict)
    fast_stop: bool = False

    def argv(self, python: list[str] | str, bind: str, port: int) -> list[str]:
        prefix = shlex.split(python) if isinstance(python, str) else list(python)
        cmd: list[str] = []
        for part in self.command:
            cmd.extend(prefix if part == "{python}" else [part])
        boot = flag_argv(self.boot_flags)
        return [*cmd, *self.extra_args, *self.candidate.argv(), *boot, "--host", bind, "--port", str(port)]


def search_boot_env(host: Host, env: dict[str, str]) -> dict[str, str]:
    """The search boot's environment on ``host``: ``~`` is the host's home (remote for SSH hosts), and a variable
    the host's own environment sets (its ``env``; for the local host also the driver's) is left as the host has it."""
    remote = getattr(host, "remote_path", None)
    taken = set(getattr(host, "env", None) or {})
    if not callable(remote):
        taken |= set(os.environ)
    out = {}
    for k, v in env.items():
        if k in taken:
            continue
        if v.startswith("~"):
            v = remote(v) if callable(remote) else os.path.expanduser(v)
        out[k] = v
    return out


@dataclass
class Controls:
    """Flags the driver sets while a trial runs (through the actor)."""

    prune: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)

    def stop_requested(self) -> bool:
        return self.prune.is_set() or self.cancel.is_set()


def run_trial(host: Host, spec: TrialSpec, emit: Emit, controls: Controls | None = None) -> TrialResult:
    controls = controls or Controls()
    trial_dir = Path(spec.trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    log_path = trial_dir / "server.log"
    t_start = time.time()
    result = TrialResult(trial=spec.number, host=host.name, status="complete", t_start=t_start, log_path=str(log_path))

    def phase(name: str, detail: str = "") -> None:
        emit(PhaseEvent(trial=spec.number, host=host.name, phase=name, detail=detail))

    phase("starting", redact_log(spec.candidate.short()))  # shown in progress lines: secrets masked
    try:
        port = host.pick_port()
        bind = getattr(host, "server_host", "127.0.0.1")
        python = getattr(host, "python", "python3")
        argv = spec.argv(python, bind, port)
        boot_env = search_boot_env(host, spec.boot_env)
        env = {
            **boot_env,
            **spec.server_env,
            **dict(spec.candidate.env),
            "SGLANG_OPTIMIZER_TRIAL": f"{spec.study}/{spec.number}",
        }
        if "NCCL_DEBUG" not in env and "NCCL_DEBUG" not in os.environ:
            # NCCL says why a collective cannot run only at WARN or above; the fatal-setting rules read that line
            env["NCCL_DEBUG"] = "WARN"
        (trial_dir / "command.sh").write_text(  # a record for humans: secrets masked
            "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in redact_mapping(env).items())
            + redact_log(shlex.join(argv))
            + "\n"
        )
        server = host.start(argv, env, log_path, port)
        server.fast_stop = spec.fast_stop
    except HostError as exc:
        return _finish(result, "host_fault", reason=str(exc), kind="host", log_tail=exc.log_tail)

    try:
        phase("booting")
        try:
            ready = wait_ready(
                server,
                boot_timeout_s=spec.boot_timeout_s,
                dist_init_timeout_s=spec.dist_init_timeout_s,
                poll_s=spec.poll_s,
                t0=t_start,
                cancel=controls.cancel.is_set,
                on_phase=phase,
            )
        except BootError as exc:
            if exc.kind == "cancelled":
                return _finish(result, "cancelled", reason=exc.reason, kind=exc.kind, log_tail=exc.log_tail)
            if exc.kind == "port":
                # Someone else holds the port: the host's fault, not the configuration's.
                return _finish(result, "host_fault", reason=exc.reason, kind="port", log_tail=exc.log_tail)
            return _finish(result, "infeasible", reason=exc.reason, kind=exc.kind, log_tail=exc.log_tail)
        result.boot_s = ready.boot_s
        result.boot_phases = ready.phases
        phase("warming_up", f"ready after {ready.boot_s:.1f} s")

        order = spec.level_order or spec.workload.levels

        def on_chunk(chunk: ChunkResult) -> bool:
            if chunk.index == 0:
                multi = spec.workload.multi_level
                phase("benchmarking", f"concurrency {chunk.level}" if multi and not spec.interleave else "")
            emit(
                ChunkEvent(
                    trial=spec.number,
                    host=host.name,
                    index=chunk.index,
                    tok_per_s=chunk.tok_per_s,
                    completed=chunk.completed,
                    failed=chunk.failed,
                    wall_s=chunk.wall_s,
                    level=chunk.level,
                )
            )
            return not controls.stop_requested() and server.returncode() is None

        stop_event = _EventUnion(controls.prune, controls.cancel)
        bench = run_benchmark(
            server.base_url,
            spec.workload,
            on_chunk=on_chunk,
            cancel=stop_event,  # type: ignore[arg-type]
            order=list(order),
            interleave=spec.interleave,
        )
        _write_records(trial_dir / "bench.json", bench)
        result.records_path = str(trial_dir / "bench.json")
        result.metrics = bench.to_metrics()
        rc = server.returncode()
        if rc is None and bench.failed:
            # Requests failed: a server that crashed may still be on its way out (SGLang kills its process tree
            # after the fatal line). Give it a moment, and believe a fatal line in its log either way: a crashed
            # server's partial throughput must never be recorded as the configuration's.
            deadline = time.time() + 3.0
            while rc is None and time.time() < deadline:
                time.sleep(0.1)
                rc = server.returncode()
        fatal = _crash_line(log_tail(log_path), fatal_only=True) if bench.failed else ""
        if rc is not None or fatal:
            time.sleep(0.2)
            tail = log_tail(log_path)
            line = _crash_line(tail) or f"server exited with status {rc} during the benchmark"
            return _finish(result, "infeasible", reason=f"crash_serving: {line}", kind="crash_serving", log_tail=tail)
        if controls.cancel.is_set():
            return _finish(result, "cancelled", reason="study stopping")
        if bench.completed:  # also for a pruned trial: a misconfiguration is why many trials are slow
            result.metrics.update(probe_server(host, server.base_url, spec, log_path, model=bench.model))
        if controls.prune.is_set() and len(bench.chunks) < spec.workload.chunks * len(order):
            return _finish(result, "pruned")
        if bench.completed == 0:
            reasons = ", ".join(f"{k} x{v}" for k, v in bench.failure_reasons.items())
            return _finish(
                result,
                "infeasible",
                reason=f"serving: no request completed ({reasons})",
                kind="serving",
                log_tail=log_tail(log_path),
            )
        return _finish(result, "complete")
    except HostError as exc:
        # Contact with the host was lost mid-trial: a host fault (re-queued elsewhere), not the configuration's.
        return _finish(result, "host_fault", reason=str(exc), kind="host", log_tail=log_tail(log_path))
    finally:
        phase("stopping_server")
        t_stop = time.time()
        try:
            server.stop(spec.stop_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a stop problem is reported, never raised past the trial
            result.reason = (result.reason + f"; stop: {exc}").strip("; ")
        result.stop_s = round(time.time() - t_stop, 3)
        result.t_end = time.time()
        phase("done", result.status)


def probe_server(host: Host, base_url: str, spec: TrialSpec, log_path: Path, *, model: str = "") -> dict[str, Any]:
    """What the server really runs (and whether it changed a setting asked for), its greedy outputs and the host,
    as metrics recorded with the trial (``optimizer.alarms`` reads them)."""
    from . import alarms, probes
    from .study import records as R

    info = probes.server_info(base_url)
    args = {k: v for k, v in info.items() if not isinstance(v, (dict, list))}
    log_text = log_tail(log_path, 200_000)
    asked = asked_with_search_boot(
        {**alarms.parse_args(spec.extra_args), **dict(spec.candidate.flags)}, spec.boot_flags
    )
    out: dict[str, Any] = {
        alarms.CHANGES_ATTR: alarms.server_changes(
            asked, args, concurrency=max(spec.workload.levels), log_text=log_text
        ),
        alarms.GREEDY_ATTR: probes.greedy_digests(base_url, model or None),
        R.HOST_FACTS: probes.host_facts(getattr(host, "run", None), log_text),
    }
    if args.get("attention_backend"):
        out[alarms.ATTN_ATTR] = args["attention_backend"]
    if info.get("version"):
        out[R.SERVER_VERSION] = str(info["version"])
    return out


class _EventUnion:
    """Looks like a threading.Event that is set when any of its events is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.time() + timeout
        while not self.is_set():
            if deadline is not None and time.time() >= deadline:
                return False
            time.sleep(0.05)
        return True


def _finish(result: TrialResult, status: str, *, reason: str = "", kind: str = "", log_tail: str = "") -> TrialResult:
    result.status = status
    result.reason = reason
    result.kind = kind
    result.log_tail = log_tail
    if status == "infeasible" and result.log_path:
        # lines that may prove one setting fatal (optimizer.sglang.fatal_settings), wherever they sit in the log
        try:
            with open(result.log_path, errors="replace") as fh:
                result.evidence = fatal_settings.evidence(fh)
        except OSError:
            pass
    result.t_end = time.time()
    return result


def _crash_line(tail: str, fatal_only: bool = False) -> str:
    needles = (ILLEGAL_MEMORY_ACCESS, SCHEDULER_EXCEPTION, "out of memory", "Traceback")
    for needle in needles[:3] if fatal_only else needles:
        for line in tail.splitlines():
            if needle in line:
                return line.strip()[:300]
    return ""


def _write_records(path: Path, bench: BenchResult) -> None:
    try:
        data = {"metrics": bench.to_metrics(), "chunks": [asdict(c) for c in bench.chunks]}
        path.write_text(json.dumps(data, default=str))
    except (OSError, TypeError):
        pass
