"""A per-level study's answer as one server: ``best-adaptive.json`` for SGLang's adaptive mode, and its launch files.

A per-level study measures a different best configuration at each concurrency; one server can only be launched
once. SGLang's adaptive mode (``--speculative-adaptive --speculative-adaptive-config FILE``,
``optimizer.sglang.adaptive``) routes each decode batch to a slot by its size and runs that slot's step count, so
the measured best *chain* of each level can be served by one server:

- each level ``c`` becomes the slot ``"c"`` with ``candidate_steps: [s]``, ``s`` the step count of the fastest
  topk-1 chain measured at ``c`` (complete, within the level's latency limits). Where no speculation measured
  faster, the note says so, but the chain stays: SGLang's 0 steps still runs the verify path and the draft-extend
  pass (it is not the baseline) and no launch measured it. One candidate per slot: SGLang's rule moves between
  candidates by acceptance alone, not by the step's cost, so a wider set would let it drift away from the
  measured best (docs/adaptive.md);
- a batch between two levels uses the slot of the level below (SGLang pads it to a captured graph size, then takes
  the largest slot key <= it); below the lowest level, the lowest level's slot;
- the other flags and the environment are those of the best chain at the study's objective (its objective level,
  else the chain with the best objective value): adaptive mode runs one set of settings for every load;
- adaptive mode cannot express topk > 1: where a level's fastest launch is a tree, the file says so and what the
  chain costs there (its measured tok/s against the tree's).

Written beside ``best.yaml``: ``best-adaptive.json`` (SGLang's adaptive config, nothing else in it),
``best-adaptive.yaml`` (``--config``: the anchor's flags without the step/draft counts, plus adaptive mode),
``best-adaptive.env`` and ``best-adaptive.sh`` (passes the JSON's absolute path, so it runs from anywhere). The
returned summary goes to ``summary.json`` under ``adaptive``.
"""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial

from . import __version__
from .candidate import Candidate
from .levels import _counts, best_by_kind, is_adaptive, study_plan, trial_levels
from .redact import MASK, redact_mapping
from .samplers.candidates import acts_on_communication
from .sglang import adaptive, config_file
from .sglang import flags as sgl
from .study import records as R

STEM = "best-adaptive"


def _tree(t: FrozenTrial) -> tuple[str | None, tuple[int, int, int] | None]:
    flags = t.user_attrs.get(R.FLAGS) or {}
    algo = sgl.algorithm(flags)
    if algo is None:
        return None, None
    return algo, sgl.resolved_triple(flags)


def _is_chain(t: FrozenTrial) -> bool:
    algo, tree = _tree(t)
    return algo in ("EAGLE", "EAGLE3") and tree is not None and tree[1] == 1 and not is_adaptive(t)


def _kind(t: FrozenTrial) -> str:
    if is_adaptive(t):
        return "adaptive"
    return "none" if _tree(t)[0] is None else "chain" if _is_chain(t) else "tree"


def schedule(study: optuna.Study, *, neighbours: int = 0) -> dict[str, Any] | None:
    """The tuned schedule of a per-level study (None for a single-level study or one without a measured chain):
    ``config`` (SGLang's adaptive JSON), ``anchor`` (the trial whose other settings it uses) and one row per level.
    ``neighbours`` > 0 gives each slot the step counts within that distance of its best (1 or more) as candidates,
    for SGLang's acceptance rule to choose among (the default, 0, pins the measured best: docs/adaptive.md)."""
    plan = study_plan(study)
    if plan is None or not plan.multi_level:
        return None
    trials = [t for t in study.get_trials(deepcopy=False) if _counts(t)]
    rows: list[dict[str, Any]] = []
    for c in plan.levels:
        rows.append({"concurrency": c, **best_by_kind(trials, plan, c, lambda t: (_kind(t), "any"))})
    if not any("chain" in r for r in rows):
        return None
    anchor = _anchor(study, plan, trials)
    if anchor is None:
        return None
    # the server runs the anchor's settings at every load: a chain measured with them is the evidence that counts
    one_gpu = int((anchor.user_attrs.get(R.FLAGS) or {}).get("tp-size") or 1) <= 1
    same = [t for t in trials if _is_chain(t) and _settings(t, one_gpu) == _settings(anchor, one_gpu)]
    out_rows = []
    config: dict[str, Any] = {}
    for r in rows:
        c = r["concurrency"]
        chain, none, top = _fastest_at(same, c) or r.get("chain"), r.get("none"), r.get("any")
        if chain is None:
            continue
        steps, tps, src = _tree(chain[1])[1][0], chain[0], chain[1]  # type: ignore[index]
        config[str(c)] = {"candidate_steps": list(range(max(1, steps - neighbours), steps + neighbours + 1))}
        row: dict[str, Any] = {
            "concurrency": c,
            "steps": steps,
            "from_trial": src.number,
            "from_config": src.user_attrs.get(R.CONFIG),
            "measured_tok_per_s": round(tps, 2),
            "level_best_trial": top[1].number if top else None,
            "level_best_config": top[1].user_attrs.get(R.CONFIG) if top else None,
            "level_best_tok_per_s": round(top[0], 2) if top else None,
            "needs_topk_gt_1": False,
            "note": "",
        }
        if none is not None and none[0] > tps:
            # SGLang's 0 steps is not "no speculation": it still runs the verify path and the draft-extend pass,
            # and no launch of the study measured it, so the measured best chain stays
            row["note"] = (
                f"no speculation measured fastest at this level ({none[1].user_attrs.get(R.CONFIG)}: "
                f"{none[0]:.1f} tok/s, the chain {1.0 - tps / none[0]:.1%} less); adaptive mode's 0 steps still "
                "runs the verify path and the draft-extend pass and was not measured, so the best chain is kept: "
                "serve without speculation if this load dominates"
            )
        if top is not None and top[1] is not src and top[0] > tps:
            cost = 1.0 - tps / top[0]
            row["cost_vs_level_best"] = round(cost, 4)
            if _tree(top[1])[1] is not None and _tree(top[1])[1][1] > 1 and not is_adaptive(top[1]):  # type: ignore[index]
                row["needs_topk_gt_1"] = True
                row["note"] = (
                    f"the fastest launch at this level is a tree ({top[1].user_attrs.get(R.CONFIG)}: "
                    f"{top[0]:.1f} tok/s), which adaptive mode cannot express (topk 1 only); the best chain gives "
                    f"{tps:.1f} tok/s here, {cost:.1%} less"
                )
            elif is_adaptive(top[1]):
                row["note"] = (
                    f"an adaptive launch measured fastest here ({top[1].user_attrs.get(R.CONFIG)}: {top[0]:.1f} "
                    f"tok/s); the chosen step count measured {cost:.1%} less"
                )
            elif not row["note"] and _tree(top[1])[1] is not None:
                row["note"] = (
                    f"the fastest launch at this level ({top[1].user_attrs.get(R.CONFIG)}: {top[0]:.1f} tok/s) "
                    f"differs in other settings; the chosen step count measured {cost:.1%} less"
                )
        if _settings(src, one_gpu) != _settings(anchor, one_gpu):
            row["note"] = (row["note"] + "; " if row["note"] else "") + (
                f"no chain with the schedule's settings (trial {anchor.number}) was measured at this level: the step "
                f"count comes from trial {src.number}, measured with other settings"
            )
        out_rows.append(row)
    if not config:
        return None
    adaptive.parse_config(config)  # what SGLang will accept, checked here
    return {"config": config, "anchor": anchor, "levels": out_rows}


def _settings(t: FrozenTrial, one_gpu: bool) -> tuple:
    """Everything but the draft tree that can change the server: the other flags and the environment (on one GPU,
    without the communication settings, which change nothing there)."""
    tree = (sgl.ALGO, sgl.STEPS, sgl.TOPK, sgl.DRAFT)

    def kept(name: str) -> bool:
        return name not in tree and not (one_gpu and acts_on_communication(name))

    flags = {k: str(v) for k, v in (t.user_attrs.get(R.FLAGS) or {}).items() if kept(k)}
    env = {k: str(v) for k, v in (t.user_attrs.get(R.ENV) or {}).items() if kept(k)}
    return tuple(sorted(flags.items())), tuple(sorted(env.items()))


def _fastest_at(trials: list[FrozenTrial], c: int) -> tuple[float, FrozenTrial] | None:
    """The trial measured fastest at concurrency c (complete at that level), with its tok/s."""
    measured = [(float(m["tok_per_s"]), t) for t in trials if (m := trial_levels(t).get(c))
                and m.get("complete") and m.get("tok_per_s") is not None]  # fmt: skip
    return max(measured, key=lambda x: x[0]) if measured else None


def _anchor(study: optuna.Study, plan: Any, trials: list[FrozenTrial]) -> FrozenTrial | None:
    """The chain whose other settings (flags, environment) the adaptive launch takes."""
    chains = [t for t in trials if _is_chain(t)]
    if not chains:
        return None
    if plan.level is not None:
        fastest = _fastest_at(chains, plan.level)
        if fastest:
            return fastest[1]
    valued = [t for t in chains if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    if valued:
        return max(valued, key=lambda t: float(t.value))  # type: ignore[arg-type]
    return chains[0]


def adaptive_flags(
    anchor_flags: dict[str, Any], json_path: str, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The anchor's flags as an adaptive launch: topk 1, no draft-token count (each slot has its own step count).

    With the schedule's ``config``, the launch's step count is its deepest candidate, so every other runtime state
    SGLang builds is shallower than the launch's: on an H200 with Triton attention, SGLang 0.5.17 failed to capture
    a state deeper than the launch's and booted when launched at the deepest (docs/adaptive.md). A slot whose
    candidates leave that count out starts at its own middle candidate, so with one candidate per slot nothing else
    changes."""
    out = {
        k: v for k, v in anchor_flags.items() if k not in (sgl.STEPS, sgl.DRAFT, adaptive.FLAG, adaptive.CONFIG_FLAG)
    }
    if config is not None:
        out[sgl.STEPS] = max(adaptive.parse_config(config).candidate_steps)
    out[sgl.TOPK] = 1
    out[adaptive.FLAG] = True
    out[adaptive.CONFIG_FLAG] = json_path
    return out


def default_adaptive_flags(tuned: dict[str, Any]) -> dict[str, Any]:
    """A tuned adaptive launch's flags as SGLang's default adaptive config: no config file and no step count (SGLang
    starts at the middle of its candidates), the rest as tuned."""
    return {k: v for k, v in tuned.items() if k not in (adaptive.CONFIG_FLAG, sgl.STEPS)}


def export_adaptive(study: optuna.Study, out_dir: Path, *, neighbours: int = 0) -> dict[str, Any] | None:
    """Write ``best-adaptive.json``/``.yaml``/``.env``/``.sh`` for a per-level study; the summary, or None."""
    sched = schedule(study, neighbours=neighbours)
    if sched is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    anchor: FrozenTrial = sched["anchor"]
    (out_dir / f"{STEM}.json").write_text(json.dumps(sched["config"], indent=2) + "\n")
    flags = adaptive_flags(redact_mapping(dict(anchor.user_attrs.get(R.FLAGS) or {})), f"{STEM}.json", sched["config"])
    in_file, on_cli = config_file.split(flags)
    exported = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    lines = [
        f"# Tuned adaptive schedule of study {study.study_name!r}: one server that runs each level's measured best",
        "# chain (SGLang's --speculative-adaptive; the step count per batch size is in best-adaptive.json). It starts at",
        "# the deepest of them: SGLang 0.5.17 failed to capture a state deeper than the launch's (H200, Triton).",
        f"# Other settings from trial {anchor.number} ({anchor.user_attrs.get(R.CONFIG)}).",
    ]
    for r in sched["levels"]:
        lines.append(
            f"# concurrency {r['concurrency']}: {r['steps']} steps (trial {r['from_trial']}, "
            f"{r['measured_tok_per_s']:.1f} tok/s)" + (f"; {r['note']}" if r["note"] else "")
        )
    lines += [
        f"# Written by sglang-spec-optimizer {__version__} on {exported}. Not confirmed by relaunches yet.",
        f"# Use: bash {STEM}.sh  (it passes the JSON's absolute path; this file's relative path works from this folder)",
    ]
    (out_dir / f"{STEM}.yaml").write_text("\n".join(lines) + "\n" + yaml.safe_dump(in_file, sort_keys=False))
    env = redact_mapping(dict(anchor.user_attrs.get(R.ENV) or {}))
    shared = {k: v for k, v in redact_mapping(study.user_attrs.get(R.SERVER_ENV) or {}).items() if k not in env}
    env_text = ""
    if shared:
        env_text += "# The study's server environment (server.env), which every trial ran with\n"
        env_text += "".join(f"# export {k}=...  (a secret, not written: set it yourself)\n" for k, v in sorted(shared.items()) if v == MASK)  # fmt: skip
        env_text += Candidate(env={k: v for k, v in shared.items() if v != MASK}).env_exports() + "\n"
    env_text += "# NCCL and other environment settings of the anchor trial\n" + Candidate(env=env).env_exports()
    (out_dir / f"{STEM}.env").write_text(env_text)
    script = out_dir / f"{STEM}.sh"
    script.write_text(_script(study, anchor.number, on_cli))
    script.chmod(0o755)
    confirmation = study.user_attrs.get(R.ADAPTIVE_CONFIRM)
    if not (isinstance(confirmation, dict) and confirmation.get("config") == sched["config"]):
        confirmation = None  # none yet, or of another schedule (the study has moved on since)
    return {
        "files": [f"{STEM}.json", f"{STEM}.yaml", f"{STEM}.env", f"{STEM}.sh"],
        "config": sched["config"],
        "anchor_trial": anchor.number,
        "levels": sched["levels"],
        "confirmed": confirmation is not None,
        "confirmation": None
        if confirmation is None
        else {"rounds": confirmation.get("rounds"), "levels": confirmation.get("levels")},
        "adaptive_trials_measured": sum(1 for t in study.get_trials(deepcopy=False) if _counts(t) and is_adaptive(t)),
    }


def _script(study: optuna.Study, anchor: int, on_cli: dict[str, Any]) -> str:
    cmd_text = study.user_attrs.get(R.SERVER_COMMAND)
    words = shlex.split(cmd_text) if cmd_text else ["{python}", "-m", "sglang.launch_server"]
    cmd = " ".join('"${PYTHON:-python3}"' if w == "{python}" else shlex.quote(w) for w in words)
    refused = Candidate(flags={k: v for k, v in on_cli.items() if k != adaptive.CONFIG_FLAG}).argv()
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# The tuned adaptive schedule of study {study.study_name!r} (settings of trial {anchor}): one server,",
            "# each batch size at its level's measured best chain. Arguments (e.g. --port 30000) are passed on.",
            'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            f'source "$here/{STEM}.env"',
            f'exec {cmd} --config "$here/{STEM}.yaml"'
            + "".join(f" {shlex.quote(a)}" for a in refused)
            + f' --speculative-adaptive-config "$here/{STEM}.json" "$@"',
            "",
        ]
    )


__all__ = ["STEM", "adaptive_flags", "export_adaptive", "schedule"]
