"""The answer in the restarts a user waits for: the search stops itself, the confirmation stops once its verdict is
decided (and asks for more rounds add to it), the host's noise is kept for the next study, and the dry run counts
the confirmation. Real simulator server processes and real journal storage throughout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import KIMI, sim_command

from optimizer import cli
from optimizer.confirm import PLAN_ATTR, RESULT_ATTR, runs_of
from optimizer.errors import ConfigError
from optimizer.settings import parse_study
from optimizer.study import open_storage
from optimizer.study import records as R
from optimizer.study.hostnoise import HOST_NOISE

LLAMA = "llama-3.1-8b-h100"
FIXED = {"model-path": "m", "speculative-draft-model-path": "eagle3-head", "attention-backend": "fa3"}
SPACE = {
    "name": "answer",
    "fixed": FIXED,
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [2, 3]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1, 4]},
    },
}
S3K1 = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3, "speculative-eagle-topk": 1}
S3K4 = dict(S3K1, **{"speculative-eagle-topk": 4})  # 3.9 % slower than s3 k1 on the Llama profile
S2K1 = dict(S3K1, **{"speculative-num-steps": 2})  # 11 % slower than s3 k1


def study_file(tmp_path: Path, initial: list[dict], *, noise: float, top: int, rounds: int, **extra) -> Path:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    study = {
        "study": "answer",
        "studies_dir": str(tmp_path / "studies"),
        "space": str(tmp_path / "space.yaml"),
        "server": {
            "command": sim_command(LLAMA, step_scale=4.0) + ["--sim-launch-noise", str(noise)],
            "boot_timeout_s": 30,
        },
        "workload": {"concurrency": 1, "max_tokens": 32, "chunks": 2, "requests_per_chunk": 2, "warmup_requests": 1},
        "budget": {"trials": 1 + len(initial)},
        "pruner": {"name": "none"},
        "initial": initial,
        "confirm": {"rounds": rounds, "top": top},
        **extra,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def load(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(
        study_name="answer", storage=open_storage(str(tmp_path / "studies" / "answer" / "journal.log"))
    )


def local_hosts(tmp_path: Path, n: int) -> Path:
    """A hosts file of ``n`` local hosts, h0, h1, ..."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({"hosts": [{"name": f"h{i}", "type": "local"} for i in range(n)]}))
    return hosts


def confirm_on_a_known_host(tmp_path: Path, capsys, extra: list[str]) -> tuple[str, optuna.Study]:
    """A study of the study's best (EAGLE3 s3 k1) without a confirmation, then, its host's noise stored (3 %),
    ``confirm`` with up to 3 rounds: what it printed and the study."""
    from optimizer.study import hostnoise

    path = study_file(tmp_path, [S3K1], noise=0.03, top=1, rounds=3)
    args = ["--config", str(path), *extra, "--executor", "thread", "--plain"]
    assert cli.main(["optimize", *args, "--confirm-rounds", "0"]) == 0
    capsys.readouterr()
    hostnoise.save(tmp_path / "studies", hostnoise.study_identity(load(tmp_path)), "earlier", 0.03, 10)
    assert cli.main(["confirm", *args, "--confirm-rounds", "3"]) == 0
    return capsys.readouterr().out, load(tmp_path)


def test_a_large_gap_is_decided_in_one_round(tmp_path, capsys):
    # EAGLE3 s3 k1 is 2.24x the baseline. On a host whose noise is known (stored: 3 %), the baseline's own launch
    # in the search already separates it, so the first round relaunches only the study's best (its selected
    # launch does not count) and the verdict is decided
    out, study = confirm_on_a_known_host(tmp_path, capsys, [])
    runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert [(r["label"], r["round"]) for r in runs] == [("trial 1", 0)]
    result = study.user_attrs[RESULT_ATTR]
    assert result["decided"] == "winner" and result["rounds"] == 1 and result["launches"] == 1
    assert result["significant_gain"] is True and result["winner"]["trial"] == 1
    base = next(a for a in result["arms"] if a["baseline"])
    assert base["launches"] == 1  # the search's launch of the baseline counts as evidence
    assert "decided at 95 % after 1 round(s), 1 relaunch(es): a significant winner" in out
    assert "launch noise from the host's stored 3.0%" in out


def test_on_an_unknown_host_the_noise_is_measured_before_anything_is_decided(tmp_path, capsys):
    # the same study on a host whose noise is not stored: the stated prior alone decides nothing, so the baseline
    # is relaunched beside the best until two degrees of freedom of noise are measured, then it is decided
    path = study_file(tmp_path, [S3K1], noise=0.03, top=1, rounds=3)
    assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert [(r["label"], r["round"]) for r in runs] == [
        ("baseline", 0),
        ("trial 1", 0),
        ("baseline", 1),
        ("trial 1", 1),
    ]
    result = study.user_attrs[RESULT_ATTR]
    assert result["decided"] == "winner" and result["rounds"] == 2 and result["launch_noise_df"] >= 2
    assert "launch noise from a stated prior of 5%" in out


def test_hosts_a_round_would_leave_idle_relaunch_the_configurations_in_question_again(tmp_path, capsys):
    # the same study on three local hosts: the first round holds the baseline and the study's best, so the third
    # host relaunches the study's best again, beside them. The noise has its two degrees of freedom after that one
    # round (one host needed two), and the extra relaunch counts in the verdict like any other. (The confirmation
    # does not start early here: the test below has that)
    no_early = {"rounds": 3, "top": 1, "start_early": False}
    path = study_file(tmp_path, [S3K1], noise=0.03, top=1, rounds=3, confirm=no_early)
    args = ["--config", str(path), "--hosts", str(local_hosts(tmp_path, 3)), "--executor", "thread", "--plain"]
    assert cli.main(["optimize", *args]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert sorted((r["label"], r["round"], r["slot"]) for r in runs) == [
        ("baseline", 0, 0),
        ("trial 1", 0, 0),
        ("trial 1", 0, 1),
    ]
    assert len({r["host"] for r in runs}) == 3  # side by side, one per host
    assert max(r["t_start"] for r in runs) < min(r["t_end"] for r in runs)  # all three were running at once
    result = study.user_attrs[RESULT_ATTR]
    assert result["decided"] == "winner" and result["rounds"] == 1 and result["launches"] == 3
    assert result["launch_noise_df"] >= 2
    assert result["winner"]["trial"] == 1 and result["winner"]["launches"] == 2  # its two relaunches
    assert "confirmation round 1/3: baseline, trial 1 (and 1 more relaunch(es) of them on hosts" in out


def test_idle_hosts_stay_idle_where_one_relaunch_settles_the_verdict(tmp_path, capsys):
    # the large gap above on three hosts whose noise is known: one relaunch of the study's best settles everything
    # (if the means held), so a second one could not save a round and the other hosts are left alone
    out, study = confirm_on_a_known_host(tmp_path, capsys, ["--hosts", str(local_hosts(tmp_path, 3))])
    runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert [(r["label"], r["round"], r["slot"]) for r in runs] == [("trial 1", 0, 0)]
    assert study.user_attrs[RESULT_ATTR]["decided"] == "winner"
    assert "more relaunch(es) of them on hosts" not in out


def test_hosts_the_searchs_last_launches_leave_idle_start_the_confirmation(tmp_path, capsys):
    # three hosts, budget 3 (the baseline, s3 k1, s2 k1): the two configurations run side by side; when the first
    # ends the budget is spent but the other still runs, so the free host relaunches the confirmation's first
    # configuration at once (the driver handles one result at a time: the other is still running then). The
    # confirmation starts as soon as the search's own launches end, waits for that relaunch as part of its first
    # round, and counts it like its own relaunches
    path = study_file(tmp_path, [S3K1, S2K1], noise=0.03, top=2, rounds=3)
    args = ["--config", str(path), "--hosts", str(local_hosts(tmp_path, 3)), "--executor", "thread", "--plain"]
    assert cli.main(["optimize", *args]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    early = [v for k, v in study.user_attrs.items() if k.startswith(R.RELAUNCH_RUN_PREFIX)]
    assert early and all(r["early"] for r in early)
    first = min(early, key=lambda r: r["t_start"])
    assert first["trial"] in (1, 2) and first["status"] == "complete"
    last_search_end = max(t.datetime_complete.timestamp() for t in study.trials if t.datetime_complete)
    assert first["t_start"] < last_search_end  # it ran beside the search's last launch
    assert f"relaunching trial {first['trial']} for the confirmation" in out
    result = study.user_attrs[RESULT_ATTR]
    arm = next(a for a in result["arms"] if a["trial"] == first["trial"])
    assert any(v == pytest.approx(first["tok_per_s"]) for v in arm["runs"])  # counted as its relaunch
    confirm_runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    hosts_busy = [(r["host"], r["t_start"], r["t_end"]) for r in [*early, *confirm_runs]]
    for h, a0, a1 in hosts_busy:  # never two launches at once on one host
        assert not any(h == g and b0 < a1 and a0 < b1 and (a0, a1) != (b0, b1) for g, b0, b1 in hosts_busy)
    assert result["early_launches"] == len(early)
    assert f"and {len(early)} made early, on hosts the search's last launches left idle" in out


def test_a_small_gap_takes_more_rounds_and_later_rounds_add_to_the_runs(tmp_path, capsys):
    # s2 k1 is 11 % slower than s3 k1. The host is known (its stored noise: 8 %, 30 degrees of freedom), so the
    # rounds do not hang on this busy machine's timing: one round cannot settle the pair and the verdict is
    # undecided; asked for five rounds later, the confirmation goes on from the runs already made, relaunching
    # both, for more than one round.
    from optimizer.study import hostnoise

    path = study_file(tmp_path, [S3K1, S2K1], noise=0.0, top=2, rounds=1)
    args = ["--config", str(path), "--executor", "thread", "--plain"]
    assert cli.main(["optimize", *args, "--confirm-rounds", "0"]) == 0
    capsys.readouterr()
    ident = hostnoise.study_identity(load(tmp_path))
    assert ident is not None and ident["host"] == "local"
    hostnoise.save(tmp_path / "studies", ident, "earlier", 0.08, 30)

    assert cli.main(["confirm", *args, "--confirm-rounds", "1"]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    first = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert {r["round"] for r in first} == {0} and first[0]["label"] == "trial 1"
    result = study.user_attrs[RESULT_ATTR]
    assert result["decided"] is None and result["rounds"] == 1 and result["could_not_tell_apart"] == ["trial 2"]
    assert "launch noise from the host's stored 8.0%" in out
    assert "could not be told apart within 1 rounds" in out
    # what more rounds would cost, by the futility rule's own projection: a round relaunches both configurations
    m = re.search(
        r"if the measured means held, confirm --confirm-rounds (\d+) would decide it \((\d+) more round\(s\), "
        r"(\d+) relaunches, added to these\)",
        out,
    )
    assert m is not None, out
    assert int(m.group(1)) == 1 + int(m.group(2)) and int(m.group(3)) == 2 * int(m.group(2))
    summary = json.loads((tmp_path / "studies" / "answer" / "summary.json").read_text())
    assert any("could not be told apart" in line for line in summary["confirmation"]["verdict"])

    assert cli.main(["confirm", *args, "--confirm-rounds", "5"]) == 0
    out = capsys.readouterr().out
    study = load(tmp_path)
    runs = runs_of(study, study.user_attrs[PLAN_ATTR]["id"])
    assert runs[: len(first)] == first  # the first round's runs are kept, not relaunched
    assert f"{len(first)} relaunches already done" in out
    later = runs[len(first) :]
    assert min(r["round"] for r in later) == 1 and {r["label"] for r in later} == {"trial 1", "trial 2"}
    assert study.user_attrs[RESULT_ATTR]["rounds"] >= 2

    # what these relaunches measured is added to the host's store; the next study on the host starts with it
    data = json.loads(hostnoise.path_for(tmp_path / "studies", ident).read_text())
    assert set(data["studies"]) == {"earlier", "answer"} and data["df"] > 30
    path2 = study_file(tmp_path, [S3K1], noise=0.0, top=1, rounds=0)
    data2 = yaml.safe_load(path2.read_text())
    data2["study"] = "answer2"
    path2.write_text(yaml.safe_dump(data2))
    assert cli.main(["optimize", "--config", str(path2), "--executor", "thread", "--plain"]) == 0
    out2 = capsys.readouterr().out
    assert "host local" in out2 and "is known: launch-to-launch noise" in out2
    study2 = optuna.load_study(
        study_name="answer2", storage=open_storage(str(tmp_path / "studies" / "answer2" / "journal.log"))
    )
    assert study2.user_attrs[HOST_NOISE]["df"] == data["df"]
    assert study2.user_attrs[R.LAUNCH_NOISE]["source"].startswith("host ")  # the pruner starts with it too


def test_the_search_stops_itself_and_says_why(tmp_path, capsys):
    # the structured sampler on a small Kimi space, budget 12: with a 20 % threshold the model soon expects less
    # than that from any configuration left and the search stops; the terminal, summary and note say so
    space = {
        "name": "stop",
        "fixed": {
            "model-path": "moonshotai/Kimi-K2.5",
            "speculative-draft-model-path": "lightseekorg/kimi-k2.5-eagle3",
            "tp-size": 8,
            "attention-backend": "flashinfer",
        },
        "parameters": {
            "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
            "speculative-num-steps": {"type": "categorical", "choices": [1, 2, 3, 5]},
            "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
            "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL"]},
        },
    }
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    study = {
        "study": "stop",
        "studies_dir": str(tmp_path / "studies"),
        "space": str(tmp_path / "space.yaml"),
        "server": {"command": sim_command(KIMI), "boot_timeout_s": 30},
        "workload": {"concurrency": 1, "max_tokens": 32, "chunks": 2, "requests_per_chunk": 2, "warmup_requests": 1},
        "budget": {"trials": 12, "stop_below_gain_pct": 20},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "studies" / "stop" / "summary.json").read_text())
    stop = s["search_stop"]
    assert stop["reason"] == "confident" and stop["launches"] < 12 and s["launches"] == stop["launches"]
    assert stop["threshold"] == pytest.approx(0.2) and stop["expected_gain"] < 0.2
    assert f"the search stopped itself after {stop['launches']} launches" in out
    assert "the model expected" in stop["text"]
    import optuna_dashboard

    st = optuna.load_study(study_name="stop", storage=open_storage(str(tmp_path / "studies" / "stop" / "journal.log")))
    assert "**Stopped:** the search stopped itself" in optuna_dashboard.get_note(st)


def test_the_threshold_is_validated_and_other_samplers_have_no_stop_rule(tmp_path, capsys):
    for bad in (0, 150, "two", True):
        with pytest.raises(ConfigError) as e:
            parse_study({"budget": {"trials": 5, "stop_below_gain_pct": bad}}, "study.yaml")
        assert "budget.stop_below_gain_pct" in str(e.value) and "per cent" in str(e.value)
    assert parse_study({"budget": {"stop_below_gain_pct": None}}).budget.stop_below_gain_pct is None
    assert parse_study({}).budget.stop_below_gain_pct == 2.0
    path = study_file(tmp_path, [S3K1], noise=0.0, top=1, rounds=0, sampler={"name": "random"})
    assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "RandomSampler has no stop rule: the search spends its budget" in out
    s = json.loads((tmp_path / "studies" / "answer" / "summary.json").read_text())
    assert s["search_stop"]["reason"] == "budget" and "has no stop rule" in s["search_stop"]["text"]


def test_the_dry_run_counts_the_confirmation_and_the_expected_stop(tmp_path, capsys):
    args = ["optimize", "--dry-run", "--study", "dry", "--space", "search_spaces/demo.yaml"]
    args += ["--studies-dir", str(tmp_path), "--boot-s", "720", "--bench-s", "120"]
    assert cli.main([*args, "--trials", "14", "--confirm-rounds", "3", "--confirm-top", "2"]) == 0
    out = capsys.readouterr().out
    # 14 launches and 9 confirmation relaunches at 720 + 120 + 5.5 s: 5.4 h at most (the search alone: 3.3 h)
    assert "budget: 14 launches on 1 host(s), a ceiling: the search stops itself" in out
    assert "confirmation: up to 3 rounds of the baseline and the best 2, at most 9 relaunches" in out
    assert "estimated wall-clock: 5.4 h at most (14 launches + 9 confirmation relaunches" in out
    assert "expected: " in out and "until the search stops itself" in out
    assert cli.main([*args, "--trials", "14", "--confirm-rounds", "0"]) == 0
    out = capsys.readouterr().out
    assert "confirmation: off" in out and "estimated wall-clock: 3.3 h at most" in out
    # on four hosts a round may fill every host: 3 rounds of 4 relaunches at most, one launch's wall-clock each
    # (ceil(14 / 4) = 4 launch times for the search, 3 for the confirmation: 7 x 845.5 s = 1.6 h)
    assert cli.main([*args, "--hosts", str(local_hosts(tmp_path, 4)), "--trials", "14", "--confirm-rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert "at most 12 relaunches; each round relaunches only the configurations still in question (idle hosts" in out
    assert "estimated wall-clock: 1.6 h at most (14 launches + 12 confirmation relaunches" in out
