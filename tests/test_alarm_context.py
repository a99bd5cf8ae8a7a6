"""slower_than_baseline against what the study knows (issue 26), on a real journal study: a difference below the
launch noise raises nothing; on a PCIe-only host the cause named is the settings when the same tree with other
settings beat the baseline, and the NCCL settings (not only the drafter) when none did."""

from __future__ import annotations

import optuna

from optimizer.alarms import study_alarms
from optimizer.study import open_storage

SPEC = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
}


def _study(tmp_path, values: list[tuple[dict, dict, float]], noise: float | None, pcie: bool) -> optuna.Study:
    study = optuna.create_study(
        study_name="a", storage=open_storage(str(tmp_path / "journal.log")), direction="maximize"
    )
    if noise is not None:
        study.set_user_attr("launch_noise", {"sigma": noise, "df": 6, "source": "confirmation"})
    for i, (flags, env, value) in enumerate(values):
        t = study.ask()
        for k, v in {
            "flags": flags,
            "env": env,
            "config": f"c{i}",
            "launched": True,
            "outcome": "complete",
            "host_facts": {"pcie_only": True} if pcie else {},
        }.items():
            t.set_user_attr(k, v)
        if i == 0:
            t.set_user_attr("baseline", True)
        study.tell(t, value)
    return study


def test_below_the_launch_noise_no_alarm(tmp_path):
    study = _study(tmp_path, [({}, {}, 100.0), (SPEC, {}, 99.1)], noise=0.018, pcie=False)  # -0.9 %, noise 1.8 %
    assert 1 not in study_alarms(study)
    study = _study(tmp_path / "b", [({}, {}, 100.0), (SPEC, {}, 90.0)], noise=0.018, pcie=False)
    assert [a.kind for a in study_alarms(study)[1]] == ["slower_than_baseline"]


def test_pcie_only_names_the_settings(tmp_path):
    ll = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}
    study = _study(tmp_path, [({}, {}, 100.0), (SPEC, {}, 75.0), (SPEC, ll, 106.7)], noise=None, pcie=True)
    alarm = study_alarms(study)[1][0]
    assert alarm.cause.startswith("the communication settings, not the drafter or the tree")
    assert "PCIe-only" in alarm.cause and "+6.7% over the baseline (trial 2: c2)" in alarm.cause
    assert "trial 2's settings" in alarm.fix
    study = _study(tmp_path / "b", [({}, {}, 100.0), (SPEC, {}, 75.0)], noise=None, pcie=True)
    alarm = study_alarms(study)[1][0]
    assert "PCIe-only" in alarm.cause and "NCCL_PROTO" in alarm.fix


def test_pcie_only_with_tuned_nccl_does_not_blame_untuned_nccl(tmp_path):
    ll = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}
    study = _study(tmp_path, [({}, {}, 100.0), (SPEC, ll, 90.0)], noise=None, pcie=True)
    alarm = study_alarms(study)[1][0]
    assert "untuned NCCL" not in alarm.cause and "drafting and verifying cost more" in alarm.cause
