"""Notes and artifacts on a real journal study: content per outcome, redaction, idempotence, missing files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import optuna_dashboard
from test_report_study import SECRET, build_study

from optimizer.notes import annotate, attach_artifacts, note_markdown, redact_attrs, redact_log, trial_artifacts
from optimizer.settings import StudyConfig
from optimizer.study import open_storage


def _note(study: optuna.Study, number: int) -> str:
    t = study.get_trials(deepcopy=False)[number]
    return optuna_dashboard.get_note(SimpleNamespace(storage=study._storage, study=study, _trial_id=t._trial_id))


def test_redaction_keeps_draft_tokens_and_hides_secrets() -> None:
    assert redact_attrs(
        {"speculative-num-draft-tokens": 8, "HF_TOKEN": "x", "api-key": "y", "tokenizer-path": "t"}
    ) == {"speculative-num-draft-tokens": 8, "HF_TOKEN": "***", "api-key": "***", "tokenizer-path": "t"}
    text = f"ServerArgs(api_key='abc', max_total_tokens=5) --api-key sekrit --port 1 first token 5 {SECRET}"
    out = redact_log(text)
    assert "abc" not in out and "sekrit" not in out and SECRET not in out
    assert "max_total_tokens=5" in out and "--port 1" in out and "first token 5" in out


def test_annotate_is_idempotent_and_quick(tmp_path: Path) -> None:
    study, cfg = build_study(tmp_path, n=4)
    frozen = study.get_trials(deepcopy=False)[1]
    before = trial_artifacts(study, frozen._trial_id)
    t0 = time.perf_counter()
    annotate(study, frozen, cfg)
    assert time.perf_counter() - t0 < 2.0
    assert trial_artifacts(study, frozen._trial_id) == before  # not uploaded twice
    assert (
        len(list((cfg.study_dir / "artifacts").iterdir())) == 2 + 2 + 1 + 2
    )  # logs and records of trials 0-3 (2 has no records)
    note = _note(study, 1)
    assert note.startswith("## Trial 1: EAGLE3 s3 k1 d4") and "+69.3% against the baseline" in note


def test_missing_files_and_bare_trials_never_raise(tmp_path: Path) -> None:
    cfg = StudyConfig(study="bare", studies_dir=str(tmp_path))
    study = optuna.create_study(study_name="bare", storage=open_storage(cfg.storage_url), direction="maximize")
    t = study.ask()
    t.set_user_attr("log_path", str(tmp_path / "gone.log"))
    t.set_user_attr("records_path", "")
    t.set_user_attr("boot_phases", {"server_args": 1.0, "weird": "x"})
    study.tell(t, state=optuna.trial.TrialState.FAIL)
    annotate(study, study.get_trials()[0], cfg)
    note = _note(study, 0)
    assert "## Trial 0" in note and "SGLang defaults" in note
    assert trial_artifacts(study, study.get_trials()[0]._trial_id) == []


def test_running_trial_gets_optuna_artifacts(tmp_path: Path) -> None:
    cfg = StudyConfig(study="live", studies_dir=str(tmp_path))
    study = optuna.create_study(study_name="live", storage=open_storage(cfg.storage_url), direction="maximize")
    log = tmp_path / "server.log"
    log.write_text(f"hello\n--api-key {SECRET}\n")
    rec = tmp_path / "bench.json"
    rec.write_text(json.dumps({"records": []}))
    trial = study.ask()
    trial.set_user_attr("log_path", str(log))
    trial.set_user_attr("records_path", str(rec))
    metas = attach_artifacts(study, trial, cfg)  # before tell: optuna.artifacts.upload_artifact on the trial
    assert {m["filename"] for m in metas} == {f"trial-{trial.number}-server.log", f"trial-{trial.number}-bench.json"}
    system = study._storage.get_trial_system_attrs(trial._trial_id)
    assert sum(k.startswith("artifacts:") for k in system) == 2
    study.tell(trial, 1.0)
    annotate(study, study.get_trials()[0], cfg)  # after tell: nothing uploaded twice
    assert len(trial_artifacts(study, trial._trial_id)) == 2
    from optuna.artifacts import FileSystemArtifactStore, download_artifact

    store = FileSystemArtifactStore(str(cfg.study_dir / "artifacts"))
    log_meta = next(m for m in metas if m["filename"].endswith(".log"))
    out = tmp_path / "back.log"
    download_artifact(artifact_store=store, artifact_id=log_meta["artifact_id"], file_path=str(out))
    assert SECRET not in out.read_text() and "--api-key ***" in out.read_text()


def test_note_for_each_outcome(tmp_path: Path) -> None:
    study, _ = build_study(tmp_path)
    trials = study.get_trials()
    base = study.user_attrs["baseline_tok_per_s"]
    notes = {t.number: note_markdown(t, baseline_tok_per_s=base) for t in trials}
    assert "**baseline** (no speculative decoding)" in notes[0]
    assert "### Boot time by phase" in notes[1] and "| ready_line |" in notes[1]
    assert "### Chunks (tok/s)" in notes[1]
    assert "**kind:** `hang`" in notes[8] and "no progress for 600 s" in notes[8]
    assert "host fault: ssh connection lost" in notes[10]
    assert all(SECRET not in n for n in notes.values())
    # a log tail that contains a code fence cannot break out of its block
    frozen = trials[2]
    frozen.user_attrs["log_tail"] = "a\n```\n# not a heading\n"
    md = note_markdown(frozen)
    assert "````text" in md
