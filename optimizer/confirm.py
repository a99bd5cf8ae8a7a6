"""Confirmation: relaunch the study's top configurations and the baseline, interleaved, and pick a winner that
holds up (``optimizer.verdict`` does the statistics).

A study's best comes from one launch each, and launches of the same configuration differ (by 1-3 % on a steady
machine, by 15-30 % on another one). So after the study (``confirm.rounds`` in the study file, or
``python -m optimizer confirm``) the baseline and the ``top`` best configurations are launched again with fresh
restarts, in rounds ``A B C, A B C, ...`` so drift cancels, each round with its own prompt order (the workload's
seed moves by round; every configuration of a round gets the same prompts).

By default the confirmation is sequential (``confirm.sequential``): ``rounds`` is a ceiling, and after each round
``optimizer.verdict.settle`` asks whether the verdict is decided at 95 % (a significant winner, equivalence within
``confirm.margin_pct``, or no gain worth having over the baseline); it stops as soon as it is. The search's own
launches count: the baseline's launch and its relaunches, and the single launch of every configuration but the
study's best. The study's best is the search's answer (its model's estimate pools every launch, its own included);
its launch helped select it and is left out of its estimate (so it is not biased upwards; the runners-up's launches
were selected for being high and read high too, which only makes the winner harder to declare). It stays the winner
until the relaunches settle a comparison against it: an undecided confirmation exports it, not whichever
configuration a few noisy relaunches ranked first. A round relaunches only the configurations still in an open comparison (the study's best always in the first round): one
the search's launches already separate is not relaunched. A round's relaunches run side by side on the hosts; hosts
the round would leave idle relaunch the configurations in question again (the study's answer first, the baseline
last) where that can save a round (``Confirmer._fill``): a round on four hosts with two configurations in question
can measure each twice for the wall-clock of one. Hosts the search's last launches left idle may already have
relaunched the configurations (``confirm.start_early``, ``optimizer.study.relaunch``): those relaunches count as the
first round's, and the first round waits for those still running (``early``).
The noise starts from the host's stored noise (``optimizer.study.hostnoise``), else a stated prior, pooled with
what the launches show; the measured noise is stored for the host afterwards. Rounds asked later
(``confirm --confirm-rounds 4`` after 3) add to the runs already made. ``sequential: false`` is the fixed design:
every round relaunches every configuration, gains from paired per-round ratios.

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
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from . import alarms
from .events import PhaseEvent, TrialResult
from .study import hostnoise
from .study import records as R
from .study.relaunch import baseline_runs, completed_values, early_runs
from .trial import TrialSpec
from .verdict import SETTLE_HORIZON, Arm, Verdict, arm_cost, decide, launch_noise, rounds_to_settle

PLAN_ATTR = R.CONFIRM_PLAN
RUN_PREFIX = R.CONFIRM_RUN_PREFIX
RESULT_ATTR = R.CONFIRM_RESULT
NOISE_ATTR = R.LAUNCH_NOISE
#: Trial numbers given to confirmation launches, far above any study's (executors key their runs by number).
NUMBER_BASE = 1_000_000
MAX_HOST_RETRIES = 2
#: degrees of freedom of measured noise a sequential confirmation needs before it settles a comparison, on a host
#: whose noise is not stored (with the stated prior alone, 20 % launch noise read as 5 % and decided wrongly)
MIN_DF = 2


@dataclass
class Item:
    seq: int
    round: int
    arm: int  # index into the plan's arms
    retries: int = 0
    slot: int = 0  # 0: the arm's relaunch of the round; 1, 2, ...: again, on a host the round would leave idle


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
    # by the single measurements, not the search's estimates (optimizer.samplers.estimate): ranked by the estimates,
    # the exported answer on the Kimi profile was within 2 % of the optimum in 14 of 20 runs at 3 % launch noise
    # instead of 16, and in 5 instead of 8 at 20 % (benchmarks.answer, 2026-12-03)
    done.sort(key=lambda t: t.value, reverse=True)  # type: ignore[arg-type, return-value]
    seen: set[str] = set()
    out = []
    for t in done:
        key = t.user_attrs.get(R.CANDIDATE_KEY) or json.dumps(t.params, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out[:top]


def confirmed_trials(study: optuna.Study, top: int) -> list[optuna.trial.FrozenTrial]:
    """The configurations a confirmation holds besides the baseline: the search's answer (its model's estimate,
    ``records.search_answer``) first, then the fastest single launches, ``top`` in all. The first is the study's
    best the plan marks as selected."""
    answer = R.search_answer(study)
    ranked = candidates(study, len(study.get_trials(deepcopy=False)))
    ranked.sort(key=lambda t: answer is None or t.number != answer.number)  # stable: the answer first
    return ranked[:top]


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
            evidence=[float(x) for x in a.get("evidence") or []],
        )
        for a in plan.get("arms", [])
    ]
    if plan.get("sequential"):  # relaunches made while the search's last launches ran (confirm.start_early)
        for arm in arms:
            values = completed_values(early_runs(study, None if arm.baseline else arm.trial))
            (arm.evidence if arm.baseline else arm.extra).extend(values)  # the baseline is never selected
    for r in runs_of(study, plan.get("id")):
        if r.get("status") == "complete" and isinstance(r.get("tok_per_s"), (int, float)) and r["tok_per_s"] > 0:
            if r.get("slot"):
                arms[r["arm"]].extra.append(float(r["tok_per_s"]))
            else:
                arms[r["arm"]].runs[int(r["round"])] = float(r["tok_per_s"])
    return arms


def stored_verdict(study: optuna.Study) -> dict[str, Any] | None:
    v = study.user_attrs.get(RESULT_ATTR)
    return v if isinstance(v, dict) else None


def relaunch_spec(cfg: Any, number: int, cand: Any, round_no: int, trial_dir: Any) -> TrialSpec:
    """A confirmation relaunch: the study's server command, environment and workload, measured in full (never
    pruned), with the prompt order of its round (shuffled per round, the same for every configuration of the
    round: paired rounds)."""
    return TrialSpec(
        number=number,
        candidate=cand,
        command=list(cfg.server.command),
        workload=cfg.workload.model_copy(update={"seed": cfg.workload.seed + 1 + round_no}),
        trial_dir=str(trial_dir),
        extra_args=list(cfg.server.extra_args),
        server_env=dict(cfg.server.env),
        boot_timeout_s=cfg.server.boot_timeout_s,
        dist_init_timeout_s=cfg.server.dist_init_timeout_s,
        poll_s=cfg.server.poll_s,
        stop_timeout_s=cfg.server.stop_timeout_s,
        study=cfg.study,
        protected=True,
    )


class Confirmer:
    """Runs a confirmation with an executor (the study's own: Ray actors, threads, or the in-process model).

    It also stands in for the driver before the live display (``optimizer.progress``): hosts, their phases, the
    launches so far and left, and an ETA, so the table keeps running through the confirmation."""

    def __init__(
        self,
        cfg: Any,
        space: Any,
        hosts: list[Any],
        executor: Any,
        study: optuna.Study,
        *,
        progress: Any = None,
        early: Any = None,
    ) -> None:
        self.cfg = cfg
        #: the driver's relaunches (``optimizer.study.relaunch.BaselineRelaunches``): early ones may still run on
        #: hosts the search's last launches left idle; the first round counts them as its relaunches of their
        #: configurations and waits for them (``confirm.start_early``)
        self.early = early
        self.space = space
        self.host_names = [h.name if hasattr(h, "name") else str(h) for h in hosts]
        self.hosts = [h if hasattr(h, "name") else SimpleNamespace(name=str(h)) for h in hosts]
        self.executor = executor
        self.study = study
        self.progress = progress
        self.launches = 0
        self.stopping = False
        self.confirming = True  # the live display shows confirmation relaunches, not trials
        self.noise_known = False  # whether the host's noise was stored by an earlier study (``_sequential``)
        self.t0 = time.time()
        self.active: dict[int, Any] = {}  # number -> (item, host), with .candidate for the display
        self.host_phase: dict[str, tuple[str, int | None, float]] = {}
        self.quarantined: set[str] = set()
        self.left = 0  # launches still planned (this round, and the rounds a fixed design has left)
        self.planned = 0
        boot, bench = _measured_times(study)
        self.per_launch_s = None if boot is None else boot + (bench or 0.0)

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.note(self, text)

    # the live display's view of a driver
    def launched(self) -> int:
        return self.launches

    def budget_left(self) -> int:
        return self.left

    def eta_s(self) -> float | None:
        """The launches still planned, side by side on the hosts; sequential: this round's (one more round is
        possible until the verdict is decided, which the display cannot know)."""
        if self.per_launch_s is None:
            return None
        return self.per_launch_s * -(-self.left // max(1, len(self.host_names)))

    # ------------------------------------------------------------------ plan
    def plan(self, rounds: int, top: int) -> tuple[dict[str, Any], list[Any]]:
        """The arms (baseline first, then the study's best ``top``) and their candidates. The plan's id does not
        depend on ``rounds``: asking for more rounds later adds to the runs already made."""
        sequential = self.cfg.confirm.sequential
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
            evidence: list[float] = []
            if sequential and base is not None:  # the baseline is launched first, never selected: unbiased
                evidence = [float(base.value), *completed_values(baseline_runs(self.study, early=False))]  # type: ignore[arg-type]
            arms.append(
                {
                    "label": "baseline",
                    "trial": None if base is None else base.number,
                    "config": "baseline (no speculation)",
                    "cost": [0, 0, 0],
                    "baseline": True,
                    "study_tok_per_s": None if base is None else base.value,
                    "evidence": evidence,
                }
            )
            cands.append(c)
        answer = R.search_answer(self.study)
        answer_is_base = answer is not None and base is not None and answer.number == base.number
        if answer_is_base and arms:  # the search's answer is to serve without speculation: it stands (verdict)
            arms[0]["selected"] = True
        for k, t in enumerate(confirmed_trials(self.study, top)):
            c = self.space.candidate(t.params)
            arms.append(
                {
                    "label": f"trial {t.number}",
                    "trial": t.number,
                    "config": t.user_attrs.get(R.CONFIG) or self.space.describe(c),
                    "cost": list(arm_cost(c.flags)),
                    "baseline": False,
                    "study_tok_per_s": t.value,
                    # the study's best (the search's answer) was selected partly on its launch: left out of its estimate
                    "selected": k == 0 and not answer_is_base,
                    "evidence": [float(t.value)] if sequential and (k > 0 or answer_is_base) else [],  # type: ignore[arg-type]
                }
            )
            cands.append(c)
        ident = hashlib.sha1(json.dumps(arms, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return {"id": ident, "rounds": rounds, "sequential": sequential, "arms": arms}, cands

    # ------------------------------------------------------------------ run
    def run(self, rounds: int, top: int) -> Verdict | None:
        plan, cands = self.plan(rounds, top)
        if len([a for a in plan["arms"] if not a["baseline"]]) == 0:
            self.say("confirmation: no completed configuration to confirm")
            return None
        stored = self.study.user_attrs.get(PLAN_ATTR)
        if not isinstance(stored, dict) or stored.get("id") != plan["id"] or stored.get("rounds") != rounds:
            self.study.set_user_attr(PLAN_ATTR, plan)
        self.left = len(plan["arms"])  # a round's worth at most, until the round is planned
        if self.progress is not None:
            self.progress.start(self)
        try:
            if plan["sequential"]:
                verdict = self._sequential(plan, cands, rounds)
            else:
                verdict = self._fixed(plan, cands, rounds)
        finally:
            self.left = 0
            if self.progress is not None:
                self.progress.stop(self)
        return self._finish(plan, rounds, verdict)

    def _fixed(self, plan: dict[str, Any], cands: list[Any], rounds: int) -> Verdict:
        done = {(r["round"], r["arm"]) for r in runs_of(self.study, plan["id"]) if r.get("status") == "complete"}
        todo = [
            Item(seq=0, round=r, arm=i) for r in range(rounds) for i in range(len(plan["arms"])) if (r, i) not in done
        ]
        total = rounds * len(plan["arms"])
        labels = ", ".join(a["label"] for a in plan["arms"])
        self.say(
            f"confirmation: {total} launches ({rounds} rounds of {labels}), outside the study's launch budget"
            + (f"; {total - len(todo)} already done" if len(todo) < total else "")
        )
        self._launch(plan, cands, todo, rounds, finished=total - len(todo), total=total)
        return decide(arms_from(self.study))

    def _sequential(self, plan: dict[str, Any], cands: list[Any], rounds: int) -> Verdict:
        ident = hostnoise.study_identity(self.study)
        if ident is not None:  # a study from before the host's noise was stored: take it now
            hostnoise.adopt(self.study, self.cfg.studies_dir, ident)
        prior, prior_text = hostnoise.prior(self.study)
        self.noise_known = isinstance(self.study.user_attrs.get(hostnoise.HOST_NOISE), dict)
        margin = self.cfg.confirm.margin_pct / 100.0
        done_runs = runs_of(self.study, plan["id"])
        next_round = 1 + max((int(r["round"]) for r in done_runs), default=-1)
        self.say(
            f"confirmation: up to {rounds} rounds, each relaunching only the configurations still in question, "
            f"stopping once the verdict is decided at 95 % (outside the study's launch budget); "
            f"launch noise from {prior_text}" + (f"; {len(done_runs)} relaunches already done" if done_runs else "")
        )
        for r in range(next_round, rounds):
            if self.stopping:
                break
            running = self._early_arms(plan)  # relaunches of this round already under way (the first only)
            todo_arms = [
                i
                for i in self._open_arms(plan, prior, margin, first=r == 0 or not done_runs, more=rounds - r)
                if i not in running.values()
            ]
            if not todo_arms and not running:
                break
            todo = [Item(seq=0, round=r, arm=i) for i in todo_arms]
            todo += self._fill(plan, todo_arms, r, prior, margin, running)
            labels = ", ".join(plan["arms"][i]["label"] for i in [*todo_arms, *running.values()] if i is not None)
            again = len(todo) - len(todo_arms)
            self.say(
                f"confirmation round {r + 1}/{rounds}: {labels}"
                + (f" ({len(running)} of them relaunched early, still running)" if running else "")
                + (f" (and {again} more relaunch(es) of them on hosts the round would leave idle)" if again else "")
            )
            self._launch(plan, cands, todo, rounds, finished=0, total=len(todo), early=running)
            done_runs = runs_of(self.study, plan["id"])
        more = 0 if self.stopping else rounds - self._rounds_done(plan)
        return self._decide(arms_from(self.study), prior, margin, more)

    def _rounds_done(self, plan: dict[str, Any]) -> int:
        """Rounds with a relaunch; relaunches made early count as the first round's."""
        done = 1 + max((int(r["round"]) for r in runs_of(self.study, plan["id"])), default=-1)
        return max(done, 1) if plan["sequential"] and early_runs(self.study, every=True) else done

    def _early_arms(self, plan: dict[str, Any]) -> dict[int, int | None]:
        """Early relaunches still running (number -> the plan's arm they relaunch, None for a configuration the
        plan does not hold: waited for, not counted)."""
        if self.early is None:
            return {}
        index = {(None if a["baseline"] else a.get("trial")): i for i, a in enumerate(plan["arms"])}
        return {n: index.get(trial) for n, (_, trial) in self.early.early_in_flight().items()}

    def _fill(
        self,
        plan: dict[str, Any],
        todo_arms: list[int],
        round_no: int,
        prior: tuple[float, int],
        margin: float,
        running: dict[int, int | None] | None = None,
    ) -> list[Item]:
        """Relaunches for the hosts a round would leave idle: the arms in question again, the study's answer and the
        other configurations before the baseline (a round takes the wall-clock of one launch whatever it holds).
        Only where they can save a round: where the round's own relaunches would leave the noise measured too poorly
        to settle anything (a new host, ``MIN_DF``), or where a comparison that one relaunch each could not settle,
        if the means held, two could. ``running``: early relaunches still running (``_early_arms``), the round's
        too, each on its own host."""
        running = running or {}
        in_round = [*todo_arms, *(i for i in running.values() if i is not None)]
        idle = len(self.host_names) - len(todo_arms) - len(running)
        if idle <= 0 or not in_round:
            return []
        counted = arms_from(self.study)  # the study's best without its own launch, as the verdict counts it
        arms = self._arms_for_choice(plan, counted)
        # the degrees of freedom of noise the round's own relaunches would bring (an arm's first value brings none)
        df = launch_noise(counted)[1] + sum(1 for i in in_round if counted[i].values)
        measuring = not self.noise_known and df < MIN_DF  # the round alone would leave nothing settleable
        if not measuring:
            one, two = (self._decide(arms, prior, margin, more, min_df=0) for more in (1, 2))
            if len(two.apart) >= len(one.apart):
                return []
        order = sorted(in_round, key=lambda i: (not plan["arms"][i].get("selected"), bool(plan["arms"][i]["baseline"])))
        return [Item(seq=0, round=round_no, arm=order[k % len(order)], slot=1 + k // len(order)) for k in range(idle)]

    def _decide(
        self, arms: list[Arm], prior: tuple[float, int], margin: float, more: int, min_df: int | None = None
    ) -> Verdict:
        """The sequential verdict: unpaired, with the noise prior as this host allows. On a host whose noise is not
        known the prior is a stated one: it decides nothing alone (the launches must have measured the noise with
        MIN_DF degrees of freedom before a comparison is settled) and only ever raises a measured noise
        (``verdict.pool``); a known host's stored noise is enough, and is pooled both ways. The plan's selected arm
        (the search's answer) stands as the winner while nothing is decided (``verdict.decide``'s ``standing``)."""
        plan = self.study.user_attrs.get(PLAN_ATTR) or {}
        selected = [a for a, spec in zip(arms, plan.get("arms") or []) if spec.get("selected")]
        return decide(
            arms,
            prior=prior,
            margin=margin,
            paired=False,
            more=more,
            min_df=(0 if self.noise_known else MIN_DF) if min_df is None else min_df,
            prior_is_floor=not self.noise_known,
            standing=selected[0] if selected else None,
        )

    @staticmethod
    def _arms_for_choice(plan: dict[str, Any], arms: list[Arm]) -> list[Arm]:
        """``arms`` (``arms_from``) as a round's choice weighs them: the study's best counts its own (selected) launch
        until it has been relaunched (a copy of that arm; ``arms`` is left as the verdict counts it)."""
        return [
            replace(a, evidence=[float(spec["study_tok_per_s"])])
            if spec.get("selected") and not spec.get("baseline") and not a.relaunches and spec.get("study_tok_per_s")
            else a
            for a, spec in zip(arms, plan["arms"])
        ]

    def _open_arms(
        self, plan: dict[str, Any], prior: tuple[float, int], margin: float, first: bool, more: int
    ) -> list[int]:
        """The arms of the next round: those in a comparison not yet settled. For this choice only, the study's
        best counts its own (selected) launch until it has been relaunched; it is always in the first round."""
        arms = self._arms_for_choice(plan, arms_from(self.study))
        v = self._decide(arms, prior, margin, more)
        out = [arms.index(a) for a in v.open]
        selected = next((i for i, spec in enumerate(plan["arms"]) if spec.get("selected")), None)
        if first and selected is not None and not arms[selected].relaunches and selected not in out:
            out.insert(0, selected)
        return sorted(out)

    def _launch(
        self,
        plan: dict[str, Any],
        cands: list[Any],
        todo: list[Item],
        rounds: int,
        *,
        finished: int,
        total: int,
        early: dict[int, int | None] | None = None,
    ) -> None:
        """Run ``todo`` side by side on the idle hosts; a host fault runs the item again (twice at most). ``early``:
        early relaunches still running (``_early_arms``), whose hosts are busy until they end; the driver's
        relaunches record them."""
        seq0 = len([k for k in self.study.user_attrs if k.startswith(RUN_PREFIX)])
        for n, it in enumerate(todo):
            it.seq = seq0 + n
        pending = list(todo)
        self.left = len(pending) + len(early or {})
        busy: set[str] = set()
        hosts_of = self.early.early_in_flight() if early else {}
        for number, arm in (early or {}).items():
            host = hosts_of[number][0]
            cand = None if arm is None else cands[arm]
            self.active[number] = SimpleNamespace(item=None, host=host, candidate=cand)
            busy.add(host)
        while (pending or self.active) and not self.stopping:
            for host in [h for h in self.host_names if h not in busy]:
                if not pending:
                    break
                it = pending.pop(0)
                spec = self._spec(it, plan, cands[it.arm])
                self.active[spec.number] = SimpleNamespace(item=it, host=host, candidate=cands[it.arm])
                busy.add(host)
                self.host_phase[host] = ("starting", spec.number, time.time())
                self.executor.submit(host, spec)
            try:
                ev = self.executor.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(ev, PhaseEvent) and ev.trial in self.active:
                self.host_phase[ev.host] = (ev.phase, ev.trial, time.time())
            if (
                self.progress is not None
                and getattr(ev, "trial", None) in self.active
                and not isinstance(ev, TrialResult)
            ):
                self.progress.event(self, ev)
            if not isinstance(ev, TrialResult) or ev.trial not in self.active:
                continue
            a = self.active.pop(ev.trial)
            it, host = a.item, a.host
            busy.discard(host)
            self.host_phase[host] = ("idle", None, time.time())
            if it is None:  # an early relaunch: the driver's record (relaunch:run), counted by ``arms_from``
                self.launches += 1
                self.left = len(pending) + len(self.active)
                self.say(self.early.finish(ev))
                if self.progress is not None:
                    self.progress.event(self, ev)
                continue
            if ev.status == "host_fault" and it.retries < MAX_HOST_RETRIES:
                it.retries += 1
                pending.insert(0, it)
                self.say(f"confirmation: host fault on {host} ({ev.reason}); run again")
                continue
            finished += 1
            self.left = len(pending) + len(self.active)
            self._record(it, plan, host, ev)
            if self.progress is not None:
                self.progress.event(self, ev)  # after the record: the display counts this launch
            arm = plan["arms"][it.arm]
            value = ev.metrics.get(R.TOK_PER_S) if ev.status == "complete" else None
            self.say(
                f"confirmation {finished}/{total} (round {it.round + 1}/{rounds}) [{host}]: {arm['label']} "
                + (f"{value:.1f} tok/s" if isinstance(value, (int, float)) else f"{ev.status} {ev.reason}".strip())
            )

    def _finish(self, plan: dict[str, Any], rounds: int, verdict: Verdict) -> Verdict:
        runs = runs_of(self.study, plan["id"])
        done_rounds = self._rounds_done(plan)
        early = len(early_runs(self.study, every=True)) if plan["sequential"] else 0
        made = f"{len(runs)} relaunch(es)" + (
            f" and {early} made early, on hosts the search's last launches left idle" if early else ""
        )
        if plan["sequential"]:
            if verdict.decided is not None:
                verdict.lines.append(
                    f"decided at 95 % after {done_rounds} round(s), {made}: "
                    + {
                        "winner": "a significant winner",
                        "equivalent": f"the others are not faster by {verdict.margin:.0%} or more (equivalent)",
                        "no gain": f"no gain over the baseline of {verdict.margin:.0%} or more",
                    }[verdict.decided]
                )
            else:
                undecided = [a for a in [*verdict.open, *verdict.apart] if a is not verdict.winner]
                others = [a.label for a in undecided if not a.baseline]
                what = []
                if others:
                    winner = verdict.winner.label if verdict.winner else "the best"
                    what.append(f"{winner} and {', '.join(others)} could not be told apart")
                if any(a.baseline for a in undecided):
                    what.append(f"the gain over the baseline (below {verdict.margin:.0%} or above 0) is not decided")
                more = rounds_to_settle(verdict)
                verdict.lines.append(
                    f"not decided at 95 % after {done_rounds} round(s), {made}: {'; '.join(what)} within {rounds} rounds "
                    "(confirm.rounds) at this noise; "
                    + (
                        f"if the measured means held, confirm --confirm-rounds {done_rounds + more} would decide it "
                        f"({more} more round(s), {more * (len(undecided) + 1)} relaunches, added to these)"
                        if more
                        else "more rounds (confirm --confirm-rounds N) add to these, but if the measured means held "
                        f"not even {done_rounds + SETTLE_HORIZON} rounds would decide it"
                    )
                )
        result = verdict.as_dict()
        result["plan"] = plan["id"]
        result["rounds"] = done_rounds
        result["rounds_max"] = rounds
        result["sequential"] = plan["sequential"]
        result["launches"] = len(runs)
        result["early_launches"] = early
        self.study.set_user_attr(RESULT_ATTR, result)
        if verdict.noise is not None:
            self.study.set_user_attr(
                NOISE_ATTR, {"sigma": verdict.noise, "df": verdict.noise_df, "source": "confirmation"}
            )
            ident = hostnoise.study_identity(self.study)
            if ident is not None:
                try:
                    path = hostnoise.save(self.cfg.studies_dir, ident, self.cfg.study, verdict.noise, verdict.noise_df)
                    verdict.lines.append(f"host noise stored for the next study on this host: {path}")
                except OSError as exc:
                    self.say(f"host noise not stored: {exc}")
        for line in verdict.lines:
            self.say(line)
        try:
            from .notes import save_study_note

            save_study_note(self.study)  # the dashboard's study note shows the verdict
        except Exception as exc:  # noqa: BLE001 - a note is a convenience, never a failure
            self.say(f"study note not written: {exc}")
        return verdict

    def _spec(self, it: Item, plan: dict[str, Any], cand: Any) -> TrialSpec:
        return relaunch_spec(
            self.cfg, NUMBER_BASE + it.seq, cand, it.round, self.cfg.study_dir / "confirm" / f"{it.seq:04d}"
        )

    def _record(self, it: Item, plan: dict[str, Any], host: str, ev: TrialResult) -> None:
        m = ev.metrics or {}
        value = m.get(R.TOK_PER_S)
        self.launches += 1
        run = {
            "plan": plan["id"],
            "round": it.round,
            "arm": it.arm,
            "slot": it.slot,
            "label": plan["arms"][it.arm]["label"],
            "status": ev.status,
            "tok_per_s": value if isinstance(value, (int, float)) and not math.isnan(value) else None,
            "accept_length": m.get(R.ACCEPT_LENGTH),
            "host": host,
            "boot_s": ev.boot_s,
            "host_facts": m.get(R.HOST_FACTS),
            "server_version": m.get(R.SERVER_VERSION),
            "reason": (ev.reason or "")[:300],
            "t_start": ev.t_start or None,
            "t_end": ev.t_end or time.time(),
        }
        self.study.set_user_attr(f"{RUN_PREFIX}{it.seq:04d}", run)


def _measured_times(study: optuna.Study) -> tuple[float | None, float | None]:
    from .dryrun import measured_times

    return measured_times(study)
