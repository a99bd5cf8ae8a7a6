"""Each misconfiguration alarm, end to end: a real study (journal file) through real simulator processes that
reproduce the mistake, with the alarm checked where a user looks: the trial's dashboard note, the terminal, the
report and the exported summary."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import optuna
from conftest import sim_command

from optimizer import alarms, confirm
from optimizer.app import print_summary
from optimizer.executors import ThreadExecutor
from optimizer.export import export_study
from optimizer.hosts.config import local_host
from optimizer.report import write_report
from optimizer.settings import parse_study
from optimizer.space import parse_space
from optimizer.study import Driver, Progress

LLAMA = "llama-3.1-8b-h100"
SPACE = {
    "name": "alarms",
    # no max-running-requests: SGLang resets it to 48 for speculative decoding, below the benchmark's 50
    "fixed": {"model-path": "m", "speculative-draft-model-path": "eagle3-head", "attention-backend": "fa3"},
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE", "EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [2, 3, 7]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
    },
}
EAGLE_ON_EAGLE3 = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 2, "speculative-eagle-topk": 1}
EAGLE3 = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3, "speculative-eagle-topk": 1}
#: EAGLE with 7 steps drafts the most for nothing: 115 against the baseline's 158 tok/s in the model (and EAGLE3
#: 355), margins that per-request delays on a loaded machine do not close over 128-token answers
SLOW_EAGLE = dict(EAGLE_ON_EAGLE3, **{"speculative-num-steps": 7})


def run_study(
    tmp_path: Path,
    sim_extra: list[str],
    concurrency: int,
    requests: int,
    max_tokens: int = 8,
    server_env: dict[str, str] | None = None,
    initial: list[dict] | None = None,
) -> tuple[optuna.Study, list]:
    cfg = parse_study(
        {
            "study": "alarms",
            "studies_dir": str(tmp_path / "studies"),
            "server": {
                "command": sim_command(LLAMA, step_scale=1.0) + sim_extra,
                "boot_timeout_s": 30,
                "env": server_env or {},
            },
            "workload": {
                "concurrency": concurrency,
                "max_tokens": max_tokens,
                "chunks": 2,
                "requests_per_chunk": requests,
                "warmup_requests": 1,
            },
            "budget": {"trials": 3},
            "pruner": {"name": "none"},
            "initial": initial or [EAGLE_ON_EAGLE3, EAGLE3],
        },
        "test",
    )
    hosts = [local_host("local")]
    ex = ThreadExecutor(hosts, cfg.study_dir.absolute())
    lines: list[str] = []
    try:
        study = Driver(cfg, parse_space(SPACE, "alarms.yaml"), hosts, ex, progress=Progress(lines.append)).run()
    finally:
        ex.shutdown()
    return study, lines


def by_config(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    out = {}
    for t in study.trials:
        if not t.user_attrs.get("launched"):
            continue  # SGLang's default triple, enqueued as a warm start, is left waiting when the budget ends
        if t.user_attrs.get("baseline"):
            out["baseline"] = t
        else:
            out[t.params["speculative-algorithm"]] = t
    return out


def kinds(found: list[alarms.Alarm]) -> set[str]:
    return {a.kind for a in found}


def notes_text(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str:
    import optuna_dashboard

    return optuna_dashboard.get_note(SimpleNamespace(storage=study._storage, study=study, _trial_id=trial._trial_id))


def test_misconfigured_server_raises_every_alarm(tmp_path, capsys):
    # A broken verify kernel (speculative outputs differ at temperature 0) and an attention backend the server
    # silently replaces; EAGLE given the profile's EAGLE-3 drafter; 50 concurrent requests with SGLang's 48 cap.
    study, lines = run_study(
        tmp_path, ["--sim-broken-verify", "--sim-override", "attention-backend=triton"], concurrency=50, requests=50
    )
    t = by_config(study)
    assert {k: v.user_attrs["outcome"] for k, v in t.items()} == {
        "baseline": "complete",
        "EAGLE": "complete",
        "EAGLE3": "complete",
    }
    found = alarms.study_alarms(study)
    eagle, eagle3, base = found[t["EAGLE"].number], found[t["EAGLE3"].number], found[t["baseline"].number]

    # (a) accept length near 1 with speculation on: EAGLE with an EAGLE-3 drafter, and the fix names EAGLE3
    (low,) = [a for a in eagle if a.kind == "low_accept"]
    assert t["EAGLE"].user_attrs["accept_length"] <= alarms.ACCEPT_NEAR_ONE
    assert "EAGLE3" in low.fix and "EAGLE-3 drafter" in low.cause
    assert "low_accept" not in kinds(eagle3)  # the right algorithm accepts well
    # (b) greedy outputs unlike the baseline's: every speculative trial of the broken kernel
    assert "greedy_mismatch" in kinds(eagle) and "greedy_mismatch" in kinds(eagle3)
    assert "greedy_mismatch" not in kinds(base)
    # (c) slower than the baseline: see the next test (at concurrency 50 this 2-core machine, not the model, sets
    # the pace)
    # (d) settings the server changed: the attention backend asked for (every trial), and the 48 cap
    changed = [a for a in eagle3 if a.kind == "server_changed"]
    assert any("attention-backend triton although the trial asked for fa3" in a.seen for a in changed)
    assert any("at most 48 requests" in a.seen and "max-running-requests: 50" in a.fix for a in changed)
    assert any("attention-backend" in a.seen for a in base)
    assert not any("at most 48" in a.seen for a in base)  # no speculation: no cap

    # the trial's dashboard note
    note = notes_text(study, t["EAGLE"])
    assert "### Alarms" in note and "low_accept" in note and "--speculative-algorithm EAGLE3" in note
    # the terminal
    text = "\n".join(lines)
    n = t["EAGLE"].number
    assert f"ALARM trial {n} low_accept" in text and f"ALARM trial {n} greedy_mismatch" in text
    # the report
    html = write_report(study, tmp_path / "report.html").read_text()
    assert "Alarms" in html and "greedy_mismatch" in html and "SGLang resets --max-running-requests to 48" in html
    # the summary, and the final lines printed
    summary = export_study(study, tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    # (slower_than_baseline is left out here for the reason given at (c))
    assert {a["kind"] for a in saved["alarms"][str(t["EAGLE"].number)]} >= {
        "low_accept",
        "greedy_mismatch",
        "server_changed",
    }
    print_summary(summary)
    out = capsys.readouterr().out
    assert f"ALARM trial {t['EAGLE'].number} low_accept" in out and "Fix: use --speculative-algorithm EAGLE3" in out
    # the host each result was measured on
    facts = t["EAGLE3"].user_attrs["host_facts"]
    assert facts.get("cpu") and facts.get("cpus", 0) >= 1 and t["EAGLE3"].user_attrs["server_version"] == "0.5.17"


def test_a_correct_setup_raises_no_alarm(tmp_path):
    study, lines = run_study(tmp_path, [], concurrency=1, requests=2, max_tokens=128, initial=[SLOW_EAGLE, EAGLE3])
    t = by_config(study)
    found = alarms.study_alarms(study)
    # EAGLE with an EAGLE-3 drafter is still a mistake; the right algorithm, correct outputs and an honoured
    # configuration raise nothing
    assert t["EAGLE3"].value > t["baseline"].value
    assert t["EAGLE3"].number not in found and t["baseline"].number not in found
    # (c) slower than the baseline (the model: 115 against 158 tok/s)
    assert t["EAGLE"].value < t["baseline"].value
    assert kinds(found[t["EAGLE"].number]) >= {"low_accept", "slower_than_baseline"}
    assert "ALARM trial 1 slower_than_baseline" in "\n".join(lines)
    assert "greedy_mismatch" not in kinds(found[t["EAGLE"].number])
    assert not [line for line in lines if f"trial {t['EAGLE3'].number}" in line and "ALARM" in line]


def test_simulated_accept_length_makes_the_greedy_check_a_note(tmp_path):
    # SGLANG_SIMULATE_ACC_LEN (dummy-weight benchmarking) makes SGLang emit fixed tokens, so speculative outputs
    # differ from the baseline's; the simulator's broken verify kernel produces the same differing outputs.
    study, lines = run_study(
        tmp_path,
        ["--sim-broken-verify"],
        concurrency=1,
        requests=2,
        max_tokens=32,
        server_env={"SGLANG_SIMULATE_ACC_LEN": "3.0"},
    )
    t = by_config(study)
    base_digests = t["baseline"].user_attrs["greedy_digests"]
    assert t["EAGLE3"].user_attrs["greedy_digests"] != base_digests  # the outputs do differ
    found = alarms.study_alarms(study)
    assert all("greedy_mismatch" not in kinds(found.get(t[k].number, [])) for k in ("EAGLE", "EAGLE3"))
    text = "\n".join(lines)
    for k in ("EAGLE", "EAGLE3"):
        n = t[k].number
        assert f"note trial {n}: greedy output check not meaningful with SGLANG_SIMULATE_ACC_LEN=3.0" in text
    assert f"note trial {t['baseline'].number}:" not in text
    # a speculative trial stays a confirmation candidate, and the export records the note
    assert t["EAGLE3"].number in [c.number for c in confirm.candidates(study, 3)]
    saved = export_study(study, tmp_path / "out")
    assert set(saved["greedy_unchecked"]) == {str(t["EAGLE"].number), str(t["EAGLE3"].number)}
    # without the variable the same outputs raise the alarm (the rule, on the recorded attributes)
    assert "greedy_mismatch" in kinds(alarms.trial_alarms(t["EAGLE3"].user_attrs, None, t["baseline"].user_attrs))
    env_trial = {**t["EAGLE3"].user_attrs, "env": {"SGLANG_SIMULATE_ACC_LEN": "2.5"}}
    assert "greedy_mismatch" not in kinds(alarms.trial_alarms(env_trial, None, t["baseline"].user_attrs))
