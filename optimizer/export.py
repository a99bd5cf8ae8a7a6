"""The take-away: ``best.yaml`` (SGLang's ``--config`` format), ``best.env`` (NCCL exports), ``best.sh`` (the
launch line) and ``summary.json``.

``best.yaml`` holds only keys SGLang's ``--config`` accepts (``optimizer.sglang.config_file``); a flag its parser
refuses (e.g. ``cuda-graph-backend-prefill``, whose destination deprecated aliases share) goes on ``best.sh``'s
command line instead, so ``bash best.sh`` boots the measured configuration as is. All files are rewritten from
storage alone (``python -m optimizer export --study NAME``), so they can be made again at any time, also for a
study that was interrupted.
"""

from __future__ import annotations

import datetime as _dt
import shlex
from pathlib import Path
from typing import Any

import optuna
import yaml

from . import __version__
from .candidate import Candidate
from .redact import redact_mapping
from .sglang import config_file
from .study import records as R
from .study.records import baseline_trial, best_trial, summary_rows
from .study.storage import write_json


def export_study(study: optuna.Study, out_dir: Path) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    best = best_trial(study)
    base = baseline_trial(study)
    attrs = study.user_attrs
    summary: dict[str, Any] = {
        "study": study.study_name,
        "optimizer_version": __version__,
        "exported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "server_command": attrs.get(R.SERVER_COMMAND),
        "space": attrs.get(R.SPACE),
        "workload": attrs.get(R.WORKLOAD),
        "trials": len(study.trials),
        "launches": sum(1 for t in study.trials if t.user_attrs.get(R.LAUNCHED)),
        "baseline": None,
        "best": None,
    }
    if base is not None:
        summary["baseline"] = {"trial": base.number, "tok_per_s": base.value}
    if best is None:
        summary["note"] = "no feasible trial yet"
        write_json(out_dir / "summary.json", summary)
        return summary
    cand = Candidate(flags=best.user_attrs.get(R.FLAGS, {}), env=best.user_attrs.get(R.ENV, {}))
    gain = None
    if base is not None and base.value:
        gain = best.value / base.value - 1.0  # type: ignore[operator]
    summary["best"] = {
        "trial": best.number,
        "config": best.user_attrs.get(R.CONFIG),
        "tok_per_s": best.value,
        "gain_over_baseline": None if gain is None else round(gain, 4),
        "accept_length": best.user_attrs.get(R.ACCEPT_LENGTH),
        "flags": redact_mapping(dict(cand.flags)),
        "env": redact_mapping(dict(cand.env)),
        "metrics": {k: v for k, v in best.user_attrs.items() if k.startswith(("ttft", "itl", "e2e", "requests"))},
    }
    flags = redact_mapping(dict(cand.flags))
    in_file, on_cli = config_file.split(flags)
    summary["best"]["config_file_refused"] = sorted(on_cli)
    header = (
        f"# Best configuration of study {study.study_name!r}: trial {best.number}, {best.value:.1f} tok/s"
        + (f" ({gain:+.1%} over the baseline)" if gain is not None else "")
        + f"\n# Written by sglang-spec-optimizer {__version__} on {summary['exported']}."
        + "\n# Use: bash best.sh  (= source best.env; python -m sglang.launch_server --config best.yaml"
        + (" + the flags SGLang's --config refuses" if on_cli else "")
        + ")\n"
    )
    (out_dir / "best.yaml").write_text(header + yaml.safe_dump(in_file, sort_keys=False))
    env_text = "# NCCL and other environment settings of the best trial (SGLang's --config cannot hold them)\n"
    env_text += Candidate(env=redact_mapping(dict(cand.env))).env_exports()
    (out_dir / "best.env").write_text(env_text)
    script = out_dir / "best.sh"
    script.write_text(launch_script(study.study_name, best.number, attrs.get("server_command"), on_cli))
    script.chmod(0o755)
    summary["rows"] = summary_rows(study)
    write_json(out_dir / "summary.json", summary)
    return summary


def launch_script(study: str, trial: int, server_command: str | None, on_cli: dict[str, Any]) -> str:
    """``best.sh``: the study's server command with ``--config best.yaml`` and the flags the file cannot hold.

    ``{python}`` in the study's server command becomes ``${PYTHON:-python3}``; arguments given to ``best.sh``
    (``--port 30000``) are passed on and win over the file (SGLang puts the file's flags first).
    """
    words = shlex.split(server_command) if server_command else ["{python}", "-m", "sglang.launch_server"]
    cmd = " ".join('"${PYTHON:-python3}"' if w == "{python}" else shlex.quote(w) for w in words)
    refused = Candidate(flags=on_cli).argv()
    lines = [
        "#!/usr/bin/env bash",
        f"# The best configuration of study {study!r} (trial {trial}), as measured: run it as is; arguments",
        "# (e.g. --port 30000) are passed on. best.yaml holds what SGLang's --config accepts and best.env the",
        "# environment.",
    ]
    for name in on_cli:
        lines.append(f"# --{name} is on the command line: SGLang's --config refuses it ({config_file.refusal(name)}).")
    lines += [
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'source "$here/best.env"',
        f'exec {cmd} --config "$here/best.yaml"' + "".join(f" {shlex.quote(a)}" for a in refused) + ' "$@"',
        "",
    ]
    return "\n".join(lines)
