"""What optuna-dashboard shows for each trial: a markdown note and artifacts (server log, benchmark records).

The driver calls :func:`annotate` after every tell. A note lives in the study's system attributes, so it can be
written after the trial has finished. Artifacts are different: Optuna refuses to change a finished trial, so for a
finished trial the artifact's metadata goes where optuna-dashboard also looks for trial artifacts (the study's
``dashboard:artifacts:<trial_id>:<artifact_id>`` attributes, which its own upload button used to write). While a
trial still runs, :func:`attach_artifacts` uses ``optuna.artifacts.upload_artifact`` on the trial itself.

Everything here is a convenience: it is quick, never raises for a missing file, and never leaks a secret
(flags, env, failure reasons, log tails and the uploaded server log are redacted).
"""

from __future__ import annotations

import io
import json
import mimetypes
import re
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .boot import study_boot_summary, summary_lines
from .redact import redact_attrs, redact_log
from .sglang.logs import BOOT_PHASE_NAMES
from .study import records as R
from .study.records import baseline_trial, outcome

ARTIFACT_DIR = "artifacts"
DASHBOARD_ARTIFACT_PREFIX = "dashboard:artifacts:"  # optuna-dashboard's study-level key for trial artifacts
OPTUNA_ARTIFACT_PREFIX = "artifacts:"  # optuna.artifacts' trial-level key
MAX_LOG_BYTES = 8 * 1024 * 1024  # the tail of a server log that is uploaded
MAX_RECORDS_BYTES = 64 * 1024 * 1024
LOG_TAIL_CHARS = 3000


METRICS: tuple[tuple[str, str, str], ...] = (
    ("tok_per_s", "throughput", "tok/s"),
    ("requests_per_s", "requests", "req/s"),
    ("accept_length", "accept length", "tokens/step"),
    ("tokens_per_chunk", "tokens per chunk", ""),
    ("ttft_ms_mean", "TTFT mean", "ms"),
    ("ttft_ms_p50", "TTFT p50", "ms"),
    ("ttft_ms_p99", "TTFT p99", "ms"),
    ("itl_ms_mean", "ITL mean", "ms"),
    ("itl_ms_p50", "ITL p50", "ms"),
    ("itl_ms_p99", "ITL p99", "ms"),
    ("e2e_ms_mean", "end-to-end mean", "ms"),
    ("e2e_ms_p50", "end-to-end p50", "ms"),
    ("e2e_ms_p99", "end-to-end p99", "ms"),
    ("completed", "requests completed", ""),
    ("failed", "requests failed", ""),
    ("chunks_run", "chunks run", ""),
    ("boot_s", "boot", "s"),
)


# ---------------------------------------------------------------------------------------------- markdown
def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str)
    return str(v)


def _cell(v: Any) -> str:
    return _fmt(v).replace("|", "\\|").replace("\n", " ")


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    header = list(header)
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def _code(text: str, lang: str = "text") -> list[str]:
    fence = "```"
    while fence in text:
        fence += "`"
    return [fence + lang, text.rstrip("\n"), fence, ""]


_REQUEST_LINE = re.compile(r'"(?:GET|POST|PUT|DELETE|HEAD) [^"]*HTTP/[0-9.]+" \d{3}')


#: Terminal colour and cursor sequences (SGLang and uvicorn colour their logs): markdown shows them raw.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def tidy_tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    """The end of a server log for a note: no terminal escapes, no cut-off first line, runs of HTTP access lines
    collapsed."""
    text = _ANSI.sub("", text)[-limit:]
    if len(text) >= limit and "\n" in text:
        text = text.split("\n", 1)[1]  # the first line was cut by the driver's truncation
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) > 2:
            out.extend([run[0], f"[... {len(run) - 2} more request lines ...]", run[-1]])
        else:
            out.extend(run)
        run.clear()

    for line in text.split("\n"):
        if _REQUEST_LINE.search(line):
            run.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out)


def boot_rows(phases: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(phase, seconds since launch, seconds since the previous phase), in time order."""
    items = sorted(
        ((str(k), float(v)) for k, v in (phases or {}).items() if isinstance(v, (int, float))),
        key=lambda kv: (kv[1], BOOT_PHASE_NAMES.index(kv[0]) if kv[0] in BOOT_PHASE_NAMES else 99),
    )
    out, prev = [], 0.0
    for name, at in items:
        out.append((name, at, max(0.0, at - prev)))
        prev = at
    return out


def note_markdown(
    frozen: FrozenTrial,
    *,
    baseline_tok_per_s: float | None = None,
    artifacts: list[dict[str, str]] | None = None,
    study_id: int | None = None,
    alarms: list[Any] | None = None,
) -> str:
    """The trial's note: configuration, metrics, boot time by phase, failure reason and log tail, artifacts."""
    ua = frozen.user_attrs
    oc = outcome(frozen)
    lines: list[str] = []
    title = ua.get(R.CONFIG) or ("baseline (no speculation)" if ua.get(R.BASELINE) else f"trial {frozen.number}")
    lines += [f"## Trial {frozen.number}: {title}", ""]
    head = [f"**outcome:** {oc}"]
    if ua.get(R.BASELINE):
        head.append("**baseline** (no speculative decoding)")
    if ua.get(R.HOST):
        head.append(f"**host:** {ua[R.HOST]}")
    t0, t1 = ua.get(R.T_START), ua.get(R.T_END)
    if isinstance(t0, (int, float)) and isinstance(t1, (int, float)) and t0 > 0:
        head.append(f"**ran:** {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t0))}, {t1 - t0:.1f} s")
    lines += [" · ".join(head), ""]

    value = ua.get(R.TOK_PER_S)
    if value is None and oc == "complete" and frozen.value is not None:
        value = frozen.value
    if (
        isinstance(value, (int, float))
        and oc in ("complete", "duplicate")
        and baseline_tok_per_s
        and not ua.get(R.BASELINE)
    ):
        gain = value / baseline_tok_per_s - 1.0
        lines += [f"**{value:.1f} tok/s**, {gain:+.1%} against the baseline ({baseline_tok_per_s:.1f} tok/s)", ""]
    elif isinstance(value, (int, float)) and oc in ("complete", "duplicate"):
        lines += [f"**{value:.1f} tok/s**", ""]
    elif isinstance(value, (int, float)):
        chunks = ua.get("chunks_run")
        lines += [
            f"Measured {value:.1f} tok/s"
            + (f" over {chunks} chunk(s)" if chunks else "")
            + f" before it stopped ({oc}); not a result.",
            "",
        ]
    if ua.get(R.DUPLICATE_OF) is not None:
        lines += [f"Duplicate of trial {ua[R.DUPLICATE_OF]} after SGLang's normalisation: not launched again.", ""]
    if alarms:  # right under the result: a misconfiguration makes the figure above meaningless
        lines += ["### Alarms", ""]
        for a in alarms:
            lines += [f"- **{a.kind}**: {a.seen} *Likely cause:* {a.cause} **Fix:** {a.fix}"]
        lines.append("")

    # failure first: it is what the reader of a failed trial looks for
    if oc in ("infeasible", "failed", "interrupted") or ua.get(R.FAILURE_REASON):
        lines += ["### Why it failed", ""]
        if ua.get(R.FAILURE_KIND):
            lines += [f"**kind:** `{ua[R.FAILURE_KIND]}`", ""]
        if ua.get(R.FAILURE_REASON):
            lines += [redact_log(str(ua[R.FAILURE_REASON])), ""]
        if ua.get(R.LOG_TAIL):
            lines += ["Server log (tail):", ""] + _code(redact_log(tidy_tail(str(ua[R.LOG_TAIL]))))
    if oc == "pruned" or ua.get(R.PRUNED_AT_CHUNK) is not None:
        at = ua.get(R.PRUNED_AT_CHUNK)
        lines += [
            f"Pruned{f' after chunk {at}' if at is not None else ''}: its chunks were slower than the "
            "trials it was compared with.",
            "",
        ]

    constraints = {k[len(R.CONSTRAINT_PREFIX) :]: v for k, v in ua.items() if k.startswith(R.CONSTRAINT_PREFIX)}
    if constraints and all(isinstance(v, (int, float)) and v <= 0 for v in constraints.values()):
        lines += ["Constraints satisfied: " + ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(constraints.items())), ""]
    elif constraints:
        lines += ["### Constraints", "", "(positive = violated)", ""]
        lines += _table(("constraint", "value"), sorted(constraints.items()))

    flags = redact_attrs(ua.get(R.FLAGS) or {})
    env = redact_attrs(ua.get(R.ENV) or {})
    lines += ["### Configuration", ""]
    if flags or env:
        rows = [(f"`{k}`", "flag", v) for k, v in flags.items()] + [(f"`{k}`", "env", v) for k, v in env.items()]
        lines += _table(("name", "kind", "value"), rows)
    else:
        lines += ["SGLang defaults (no speculative-decoding flags).", ""]
    if frozen.params:
        lines += ["Sampled parameters: " + ", ".join(f"`{k}={_fmt(v)}`" for k, v in frozen.params.items()), ""]

    metric_rows = [(label, ua[key], unit) for key, label, unit in METRICS if key in ua and ua[key] is not None]
    if metric_rows:
        lines += ["### Metrics", ""] + _table(("metric", "value", "unit"), metric_rows)

    if frozen.intermediate_values:
        lines += ["### Chunks (tok/s)", ""]
        lines += _table(("chunk", "tok/s"), sorted(frozen.intermediate_values.items()))

    phases = boot_rows(ua.get(R.BOOT_PHASES) or {})
    if phases:
        total = ua.get(R.BOOT_S)
        lines += [
            "### Boot time by phase" + (f" ({float(total):.1f} s)" if isinstance(total, (int, float)) else ""),
            "",
        ]
        longest = max(d for _, _, d in phases) or 1.0
        lines += _table(
            ("phase", "at (s)", "took (s)", ""),
            [(n, round(at, 2), round(d, 2), "█" * max(0, round(12 * d / longest))) for n, at, d in phases],
        )

    if artifacts:
        lines += ["### Artifacts", ""]
        for a in artifacts:
            url = f"/artifacts/{study_id}/{frozen._trial_id}/{a['artifact_id']}" if study_id is not None else ""
            lines.append(f"- [{a['filename']}]({url})" if url else f"- {a['filename']}")
        lines.append("")
    for key in (R.LOG_PATH, R.RECORDS_PATH):
        if ua.get(key):
            lines.append(f"{key.replace('_', ' ')}: `{ua[key]}`  ")
    return "\n".join(lines).rstrip() + "\n"


def study_note_markdown(study: optuna.Study) -> str:
    """The study's note: best configuration so far, its gain, the baseline, and trials per outcome."""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        counts[outcome(t)] = counts.get(outcome(t), 0) + 1
    lines = [f"## {study.study_name}", ""]
    base = study.user_attrs.get(R.BASELINE_TOK_PER_S)
    bt = baseline_trial(study)
    if base is None and bt is not None:
        base = bt.value
    from .answer import badge_note, headline, study_answer

    ans = study_answer(study)
    if ans is not None:
        lines += [f"**{headline(ans).replace('answer:', 'Answer:', 1)}**", "", f"{ans['verdict']}.", ""]
        for a in ans["alternatives"]:
            ci = a.get("ci") or [None, None]
            interval = f" ({ans['ci_level']:.0%} CI {ci[0]:.1f}-{ci[1]:.1f})" if None not in ci else ""
            lines += [
                f"- equivalent: trial {a['trial']} {a['config']}: {a['tok_per_s']:.1f} tok/s{interval}; {a['verdict']}"
            ]
        lines += ([""] if ans["alternatives"] else []) + [f"Why trial {ans['trial']}: {ans['why']}.", ""]
        badge = badge_note(ans)
        if badge:
            lines += [f"*{badge}*", ""]
        flags = redact_attrs(ans["flags"])
        env = redact_attrs(ans["env"])
        if flags or env:
            lines += _code(
                " ".join(f"{k}={v}" for k, v in env.items())
                + (" " if env else "")
                + " ".join(f"--{k} {v}" if not str(k).startswith("-") else f"{k} {v}" for k, v in flags.items()),
                "bash",
            )
    else:
        lines += ["No feasible trial yet.", ""]
    if base:
        lines += [f"**Baseline** (no speculation): {float(base):.1f} tok/s", ""]
    stop = study.user_attrs.get(R.SEARCH_STOP)
    if isinstance(stop, Mapping) and stop.get("text"):
        lines += [f"**Stopped:** {stop['text']}", ""]
    confirmation = study.user_attrs.get(R.CONFIRM_RESULT)
    if isinstance(confirmation, Mapping) and confirmation.get("verdict"):
        lines += [f"### Confirmation ({confirmation.get('launches', '?')} relaunches)", ""]
        lines += [f"- {line}" for line in confirmation["verdict"]] + [""]
    noise = study.user_attrs.get(R.LAUNCH_NOISE)
    if isinstance(noise, Mapping) and isinstance(noise.get("sigma"), (int, float)) and not confirmation:
        lines += [f"Launch-to-launch noise {noise['sigma']:.1%} (from {noise.get('source', '?')})", ""]
    lines += ["Trials: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), ""]
    restarts = summary_lines(study_boot_summary(trials))  # where the restarts went (optimizer/boot.py)
    lines += [f"- {x.strip()}" for x in restarts] + ([""] if restarts else [])
    workload = study.user_attrs.get(R.WORKLOAD)
    if isinstance(workload, Mapping):
        lines += ["Workload: " + ", ".join(f"{k}={_fmt(v)}" for k, v in workload.items()), ""]
    if study.user_attrs.get(R.SERVER_COMMAND):
        lines += ["Server command:", ""] + _code(redact_log(str(study.user_attrs[R.SERVER_COMMAND])), "bash")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------- artifacts
def _store(cfg: Any) -> Any:
    from optuna.artifacts import FileSystemArtifactStore

    root = Path(cfg.study_dir) / ARTIFACT_DIR
    root.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(root))


def _resolve(path: Any, cfg: Any) -> Path | None:
    if not path:
        return None
    p = Path(str(path))
    for cand in (p, Path(cfg.study_dir) / p):
        try:
            if cand.is_file():
                return cand
        except OSError:
            continue
    return None


def _read_tail(path: Path, limit: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - limit))
        return f.read()


def _payloads(frozen_or_attrs: Mapping[str, Any], number: int, cfg: Any) -> list[tuple[str, str, bytes]]:
    """(kind, filename, bytes) of the trial's server log (redacted tail) and benchmark records."""
    out = []
    log = _resolve(frozen_or_attrs.get(R.LOG_PATH), cfg)
    if log is not None:
        data = _read_tail(log, MAX_LOG_BYTES).decode("utf-8", "replace")
        out.append(("log", f"trial-{number}-{log.stem or 'server'}.log", redact_log(data).encode()))
    rec = _resolve(frozen_or_attrs.get(R.RECORDS_PATH), cfg)
    if rec is not None and rec.stat().st_size <= MAX_RECORDS_BYTES:
        out.append(("records", f"trial-{number}-{rec.name}", rec.read_bytes()))
    return out


def trial_artifacts(study: optuna.Study, trial_id: int) -> list[dict[str, Any]]:
    """Artifacts optuna-dashboard lists for a trial (both places it looks)."""
    storage = study._storage
    metas: list[dict[str, Any]] = []
    prefix = f"{DASHBOARD_ARTIFACT_PREFIX}{trial_id}:"
    for k, v in storage.get_study_system_attrs(study._study_id).items():
        if k.startswith(prefix) and v:
            meta = json.loads(v)
            if meta:
                metas.append(meta)
    for k, v in storage.get_trial_system_attrs(trial_id).items():
        if k.startswith(OPTUNA_ARTIFACT_PREFIX) and v:
            meta = json.loads(v)
            if meta:
                metas.append(meta)
    return metas


def attach_artifacts(study: optuna.Study, trial: optuna.Trial | FrozenTrial, cfg: Any) -> list[dict[str, Any]]:
    """Upload the trial's server log and benchmark records, once; returns the trial's artifact metadata.

    A running trial gets them through ``optuna.artifacts.upload_artifact``; a finished one (Optuna refuses to
    change it) through optuna-dashboard's study-level trial-artifact attributes. Missing files are skipped."""
    trial_id = trial._trial_id
    existing = trial_artifacts(study, trial_id)
    have = {m.get("filename") for m in existing}
    attrs = trial.user_attrs
    todo = [p for p in _payloads(attrs, trial.number, cfg) if p[1] not in have]
    if not todo:
        return existing
    store = _store(cfg)
    finished = study._storage.get_trial(trial_id).state.is_finished()
    for _kind, name, data in todo:
        if not finished:
            from optuna.artifacts import upload_artifact

            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / name
                path.write_bytes(data)
                upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial, storage=study._storage)
            continue
        artifact_id = str(uuid.uuid4())
        mimetype, encoding = mimetypes.guess_type(name)
        store.write(artifact_id, io.BytesIO(data))
        meta = {
            "artifact_id": artifact_id,
            "filename": name,
            "mimetype": mimetype or ("text/plain" if name.endswith(".log") else "application/octet-stream"),
            "encoding": encoding,
        }
        study._storage.set_study_system_attr(
            study._study_id, f"{DASHBOARD_ARTIFACT_PREFIX}{trial_id}:{artifact_id}", json.dumps(meta)
        )
    return trial_artifacts(study, trial_id)


# ---------------------------------------------------------------------------------------------- entry point
def annotate(study: optuna.Study, frozen: FrozenTrial, cfg: Any) -> None:
    """Artifacts, the trial's note and the study's note. Called by the driver after every tell."""
    import optuna_dashboard

    try:
        artifacts = attach_artifacts(study, frozen, cfg)
    except OSError:
        artifacts = []
    base = study.user_attrs.get(R.BASELINE_TOK_PER_S)
    from .alarms import alarms_of

    body = note_markdown(
        frozen, baseline_tok_per_s=base, artifacts=artifacts, study_id=study._study_id, alarms=alarms_of(study, frozen)
    )
    from .levels_view import note_lines

    per_level = note_lines(study, frozen)  # a study over several load levels: figures and limits per level
    if per_level:
        body = body.rstrip() + "\n\n" + "\n".join(per_level) + "\n"
    # save_note only needs the storage, the study and the trial id; an ``optuna.Trial`` would also call the
    # sampler's before_trial hook for a trial that is already over.
    optuna_dashboard.save_note(SimpleNamespace(storage=study._storage, study=study, _trial_id=frozen._trial_id), body)
    if frozen.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
        save_study_note(study)


def save_study_note(study: optuna.Study) -> None:
    """The study's note in optuna-dashboard (after every trial, and after a confirmation). Without
    optuna-dashboard installed (an air-gapped GPU host's bundle leaves the UI out) there is no note to write."""
    try:
        import optuna_dashboard
    except ImportError:
        return

    from .levels_view import study_note_lines

    optuna_dashboard.save_note(study, study_note_markdown(study) + study_note_lines(study))
