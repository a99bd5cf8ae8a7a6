"""Launch-to-launch noise, measured once per host and kept across studies on that host.

How much two launches of the same configuration differ is a property of the machine (1-3 % on a steady one,
15-30 % on another), not of a study. A confirmation measures it (the pooled spread of log tok/s over relaunches,
``optimizer.verdict.launch_noise``) and stores it here, keyed by the host's identity: its name, GPU(s), driver,
SGLang and NCCL versions, as a launch's probes read them (``optimizer.probes``). A new study on a known host adopts
it at its first launch that reports the host: the pruner's margin (study attribute ``launch_noise``) and the
confirmation's prior (``host_noise``) start from it. Where nothing is known the confirmation's stated prior is
``optimizer.verdict.NOISE_PRIOR``.

One JSON file per identity, ``<studies_dir>/hosts/<slug>.json``: the identity, and each study's measurement
(sigma, degrees of freedom); the host's noise pools them (a study confirmed again replaces its own entry, so a
re-run never counts the same launches twice).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import optuna

from . import records as R

HOST_NOISE = "host_noise"  # study attribute: {sigma, df, file, identity} adopted from the host's store
#: a host's noise weighs at most this many degrees of freedom as a prior: machines change (drivers, thermals)
MAX_PRIOR_DF = 30


def identity(host: str, facts: dict[str, Any] | None, server_version: Any = None) -> dict[str, str]:
    facts = facts or {}
    return {
        "host": str(host or "local"),
        "gpu": str(facts.get("gpu") or "unknown"),
        "driver": str(facts.get("driver") or "unknown"),
        "sglang": str(server_version or "unknown"),
        "nccl": str(facts.get("nccl") or "unknown"),
    }


def slug(ident: dict[str, str]) -> str:
    digest = hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{ident['host']}-{ident['gpu']}").strip("-")[:60]
    return f"{name}-{digest}"


def path_for(studies_dir: str | Path, ident: dict[str, str]) -> Path:
    return Path(studies_dir) / "hosts" / f"{slug(ident)}.json"


def pooled(entries: dict[str, Any]) -> tuple[float, int] | None:
    ss, df = 0.0, 0
    for e in entries.values():
        if isinstance(e, dict) and isinstance(e.get("sigma"), (int, float)) and int(e.get("df") or 0) > 0:
            ss += float(e["sigma"]) ** 2 * int(e["df"])
            df += int(e["df"])
    return (math.sqrt(ss / df), df) if df else None


def load(studies_dir: str | Path, ident: dict[str, str]) -> tuple[float, int] | None:
    try:
        data = json.loads(path_for(studies_dir, ident).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return pooled(data.get("studies") or {}) if isinstance(data, dict) else None


def save(studies_dir: str | Path, ident: dict[str, str], study: str, sigma: float, df: int) -> Path:
    path = path_for(studies_dir, ident)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    studies = data.get("studies") if isinstance(data.get("studies"), dict) else {}
    studies[study] = {"sigma": round(float(sigma), 6), "df": int(df)}
    noise = pooled(studies)
    data = {"identity": ident, "sigma": noise[0] if noise else None, "df": noise[1] if noise else 0, "studies": studies}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def of_trial(trial: Any) -> dict[str, str] | None:
    """The identity of the host a launch ran on, when the launch reported its host."""
    ua = trial.user_attrs if hasattr(trial, "user_attrs") else trial
    facts = ua.get(R.HOST_FACTS)
    if not isinstance(facts, dict):
        return None
    return identity(ua.get(R.HOST) or "local", facts, ua.get(R.SERVER_VERSION))


def study_identity(study: optuna.Study) -> dict[str, str] | None:
    """The host of the study's baseline launch (else its first launch that reported one)."""
    trials = study.get_trials(deepcopy=False)
    base = R.baseline_trial(study)
    for t in ([base] if base is not None else []) + trials:
        ident = of_trial(t)
        if ident is not None:
            return ident
    return None


def adopt(study: optuna.Study, studies_dir: str | Path, ident: dict[str, str]) -> str | None:
    """Start the study with the host's stored noise (if any and the study has none); returns a line to show."""
    if isinstance(study.user_attrs.get(HOST_NOISE), dict):
        return None
    known = load(studies_dir, ident)
    if known is None:
        return None
    sigma, df = known
    file = str(path_for(studies_dir, ident))
    study.set_user_attr(HOST_NOISE, {"sigma": sigma, "df": df, "file": file, "identity": ident})
    if not isinstance(study.user_attrs.get(R.LAUNCH_NOISE), dict):
        study.set_user_attr(R.LAUNCH_NOISE, {"sigma": sigma, "df": df, "source": f"host {slug(ident)}"})
    return f"host {ident['host']} ({ident['gpu']}) is known: launch-to-launch noise {sigma:.1%} over {df} df ({file})"


def prior(study: optuna.Study) -> tuple[tuple[float, int], str]:
    """The confirmation's prior on the noise: the host's stored noise, else the stated ``NOISE_PRIOR``."""
    from ..verdict import NOISE_PRIOR

    h = study.user_attrs.get(HOST_NOISE)
    if isinstance(h, dict) and isinstance(h.get("sigma"), (int, float)) and int(h.get("df") or 0) > 0:
        return (float(h["sigma"]), min(int(h["df"]), MAX_PRIOR_DF)), f"the host's stored {float(h['sigma']):.1%}"
    return NOISE_PRIOR, f"a stated prior of {NOISE_PRIOR[0]:.0%} ({NOISE_PRIOR[1]} df; the host is not known yet)"
