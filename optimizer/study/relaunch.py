"""The baseline relaunched during the study, to measure the noise between launches while it still matters.

A pruner that knows only the noise within one launch stops a good configuration that landed on a slow boot. With
``confirm.baseline_relaunches: N`` the driver relaunches the baseline N times as soon as it has completed, before
or beside the sampler's trials; the spread of the baseline's launches (log tok/s) becomes the study's
``launch_noise``, which the ratio pruner adds to its margin. A later confirmation, with more launches, replaces it.

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
        self.running: dict[int, str] = {}  # number -> host

    def owns(self, number: int) -> bool:
        return number >= NUMBER_BASE and number < NUMBER_BASE + 1_000_000

    def _done(self) -> int:
        return sum(1 for r in runs(self.study) if r.get("status") == "complete")

    def due(self) -> bool:
        if self.count <= 0 or self._done() + len(self.running) >= self.count:
            return False
        if len(runs(self.study)) + len(self.running) >= 2 * self.count:
            return False  # failed relaunches get one more try each, never an endless loop
        return R.baseline_trial(self.study) is not None  # relaunch what was measured, once it was

    def spec(self, host: str) -> TrialSpec:
        seq = len(runs(self.study)) + len(self.running)
        spec = self.make_spec(NUMBER_BASE + seq, self.space.baseline())
        spec.trial_dir = str(Path(spec.trial_dir).parent.parent / "relaunch" / f"{seq:04d}")
        spec.protected = True
        self.running[spec.number] = host
        return spec

    def finish(self, r: TrialResult) -> str:
        """Record one relaunch and the noise the baseline's launches show so far; returns a line for the display."""
        self.running.pop(r.trial, None)
        value = (r.metrics or {}).get(R.TOK_PER_S)
        ok = r.status == "complete" and isinstance(value, (int, float)) and value > 0
        seq = r.trial - NUMBER_BASE
        self.study.set_user_attr(
            f"{R.RELAUNCH_RUN_PREFIX}{seq:04d}",
            {
                "status": r.status,
                "tok_per_s": value if ok else None,
                "host": r.host,
                "boot_s": r.boot_s,
                R.HOST_FACTS: (r.metrics or {}).get(R.HOST_FACTS),
                "reason": (r.reason or "")[:300],
                "t_end": r.t_end or time.time(),
            },
        )
        base = R.baseline_trial(self.study)
        values = ([base.value] if base is not None and base.value else []) + [
            x["tok_per_s"] for x in runs(self.study) if x.get("status") == "complete" and x.get("tok_per_s")
        ]
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
