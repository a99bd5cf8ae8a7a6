"""Resuming a study a killed driver left: what is re-queued is a whole configuration, never the first few
parameters of one the sampler was still choosing (Optuna stores each suggested parameter as it comes)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from optimizer.study import records as R
from optimizer.study.resume import chosen_params, requeue_interrupted

WHOLE = {"speculative-num-steps": 2, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 5}


def test_only_whole_configurations_are_requeued(tmp_path):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(direction="maximize", storage=storage)
    # 0: chosen by the sampler, flags recorded, then the driver died while it ran
    t0 = study.ask()
    for k in WHOLE:
        t0.suggest_int(k, 1, 8)
    t0.set_user_attr(R.FLAGS, {"tp-size": 1})
    # 1: killed while the sampler's choice was being stored: two of its three parameters
    t1 = study.ask()
    t1.suggest_int("speculative-num-steps", 1, 8)
    t1.suggest_int("speculative-eagle-topk", 1, 8)
    # 2: a queued configuration (a warm start), killed after its first parameter
    study.enqueue_trial(WHOLE, user_attrs={"warm_start": "initial[0]"})
    t2 = study.ask()
    t2.suggest_int("speculative-num-steps", 1, 8)
    frozen = {t.number: t for t in study.get_trials()}
    assert chosen_params(frozen[1]) is None
    assert chosen_params(frozen[2]) == WHOLE and frozen[2].params == {"speculative-num-steps": 2}

    assert requeue_interrupted(study) == 2
    trials = study.get_trials()
    again = {t.user_attrs[R.REQUEUED_FROM]: t for t in trials if R.REQUEUED_FROM in t.user_attrs}
    assert set(again) == {0, 2}
    assert again[0].system_attrs["fixed_params"] == trials[0].params
    assert again[2].system_attrs["fixed_params"] == WHOLE
    assert all(trials[n].state == TrialState.FAIL for n in (0, 1, 2))
    assert "chooses again" in trials[1].user_attrs[R.FAILURE_REASON]
    assert "re-queued" in trials[0].user_attrs[R.FAILURE_REASON]


def test_a_requeued_copy_stopped_again_is_not_requeued_a_second_time_and_says_so(tmp_path):
    """A re-queued copy killed again, even before its own suggestion finished, is marked as such: once is the
    limit (a launch that kills the driver must not loop), and the reason must not claim a re-queue."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(direction="maximize", storage=storage)
    study.enqueue_trial(WHOLE, user_attrs={R.REQUEUED_FROM: 7})
    copy = study.ask()
    copy.suggest_int("speculative-num-steps", 1, 8)  # killed after its first parameter
    assert requeue_interrupted(study) == 0
    (trial,) = study.get_trials()
    assert trial.state == TrialState.FAIL and trial.user_attrs[R.OUTCOME] == R.INTERRUPTED
    assert chosen_params(trial) == WHOLE and trial.params == {"speculative-num-steps": 2}
    assert "not re-queued a second time" in trial.user_attrs[R.FAILURE_REASON]
