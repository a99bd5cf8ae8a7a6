"""Where trials run: Ray actors pinned to hosts (the default), or plain threads (no Ray runtime needed).

The driver sees one small interface, :class:`Executor`: ``submit`` a trial to a host, ``prune``/``cancel`` it, and
read events from ``events`` (PhaseEvent, ChunkEvent, then exactly one TrialResult per submitted trial). An actor or
thread that dies becomes a TrialResult with status ``host_fault``: one trial's failure, never the study's.
"""

from __future__ import annotations

import os
import queue
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from . import signals
from .errors import ConfigError
from .events import TrialResult
from .hosts import _proc
from .hosts.config import HostConfig
from .hosts.factory import make_host
from .hosts.local import LocalHost
from .trial import Controls, TrialSpec, run_trial


class EventSource(Protocol):
    def get(self, timeout: float | None = None) -> Any:
        """The next PhaseEvent, ChunkEvent or TrialResult; raises ``queue.Empty`` after ``timeout`` seconds."""
        ...


@runtime_checkable
class Executor(Protocol):
    """What the driver needs from the place trials run (``RayExecutor``, ``ThreadExecutor`` and the simulated
    cluster ``optimizer.simexec.ModelExecutor``)."""

    events: EventSource

    def host_names(self) -> list[str]: ...

    def submit(self, host: str, spec: TrialSpec) -> None:
        """Start a trial on an idle host; its events arrive on ``events``, ending with one TrialResult."""
        ...

    def prune(self, trial: int) -> None:
        """Stop a running trial now; its TrialResult says ``pruned``."""
        ...

    def cancel_all(self) -> None:
        """Ctrl-C: stop every running trial (servers stopped gracefully); each still sends its TrialResult."""
        ...

    def kill_servers(self, timeout_s: float = 10.0) -> None:
        """A second Ctrl-C: kill the servers at once."""
        ...

    def reap_orphans(self) -> dict[str, list[int]]:
        """Stop servers a previous run left on each host; host -> process groups stopped."""
        ...

    def join(self, timeout_s: float) -> None: ...

    def shutdown(self) -> None: ...


def _safe_run(host: Any, spec: TrialSpec, emit: Any, controls: Controls) -> TrialResult:
    try:
        return run_trial(host, spec, emit, controls)
    except Exception as exc:  # noqa: BLE001 - a bug or host problem must not take the study down
        return TrialResult(
            trial=spec.number,
            host=getattr(host, "name", "?"),
            status="host_fault",
            kind="error",
            reason=f"{type(exc).__name__}: {exc}",
            log_tail=traceback.format_exc()[-3000:],
        )


def _kill_current(host: Any) -> None:
    """Kill the server a host runs right now, at once (a forced stop: a second Ctrl-C)."""
    cur = getattr(host, "_current", None)
    if cur is None or getattr(cur, "_stopped", False):
        return
    if isinstance(host, LocalHost):
        _proc.stop_group(int(cur.pgid), 0.0)  # no lock: the trial's own stop() may hold it
        return
    cur.stop(0.0)


class ThreadExecutor:
    """Runs each trial in a thread of this process. For one machine without Ray, and for GPU hosts where the Ray
    wheel cannot be brought."""

    def __init__(self, hosts: list[HostConfig], state_dir: Path) -> None:
        self.events: queue.Queue = queue.Queue()
        self.configs = {h.name: h for h in hosts}
        self.hosts = {h.name: make_host(h, state_dir / "hosts" / h.name) for h in hosts}
        self.controls: dict[int, Controls] = {}
        self.threads: dict[int, threading.Thread] = {}

    def host_names(self) -> list[str]:
        return list(self.hosts)

    def submit(self, host: str, spec: TrialSpec) -> None:
        controls = Controls()
        self.controls[spec.number] = controls

        def work() -> None:
            self.events.put(_safe_run(self.hosts[host], spec, self.events.put, controls))

        th = threading.Thread(target=work, name=f"trial-{spec.number}", daemon=True)
        self.threads[spec.number] = th
        th.start()

    def prune(self, trial: int) -> None:
        if trial in self.controls:
            self.controls[trial].prune.set()

    def cancel_all(self) -> None:
        for c in self.controls.values():
            c.cancel.set()

    def kill_servers(self, timeout_s: float = 10.0) -> None:
        ths = [threading.Thread(target=_kill_current, args=(h,), daemon=True) for h in self.hosts.values()]
        for th in ths:
            th.start()
        for th in ths:
            th.join(timeout_s)

    def reap_orphans(self) -> dict[str, list[int]]:
        out = {}
        for name, host in self.hosts.items():
            try:
                out[name] = host.reap_orphans()
            except Exception as exc:  # noqa: BLE001
                out[name] = [f"error: {exc}"]  # type: ignore[list-item]
        return out

    def join(self, timeout_s: float) -> None:
        for th in list(self.threads.values()):
            th.join(timeout_s)

    def shutdown(self) -> None:
        for host in self.hosts.values():
            try:
                host.close()
            except Exception:  # noqa: BLE001
                pass


def _host_resource(name: str) -> str:
    return f"host:{name}"


def _outlives_the_job(state_dir: Path) -> None:
    """A ``ray job submit --working-dir`` entrypoint runs in Ray's copy of that directory (under the session's
    ``runtime_resources/``), which Ray deletes once no job uses it: a study written there would be lost."""
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ and "runtime_resources" in Path(state_dir).resolve().parts:
        raise ConfigError(
            f"the study would be written into Ray's temporary copy of the job's working dir ({state_dir}), which "
            "Ray deletes; give an absolute --studies-dir on this node (docs/ray-jobs.md)",
            key="--studies-dir",
        )


class RayExecutor:
    """One Ray actor per host, placed through a custom resource ``host:<name>`` so Ray itself never puts two
    servers on one host. On a Ray cluster, start each GPU node with ``--resources '{"host:<name>": 1}'`` and give
    it a ``type: local`` entry in the hosts file: its actor then runs on the GPU node and starts the server there.
    SSH hosts' actors run wherever the resource is (by default on the driver's node)."""

    def __init__(
        self, hosts: list[HostConfig], state_dir: Path, *, address: str | None = None, num_cpus: int = 2
    ) -> None:
        import ray

        self.ray = ray
        self.events: queue.Queue = queue.Queue()
        self.configs = {h.name: h for h in hosts}
        self.state_dir = state_dir
        _outlives_the_job(state_dir)
        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS")  # set for a `ray job submit` entrypoint
            if address:
                ray.init(address=address, log_to_driver=False)
                self._ensure_resources(hosts)
            else:
                ray.init(
                    num_cpus=num_cpus,
                    resources={_host_resource(h.name): 1 for h in hosts},
                    include_dashboard=False,
                    log_to_driver=False,
                )
            signals.reclaim()  # ray.init put its own SIGTERM handlers in this process
        else:
            self._ensure_resources(hosts)
        self.actors: dict[str, Any] = {}
        self.running: dict[int, str] = {}
        self.lock = threading.Lock()
        for h in hosts:
            self.actors[h.name] = self._new_actor(h)

    def _ensure_resources(self, hosts: list[HostConfig]) -> None:
        have = self.ray.cluster_resources()
        missing = [h.name for h in hosts if _host_resource(h.name) not in have]
        if missing:
            raise ConfigError(
                "the running Ray runtime has no resource for hosts "
                + ", ".join(missing)
                + "; start it with resources={'host:<name>': 1} for each host (on a cluster: "
                + f"ray start ... --resources '{{\"host:{missing[0]}\": 1}}' on the node that runs its server)",
                key="--ray-address",
            )

    def _new_actor(self, cfg: HostConfig) -> Any:
        actor_cls = self.ray.remote(HostActor)
        return actor_cls.options(
            num_cpus=0,
            resources={_host_resource(cfg.name): 1},
            max_concurrency=4,
            name=None,
            max_restarts=0,
        ).remote(cfg.model_dump(), str(self.state_dir / "hosts" / cfg.name))

    def host_names(self) -> list[str]:
        return list(self.actors)

    def submit(self, host: str, spec: TrialSpec) -> None:
        actor = self.actors[host]
        with self.lock:
            self.running[spec.number] = host
        gen = actor.run.options(num_returns="streaming").remote(spec)
        threading.Thread(target=self._pump, args=(host, spec, gen), name=f"pump-{spec.number}", daemon=True).start()

    def _pump(self, host: str, spec: TrialSpec, gen: Any) -> None:
        got_result = False
        try:
            for ref in gen:
                ev = self.ray.get(ref)
                if isinstance(ev, TrialResult):
                    got_result = True
                self.events.put(ev)
        except Exception as exc:  # noqa: BLE001 - RayActorError, worker crash, ...
            # Replace the actor before the driver hears of the fault (it re-queues the trial on this host at once),
            # and let the new actor stop the server the dead one left running (found through its pid file).
            with self.lock:
                try:
                    self.ray.kill(self.actors[host], no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
                self.actors[host] = new = self._new_actor(self.configs[host])
            try:
                reaped = self.ray.get(new.reap_orphans.remote(), timeout=120)
            except Exception as reap_exc:  # noqa: BLE001
                reaped = [f"error: {reap_exc}"]
            if not got_result:
                stopped = f" (its server was stopped: {reaped})" if reaped else ""
                reason = f"Ray actor for host {host} died{stopped}: {type(exc).__name__}: {exc}"
                self.events.put(
                    TrialResult(trial=spec.number, host=host, status="host_fault", kind="actor_died", reason=reason)
                )
        finally:
            with self.lock:
                self.running.pop(spec.number, None)

    def prune(self, trial: int) -> None:
        host = self.running.get(trial)
        if host:
            self.actors[host].prune.remote(trial)

    def cancel_all(self) -> None:
        for actor in self.actors.values():
            try:
                actor.cancel.remote()
            except Exception:  # noqa: BLE001
                pass

    def kill_servers(self, timeout_s: float = 10.0) -> None:
        try:
            self.ray.get([a.kill_server.remote() for a in self.actors.values()], timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a forced stop does what it can
            pass

    def reap_orphans(self) -> dict[str, list[int]]:
        refs = {name: a.reap_orphans.remote() for name, a in self.actors.items()}
        out = {}
        for name, ref in refs.items():
            try:
                out[name] = self.ray.get(ref, timeout=120)
            except Exception as exc:  # noqa: BLE001
                out[name] = [f"error: {exc}"]
        return out

    def join(self, timeout_s: float) -> None:
        import time

        deadline = time.time() + timeout_s
        while self.running and time.time() < deadline:
            time.sleep(0.1)

    def shutdown(self) -> None:
        for actor in self.actors.values():
            try:
                self.ray.get(actor.close.remote(), timeout=30)
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass


class HostActor:
    """The Ray actor around one host. ``run`` streams a trial's events; ``prune``/``cancel`` reach it while it
    runs (the actor is threaded)."""

    def __init__(self, cfg: dict, state_dir: str) -> None:
        self.host = make_host(HostConfig(**cfg), Path(state_dir))
        self.controls: dict[int, Controls] = {}

    def run(self, spec: TrialSpec) -> Iterator[Any]:
        q: queue.Queue = queue.Queue()
        controls = Controls()
        self.controls[spec.number] = controls
        th = threading.Thread(
            target=lambda: q.put(("result", _safe_run(self.host, spec, q.put, controls))), daemon=True
        )
        th.start()
        try:
            while True:
                item = q.get()
                if isinstance(item, tuple) and item and item[0] == "result":
                    yield item[1]
                    return
                yield item
        finally:
            self.controls.pop(spec.number, None)

    def prune(self, trial: int) -> None:
        if trial in self.controls:
            self.controls[trial].prune.set()

    def cancel(self) -> None:
        for c in self.controls.values():
            c.cancel.set()

    def reap_orphans(self) -> list[int]:
        return self.host.reap_orphans()

    def kill_server(self) -> None:
        _kill_current(self.host)

    def close(self) -> None:
        self.host.close()
