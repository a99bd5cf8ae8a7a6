"""The driver: the only writer of the study. It asks for candidates, hands them to idle hosts, reports chunks,
prunes, and tells results; resuming (``resume``), host bookkeeping (``scheduling``) and what is written on each
trial (``recording``) live beside it.

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

import queue
import signal
import time
from typing import Any

import optuna

from ..boot import search_boot_spec
from ..confirm import confirmed_trials, relaunch_spec
from ..events import ChunkEvent, PhaseEvent, TrialResult
from ..executors import Executor
from ..hosts.config import HostConfig
from ..progress import Progress
from ..redact import redact_text
from ..samplers import stop_below_gain, store_search_answer
from ..settings import StudyConfig
from ..space import SearchSpace
from ..trial import TrialSpec
from . import hostnoise
from . import records as R
from .recording import Recorder, stamp
from .relaunch import BaselineRelaunches, label
from .resume import WarmStart, reap_orphans, requeue_interrupted
from .scheduling import Active, HostPool
from .storage import load_or_create

MAX_IDLE_ASKS = 200  # asks in a row that launch nothing: the space is exhausted


class Driver:
    def __init__(
        self,
        cfg: StudyConfig,
        space: SearchSpace,
        hosts: list[HostConfig],
        executor: Executor,
        *,
        progress: Progress | None = None,
        study: optuna.Study | None = None,
        confirm_follows: bool = False,
    ) -> None:
        self.cfg = cfg
        self.space = space
        self.hosts = hosts
        self.executor = executor
        self.progress = progress or Progress()
        self.study = study or load_or_create(cfg, space=space)
        self.arch = space.model.architecture
        self.pool = HostPool(hosts)
        self.record = Recorder(self.study, cfg, note=self.note, told=lambda f: self.progress.finished(self, f))
        self.warm: WarmStart | None = None
        self.active: dict[int, Active] = {}
        self.t0 = time.time()
        self.stopping = False
        self.command_text = redact_text(" ".join(cfg.server.command))  # recorded on each launch: what it ran
        self.halted: str | None = None  # why the study stopped itself (a failed baseline, no usable host)
        self.interrupts = 0
        self.idle_asks = 0
        self.search_settled = False  # the structured sampler is confident: no more launches
        self.host_noise_checked = False
        self.boot_times: list[float] = []
        self.bench_times: list[float] = []
        self.plan = cfg.plan()  # load levels: their order per boot, which chunks are reported, the objective
        self.relaunch = BaselineRelaunches(self.study, cfg.confirm.baseline_relaunches, self._spec, space)
        #: a confirmation follows in this process: hosts the search's last launches leave idle start it
        #: (``confirm.start_early``), and it takes over the early relaunches still running
        #: (``Confirmer(..., early=driver.relaunch)``); the search ends when its own launches have
        self.confirm_follows = confirm_follows

    # Host state, as the live display and the tests read it.
    @property
    def pending(self) -> list[Active]:
        return self.pool.pending

    @property
    def busy(self) -> dict[str, int]:
        return self.pool.busy

    @property
    def quarantined(self) -> set[str]:
        return self.pool.quarantined

    @property
    def host_phase(self) -> dict[str, tuple[str, int | None, float]]:
        return self.pool.phase

    def note(self, text: str) -> None:
        self.progress.note(self, text)

    # ------------------------------------------------------------------ budget
    def launched(self) -> int:
        return R.launched_count(self.study)

    def budget_left(self) -> int:
        return max(0, self.cfg.budget.trials - self.launched() - len(self.active))

    def time_left(self) -> bool:
        return self.cfg.budget.time_s is None or time.time() - self.t0 < self.cfg.budget.time_s

    def eta_s(self) -> float | None:
        """Time to the answer: the launches left until the search is expected to stop (the budget when the
        sampler has no stop rule; ``dryrun.EXPECTED_STOP_LAUNCHES`` with one, at least the launches running), then
        the confirmation's expected relaunches."""
        if not self.boot_times:
            return None
        from ..dryrun import EXPECTED_CONFIRM_RELAUNCHES, EXPECTED_STOP_LAUNCHES

        per_trial = sum(self.boot_times) / len(self.boot_times) + (
            sum(self.bench_times) / len(self.bench_times) if self.bench_times else 0.0
        )
        left = self.budget_left()
        if self.search_settled:
            left = 0
        elif hasattr(self.study.sampler, "confident") and stop_below_gain(self.cfg) is not None:
            left = min(left, max(0, EXPECTED_STOP_LAUNCHES - self.launched() - len(self.active)))
        confirm = 0
        if self.cfg.confirm.rounds > 0:
            arms = self.cfg.confirm.rounds * (self.cfg.confirm.top + 1)
            confirm = min(arms, EXPECTED_CONFIRM_RELAUNCHES) if self.cfg.confirm.sequential else arms
        return per_trial * ((left + confirm) / self.pool.usable())

    # ------------------------------------------------------------------ run
    def prepare(self) -> None:
        """Resume what a dead run left: its RUNNING trials are re-queued, its servers stopped."""
        stamp(self.study, self.cfg)
        if R.SPACE_PARAMS not in self.study.user_attrs:
            from .matching import space_record

            self.study.set_user_attr(R.SPACE_PARAMS, space_record(self.space))
        pythons = dict(self.study.user_attrs.get(R.HOST_PYTHON) or {})
        self.study.set_user_attr(R.HOST_PYTHON, {**pythons, **{h.name: h.python for h in self.hosts}})
        requeued = requeue_interrupted(self.study, skip=self.active)
        if requeued:
            self.note(f"resumed: {requeued} interrupted trial(s) re-queued")
        reap_orphans(self.executor, self.note)
        self.warm = WarmStart(self.study, self.cfg, self.space)
        if not hasattr(self.study.sampler, "confident"):
            self.note(f"the {type(self.study.sampler).__name__} has no stop rule: the search spends its budget")
        elif stop_below_gain(self.cfg) is None:
            self.note("budget.stop_below_gain_pct is null: the search spends its budget")

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

    def _loop(self) -> None:
        while True:
            if not self.stopping:
                self._fill_hosts()
            hand_off = self.confirm_follows and not self.stopping  # the confirmation waits for the early ones
            if not self.active and not self.pending and not self.relaunch.waiting(early=not hand_off):
                break
            if self.stopping and not self.active:  # stopping: trials waiting for a host will not get one
                self.force_stop("the study stopped before this trial got a host")
                break
            if not self.active and self.pending and not self.pool.free():
                self.note("every host is quarantined: stopping")
                self.halted = "every host is quarantined (host faults: see the notes above)"
                for a in self.pending:
                    self.record.fail(a, "no usable host left (all quarantined)")
                self.pending.clear()
                break
            try:
                ev = self.executor.events.get(timeout=0.2)
            except queue.Empty:
                continue
            self._handle(ev)
        self.record.fail_waiting("its original trial did not finish")
        if not self.search_settled:
            if self.stopping:
                self._stopped("interrupted")
            elif self.budget_left() <= 0:
                self._stopped("budget")
            elif not self.time_left():
                self._stopped("time")
            elif self.idle_asks >= MAX_IDLE_ASKS:
                self._stopped("space")

    def _store_relaunch_noise(self) -> None:
        """The noise the baseline's relaunches measured, kept for the next study on this host."""
        noise = self.study.user_attrs.get(R.LAUNCH_NOISE)
        ident = hostnoise.study_identity(self.study)
        if isinstance(noise, dict) and noise.get("source") == "baseline relaunches" and ident is not None:
            try:
                hostnoise.save(self.cfg.studies_dir, ident, self.cfg.study, noise["sigma"], int(noise["df"]))
            except OSError as exc:
                self.note(f"host noise not stored: {exc}")

    def _stopped(self, reason: str) -> None:
        """Say, and record on the study (``search:stop``), why the search stopped and what the model expected of
        one more launch; the summary and the dashboard's note show it."""
        gain = getattr(self.study.sampler, "last_expected_gain", None)
        threshold = stop_below_gain(self.cfg) if hasattr(self.study.sampler, "confident") else None
        expected = "" if gain is None else f"; the model expected {gain:.1%} from one more launch"
        n = self.launched()
        text = {
            "confident": f"the search stopped itself after {n} launches: the model expects no configuration left to "
            f"beat the best by {threshold or 0:.1%} (budget.stop_below_gain_pct){expected}; no more launches",
            "budget": f"the search spent its budget of {self.cfg.budget.trials} launches{expected}",
            "time": f"the search spent its time budget after {n} launches{expected}",
            "space": f"the search ran out of configurations to launch after {n} launches",
            "interrupted": f"the search was stopped by hand after {n} launches",
        }[reason]
        if threshold is None and reason == "budget":
            text += f" (sampler {self.cfg.sampler.name} has no stop rule: only the structured sampler stops itself)"
        self.study.set_user_attr(
            R.SEARCH_STOP,
            {
                "reason": reason,
                "text": text,
                "launches": n,
                "expected_gain": None if gain is None else round(float(gain), 5),
                "threshold": threshold,
            },
        )
        self.note(text)
        try:
            from ..notes import save_study_note

            save_study_note(self.study)  # the dashboard's study note says why the search stopped
        except Exception as exc:  # noqa: BLE001 - a note is a convenience, never a failure
            self.note(f"study note not written: {exc}")

    def _fill_hosts(self) -> None:
        while self.pool.free():
            if self.relaunch.due():  # the noise between launches, measured early for the pruner
                host = self.pool.free()[0]
                spec = self.relaunch.spec(host)
                self.pool.busy[host] = spec.number
                self.executor.submit(host, spec)
                continue
            if self.pending:
                a = self.pool.take_pending()
                if a is None:
                    return
            else:
                if not self.time_left() or self.idle_asks >= MAX_IDLE_ASKS:
                    return
                if self.budget_left() <= 0:
                    if not self._relaunch_early():
                        return
                    continue
                if getattr(self.study.sampler, "confident", False):
                    if not self.search_settled:
                        self.search_settled = True
                        self._stopped("confident")
                    if not self._relaunch_early():
                        return
                    continue
                a = self._ask()
                if a is None:
                    continue
            host = self.pool.assign(a)
            self.active[a.trial.number] = a
            a.trial.set_user_attr(R.HOST, host)
            a.trial.set_user_attr(R.SERVER_COMMAND, self.command_text)
            self.executor.submit(host, a.spec)

    def _relaunch_early(self) -> bool:
        """The search asks for no more launches but its last ones still run: a free host relaunches the next
        configuration the confirmation will hold, so the confirmation starts on hosts that would sit idle
        (``confirm.start_early``; ``relaunch.BaselineRelaunches.next_early``). False when there is none to start."""
        c = self.cfg.confirm
        if self.stopping or not (self.confirm_follows and c.start_early and c.sequential and c.rounds > 0):
            return False
        if not self.active:
            return False
        nxt = self.relaunch.next_early(confirmed_trials(self.study, c.top))
        if nxt is None:
            return False
        trial, cand = nxt
        host = self.pool.free()[0]
        number, subdir = self.relaunch.next_number()  # the confirmation's flags and first round's prompts
        spec = self.relaunch.started_early(
            host, trial, relaunch_spec(self.cfg, number, cand, 0, self.cfg.study_dir / subdir)
        )
        self.pool.busy[host] = spec.number
        self.executor.submit(host, spec)
        self.note(
            f"[{host}] idle while the search's last launches run: relaunching {label(trial)} for the confirmation"
        )
        return True

    # ------------------------------------------------------------------ stopping
    def force_stop(self, cause: str = "forced stop (second Ctrl-C) while this trial ran") -> None:
        """A second Ctrl-C: kill the servers now; record running trials as interrupted and re-queue them (as the
        next run would for a driver that died). Also ends a stop with trials still waiting for a host."""
        self.stopping = True
        self.executor.kill_servers()
        for a in [*self.active.values(), *self.pending]:
            self.record.interrupted(a, cause)
        self.active.clear()
        self.pending.clear()

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.interrupts += 1
        if self.interrupts >= 2:
            raise KeyboardInterrupt
        self.stopping = True
        self.note("stopping: servers are being stopped and running trials recorded (Ctrl-C again to force)")
        self.executor.cancel_all()

    # ------------------------------------------------------------------ asking
    def _ask(self) -> Active | None:
        """Ask the sampler for a candidate; settle it at once if it needs no launch."""
        trial = self.study.ask()
        if self.warm is not None and self.warm.take_baseline():
            cand = self.space.baseline()
            trial.set_user_attr(R.BASELINE, True)
            trial.set_user_attr(R.BASELINE_PARAMS, self.space.baseline_params())
            self.warm.enqueue()  # after the baseline's ask, which would otherwise take the queued trial
        else:
            cand = self.space.suggest(trial)
        key = cand.key(architecture=self.arch)
        self.record.describe(trial, self.space, cand, key)
        a = Active(trial=trial, candidate=cand, key=key, spec=self._spec(trial.number, cand))
        if self.cfg.precheck:
            checks = self.space.checks(cand, gpu_sm=self.cfg.gpu_sm)
            if any(c.value > 0 for c in checks):
                reason = "; ".join(c.reason for c in checks if c.value > 0)
                self.record.infeasible(a, reason, kind="precheck", checks={c.name: c.value for c in checks})
                self.idle_asks += 1
                return None
        if self.record.learned_fatal(a):
            self.idle_asks += 1
            return None
        if self.cfg.dedup:
            done = R.measured_keys(self.study).get(key)
            if done is not None and done.user_attrs.get(R.SERVER_COMMAND) not in (None, self.command_text):
                done = None  # measured with another server command (since fixed): not a duplicate of this launch
            if done is not None:
                self.record.duplicate(a, done)
                self.idle_asks += 1
                return None
            if any(o.key == key for o in self.active.values()):
                self.record.waiting_dups.append(a)
                self.idle_asks += 1
                return None
        self.idle_asks = 0
        return a

    def _spec(self, number: int, cand: Any) -> TrialSpec:
        server = self.cfg.server
        return TrialSpec(
            number=number,
            candidate=cand,
            command=list(server.command),
            workload=self.cfg.workload,
            trial_dir=str(self.cfg.study_dir / "trials" / str(number)),
            extra_args=list(server.extra_args),
            server_env=dict(server.env),
            boot_timeout_s=server.boot_timeout_s,
            dist_init_timeout_s=server.dist_init_timeout_s,
            poll_s=server.poll_s,
            stop_timeout_s=server.stop_timeout_s,
            study=self.cfg.study,
            protected=cand.is_baseline,  # no speculation: never pruned (the baseline, and the space's 'none')
            level_order=self.plan.order(),
            interleave=self.plan.interleave,
            # the search boot (optimizer/boot.py): search launches only, never the confirmation or the export
            **search_boot_spec(
                server.search_boot,
                cand.flags,
                server.extra_args,
                self.cfg.workload.levels,
                server.env,
                bench_warmup=self.cfg.workload.warmup_requests,
            ),
        )

    # ------------------------------------------------------------------ events
    def _handle(self, ev: Any) -> None:
        if self.relaunch.owns(ev.trial):  # not a trial: recorded apart, not shown as one
            if isinstance(ev, TrialResult):
                self.pool.release(ev.host, ev.trial)
                self.note(self.relaunch.finish(ev))
                self._store_relaunch_noise()
            return
        if isinstance(ev, PhaseEvent):
            self.host_phase[ev.host] = (ev.phase, ev.trial, ev.t)
        elif isinstance(ev, ChunkEvent):
            self._chunk(ev)
        elif isinstance(ev, TrialResult):
            self._finish(ev)
        self.progress.event(self, ev)

    def _chunk(self, ev: ChunkEvent) -> None:
        a = self.active.get(ev.trial)
        step = self.plan.step(ev.level, ev.index)  # only chunks that pair across trials are reported
        if a is None or ev.tok_per_s != ev.tok_per_s or step is None:  # NaN: nothing measured
            return
        if step not in a.reported:
            a.trial.report(ev.tok_per_s, step=step)
            a.reported.add(step)
        # Pruning at the objective's last chunk saves little and would throw the finished measurement away.
        last = step >= self.plan.last_step()
        if not a.spec.protected and not self.stopping and not last and a.trial.should_prune():
            a.trial.set_user_attr(R.PRUNED_AT_CHUNK, ev.index)
            self.executor.prune(ev.trial)

    def _finish(self, r: TrialResult) -> None:
        a = self.active.pop(r.trial, None)
        self.pool.release(r.host, r.trial)
        if a is None:
            return
        if r.status == "host_fault":
            if self.pool.fault(r.host):
                self.note(f"[{r.host}] quarantined after {self.pool.faults[r.host]} host faults: {r.reason}")
            self.record.host_fault(a, r.host, r.reason)
            if not self.stopping and self.pool.requeue(a):
                self.note(f"[{r.host}] host fault on trial {r.trial} ({r.reason}); re-queued")
            else:
                self.record.fail(a, f"host fault: {r.reason}", r)
            return
        self.pool.healthy(r.host)
        if r.boot_s is not None:
            self.boot_times.append(r.boot_s)
        if r.metrics:
            self.bench_times.append(max(0.0, r.t_end - r.t_start - (r.boot_s or 0.0)))
        self.record.result(a, r)
        try:
            store_search_answer(self.cfg, self.space, self.study, r.trial)
        except Exception as exc:  # noqa: BLE001 - an aid: without it the answer is the fastest single launch
            self.note(f"the search's estimate was not stored: {exc}")
        if a.trial.user_attrs.get(R.BASELINE) and r.status in ("infeasible", "failed") and not self.stopping:
            # Every other launch would fail the same way (the command, the model path, a fixed flag): stop now.
            self.halted = f"the baseline (trial {r.trial}) failed: {r.reason or r.status}"
            self.stopping = True
            self.note(f"{self.halted}; stopping before more launches are spent (fix it and run again to resume)")
            self.executor.cancel_all()
        facts = (r.metrics or {}).get(R.HOST_FACTS)
        if not self.host_noise_checked and isinstance(facts, dict):
            self.host_noise_checked = True  # the first launch that reports its host: is the host's noise known?
            ident = hostnoise.identity(r.host, facts, (r.metrics or {}).get(R.SERVER_VERSION))
            line = hostnoise.adopt(self.study, self.cfg.studies_dir, ident)
            if line:
                self.note(line)
