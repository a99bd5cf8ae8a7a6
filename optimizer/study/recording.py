"""Telling the study what happened to a trial: its outcome, value, constraints and user attributes, the
optuna-dashboard note written after every tell, and duplicates settled when their original finishes.

Every tell ends in ``after_tell`` (the note, then the progress line), so each outcome is annotated exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from .. import __version__
from ..candidate import Candidate
from ..events import TrialResult
from ..levels import baseline_levels, judge, plan_record
from ..notes import annotate
from ..redact import redact_log, redact_mapping, redact_text
from ..settings import StudyConfig
from ..sglang import fatal_settings
from ..space import SearchSpace
from . import records as R
from .scheduling import Active

LOG_TAIL_CHARS = 3000
REASON_CHARS = 2000


class Recorder:
    def __init__(
        self,
        study: optuna.Study,
        cfg: StudyConfig,
        *,
        note: Callable[[str], None],
        told: Callable[[FrozenTrial], None],
    ) -> None:
        self.study = study
        self.cfg = cfg
        self.note = note
        self.told = told
        self.waiting_dups: list[Active] = []  # duplicates of a running trial: told when it finishes
        self.plan = cfg.plan()

    # ------------------------------------------------------------------ before launch
    def describe(self, trial: optuna.Trial, space: SearchSpace, cand: Candidate, key: str) -> None:
        # 'config' feeds progress lines, notes, summary.json and the dashboard: mask secret-named env values.
        trial.set_user_attr(R.CONFIG, redact_log(space.describe(cand)))
        trial.set_user_attr(R.CANDIDATE_KEY, key)
        trial.set_user_attr(R.FLAGS, redact_mapping(dict(cand.flags)))
        trial.set_user_attr(R.ENV, redact_mapping(dict(cand.env)))
        if space.is_baseline(cand):
            trial.set_user_attr(R.BASELINE, True)

    # ------------------------------------------------------------------ results
    def result(self, a: Active, r: TrialResult) -> None:
        """Record a launched trial's result (anything but a host fault, which ``scheduling`` re-queues)."""
        self._launched(a, r)
        if r.status == "complete":
            # The objective (one level's tok/s or an aggregate) and the latency limits, from the per-level figures.
            base = baseline_levels(self.study) if self.plan.objective.aggregate == "gain" else None
            is_baseline = bool(a.trial.user_attrs.get(R.BASELINE))  # the untuned launch, not any without speculation
            judged = judge(r.metrics or {}, self.plan, base, is_baseline=is_baseline)
            for k, v in judged.flat.items():
                a.trial.set_user_attr(k, v)
            value = float(judged.value if judged.value is not None else r.metrics.get(R.TOK_PER_S) or 0.0)
            a.trial.set_user_attr(R.OUTCOME, R.COMPLETE)
            for name, v in {"server": 0.0, **judged.constraints}.items():
                a.trial.set_constraint(name, v)
                a.trial.set_user_attr(R.constraint_attr(name), v)
            self.study.tell(a.trial, value)
            if is_baseline and not self.study.user_attrs.get(R.BASELINE_TOK_PER_S):
                self.study.set_user_attr(R.BASELINE_TOK_PER_S, value)
                self.study.set_user_attr(R.BASELINE_TRIAL, a.trial.number)
        elif r.status == "pruned":
            a.trial.set_user_attr(R.OUTCOME, R.PRUNED)
            self.study.tell(a.trial, state=TrialState.PRUNED)
        elif r.status == "infeasible":
            self.infeasible(a, r.reason, kind=r.kind, result=r)
        else:  # cancelled
            self.fail(a, r.reason or "cancelled", r)
        self._settle_duplicates(a)
        if r.status in ("complete", "pruned"):  # infeasible and fail annotate and print themselves
            self.after_tell(a)

    def _launched(self, a: Active, r: TrialResult) -> None:
        t = a.trial
        t.set_user_attr(R.LAUNCHED, True)
        t.set_user_attr(R.T_START, r.t_start)
        t.set_user_attr(R.T_END, r.t_end)
        t.set_user_attr(R.HOST, r.host)
        if r.boot_s is not None:
            t.set_user_attr(R.BOOT_S, r.boot_s)
            t.set_user_attr(R.BOOT_PHASES, r.boot_phases)
        if r.stop_s is not None:
            t.set_user_attr(R.STOP_S, r.stop_s)
        if a.spec.boot_flags:
            t.set_user_attr(R.SEARCH_BOOT, a.spec.boot_flags)
        for k, v in (r.metrics or {}).items():
            if v is not None and not (isinstance(v, float) and v != v):
                t.set_user_attr(k, v)
        if r.log_path:
            t.set_user_attr(R.LOG_PATH, r.log_path)
        if r.records_path:
            t.set_user_attr(R.RECORDS_PATH, r.records_path)

    def infeasible(
        self,
        a: Active,
        reason: str,
        *,
        kind: str,
        result: TrialResult | None = None,
        checks: dict[str, float] | None = None,
    ) -> None:
        t = a.trial
        t.set_user_attr(R.OUTCOME, R.INFEASIBLE)
        t.set_user_attr(R.FAILURE_KIND, kind)
        t.set_user_attr(R.FAILURE_REASON, reason[:REASON_CHARS])
        if result is not None and result.log_tail:
            t.set_user_attr(R.LOG_TAIL, result.log_tail[-LOG_TAIL_CHARS:])
        if result is not None:
            lines = [*result.evidence, *result.log_tail.splitlines()]
            setting = fatal_settings.blame(lines, a.candidate.flags, a.candidate.env)
            if setting is not None:
                t.set_user_attr(R.FATAL_SETTING, setting)
                self.note(
                    f"trial {t.number}: {setting['name']}={setting['value']} is fatal on its own "
                    f"({setting['line'][:160]}); candidates holding it will not be launched"
                )
        if self.cfg.infeasible_as == "fail":
            self.study.tell(t, state=TrialState.FAIL)
            self.after_tell(a)
            return
        constraints = dict(checks or {})
        if not checks:
            constraints["server"] = 1.0
        for name, value in constraints.items():
            t.set_constraint(name, value)
            t.set_user_attr(R.constraint_attr(name), value)
        self.study.tell(t, 0.0)
        self.after_tell(a)

    def learned_fatal(self, a: Active) -> bool:
        """Record a candidate holding a setting an earlier launch proved fatal on its own (read from storage, so a
        resumed study keeps what it learned) as infeasible without a launch. True if it did."""
        for t in self.study.get_trials(deepcopy=False):
            setting = t.user_attrs.get(R.FATAL_SETTING)
            if setting and fatal_settings.holds(setting, a.candidate.flags, a.candidate.env):
                a.trial.set_user_attr(R.SKIPPED_FOR_FATAL, {**setting, "trial": t.number})
                reason = (
                    f"{setting['name']}={setting['value']} was fatal in trial {t.number} ({setting['line']}); "
                    "not launched again"
                )
                self.infeasible(a, reason, kind="learned_fatal", checks={"learned_fatal": 1.0})
                return True
        return False

    def duplicate(self, a: Active, original: FrozenTrial) -> None:
        """Tell a trial the same value (or pruned state) as the trial that already measured its configuration."""
        t = a.trial
        t.set_user_attr(R.DUPLICATE_OF, original.number)
        t.set_user_attr(R.OUTCOME, R.DUPLICATE)
        if original.state == TrialState.PRUNED:
            for step, v in original.intermediate_values.items():
                t.report(v, step=step)
            self.study.tell(t, state=TrialState.PRUNED)
        else:
            for name, value in original.constraints.items():
                t.set_constraint(name, value)
                t.set_user_attr(R.constraint_attr(name), value)
            self.study.tell(t, original.value)
        self.after_tell(a)

    def fail(self, a: Active, reason: str, r: TrialResult | None = None) -> None:
        a.trial.set_user_attr(R.OUTCOME, R.FAILED)
        a.trial.set_user_attr(R.FAILURE_REASON, reason[:REASON_CHARS])
        if r is not None and r.log_tail:
            a.trial.set_user_attr(R.LOG_TAIL, r.log_tail[-LOG_TAIL_CHARS:])
        self.study.tell(a.trial, state=TrialState.FAIL, skip_if_finished=True)
        self.after_tell(a)

    def host_fault(self, a: Active, host: str, reason: str) -> None:
        a.trial.set_user_attr(R.host_fault_attr(a.requeues), f"{host}: {reason}"[:500])

    def interrupted(self, a: Active, cause: str) -> None:
        """A trial the driver gave up on while it ran or waited: FAIL, with its configuration re-queued (the
        baseline is asked again instead: it has no parameters to enqueue). The reason is ``cause`` and what
        became of the configuration."""
        t = a.trial
        if a.spec.protected or not t.params:
            fate = "asked again"
        elif t.user_attrs.get(R.REQUEUED_FROM) is not None:
            fate = R.NOT_REQUEUED_AGAIN
        else:
            self.study.enqueue_trial(t.params, user_attrs={R.REQUEUED_FROM: t.number})
            fate = "re-queued"
        t.set_user_attr(R.OUTCOME, R.INTERRUPTED)
        t.set_user_attr(R.FAILURE_REASON, f"{cause}; {fate}")
        self.study.tell(t, state=TrialState.FAIL, skip_if_finished=True)

    # ------------------------------------------------------------------ duplicates of running trials
    def fail_waiting(self, reason: str) -> None:
        for a in self.waiting_dups:
            self.fail(a, reason)
        self.waiting_dups.clear()

    def _settle_duplicates(self, original: Active) -> None:
        frozen = self.study.get_trials(deepcopy=False)[original.trial.number]
        for d in [d for d in self.waiting_dups if d.key == original.key]:
            self.waiting_dups.remove(d)
            if frozen.state in (TrialState.COMPLETE, TrialState.PRUNED):
                self.duplicate(d, frozen)
            else:
                self.fail(d, f"duplicate of trial {frozen.number}, which did not finish")

    # ------------------------------------------------------------------ after every tell
    def after_tell(self, a: Active) -> None:
        frozen = self.study.get_trials(deepcopy=False)[a.trial.number]
        try:
            annotate(self.study, frozen, self.cfg)
        except ImportError:
            pass  # notes need optuna-dashboard; without it the study runs without them
        except Exception as exc:  # noqa: BLE001 - notes are a convenience, never a failure
            self.note(f"note for trial {frozen.number} not written: {exc}")
        self.told(frozen)


def stamp(study: optuna.Study, cfg: StudyConfig) -> None:
    """The study's own attributes, written once, when it is created; the server environment on every run (the
    one a resumed study's next trials run with)."""
    study.set_user_attr(R.SERVER_ENV, redact_mapping({k: str(v) for k, v in cfg.server.env.items()}))
    if R.OPTIMIZER_VERSION in study.user_attrs:
        return
    study.set_user_attr(R.OPTIMIZER_VERSION, __version__)
    study.set_user_attr(R.SERVER_COMMAND, redact_text(" ".join(cfg.server.command)))
    study.set_user_attr(R.SPACE, cfg.space)
    study.set_user_attr(R.WORKLOAD, cfg.workload.model_dump(mode="json"))
    study.set_user_attr(R.CREATED, time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    study.set_user_attr(R.PLAN, plan_record(cfg.plan(), dict(cfg.limits)))
