"""The baseline relaunched during the study, to measure the noise between launches while it still matters.

A pruner that knows only the noise within one launch stops a good configuration that landed on a slow boot. With
``confirm.baseline_relaunches: N`` the driver relaunches the baseline N times as soon as it has completed, before
or beside the sampler's trials; the spread of the baseline's launches (log tok/s) becomes the study's
``launch_noise``, which the ratio pruner adds to its margin. A later confirmation, with more launches, replaces it.

The same mechanism starts a sequential confirmation early (``confirm.start_early``): once the search will ask for
no more launches (it stopped itself, or spent its budget) while its last launches still run, each host they leave
idle relaunches one configuration the confirmation will hold: the search's answer, the runners-up, then the
baseline, each once, with the confirmation's production flags (``optimizer.confirm.relaunch_spec``). Such a run
stores its ``trial`` (None: the baseline) and ``early: true``; the confirmation's plan counts it as a relaunch of
that configuration (a fresh launch, chosen before it was measured: unbiased), so its first round needs fewer
relaunches, or none. Early runs never feed the pruner's noise (``finish``).

Like confirmation runs these are not trials (the sampler never sees them, the launch budget does not count them):
each is a study user attribute ``relaunch:run:NNNN``, so a resumed study keeps what it measured.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from ..events import TrialResult
from ..trial import TrialSpec
from . import records as R

#: Numbers given to these launches (executors key their runs by number): clear of trials and confirmation runs.
NUMBER_BASE = 2_000_000


def runs(study: optuna.Study) -> list[dict[str, Any]]:
    return [
        v for k, v in sorted(study.user_attrs.items()) if k.startswith(R.RELAUNCH_RUN_PREFIX) and isinstance(v, dict)
    ]


def baseline_runs(study: optuna.Study, *, early: bool = True) -> list[dict[str, Any]]:
    """The baseline's relaunches, the early ones (``confirm.start_early``) only with ``early``."""
    return [r for r in runs(study) if r.get("trial") is None and (early or not r.get("early"))]


def early_runs(study: optuna.Study, trial: int | None = None, *, every: bool = False) -> list[dict[str, Any]]:
    """Relaunches made while the search's last launches ran (``confirm.start_early``): of ``trial`` (None: the
    baseline), or all of them with ``every``."""
    return [r for r in runs(study) if r.get("early") and (every or r.get("trial") == trial)]


def label(trial: int | None) -> str:
    """What a relaunch relaunches, as the lines name it."""
    return "the baseline" if trial is None else f"trial {trial}"


def completed_values(rs: list[dict[str, Any]]) -> list[float]:
    return [float(r["tok_per_s"]) for r in rs if r.get("status") == "complete" and r.get("tok_per_s")]


def noise_from(values: list[float]) -> tuple[float, int] | None:
    """Sample standard deviation of log tok/s and its degrees of freedom; None below two launches."""
    logs = [math.log(v) for v in values if v > 0]
    return (statistics.stdev(logs), len(logs) - 1) if len(logs) >= 2 else None


class BaselineRelaunches:
    def __init__(self, study: optuna.Study, count: int, make_spec: Callable[[int, Any], TrialSpec], space: Any):
        self.study = study
        self.count = count
        self.make_spec = make_spec
        self.space = space
        self.running: dict[int, tuple[str, int | None, bool]] = {}  # number -> (host, trial or None, early)

    def owns(self, number: int) -> bool:
        return number >= NUMBER_BASE and number < NUMBER_BASE + 1_000_000

    def _done(self) -> int:
        return sum(1 for r in baseline_runs(self.study, early=False) if r.get("status") == "complete")

    def due(self) -> bool:
        running = sum(1 for _, _, early in self.running.values() if not early)
        if self.count <= 0 or self._done() + running >= self.count:
            return False
        if len(baseline_runs(self.study, early=False)) + running >= 2 * self.count:
            return False  # failed relaunches get one more try each, never an endless loop
        return R.baseline_trial(self.study) is not None  # relaunch what was measured, once it was

    def spec(self, host: str) -> TrialSpec:
        number, subdir = self.next_number()
        spec = self.make_spec(number, self.space.baseline())
        spec.trial_dir = str(Path(spec.trial_dir).parent.parent / subdir)
        spec.protected = True
        self.running[spec.number] = (host, None, False)
        return spec

    def early_in_flight(self) -> dict[int, tuple[str, int | None]]:
        """Early relaunches still running: number -> (host, trial or None for the baseline)."""
        return {n: (host, trial) for n, (host, trial, early) in self.running.items() if early}

    def waiting(self, *, early: bool) -> bool:
        """Relaunches still running (the early ones only if ``early``)."""
        return any(early or not e for _, _, e in self.running.values())

    def next_early(self, confirmed: list[Any]) -> tuple[int | None, Any] | None:
        """The next configuration to relaunch early: ``confirmed``, the confirmation's configurations as they stand
        (``optimizer.confirm.confirmed_trials``: the search's answer, then the fastest other launches), then the
        baseline unless it was relaunched already; each once. None when every one is done or running, or when
        nothing is confirmed yet."""
        if not confirmed:
            return None
        started = {r.get("trial") for r in early_runs(self.study, every=True)}
        started |= {trial for _, trial, early in self.running.values() if early}
        wanted: list[tuple[int | None, Any]] = [(t.number, self.space.candidate(t.params)) for t in confirmed]
        if self.space.model.baseline and not completed_values(baseline_runs(self.study)):
            wanted.append((None, self.space.baseline()))
        return next((w for w in wanted if w[0] not in started), None)

    def next_number(self) -> tuple[int, Path]:
        """The number the next relaunch takes, and its directory under the study's."""
        seq = len(runs(self.study)) + len(self.running)
        return NUMBER_BASE + seq, Path("relaunch") / f"{seq:04d}"

    def started_early(self, host: str, trial: int | None, spec: TrialSpec) -> TrialSpec:
        """Note an early relaunch (built by the caller with the confirmation's production flags) as running."""
        self.running[spec.number] = (host, trial, True)
        return spec

    def finish(self, r: TrialResult) -> str:
        """Record one relaunch and the noise the baseline's launches show so far; returns a line for the display."""
        _, trial, early = self.running.pop(r.trial, (r.host, None, False))
        value = (r.metrics or {}).get(R.TOK_PER_S)
        ok = r.status == "complete" and isinstance(value, (int, float)) and value > 0
        seq = r.trial - NUMBER_BASE
        self.study.set_user_attr(
            f"{R.RELAUNCH_RUN_PREFIX}{seq:04d}",
            {
                "status": r.status,
                "trial": trial,
                "early": early,
                "tok_per_s": value if ok else None,
                "host": r.host,
                "boot_s": r.boot_s,
                R.HOST_FACTS: (r.metrics or {}).get(R.HOST_FACTS),
                "reason": (r.reason or "")[:300],
                "t_start": r.t_start or None,
                "t_end": r.t_end or time.time(),
            },
        )
        if early:
            return (
                f"early confirmation relaunch of {label(trial)} [{r.host}]: "
                + (f"{value:.1f} tok/s" if ok else f"{r.status} {r.reason}".strip())
                + " (a host the search's last launches left idle)"
            )
        base = R.baseline_trial(self.study)
        values = ([base.value] if base is not None and base.value else []) + completed_values(
            baseline_runs(self.study, early=False)
        )
        est = noise_from(values)
        if not ok:
            return f"baseline relaunch {seq + 1}/{self.count} [{r.host}]: {r.status} {r.reason}".strip()
        line = f"baseline relaunch {seq + 1}/{self.count} [{r.host}]: {value:.1f} tok/s (outside the launch budget)"
        if est is None:
            return line
        known = self.study.user_attrs.get(R.LAUNCH_NOISE)
        if not (isinstance(known, dict) and known.get("source") == "confirmation" and known.get("df", 0) > est[1]):
            self.study.set_user_attr(R.LAUNCH_NOISE, {"sigma": est[0], "df": est[1], "source": "baseline relaunches"})
        return line + f"; launch-to-launch noise {est[0]:.1%} over {est[1] + 1} launches of the baseline"
