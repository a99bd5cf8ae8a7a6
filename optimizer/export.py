"""The take-away: ``best.yaml`` (SGLang's ``--config`` format), ``best.env`` (NCCL exports), ``best.sh`` (the
launch line) and ``summary.json``.

``best.yaml`` holds only keys SGLang's ``--config`` accepts (``optimizer.sglang.config_file``); a flag its parser
refuses (e.g. ``cuda-graph-backend-prefill``, whose destination deprecated aliases share) goes on ``best.sh``'s
command line instead, so ``bash best.sh`` boots the measured configuration as is. All files are rewritten from
storage alone (``python -m optimizer export --study NAME``), so they can be made again at any time, also for a
study that was interrupted.

A study over several load levels also writes ``best-c<N>.yaml``, ``.env`` and ``.sh`` for each level's own best
configuration, and a per-level table (``levels`` in summary.json): the best at each concurrency, its gain over
the baseline at that concurrency, and a plain verdict where no speculative configuration beats the baseline.
"""

from __future__ import annotations

import datetime as _dt
import shlex
from pathlib import Path
from typing import Any

import optuna
import yaml

from . import __version__
from .adaptive_export import export_adaptive
from .boot import study_boot_summary
from .candidate import Candidate
from .levels import level_answers, pareto_front, study_plan
from .redact import MASK, redact_mapping
from .sglang import config_file
from .study import records as R
from .study.records import baseline_trial, search_answer, summary_rows
from .study.storage import write_json


def export_study(study: optuna.Study, out_dir: Path) -> dict[str, Any]:
    from .alarms import greedy_note_of, study_alarms
    from .confirm import stored_verdict

    out_dir.mkdir(parents=True, exist_ok=True)
    best = search_answer(study)
    base = baseline_trial(study)
    attrs = study.user_attrs
    confirmation = stored_verdict(study)
    winner = (confirmation or {}).get("winner") or {}
    if isinstance(winner.get("trial"), int) and winner["trial"] < len(study.trials):
        best = study.trials[winner["trial"]]  # the confirmed winner, not the luckiest single launch
    summary: dict[str, Any] = {
        "study": study.study_name,
        "optimizer_version": __version__,
        "exported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "server_command": (best.user_attrs.get(R.SERVER_COMMAND) if best is not None else None)
        or attrs.get(R.SERVER_COMMAND),
        "space": attrs.get(R.SPACE),
        "workload": attrs.get(R.WORKLOAD),
        "trials": len(study.trials),
        "launches": sum(1 for t in study.trials if t.user_attrs.get(R.LAUNCHED)),
        "baseline": None,
        "best": None,
        "confirmation": confirmation,
        "launch_noise": attrs.get(R.LAUNCH_NOISE),
        "search_stop": attrs.get(R.SEARCH_STOP),  # why the search stopped, what one more launch was expected to gain
        "restarts": study_boot_summary(study.get_trials(deepcopy=False)),  # where the restarts went (boot.py)
        "alarms": {str(n): [a.as_dict() for a in found] for n, found in study_alarms(study).items()},
        "greedy_unchecked": {
            str(t.number): note
            for t in study.trials
            if t.user_attrs.get(R.LAUNCHED) and (note := greedy_note_of(study, t))
        },
    }
    if base is not None:
        summary["baseline"] = {"trial": base.number, "tok_per_s": base.value}
    plan = study_plan(study)
    if plan is not None and plan.multi_level:
        summary["objective"] = plan.describe()
        summary["limits"] = plan.limit_text()
        answers = level_answers(study, plan)
        summary["levels"] = [a.row() for a in answers]
        for a in answers:
            if a.best is not None:
                what = f"{a.tok_per_s:.1f} tok/s at concurrency {a.level}" + (
                    f" ({a.gain:+.1%} over the baseline at this concurrency)" if a.gain is not None else ""
                )
                _write_config(
                    out_dir, f"best-c{a.level}", study, a.best, what + (f"; {a.verdict()}" if a.verdict() else "")
                )
        summary["adaptive"] = export_adaptive(study, out_dir)  # best-adaptive.json + launch files (docs/adaptive.md)
    if plan is not None and plan.pareto:
        summary["pareto"] = pareto_front(study, plan)
    if best is None:
        summary["note"] = "no feasible trial yet"
        write_json(out_dir / "summary.json", summary)
        return summary
    cand = Candidate(flags=best.user_attrs.get(R.FLAGS, {}), env=best.user_attrs.get(R.ENV, {}))
    gain = None
    if base is not None and base.value:
        gain = best.value / base.value - 1.0  # type: ignore[operator]
    value = best.value
    if winner:
        value, gain = winner["tok_per_s"], winner.get("gain")
    summary["best"] = {
        "trial": best.number,
        "config": best.user_attrs.get(R.CONFIG),
        "tok_per_s": value,
        "confirmed": bool(winner),
        "ci": winner.get("ci"),
        "gain_ci": winner.get("gain_ci"),
        "launches": winner.get("launches", 1),
        "study_tok_per_s": best.value,
        "estimated_tok_per_s": ((attrs.get(R.ESTIMATE) or {}).get("estimates") or {}).get(str(best.number)),
        "host": best.user_attrs.get(R.HOST_FACTS),
        "server_version": best.user_attrs.get(R.SERVER_VERSION),
        "gain_over_baseline": None if gain is None else round(gain, 4),
        "accept_length": best.user_attrs.get(R.ACCEPT_LENGTH),
        "flags": redact_mapping(dict(cand.flags)),
        "env": redact_mapping(dict(cand.env)),
        "metrics": {k: v for k, v in best.user_attrs.items() if k.startswith(("ttft", "itl", "e2e", "requests"))},
    }
    how = f"confirmed over {winner.get('launches')} launches" if winner else "one launch, not confirmed"
    what = f"{value:.1f} tok/s ({how})" + (f" ({gain:+.1%} over the baseline)" if gain is not None else "")
    what += "".join(f"\n# {line}" for line in (confirmation or {}).get("verdict", [])[1:])
    if plan is not None and plan.multi_level:
        what += f"; objective: {plan.describe()}"
    summary["best"]["config_file_refused"] = _write_config(out_dir, "best", study, best, what)
    summary["rows"] = summary_rows(study)
    summary["answer"] = _answer(study, out_dir)
    write_json(out_dir / "summary.json", summary)
    return summary


def _answer(study: optuna.Study, out_dir: Path) -> dict[str, Any] | None:
    """The one answer (``optimizer.answer``) the terminal, the report and the study note show too."""
    from .answer import deploy_command, study_answer

    ans = study_answer(study)
    if ans is None:
        return None
    ans = {k: v for k, v in ans.items() if k not in ("flags", "env")}  # in ``best``, secrets masked
    ans["deploy"] = deploy_command(out_dir)
    return ans


def _write_config(
    out_dir: Path, stem: str, study: optuna.Study, trial: optuna.trial.FrozenTrial, what: str
) -> list[str]:
    """``<stem>.yaml`` (SGLang's --config), ``<stem>.env`` and ``<stem>.sh`` for one trial, secrets masked.
    Returns the flags SGLang's --config refuses (they go on the script's command line)."""
    cand = Candidate(flags=trial.user_attrs.get(R.FLAGS, {}), env=trial.user_attrs.get(R.ENV, {}))
    in_file, on_cli = config_file.split(redact_mapping(dict(cand.flags)))
    exported = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    header = (
        f"# Best configuration of study {study.study_name!r}: trial {trial.number}, {what}"
        + f"\n# Written by sglang-spec-optimizer {__version__} on {exported}."
        + f"\n# Use: bash {stem}.sh  (= source {stem}.env; python -m sglang.launch_server --config {stem}.yaml"
        + (" + the flags SGLang's --config refuses" if on_cli else "")
        + ")\n"
    )
    (out_dir / f"{stem}.yaml").write_text(header + yaml.safe_dump(in_file, sort_keys=False))
    env_text = _server_env_block(study.user_attrs.get(R.SERVER_ENV) or {}, cand.env)
    env_text += "# NCCL and other environment settings of the best trial (SGLang's --config cannot hold them)\n"
    env_text += Candidate(env=redact_mapping(dict(cand.env))).env_exports()
    (out_dir / f"{stem}.env").write_text(env_text)
    script = out_dir / f"{stem}.sh"
    pythons = study.user_attrs.get(R.HOST_PYTHON) or {}
    script.write_text(
        launch_script(
            study.study_name,
            trial.number,
            trial.user_attrs.get(R.SERVER_COMMAND) or study.user_attrs.get(R.SERVER_COMMAND),
            on_cli,
            stem=stem,
            python=pythons.get(str(trial.user_attrs.get(R.HOST))) if isinstance(pythons, dict) else None,
            workload=study.user_attrs.get(R.WORKLOAD),
        )
    )
    script.chmod(0o755)
    return sorted(on_cli)


def _server_env_block(server_env: dict[str, Any], trial_env: Any) -> str:
    """The study's ``server.env``: every trial was measured with it. The trial's own settings follow and win, so a
    name the trial sets is left out here; a masked secret is left for the user to set."""
    shared = {k: v for k, v in redact_mapping(server_env).items() if k not in trial_env}
    if not shared:
        return ""
    text = "# The study's server environment (server.env), which every trial ran with\n"
    masked = {k for k, v in shared.items() if v == MASK}
    text += "".join(f"# export {k}=...  (a secret, not written: set it yourself)\n" for k in sorted(masked))
    return text + Candidate(env={k: v for k, v in shared.items() if k not in masked}).env_exports() + "\n"


def launch_script(
    study: str,
    trial: int,
    server_command: str | None,
    on_cli: dict[str, Any],
    *,
    stem: str = "best",
    python: str | None = None,
    workload: Any = None,
) -> str:
    """``best.sh``: the study's server command with ``--config best.yaml`` and the flags the file cannot hold.

    ``{python}`` in the server command becomes the Python the trial's host ran it with (the hosts file's
    ``python:``, the driver's own for a local host), overridable with ``PYTHON=``; where that Python is not there
    the script says so and exits 127. The simulator also needs this project on ``PYTHONPATH``. Arguments given to
    ``best.sh`` (``--port 30000``) are passed on and win over the file (SGLang puts the file's flags first).
    """
    words = shlex.split(server_command) if server_command else ["{python}", "-m", "sglang.launch_server"]
    cmd = " ".join('"$py"' if w == "{python}" else shlex.quote(w) for w in words)
    refused = Candidate(flags=on_cli).argv()
    shown = ("prompts", "endpoint", "concurrency", "max_tokens", "temperature")
    tuned = (
        ", ".join(f"{k}={workload[k]}" for k in shown if workload.get(k) is not None)
        if isinstance(workload, dict)
        else ""
    )
    lines = [
        "#!/usr/bin/env bash",
        f"# The best configuration of study {study!r} (trial {trial}), as measured: run it as is; arguments",
        f"# (e.g. --port 30000) are passed on. {stem}.yaml holds what SGLang's --config accepts and {stem}.env the",
        "# environment.",
        f"# Tuned for the workload: {tuned or 'not recorded'}. Another load may have another best.",
    ]
    for name in on_cli:
        lines.append(f"# --{name} is on the command line: SGLang's --config refuses it ({config_file.refusal(name)}).")
    lines.append('here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"')
    if "{python}" in words:
        default = python or "python3"
        lines += [
            "# The Python the study's host ran the server with (hosts file 'python:'); PYTHON=... overrides it.",
            f'py="${{PYTHON:-{default}}}"',
            'if ! command -v "$py" >/dev/null 2>&1; then',
            f'  echo "{stem}.sh: the Python the study ran the server with ($py) is not on this machine; run it as'
            f' PYTHON=/path/to/python bash $0" >&2',
            "  exit 127",
            "fi",
        ]
    if "optimizer.sim" in words:
        root = shlex.quote(str(Path(__file__).resolve().parents[1]))
        lines.append(f'export PYTHONPATH={root}"${{PYTHONPATH:+:$PYTHONPATH}}"  # the bundled simulator')
    lines += [
        f'source "$here/{stem}.env"',
        f'exec {cmd} --config "$here/{stem}.yaml"' + "".join(f" {shlex.quote(a)}" for a in refused) + ' "$@"',
        "",
    ]
    return "\n".join(lines)
