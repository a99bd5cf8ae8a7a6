"""Confirmation: relaunch the study's top configurations and the baseline, interleaved, and pick a winner that
holds up (``optimizer.verdict`` does the statistics).

A study's best comes from one launch each, and launches of the same configuration differ (by 1-3 % on a steady
machine, by 15-30 % on another one). So after the study (``confirm.rounds`` in the study file, or
``python -m optimizer confirm``) the baseline and the ``top`` best configurations are launched again with fresh
restarts, in rounds ``A B C, A B C, ...`` so drift cancels, each round with its own prompt order (the workload's
seed moves by round; every configuration of a round gets the same prompts).

Runs are stored as study user attributes (``confirm:run:NNNN``), never as trials: the sampler does not see
them, the study's launch budget does not count them, and a confirmation interrupted half-way resumes with the
runs it already has. The verdict is stored as ``confirm:result``; the export takes its winner as the best.
"""

from __future__ import annotations

import hashlib
import json
import math
import queue
import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from . import alarms
from .events import TrialResult
from .study import records as R
from .trial import TrialSpec
from .verdict import Arm, Verdict, arm_cost, decide

PLAN_ATTR = R.CONFIRM_PLAN
RUN_PREFIX = R.CONFIRM_RUN_PREFIX
RESULT_ATTR = R.CONFIRM_RESULT
NOISE_ATTR = R.LAUNCH_NOISE
#: Trial numbers given to confirmation launches, far above any study's (executors key their runs by number).
NUMBER_BASE = 1_000_000
MAX_HOST_RETRIES = 2


@dataclass
class Item:
    seq: int
    round: int
    arm: int  # index into the plan's arms
    retries: int = 0


def candidates(study: optuna.Study, top: int) -> list[optuna.trial.FrozenTrial]:
    """The ``top`` best distinct complete trials (no duplicates, no baseline, none whose greedy output was
    wrong: a broken configuration is not a winner however fast it is)."""
    trials = study.get_trials(deepcopy=False)
    base = next(
        (t for t in trials if t.user_attrs.get(R.BASELINE) and t.state == TrialState.COMPLETE),
        None,
    )
    done = []
    for t in trials:
        ua = t.user_attrs
        if t.state != TrialState.COMPLETE or ua.get(R.OUTCOME) != R.COMPLETE or ua.get(R.BASELINE):
            continue
        if ua.get(R.DUPLICATE_OF) is not None or t.value is None:
            continue
        if any(
            a.kind == "greedy_mismatch"
            for a in alarms.for_trial(t, base, t.value, server_env=study.user_attrs.get(R.SERVER_ENV))
        ):
            continue
        done.append(t)
    done.sort(key=lambda t: t.value, reverse=True)  # type: ignore[arg-type, return-value]
    seen: set[str] = set()
    out = []
    for t in done:
        key = t.user_attrs.get(R.CANDIDATE_KEY) or json.dumps(t.params, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out[:top]


def runs_of(study: optuna.Study, plan_id: str | None = None) -> list[dict[str, Any]]:
    attrs = study.user_attrs
    runs = [v for k, v in sorted(attrs.items()) if k.startswith(RUN_PREFIX) and isinstance(v, dict)]
    return [r for r in runs if plan_id is None or r.get("plan") == plan_id]


def arms_from(study: optuna.Study) -> list[Arm]:
    """The current plan's arms with the runs stored so far."""
    plan = study.user_attrs.get(PLAN_ATTR)
    if not isinstance(plan, dict):
        return []
    arms = [
        Arm(
            label=a["label"],
            trial=a.get("trial"),
            config=a.get("config", ""),
            cost=tuple(a.get("cost", (0, 0, 0))),  # type: ignore[arg-type]
            baseline=bool(a.get("baseline")),
            study_tok_per_s=a.get("study_tok_per_s"),
        )
        for a in plan.get("arms", [])
    ]
    for r in runs_of(study, plan.get("id")):
        if r.get("status") == "complete" and isinstance(r.get("tok_per_s"), (int, float)) and r["tok_per_s"] > 0:
            arms[r["arm"]].runs[int(r["round"])] = float(r["tok_per_s"])
    return arms


def stored_verdict(study: optuna.Study) -> dict[str, Any] | None:
    v = study.user_attrs.get(RESULT_ATTR)
    return v if isinstance(v, dict) else None


class Confirmer:
    """Runs a confirmation with an executor (the study's own: Ray actors, threads, or the in-process model)."""

    def __init__(
        self,
        cfg: Any,
        space: Any,
        hosts: list[Any],
        executor: Any,
        study: optuna.Study,
        *,
        progress: Any = None,
    ) -> None:
        self.cfg = cfg
        self.space = space
        self.hosts = [h.name if hasattr(h, "name") else str(h) for h in hosts]
        self.executor = executor
        self.study = study
        self.progress = progress
        self.launches = 0
        self.stopping = False

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.note(self, text)

    # ------------------------------------------------------------------ plan
    def plan(self, rounds: int, top: int) -> tuple[dict[str, Any], list[Any]]:
        """The arms (baseline first, then the study's best ``top``) and their candidates."""
        arms: list[dict[str, Any]] = []
        cands: list[Any] = []
        trials = self.study.get_trials(deepcopy=False)
        base = next(
            (
                t
                for t in trials
                if t.user_attrs.get(R.BASELINE) and t.state == TrialState.COMPLETE and t.value is not None
            ),
            None,
        )
        if self.space.model.baseline:
            c = self.space.baseline()
            arms.append(
                {
                    "label": "baseline",
                    "trial": None if base is None else base.number,
                    "config": "baseline (no speculation)",
                    "cost": [0, 0, 0],
                    "baseline": True,
                    "study_tok_per_s": None if base is None else base.value,
                }
            )
            cands.append(c)
        for t in candidates(self.study, top):
            c = self.space.candidate(t.params)
            arms.append(
                {
                    "label": f"trial {t.number}",
                    "trial": t.number,
                    "config": t.user_attrs.get(R.CONFIG) or self.space.describe(c),
                    "cost": list(arm_cost(c.flags)),
                    "baseline": False,
                    "study_tok_per_s": t.value,
                }
            )
            cands.append(c)
        ident = hashlib.sha1(json.dumps([arms, rounds], sort_keys=True, default=str).encode()).hexdigest()[:12]
        return {"id": ident, "rounds": rounds, "arms": arms}, cands

    # ------------------------------------------------------------------ run
    def run(self, rounds: int, top: int) -> Verdict | None:
        plan, cands = self.plan(rounds, top)
        if len([a for a in plan["arms"] if not a["baseline"]]) == 0:
            self.say("confirmation: no completed configuration to confirm")
            return None
        if self.study.user_attrs.get(PLAN_ATTR, {}).get("id") != plan["id"]:
            self.study.set_user_attr(PLAN_ATTR, plan)
        done = {(r["round"], r["arm"]) for r in runs_of(self.study, plan["id"]) if r.get("status") == "complete"}
        seq0 = len([k for k in self.study.user_attrs if k.startswith(RUN_PREFIX)])
        todo = [
            Item(seq=0, round=r, arm=i) for r in range(rounds) for i in range(len(plan["arms"])) if (r, i) not in done
        ]
        for n, it in enumerate(todo):
            it.seq = seq0 + n
        total = rounds * len(plan["arms"])
        labels = ", ".join(a["label"] for a in plan["arms"])
        self.say(
            f"confirmation: {total} launches ({rounds} rounds of {labels}), outside the study's launch budget"
            + (f"; {total - len(todo)} already done" if len(todo) < total else "")
        )
        pending = list(todo)
        active: dict[int, tuple[Item, str]] = {}
        busy: set[str] = set()
        finished = total - len(todo)
        while (pending or active) and not self.stopping:
            for host in [h for h in self.hosts if h not in busy]:
                if not pending:
                    break
                it = pending.pop(0)
                spec = self._spec(it, plan, cands[it.arm])
                active[spec.number] = (it, host)
                busy.add(host)
                self.executor.submit(host, spec)
            try:
                ev = self.executor.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if not isinstance(ev, TrialResult) or ev.trial not in active:
                continue
            it, host = active.pop(ev.trial)
            busy.discard(host)
            if ev.status == "host_fault" and it.retries < MAX_HOST_RETRIES:
                it.retries += 1
                pending.insert(0, it)
                self.say(f"confirmation: host fault on {host} ({ev.reason}); run again")
                continue
            finished += 1
            self._record(it, plan, host, ev)
            arm = plan["arms"][it.arm]
            value = ev.metrics.get(R.TOK_PER_S) if ev.status == "complete" else None
            self.say(
                f"confirmation {finished}/{total} (round {it.round + 1}/{rounds}) [{host}]: {arm['label']} "
                + (f"{value:.1f} tok/s" if isinstance(value, (int, float)) else f"{ev.status} {ev.reason}".strip())
            )
        verdict = decide(arms_from(self.study))
        result = verdict.as_dict()
        result["plan"] = plan["id"]
        result["rounds"] = rounds
        result["launches"] = len([r for r in runs_of(self.study, plan["id"])])
        self.study.set_user_attr(RESULT_ATTR, result)
        if verdict.noise is not None:
            self.study.set_user_attr(
                NOISE_ATTR, {"sigma": verdict.noise, "df": verdict.noise_df, "source": "confirmation"}
            )
        for line in verdict.lines:
            self.say(line)
        try:
            from .notes import save_study_note

            save_study_note(self.study)  # the dashboard's study note shows the verdict
        except Exception as exc:  # noqa: BLE001 - a note is a convenience, never a failure
            self.say(f"study note not written: {exc}")
        return verdict

    def _spec(self, it: Item, plan: dict[str, Any], cand: Any) -> TrialSpec:
        cfg = self.cfg
        number = NUMBER_BASE + it.seq
        # Shuffled prompt order per round, the same for every configuration of the round (paired rounds).
        workload = cfg.workload.model_copy(update={"seed": cfg.workload.seed + 1 + it.round})
        return TrialSpec(
            number=number,
            candidate=cand,
            command=list(cfg.server.command),
            workload=workload,
            trial_dir=str(cfg.study_dir / "confirm" / f"{it.seq:04d}"),
            extra_args=list(cfg.server.extra_args),
            server_env=dict(cfg.server.env),
            boot_timeout_s=cfg.server.boot_timeout_s,
            dist_init_timeout_s=cfg.server.dist_init_timeout_s,
            poll_s=cfg.server.poll_s,
            stop_timeout_s=cfg.server.stop_timeout_s,
            study=cfg.study,
            protected=True,  # never pruned: a confirmation run is measured in full
        )

    def _record(self, it: Item, plan: dict[str, Any], host: str, ev: TrialResult) -> None:
        m = ev.metrics or {}
        value = m.get(R.TOK_PER_S)
        self.launches += 1
        run = {
            "plan": plan["id"],
            "round": it.round,
            "arm": it.arm,
            "label": plan["arms"][it.arm]["label"],
            "status": ev.status,
            "tok_per_s": value if isinstance(value, (int, float)) and not math.isnan(value) else None,
            "accept_length": m.get(R.ACCEPT_LENGTH),
            "host": host,
            "boot_s": ev.boot_s,
            "host_facts": m.get(R.HOST_FACTS),
            "server_version": m.get(R.SERVER_VERSION),
            "reason": (ev.reason or "")[:300],
            "t_end": ev.t_end or time.time(),
        }
        self.study.set_user_attr(f"{RUN_PREFIX}{it.seq:04d}", run)
