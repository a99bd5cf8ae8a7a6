"""Starting a run on a study: resume what a dead run left behind, and the warm starts asked before the sampler's
own suggestions (the baseline first, then the study's ``initial`` configurations and SGLang's default triple)."""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..settings import StudyConfig
from ..sglang import flags as sgl
from ..space import NONE_ALGO, SearchSpace
from . import records as R


def requeue_interrupted(study: optuna.Study, *, skip: Container[int] = ()) -> int:
    """Mark the RUNNING trials a dead run left as FAIL (interrupted) and re-queue their configurations. Returns how
    many were re-queued; the baseline counts but is not enqueued (it has no parameters: it is asked again)."""
    requeued = 0
    # Re-queue before marking FAIL, and never twice: a driver killed in between leaves a RUNNING trial whose
    # re-queued copy already exists, and the next run only marks it.
    already = {t.user_attrs.get(R.REQUEUED_FROM) for t in study.get_trials(deepcopy=False)}
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number in skip:
            continue
        reason = "the driver stopped while this trial ran; re-queued"
        intended = chosen_params(t)
        if t.user_attrs.get(R.BASELINE):
            requeued += 1
        elif intended and not t.user_attrs.get(R.REQUEUED_FROM):
            if t.number not in already:
                study.enqueue_trial(intended, user_attrs={R.REQUEUED_FROM: t.number})
            requeued += 1
        elif intended:
            reason = f"the driver stopped again while this re-queued trial ran; {R.NOT_REQUEUED_AGAIN}"
        else:
            reason = "the driver stopped while this trial's configuration was being chosen; the search chooses again"
        trial = optuna.Trial(study, t._trial_id)
        trial.set_user_attr(R.OUTCOME, R.INTERRUPTED)
        trial.set_user_attr(R.FAILURE_REASON, reason)
        study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
    return requeued


def chosen_params(t: FrozenTrial) -> dict[str, Any] | None:
    """The whole configuration a trial was given, or None while it was still being chosen: a queued trial's
    parameters (a warm start, a re-queued trial), else its suggested ones once the driver recorded its flags (Optuna
    stores each suggested parameter as it comes, so a driver killed in between leaves only some of them)."""
    fixed = t.system_attrs.get("fixed_params")
    if isinstance(fixed, dict) and fixed:
        return dict(fixed)
    return dict(t.params) if t.params and R.FLAGS in t.user_attrs else None


def reap_orphans(executor: Any, note: Callable[[str], None]) -> None:
    """Stop the servers a previous run left on the hosts."""
    for host, found in executor.reap_orphans().items():
        pgids = [p for p in found if isinstance(p, int)]
        errors = [p for p in found if not isinstance(p, int)]
        if pgids:
            note(f"[{host}] stopped {len(pgids)} server(s) left by a previous run: {pgids}")
        for e in errors:  # the executors report a host they could not ask as "error: ..."
            note(f"[{host}] could not look for servers left by a previous run: {str(e).removeprefix('error: ')}")


class WarmStart:
    """What is asked before the sampler's own suggestions. The baseline is a trial without parameters (so the
    sampler never searches 'no speculation' unless the space lists 'none'), asked first; the warm starts are
    enqueued after its ask, which would otherwise take the first queued trial."""

    def __init__(self, study: optuna.Study, cfg: StudyConfig, space: SearchSpace) -> None:
        self.study = study
        self.cfg = cfg
        self.space = space
        trials = study.get_trials(deepcopy=False)
        # A baseline that could not run (a broken server command, since fixed) is measured again.
        has_baseline = R.baseline_trial(study) is not None or any(
            t.user_attrs.get(R.BASELINE) and t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials
        )
        self.baseline_due = space.model.baseline and not has_baseline
        self.warm_due = not trials
        if not self.baseline_due:
            self.enqueue()

    def take_baseline(self) -> bool:
        """True once, for the ask that should be the baseline."""
        if not self.baseline_due:
            return False
        self.baseline_due = False
        return True

    def enqueue(self) -> None:
        """The study's ``initial`` configurations, then SGLang's own default triple (TPE and the structured sampler); once, on a new study."""
        if not self.warm_due:
            return
        self.warm_due = False
        for i, params in enumerate(self.cfg.initial):
            self.study.enqueue_trial(dict(params), user_attrs={R.WARM_START: f"initial[{i}]"})
        warm = sglang_default_params(self.space) if self.cfg.sampler.name in ("tpe", "structured") else None
        if warm:
            self.study.enqueue_trial(warm, user_attrs={R.WARM_START: "sglang auto default"})


def sglang_default_params(space: SearchSpace) -> dict[str, Any] | None:
    """SGLang's own auto triple for the architecture, if the space contains it: a strong first guess."""
    params = space.params
    algo = params.get(sgl.ALGO)
    choices = [c for c in getattr(algo, "choices", []) if str(c).lower() != NONE_ALGO]
    if not choices:
        return None
    steps, topk, draft = sgl.auto_triple(space.model.architecture, sgl.algorithm({sgl.ALGO: choices[0]}))
    out: dict[str, Any] = {k: v for k, v in space.baseline_params().items() if k != sgl.ALGO}
    out[sgl.ALGO] = choices[0]
    for name in params:  # other speculative parameters (e.g. speculative-adaptive) at their defaults, not sampled
        if name.startswith("speculative-") and name not in (sgl.ALGO, sgl.STEPS, sgl.TOPK, sgl.DRAFT):
            value = space.default_value(name)
            if value is not None:
                out[name] = value
    for name, value in ((sgl.STEPS, steps), (sgl.TOPK, topk), (sgl.DRAFT, draft)):
        p = params.get(name)
        if p is None or (name == sgl.DRAFT and topk == 1):
            continue
        if value not in p.values():
            return None
        out[name] = value
    return out
