"""The driver: owns the Optuna study (the only writer of storage), asks for candidates, hands them to idle hosts,
reports chunks, prunes, records results, and resumes a study a dead run left behind.

What it adds to plain TPE, each of which saves restarts:
- the baseline (no speculation) is measured first, and SGLang's own default triple second (a strong prior);
- candidates SGLang would reject, or whose tree breaks its runtime limit, are recorded as constraint violations
  without a launch;
- a candidate equal, after SGLang's normalisation, to one already measured is not launched again;
- configurations that crash, run out of memory or hang are constraint violations (the sampler avoids them), not
  FAILs (TPE ignores FAILs and would suggest them again);
- host faults re-queue the trial on another host and never mark the configuration.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from . import __version__, rules
from .candidate import Candidate
from .events import ChunkEvent, PhaseEvent, TrialResult
from .hosts.config import HostConfig
from .pruning import BASELINE_ATTR, make_pruner
from .redact import redact_mapping, redact_text
from .settings import StudyConfig
from .sglang import fatal_settings
from .space import NONE_ALGO, SearchSpace
from .trial import TrialSpec

MAX_HOST_FAULTS = 3  # consecutive faults before a host is quarantined
MAX_REQUEUES = 1  # a trial hit by a host fault (dead actor, lost host) is re-queued once, then failed
MAX_IDLE_ASKS = 200  # asks in a row that launch nothing: the space is exhausted


def open_storage(url: str) -> Any:
    """A journal file (``*.log``/``*.jsonl``/plain path) or any SQLAlchemy URL."""
    if "://" in url:
        return url
    path = Path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def claim_study(cfg: StudyConfig) -> list[str]:
    """One driver per study. Refuse to run a study another live driver on this machine runs (it would reap that
    driver's servers); when the previous driver is dead (e.g. SIGKILLed while it wrote to the journal), remove
    the journal lock it may have left, which would otherwise stall every write for Optuna's 30 s grace period.
    Returns notes on what was cleaned up."""
    import socket

    from .errors import OptimizerError
    from .hosts import _proc

    path = cfg.study_dir / "driver.json"
    me = {
        "pid": os.getpid(),
        "start_time": _proc.start_time(os.getpid()),
        "boot_id": _proc.boot_id(),
        "hostname": socket.gethostname(),
    }
    try:
        prev = json.loads(path.read_text())
        if not isinstance(prev, dict):
            prev = None
    except (OSError, ValueError):
        prev = None
    notes: list[str] = []
    same_machine = prev is not None and prev.get("hostname") == me["hostname"] and prev.get("boot_id") == me["boot_id"]
    if prev is not None and not same_machine:
        return notes  # the study's last driver ran elsewhere: its liveness (and the lock) cannot be judged here
    if prev is not None:
        try:
            pid = int(prev["pid"])
        except (KeyError, TypeError, ValueError):
            pid = -1
        if (
            pid > 0
            and pid != me["pid"]
            and prev.get("start_time") is not None
            and _proc.start_time(pid) == prev.get("start_time")
        ):
            raise OptimizerError(
                f"study {cfg.study!r} is being run by another driver (pid {pid}); stop it first or use another --study"
            )
    if "://" not in cfg.storage_url:
        lock = Path(cfg.storage_url + ".lock")
        if os.path.lexists(lock):
            lock.unlink(missing_ok=True)
            notes.append(f"removed the journal lock {lock} a dead driver left")
    write_json(path, me)
    return notes


def make_sampler(cfg: StudyConfig) -> optuna.samplers.BaseSampler:
    s = cfg.sampler
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    if s.name == "tpe-plain":
        return optuna.samplers.TPESampler(seed=s.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # `gamma` is deprecated in Optuna 5 (removed in 6)
        return optuna.samplers.TPESampler(
            seed=s.seed,
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=s.n_startup_trials,
            gamma=_gamma_with_baseline,
        )


def _gamma_with_baseline(n: int) -> int:
    """Optuna's default split plus one: the parameterless baseline trial often sits in TPE's 'good' set early
    on (untuned speculation is slower than no speculation) and teaches it nothing. Measured on the simulator's
    profiles over 120 seeds: Kimi's median restarts to 98 % fell by 3-5, the others did not change."""
    return min(math.ceil(0.1 * n), 25) + 1


def load_or_create(cfg: StudyConfig, *, sampler: Any = None, pruner: Any = None) -> optuna.Study:
    import warnings

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna.create_study(
        study_name=cfg.study,
        storage=open_storage(cfg.storage_url),
        sampler=sampler or make_sampler(cfg),
        pruner=pruner
        or make_pruner(
            cfg.pruner.name,
            p_threshold=cfg.pruner.p_threshold,
            n_startup_steps=cfg.pruner.n_startup_steps,
            n_startup_trials=cfg.pruner.n_startup_trials,
            min_gap=cfg.pruner.min_gap,
        ),
        direction="maximize",
        load_if_exists=True,
    )


def feasible(t: optuna.trial.FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and t.value is not None and all(v <= 0 for v in t.constraints.values())


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    done = [t for t in study.get_trials(deepcopy=False) if feasible(t) and not t.user_attrs.get("duplicate_of")]
    return max(done, key=lambda t: t.value) if done else None  # type: ignore[arg-type, return-value]


def baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(BASELINE_ATTR) and feasible(t) and not t.user_attrs.get("duplicate_of"):
            return t
    return None


@dataclass
class Active:
    trial: optuna.Trial
    candidate: Candidate
    key: str
    spec: TrialSpec
    host: str | None = None
    requeues: int = 0
    tried_hosts: set[str] = field(default_factory=set)
    #: Chunks already reported. A trial re-run after a host fault keeps its first attempt's values (Optuna
    #: takes one value per step); the retry's chunks still drive pruning through them.
    reported: set[int] = field(default_factory=set)


class Progress:
    """Plain log lines; ``optimizer.progress.RichProgress`` draws the same events as a live table."""

    def __init__(self, printer: Callable[[str], None] = print) -> None:
        self.print = printer

    def start(self, driver: Driver) -> None:
        self.print(
            f"study {driver.cfg.study}: {driver.budget_left()} launches left on "
            f"{len(driver.hosts)} host(s); storage {driver.cfg.storage_url}"
        )

    def event(self, driver: Driver, ev: Any) -> None:
        if isinstance(ev, PhaseEvent) and ev.phase in ("starting", "warming_up", "benchmarking"):
            self.print(f"[{ev.host}] trial {ev.trial}: {ev.phase} {ev.detail}".rstrip())
        elif isinstance(ev, ChunkEvent):
            self.print(f"[{ev.host}] trial {ev.trial}: chunk {ev.index} {ev.tok_per_s:.1f} tok/s")

    def finished(self, driver: Driver, frozen: optuna.trial.FrozenTrial) -> None:
        ua = frozen.user_attrs
        value = f"{frozen.value:.1f} tok/s" if frozen.value is not None and feasible(frozen) else ""
        self.print(
            f"trial {frozen.number} {ua.get('outcome', frozen.state.name.lower())}: {ua.get('config', '')} "
            f"{value} {ua.get('failure_reason', '')}".rstrip()
        )

    def note(self, driver: Driver, text: str) -> None:
        self.print(text)

    def stop(self, driver: Driver) -> None:
        pass


class Driver:
    def __init__(
        self,
        cfg: StudyConfig,
        space: SearchSpace,
        hosts: list[HostConfig],
        executor: Any,
        *,
        progress: Progress | None = None,
        study: optuna.Study | None = None,
    ) -> None:
        self.cfg = cfg
        self.space = space
        self.hosts = hosts
        self.executor = executor
        self.progress = progress or Progress()
        self.study = study or load_or_create(cfg)
        self.arch = space.model.architecture
        self.active: dict[int, Active] = {}
        self.pending: list[Active] = []  # asked (or re-queued) trials waiting for a host
        self.waiting_dups: list[Active] = []  # duplicates of a running trial: told when it finishes
        self.busy: dict[str, int] = {}  # host -> trial number
        self.faults: dict[str, int] = {h.name: 0 for h in hosts}
        self.quarantined: set[str] = set()
        self.t0 = time.time()
        self.stopping = False
        self.interrupts = 0
        self.idle_asks = 0
        self.baseline_due = False
        self.warm_due = False
        self.host_phase: dict[str, tuple[str, int | None, float]] = {}
        self.boot_times: list[float] = []
        self.bench_times: list[float] = []

    # ------------------------------------------------------------------ bookkeeping
    def launched(self) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("launched"))

    def budget_left(self) -> int:
        return max(0, self.cfg.budget.trials - self.launched() - len(self.active))

    def time_left(self) -> bool:
        return self.cfg.budget.time_s is None or time.time() - self.t0 < self.cfg.budget.time_s

    def measured_keys(self) -> dict[str, optuna.trial.FrozenTrial]:
        out = {}
        for t in self.study.get_trials(deepcopy=False):
            key = t.user_attrs.get("candidate_key")
            if key and t.state in (TrialState.COMPLETE, TrialState.PRUNED) and not t.user_attrs.get("duplicate_of"):
                out.setdefault(key, t)
        return out

    # ------------------------------------------------------------------ start / resume
    def prepare(self) -> None:
        """Resume what a dead run left: its RUNNING trials are re-queued, its servers stopped."""
        study = self.study
        attrs = study.user_attrs
        if "optimizer_version" not in attrs:
            study.set_user_attr("optimizer_version", __version__)
            study.set_user_attr("server_command", redact_text(" ".join(self.cfg.server.command)))
            study.set_user_attr("space", self.cfg.space)
            study.set_user_attr("workload", self.cfg.workload.model_dump(mode="json"))
            study.set_user_attr("created", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        requeued = 0
        # Re-queue before marking FAIL, and never twice: a driver killed in between leaves a RUNNING trial whose
        # re-queued copy already exists, and the next run only marks it.
        already = {t.user_attrs.get("requeued_from") for t in study.get_trials(deepcopy=False)}
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.number in self.active:
                continue
            if t.user_attrs.get(BASELINE_ATTR):
                requeued += 1  # asked again below: the baseline has no parameters to enqueue
            elif t.params and not t.user_attrs.get("requeued_from"):
                if t.number not in already:
                    study.enqueue_trial(t.params, user_attrs={"requeued_from": t.number})
                requeued += 1
            trial = optuna.Trial(study, t._trial_id)
            trial.set_user_attr("outcome", "interrupted")
            trial.set_user_attr("failure_reason", "the driver stopped while this trial ran; re-queued")
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
        if requeued:
            self.progress.note(self, f"resumed: {requeued} interrupted trial(s) re-queued")
        reaped = self.executor.reap_orphans()
        for host, pgids in reaped.items():
            if pgids:
                self.progress.note(self, f"[{host}] stopped {len(pgids)} server(s) left by a previous run: {pgids}")
        trials = study.get_trials(deepcopy=False)
        has_baseline = any(t.user_attrs.get(BASELINE_ATTR) and t.state != TrialState.FAIL for t in trials)
        # The baseline is a trial without parameters (so the sampler never searches 'no speculation' unless the
        # space lists 'none'): asked first, before the sampler's first suggestion.
        self.baseline_due = self.space.model.baseline and not has_baseline
        self.warm_due = not trials
        if not self.baseline_due:
            self._enqueue_warm_start()

    def _enqueue_warm_start(self) -> None:
        """The study's ``initial`` configurations, then SGLang's own default triple (TPE only)."""
        if self.warm_due:
            self.warm_due = False
            for i, params in enumerate(self.cfg.initial):
                self.study.enqueue_trial(dict(params), user_attrs={"warm_start": f"initial[{i}]"})
            warm = self._sglang_default_params() if self.cfg.sampler.name == "tpe" else None
            if warm:
                self.study.enqueue_trial(warm, user_attrs={"warm_start": "sglang auto default"})

    def _sglang_default_params(self) -> dict[str, Any] | None:
        """SGLang's own auto triple for the architecture, if the space contains it: a strong first guess."""
        params = self.space.params
        algo = params.get(rules.ALGO)
        choices = [c for c in getattr(algo, "choices", []) if str(c).lower() != NONE_ALGO]
        if not choices:
            return None
        steps, topk, draft = rules.auto_triple(self.arch, rules.algorithm({rules.ALGO: choices[0]}))
        out: dict[str, Any] = {k: v for k, v in self.space.baseline_params().items() if k != rules.ALGO}
        out[rules.ALGO] = choices[0]
        for name, value in ((rules.STEPS, steps), (rules.TOPK, topk), (rules.DRAFT, draft)):
            p = params.get(name)
            if p is None or (name == rules.DRAFT and topk == 1):
                continue
            if value not in p.values():
                return None
            out[name] = value
        return out

    # ------------------------------------------------------------------ main loop
    def run(self) -> optuna.Study:
        self.prepare()
        self.progress.start(self)
        old = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:
            old = None  # not the main thread
        try:
            self._loop()
        except KeyboardInterrupt:
            self.force_stop()
            raise
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
            self.progress.stop(self)
        return self.study

    def force_stop(self, reason: str = "forced stop (second Ctrl-C) while this trial ran; re-queued") -> None:
        """A second Ctrl-C: kill the servers now; record running trials as interrupted and re-queue them (as the
        next run would for a driver that died). Also ends a stop with trials still waiting for a host."""
        self.stopping = True
        kill = getattr(self.executor, "kill_servers", None)
        if kill is not None:
            kill()
        for a in [*self.active.values(), *self.pending]:
            t = a.trial
            if not a.spec.protected and t.params and not t.user_attrs.get("requeued_from"):
                self.study.enqueue_trial(t.params, user_attrs={"requeued_from": t.number})
            t.set_user_attr("outcome", "interrupted")
            t.set_user_attr("failure_reason", reason)
            self.study.tell(t, state=TrialState.FAIL, skip_if_finished=True)
        self.active.clear()
        self.pending.clear()

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.interrupts += 1
        if self.interrupts >= 2:
            raise KeyboardInterrupt
        self.stopping = True
        self.progress.note(
            self, "stopping: servers are being stopped and running trials recorded (Ctrl-C again to force)"
        )
        self.executor.cancel_all()

    def _free_hosts(self) -> list[str]:
        return [h.name for h in self.hosts if h.name not in self.busy and h.name not in self.quarantined]

    def _loop(self) -> None:
        while True:
            if not self.stopping:
                self._fill_hosts()
            if not self.active and not self.pending:
                break
            if self.stopping and not self.active:  # stopping: trials waiting for a host will not get one
                self.force_stop("the study stopped before this trial got a host; re-queued")
                break
            if not self.active and self.pending and not self._free_hosts():
                self.progress.note(self, "every host is quarantined: stopping")
                for a in self.pending:
                    self._tell_fail(a, "no usable host left (all quarantined)")
                self.pending.clear()
                break
            try:
                ev = self.executor.events.get(timeout=0.2)
            except queue.Empty:
                continue
            self._handle(ev)
        for a in self.waiting_dups:
            self._tell_fail(a, "its original trial did not finish")
        self.waiting_dups.clear()

    def _fill_hosts(self) -> None:
        while self._free_hosts():
            if self.pending:
                a = self._take_pending()
                if a is None:
                    return
            else:
                if self.budget_left() <= 0 or not self.time_left() or self.idle_asks >= MAX_IDLE_ASKS:
                    return
                a = self._ask()
                if a is None:
                    continue
            self._dispatch(a)

    def _take_pending(self) -> Active | None:
        free = self._free_hosts()
        for i, a in enumerate(self.pending):
            if any(h not in a.tried_hosts for h in free) or len(self.hosts) == 1 or a.tried_hosts >= set(free):
                return self.pending.pop(i)
        return None

    def _ask(self) -> Active | None:
        """Ask the sampler for a candidate; settle it at once if it needs no launch."""
        trial = self.study.ask()
        if self.baseline_due:
            self.baseline_due = False
            cand = self.space.baseline()
            trial.set_user_attr(BASELINE_ATTR, True)
            trial.set_user_attr("baseline_params", self.space.baseline_params())
            self._enqueue_warm_start()  # after the baseline's ask, which would otherwise take the queued trial
        else:
            cand = self.space.suggest(trial)
        key = cand.key(architecture=self.arch)
        # 'config' feeds progress lines, notes, summary.json and the dashboard: mask secret-named env values.
        from .notes import redact_log

        trial.set_user_attr("config", redact_log(self.space.describe(cand)))
        trial.set_user_attr("candidate_key", key)
        trial.set_user_attr("flags", redact_mapping(dict(cand.flags)))
        trial.set_user_attr("env", redact_mapping(dict(cand.env)))
        if cand.is_baseline:
            trial.set_user_attr(BASELINE_ATTR, True)
        number = trial.number
        spec = TrialSpec(
            number=number,
            candidate=cand,
            command=list(self.cfg.server.command),
            workload=self.cfg.workload,
            trial_dir=str(self.cfg.study_dir / "trials" / str(number)),
            extra_args=list(self.cfg.server.extra_args),
            server_env=dict(self.cfg.server.env),
            boot_timeout_s=self.cfg.server.boot_timeout_s,
            poll_s=self.cfg.server.poll_s,
            stop_timeout_s=self.cfg.server.stop_timeout_s,
            study=self.cfg.study,
            protected=cand.is_baseline,
        )
        a = Active(trial=trial, candidate=cand, key=key, spec=spec)
        if self.cfg.precheck:
            checks = self.space.checks(cand, gpu_sm=self.cfg.gpu_sm)
            if any(c.value > 0 for c in checks):
                reason = "; ".join(c.reason for c in checks if c.value > 0)
                self._tell_infeasible(a, reason, kind="precheck", checks={c.name: c.value for c in checks})
                self.idle_asks += 1
                return None
        learned = self._learned_fatal(cand)
        if learned is not None:
            t_no, setting = learned
            a.trial.set_user_attr("skipped_for_fatal", {**setting, "trial": t_no})
            reason = f"{setting['name']}={setting['value']} was fatal in trial {t_no} ({setting['line']}); not launched again"
            self._tell_infeasible(a, reason, kind="learned_fatal", checks={"learned_fatal": 1.0})
            self.idle_asks += 1
            return None
        if self.cfg.dedup:
            done = self.measured_keys().get(key)
            if done is not None:
                self._tell_duplicate(a, done)
                self.idle_asks += 1
                return None
            if any(o.key == key for o in self.active.values()):
                self.waiting_dups.append(a)
                self.idle_asks += 1
                return None
        self.idle_asks = 0
        return a

    def _learned_fatal(self, cand: Candidate) -> tuple[int, dict[str, str]] | None:
        """A setting an earlier launch proved fatal on its own, if this candidate holds it (from storage, so a
        resumed study keeps what it learned)."""
        for t in self.study.get_trials(deepcopy=False):
            setting = t.user_attrs.get("fatal_setting")
            if setting and fatal_settings.holds(setting, cand.flags, cand.env):
                return t.number, setting
        return None

    def _dispatch(self, a: Active) -> None:
        free = self._free_hosts()
        preferred = [h for h in free if h not in a.tried_hosts] or free
        host = preferred[0]
        a.host = host
        a.tried_hosts.add(host)
        self.busy[host] = a.trial.number
        self.active[a.trial.number] = a
        a.trial.set_user_attr("host", host)
        self.host_phase[host] = ("starting", a.trial.number, time.time())
        self.executor.submit(host, a.spec)

    # ------------------------------------------------------------------ events
    def _handle(self, ev: Any) -> None:
        if isinstance(ev, PhaseEvent):
            self.host_phase[ev.host] = (ev.phase, ev.trial, ev.t)
        elif isinstance(ev, ChunkEvent):
            a = self.active.get(ev.trial)
            if a is not None and ev.tok_per_s == ev.tok_per_s:
                if ev.index not in a.reported:
                    a.trial.report(ev.tok_per_s, step=ev.index)
                    a.reported.add(ev.index)
                # Pruning at the last chunk saves nothing and would throw the finished measurement away.
                last = ev.index >= a.spec.workload.chunks - 1
                if not a.spec.protected and not self.stopping and not last and a.trial.should_prune():
                    a.trial.set_user_attr("pruned_at_chunk", ev.index)
                    self.executor.prune(ev.trial)
        elif isinstance(ev, TrialResult):
            self._finish(ev)
        self.progress.event(self, ev)

    def _finish(self, r: TrialResult) -> None:
        a = self.active.pop(r.trial, None)
        if self.busy.get(r.host) == r.trial:
            del self.busy[r.host]
        self.host_phase[r.host] = ("idle", None, time.time())
        if a is None:
            return
        if r.status == "host_fault":
            self.faults[r.host] = self.faults.get(r.host, 0) + 1
            if self.faults[r.host] >= MAX_HOST_FAULTS:
                self.quarantined.add(r.host)
                self.progress.note(self, f"[{r.host}] quarantined after {self.faults[r.host]} host faults: {r.reason}")
            a.trial.set_user_attr(f"host_fault_{a.requeues}", f"{r.host}: {r.reason}"[:500])
            if a.requeues < MAX_REQUEUES and not self.stopping:
                a.requeues += 1
                self.pending.append(a)
                self.progress.note(self, f"[{r.host}] host fault on trial {r.trial} ({r.reason}); re-queued")
            else:
                self._tell_fail(a, f"host fault: {r.reason}", r)
            return
        self.faults[r.host] = 0
        self._record_common(a, r)
        if r.status == "complete":
            value = float(r.metrics.get("tok_per_s") or 0.0)
            a.trial.set_user_attr("outcome", "complete")
            a.trial.set_constraint("server", 0.0)
            a.trial.set_user_attr("constraint:server", 0.0)
            self.study.tell(a.trial, value)
            if a.spec.protected and not self.study.user_attrs.get("baseline_tok_per_s"):
                self.study.set_user_attr("baseline_tok_per_s", value)
                self.study.set_user_attr("baseline_trial", a.trial.number)
        elif r.status == "pruned":
            a.trial.set_user_attr("outcome", "pruned")
            self.study.tell(a.trial, state=TrialState.PRUNED)
        elif r.status == "infeasible":
            self._tell_infeasible(a, r.reason, kind=r.kind, result=r)
        else:  # cancelled
            self._tell_fail(a, r.reason or "cancelled", r)
        self._settle_duplicates(a)
        if r.status in ("complete", "pruned"):  # _tell_infeasible and _tell_fail annotate and print themselves
            self._after_tell(a)

    def _record_common(self, a: Active, r: TrialResult) -> None:
        t = a.trial
        t.set_user_attr("launched", True)
        t.set_user_attr("t_start", r.t_start)
        t.set_user_attr("t_end", r.t_end)
        t.set_user_attr("host", r.host)
        if r.boot_s is not None:
            t.set_user_attr("boot_s", r.boot_s)
            t.set_user_attr("boot_phases", r.boot_phases)
            self.boot_times.append(r.boot_s)
        for k, v in (r.metrics or {}).items():
            if v is not None and not (isinstance(v, float) and v != v):
                t.set_user_attr(k, v)
        if r.metrics:
            self.bench_times.append(max(0.0, r.t_end - r.t_start - (r.boot_s or 0.0)))
        if r.log_path:
            t.set_user_attr("log_path", r.log_path)
        if r.records_path:
            t.set_user_attr("records_path", r.records_path)

    def _tell_infeasible(
        self,
        a: Active,
        reason: str,
        *,
        kind: str,
        result: TrialResult | None = None,
        checks: dict[str, float] | None = None,
    ) -> None:
        t = a.trial
        t.set_user_attr("outcome", "infeasible")
        t.set_user_attr("failure_kind", kind)
        t.set_user_attr("failure_reason", reason[:2000])
        if result is not None and result.log_tail:
            t.set_user_attr("log_tail", result.log_tail[-3000:])
        if result is not None:
            lines = [*result.evidence, *result.log_tail.splitlines()]
            setting = fatal_settings.blame(lines, a.candidate.flags, a.candidate.env)
            if setting is not None:
                t.set_user_attr("fatal_setting", setting)
                self.progress.note(
                    self,
                    f"trial {t.number}: {setting['name']}={setting['value']} is fatal on its own "
                    f"({setting['line'][:160]}); candidates holding it will not be launched",
                )
        if self.cfg.infeasible_as == "fail":
            self.study.tell(t, state=TrialState.FAIL)
            self._after_tell(a)
            return
        constraints = dict(checks or {})
        if not checks:
            constraints["server"] = 1.0
        for name, value in constraints.items():
            t.set_constraint(name, value)
            # optuna-dashboard 0.21 does not show set_constraint: mirror it.
            t.set_user_attr(f"constraint:{name}", value)
        self.study.tell(t, 0.0)
        self._after_tell(a)

    def _tell_duplicate(self, a: Active, original: optuna.trial.FrozenTrial) -> None:
        t = a.trial
        t.set_user_attr("duplicate_of", original.number)
        t.set_user_attr("outcome", "duplicate")
        if original.state == TrialState.PRUNED:
            for step, v in original.intermediate_values.items():
                t.report(v, step=step)
            self.study.tell(t, state=TrialState.PRUNED)
        else:
            for name, value in original.constraints.items():
                t.set_constraint(name, value)
                t.set_user_attr(f"constraint:{name}", value)
            self.study.tell(t, original.value)
        self._after_tell(a)

    def _tell_fail(self, a: Active, reason: str, r: TrialResult | None = None) -> None:
        a.trial.set_user_attr("outcome", "failed")
        a.trial.set_user_attr("failure_reason", reason[:2000])
        if r is not None and r.log_tail:
            a.trial.set_user_attr("log_tail", r.log_tail[-3000:])
        self.study.tell(a.trial, state=TrialState.FAIL, skip_if_finished=True)
        self._after_tell(a)

    def _settle_duplicates(self, original: Active) -> None:
        frozen = self.study.get_trials(deepcopy=False)[original.trial.number]
        for d in [d for d in self.waiting_dups if d.key == original.key]:
            self.waiting_dups.remove(d)
            if frozen.state in (TrialState.COMPLETE, TrialState.PRUNED):
                self._tell_duplicate(d, frozen)
            else:
                self._tell_fail(d, f"duplicate of trial {frozen.number}, which did not finish")

    def _after_tell(self, a: Active) -> None:
        frozen = self.study.get_trials(deepcopy=False)[a.trial.number]
        try:
            from .notes import annotate

            annotate(self.study, frozen, self.cfg)
        except ImportError:
            pass
        except Exception as exc:  # noqa: BLE001 - notes are a convenience, never a failure
            self.progress.note(self, f"note for trial {frozen.number} not written: {exc}")
        self.progress.finished(self, frozen)

    # ------------------------------------------------------------------ summary
    def eta_s(self) -> float | None:
        if not self.boot_times:
            return None
        per_trial = sum(self.boot_times) / len(self.boot_times) + (
            sum(self.bench_times) / len(self.bench_times) if self.bench_times else 0.0
        )
        usable = max(1, len(self.hosts) - len(self.quarantined))
        return per_trial * (self.budget_left() / usable)


def summary_rows(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        rows.append(
            {
                "trial": t.number,
                "config": ua.get("config", ""),
                "outcome": ua.get("outcome", t.state.name.lower()),
                "tok_per_s": t.value if feasible(t) else None,
                "accept_length": ua.get("accept_length"),
                "boot_s": ua.get("boot_s"),
                "host": ua.get("host", ""),
                "reason": ua.get("failure_reason", "")
                or (f"duplicate of {ua['duplicate_of']}" if "duplicate_of" in ua else ""),
            }
        )
    return rows


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)
