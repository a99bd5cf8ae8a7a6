"""The take-away: ``best.yaml`` (SGLang's ``--config`` format), ``best.env`` (NCCL exports) and ``summary.json``.

All three are rewritten from storage alone (``python -m optimizer export --study NAME``), so they can be made
again at any time, also for a study that was interrupted.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import optuna
import yaml

from . import __version__
from .candidate import Candidate
from .redact import redact_mapping
from .study import baseline_trial, best_trial, summary_rows, write_json


def export_study(study: optuna.Study, out_dir: Path) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    best = best_trial(study)
    base = baseline_trial(study)
    attrs = study.user_attrs
    summary: dict[str, Any] = {
        "study": study.study_name,
        "optimizer_version": __version__,
        "exported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "server_command": attrs.get("server_command"),
        "space": attrs.get("space"),
        "workload": attrs.get("workload"),
        "trials": len(study.trials),
        "launches": sum(1 for t in study.trials if t.user_attrs.get("launched")),
        "baseline": None,
        "best": None,
    }
    if base is not None:
        summary["baseline"] = {"trial": base.number, "tok_per_s": base.value}
    if best is None:
        summary["note"] = "no feasible trial yet"
        write_json(out_dir / "summary.json", summary)
        return summary
    cand = Candidate(flags=best.user_attrs.get("flags", {}), env=best.user_attrs.get("env", {}))
    gain = None
    if base is not None and base.value:
        gain = best.value / base.value - 1.0  # type: ignore[operator]
    summary["best"] = {
        "trial": best.number,
        "config": best.user_attrs.get("config"),
        "tok_per_s": best.value,
        "gain_over_baseline": None if gain is None else round(gain, 4),
        "accept_length": best.user_attrs.get("accept_length"),
        "flags": redact_mapping(dict(cand.flags)),
        "env": redact_mapping(dict(cand.env)),
        "metrics": {k: v for k, v in best.user_attrs.items() if k.startswith(("ttft", "itl", "e2e", "requests"))},
    }
    header = (
        f"# Best configuration of study {study.study_name!r}: trial {best.number}, {best.value:.1f} tok/s"
        + (f" ({gain:+.1%} over the baseline)" if gain is not None else "")
        + f"\n# Written by sglang-spec-optimizer {__version__} on {summary['exported']}."
        + "\n# Use: python -m sglang.launch_server --config best.yaml  (source best.env first for NCCL settings)\n"
    )
    (out_dir / "best.yaml").write_text(header + yaml.safe_dump(redact_mapping(cand.config_mapping()), sort_keys=False))
    env_text = "# NCCL and other environment settings of the best trial (SGLang's --config cannot hold them)\n"
    env_text += Candidate(env=redact_mapping(dict(cand.env))).env_exports()
    (out_dir / "best.env").write_text(env_text)
    summary["rows"] = summary_rows(study)
    write_json(out_dir / "summary.json", summary)
    return summary
