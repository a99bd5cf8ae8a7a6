"""Confirmation end to end: a study on simulator processes, then the baseline and its best configurations
relaunched in interleaved rounds (fresh restarts, shuffled prompt order), for each of the three verdicts:
a significant gain, an equivalent pair, and no significant gain over the baseline."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import yaml
from conftest import sim_command

from optimizer import cli
from optimizer.confirm import PLAN_ATTR, RESULT_ATTR, RUN_PREFIX, runs_of
from optimizer.study import open_storage

LLAMA = "llama-3.1-8b-h100"
SPACE = {
    "name": "confirm",
    "fixed": {"model-path": "m", "speculative-draft-model-path": "eagle3-head", "attention-backend": "fa3"},
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE", "EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [1, 3]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
        # Llama runs on one GPU: NCCL settings change nothing, so two configurations differing only there are
        # truly equal
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL"]},
    },
}
EAGLE3_S3 = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "NCCL_PROTO": "unset",
}


def study_file(
    tmp_path: Path, initial: list[dict], noise: float, top: int, step_scale: float = 1.0, sequential: bool = False
) -> Path:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    study = {
        "study": "confirm",
        "studies_dir": str(tmp_path / "studies"),
        "space": str(tmp_path / "space.yaml"),
        "server": {
            "command": sim_command(LLAMA, step_scale=step_scale) + ["--sim-launch-noise", str(noise)],
            "boot_timeout_s": 30,
        },
        "workload": {"concurrency": 1, "max_tokens": 32, "chunks": 2, "requests_per_chunk": 2, "warmup_requests": 1},
        "budget": {"trials": 1 + len(initial)},
        "pruner": {"name": "none"},
        "initial": initial,
        # these tests are of the fixed design (every round relaunches every configuration); test_confirm_sequential.py
        # is of the sequential one
        "confirm": {"rounds": 3, "top": top, "sequential": sequential},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def load(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(
        study_name="confirm", storage=open_storage(str(tmp_path / "studies" / "confirm" / "journal.log"))
    )


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "studies" / "confirm" / "summary.json").read_text())


def test_significant_gain_through_the_confirm_command(tmp_path, capsys):
    path = study_file(tmp_path, [EAGLE3_S3], noise=0.03, top=1)
    # the study alone (confirmation off), then `python -m optimizer confirm` on demand
    args = ["--config", str(path), "--executor", "thread", "--plain"]
    assert cli.main(["optimize", *args, "--confirm-rounds", "0"]) == 0
    first = capsys.readouterr().out
    assert "one launch, not confirmed" in first and first.rstrip().splitlines()[-1].startswith("deploy: bash ")
    study = load(tmp_path)
    launched = sum(1 for t in study.trials if t.user_attrs.get("launched"))
    assert cli.main(["confirm", *args, "--confirm-rounds", "3"]) == 0
    out = capsys.readouterr().out

    study = load(tmp_path)
    # confirmation runs are not trials: the sampler never sees them and the study's budget does not count them
    assert sum(1 for t in study.trials if t.user_attrs.get("launched")) == launched
    runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert len(runs) == 6 and all(r["status"] == "complete" for r in runs)
    # interleaved: baseline, trial 1, baseline, trial 1, ... each round with its own launch
    assert [r["label"] for r in runs] == ["baseline", "trial 1"] * 3
    assert [r["round"] for r in runs] == [0, 0, 1, 1, 2, 2]
    assert all(r["host_facts"].get("cpu") for r in runs)  # the host each result was measured on
    # each relaunch had its own server log and prompt order
    dirs = sorted((tmp_path / "studies" / "confirm" / "confirm").iterdir())
    assert len(dirs) == 6 and all((d / "server.log").exists() for d in dirs)

    result = study.user_attrs[RESULT_ATTR]
    assert result["significant_gain"] is True and result["winner"]["trial"] == 1
    lo, hi = result["winner"]["gain_ci"]
    assert 0 < lo < result["winner"]["gain"] < hi  # the model: 2.24x
    s = summary(tmp_path)
    assert s["best"]["confirmed"] is True and s["best"]["trial"] == 1 and s["best"]["launches"] == 3
    assert s["best"]["ci"][0] < s["best"]["tok_per_s"] < s["best"]["ci"][1]
    assert isinstance(s["launch_noise"]["sigma"], float) and s["launch_noise"]["df"] == 4
    assert "answer: trial 1 EAGLE3 s3 k1 d4" in out and "confirmed over 3 launches" in out and "95% CI" in out
    assert "gain over the baseline +" in out and "no significant gain" not in out
    assert "confirmation: 6 launches (3 rounds of baseline, trial 1), outside the study's launch budget" in out
    best = (tmp_path / "studies" / "confirm" / "best.yaml").read_text()
    assert "confirmed over 3 launches" in best and "speculative-num-steps: 3" in best
    # the report and the dashboard's study note show the verdict, the launch noise and the host
    from optimizer.report import write_report

    html = write_report(study, tmp_path / "report.html").read_text()
    assert "Confirmation (3 interleaved rounds" in html and "confirmed best" in html
    assert "between launches" in html and "Measured on" in html
    import optuna_dashboard

    assert "gain over the baseline +" in optuna_dashboard.get_note(study)

    # a second `confirm` finds every run stored and launches nothing
    assert cli.main(["confirm", *args, "--confirm-rounds", "3"]) == 0
    assert "6 already done" in capsys.readouterr().out
    assert len([k for k in load(tmp_path).user_attrs if k.startswith(RUN_PREFIX)]) == 6
    # a fourth round asked later adds one round to the three made (the plan does not depend on the rounds)
    assert cli.main(["confirm", *args, "--confirm-rounds", "4"]) == 0
    runs4 = runs_of(load(tmp_path), load(tmp_path).user_attrs[PLAN_ATTR]["id"])
    assert len(runs4) == 8 and runs4[:6] == runs and [r["round"] for r in runs4[6:]] == [3, 3]


def test_equivalent_pair_after_a_study(tmp_path, capsys):
    # two configurations differing only in NCCL settings, which a one-GPU model does not use: truly equal.
    # Their tok/s intervals overlap: equivalent. Decode steps 4x the profile's keep the client's own timing jitter
    # on a busy 2-core machine (a few ms a request) small against the launch: with the profile's 6 ms steps, two
    # equal servers once measured 5 % apart over three launches each. Even with independent noise, two 95 %
    # intervals from three launches each miss each other about 1 % of the time (a t-test at |t| > 3.5 on 6
    # degrees of freedom), so a second study in its own folder decides a miss; the verdict must name both.
    ll = dict(EAGLE3_S3, NCCL_PROTO="LL")
    for attempt in range(2):
        folder = tmp_path / f"attempt{attempt}"
        folder.mkdir()
        path = study_file(folder, [EAGLE3_S3, ll], noise=0.0, top=2, step_scale=4.0)
        assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
        out = capsys.readouterr().out
        result = load(folder).user_attrs[RESULT_ATTR]
        if sorted(result["equivalent_trials"]) == [1, 2]:
            break
    assert sorted(result["equivalent_trials"]) == [1, 2], [(a["label"], a["runs"]) for a in result["arms"]]
    assert result["significant_gain"] is True
    assert "equivalent within the noise: trial" in out
    s = summary(folder)
    assert s["best"]["confirmed"] and s["best"]["trial"] in (1, 2)
    assert len(result["arms"]) == 3 and all(a["launches"] == 3 for a in result["arms"])


def test_no_significant_gain_over_the_baseline(tmp_path, capsys):
    # EAGLE given an EAGLE-3 drafter is the study's only speculative configuration: slower than the baseline (3
    # steps of drafting for nothing: 133 against 158 tok/s in the model, a gap no loaded machine turns into a gain)
    eagle = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1}
    path = study_file(tmp_path, [eagle], noise=0.03, top=2)
    assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
    out = capsys.readouterr().out
    result = load(tmp_path).user_attrs[RESULT_ATTR]
    assert result["significant_gain"] is False
    assert result["winner"]["gain_ci"][0] < 0
    assert "no significant gain over the baseline" in out
    assert "ALARM trial 1 low_accept" in out  # and the final summary says why
    s = summary(tmp_path)
    assert any("no significant gain over the baseline" in line for line in s["confirmation"]["verdict"])


def test_baseline_relaunches_measure_the_launch_noise_for_the_pruner(tmp_path, capsys):
    # each boot runs at its own speed (sigma 10 %): two relaunches of the baseline right after it completed
    path = study_file(tmp_path, [EAGLE3_S3], noise=0.10, top=1)
    args = ["--config", str(path), "--executor", "thread", "--plain", "--confirm-rounds", "0"]
    assert cli.main(["optimize", *args, "--baseline-relaunches", "2"]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    # not trials: the study's launches are the budget's 2, the relaunches are counted apart
    assert sum(1 for t in study.trials if t.user_attrs.get("launched")) == 2
    runs = [v for k, v in study.user_attrs.items() if k.startswith("relaunch:run:")]
    assert len(runs) == 2 and all(r["status"] == "complete" and r["tok_per_s"] > 0 for r in runs)
    noise = study.user_attrs["launch_noise"]
    assert noise["source"] == "baseline relaunches" and noise["df"] == 2 and noise["sigma"] > 0
    assert "baseline relaunch 2/2 [local]" in out and "over 3 launches of the baseline" in out
    # they ran right after the baseline, before the sampler's first configuration
    assert out.index("baseline relaunch 1/2") < out.index("trial 1: starting")
    assert len(list((tmp_path / "studies" / "confirm" / "relaunch").iterdir())) == 2
    # a resumed study does not relaunch again
    assert cli.main(["optimize", *args, "--baseline-relaunches", "2", "--trials", "2"]) == 0
    assert "baseline relaunch" not in capsys.readouterr().out


def test_no_speculation_is_confirmed_when_the_search_answered_it(tmp_path, capsys):
    """Sequential: the study's only speculative configuration measured below the baseline, so the search answered
    "no speculation"; the confirmation keeps that answer (no significant gain overturned it) and the export, the
    summary and the terminal all say to serve without speculation."""
    eagle = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1}
    path = study_file(tmp_path, [eagle], noise=0.03, top=2, sequential=True)
    assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    base = next(t for t in study.trials if t.user_attrs.get("baseline"))
    plan = study.user_attrs[PLAN_ATTR]
    assert [a["baseline"] for a in plan["arms"] if a.get("selected")] == [True]  # the baseline stands
    result = study.user_attrs[RESULT_ATTR]
    assert result["winner"]["trial"] == base.number and result["winner"]["baseline"]
    assert "confirmed best: no speculation (baseline)" in out
    s = summary(tmp_path)
    assert s["best"]["trial"] == base.number and not any("speculative" in k for k in s["best"]["flags"])
    assert "serve without speculation" in s["answer"]["verdict"]
