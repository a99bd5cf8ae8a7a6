"""The ratio pruner's margin holds the noise between launches once the study has measured it."""

from __future__ import annotations

import optuna

from optimizer.pruning import RatioToBestPruner, launch_noise
from optimizer.study.records import LAUNCH_NOISE


def study_with_best(tmp_path) -> optuna.Study:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(study_name="p", storage=storage, direction="maximize")
    for values in ([100.0, 101.0, 99.0, 100.0], [80.0, 81.0, 79.0, 80.0]):  # two completed trials, 1 % chunk noise
        t = study.ask()
        for step, v in enumerate(values):
            t.report(v, step)
        study.tell(t, sum(values) / len(values))
    return study


def running(study: optuna.Study, values: list[float]) -> optuna.trial.FrozenTrial:
    t = study.ask()
    for step, v in enumerate(values):
        t.report(v, step)
    return study.get_trials(deepcopy=False)[t.number]


def test_a_trial_on_a_slow_boot_is_kept_once_launch_noise_is_known(tmp_path):
    study = study_with_best(tmp_path)
    slow_boot = running(study, [90.0, 90.5, 89.5])  # 10 % behind the best on every chunk: one slow launch?
    pruner = RatioToBestPruner()
    assert launch_noise(study) == 0.0
    assert pruner.prune(study, slow_boot)  # chunk noise alone (1 %): pruned
    study.set_user_attr(LAUNCH_NOISE, {"sigma": 0.05, "df": 8, "source": "confirmation"})
    assert launch_noise(study) == 0.05
    assert not pruner.prune(study, slow_boot)  # 10 % is within 2.5 sigma of two launches' difference at 5 %
    assert pruner.prune(study, running(study, [60.0, 60.5, 59.5]))  # 40 % behind is pruned all the same


def test_prior_until_measured(tmp_path):
    study = study_with_best(tmp_path)
    slow_boot = running(study, [90.0, 90.5, 89.5])
    assert not RatioToBestPruner(launch_noise=0.05).prune(study, slow_boot)
    study.set_user_attr(LAUNCH_NOISE, {"sigma": 0.005, "df": 8, "source": "confirmation"})
    assert RatioToBestPruner(launch_noise=0.05).prune(study, slow_boot)  # a measurement beats the prior
