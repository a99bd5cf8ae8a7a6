"""Resume only what matches. A study remembers the space it searches (fixed flags, environment, parameters), its
workload and its server command; a run that brings other ones is refused before anything starts, with what
differs, rather than failing inside Optuna (``CategoricalDistribution does not support dynamic value space``) with
a trial left running.

One change is let through: a new server command for a study that has measured nothing yet (every launch so far
failed, e.g. ``No module named 'sglang'``). The command is recorded anew and the baseline is measured again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import distribution_to_json

from ..errors import ConfigError
from ..redact import redact_mapping, redact_text
from ..settings import StudyConfig
from ..space import CategoricalParam, FloatParam, IntParam, SearchSpace
from . import records as R


def space_record(space: SearchSpace) -> dict[str, Any]:
    m = space.model
    return json.loads(
        json.dumps(
            {
                # stored in the study: secret-named values masked (a changed secret is not a different space)
                "fixed": redact_mapping(dict(m.fixed)),
                "env": redact_mapping(dict(m.env)),
                "parameters": {k: v.model_dump(mode="json", exclude_none=True) for k, v in space.params.items()},
            },
            default=str,
        )
    )


def _distribution(p: Any) -> optuna.distributions.BaseDistribution:
    if isinstance(p, IntParam):
        return optuna.distributions.IntDistribution(p.low, p.high, step=p.step, log=p.log)
    if isinstance(p, FloatParam):
        return optuna.distributions.FloatDistribution(p.low, p.high, step=p.step, log=p.log)
    assert isinstance(p, CategoricalParam)
    return optuna.distributions.CategoricalDistribution(p.choices)


def _existing(cfg: StudyConfig) -> optuna.Study | None:
    from .storage import open_storage

    url = cfg.storage_url
    if "://" not in url and not Path(url).exists():
        return None
    try:
        return optuna.load_study(study_name=cfg.study, storage=open_storage(url))
    except KeyError:
        return None


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _diff(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if old == new else [f"{prefix}: {old!r} then, {new!r} now"]


def check_resume(cfg: StudyConfig, space: SearchSpace) -> list[str]:
    """Refuse (ConfigError) a run whose space, workload or server command differs from the existing study's.
    Returns notes on what was let through."""
    study = _existing(cfg)
    if study is None:
        return []
    attrs = study.user_attrs
    name = cfg.study
    hint = f"continue with the study's own, or start a new study (--study {name}-2)"
    differs: list[str] = []
    stored = attrs.get(R.SPACE_PARAMS)
    if isinstance(stored, dict):
        differs += [f"space {d}" for d in _diff(stored, space_record(space))]
    else:  # older studies: the distributions their trials were asked with
        for t in study.get_trials(deepcopy=False):
            for pname, dist in t.distributions.items():
                p = space.params.get(pname)
                if p is not None and distribution_to_json(_distribution(p)) != distribution_to_json(dist):
                    differs.append(f"space parameters.{pname}: {dist} then, {_distribution(p)} now")
            if differs:
                break
    if differs:
        raise ConfigError(
            f"study {name!r} searched another space ({attrs.get(R.SPACE)}): {'; '.join(differs[:3])}. "
            f"A study's results hold for its own space only: {hint}",
            key="space",
        )
    workload = attrs.get(R.WORKLOAD)
    if isinstance(workload, dict):
        now = cfg.workload.model_dump(mode="json")
        d = _diff(workload, now)
        if d:
            raise ConfigError(
                f"study {name!r} was measured with another workload: {'; '.join(d[:3])}. tok/s of two workloads "
                f"cannot be compared: {hint}",
                key="workload",
            )
    old_cmd, new_cmd = attrs.get(R.SERVER_COMMAND), redact_text(" ".join(cfg.server.command))
    if old_cmd is not None and old_cmd != new_cmd:
        measured = [t.number for t in study.get_trials(deepcopy=False) if R.feasible(t)]
        if measured:
            raise ConfigError(
                f"study {name!r} was measured with another server command ({old_cmd!r}; now {new_cmd!r}); "
                f"trials {measured[:5]} ran with it. {hint[0].upper()}{hint[1:]}",
                key="server.command",
            )
        study.set_user_attr(R.SERVER_COMMAND, new_cmd)
        return [
            f"the server command changed ({old_cmd!r} -> {new_cmd!r}); nothing was measured with the old one, so "
            "the study goes on with the new one and measures the baseline again"
        ]
    return []
