"""How the structured sampler notices that its model is wrong, and what it does then.

The throughput model is a picture of speculative decoding (``throughput_model``: accept length times step time,
with priors from published curves). A real machine may not look like it: accept curves that fall with depth, wide
trees that never pay, settings that matter only together. Three checks hold the model to the launches it chose:

- **Promises kept.** For every launch it chooses, the model states the chance that the launch measures above the
  best so far (``search:p_improve``, launch noise included). Under a calibrated model, ``n`` launches in a row that
  all fail to improve have probability ``prod(1 - p_k)``. The *surprise* ``sum(-log(1 - p_k))`` over the model's
  launches since its last improvement, the last ``WINDOW`` of them, is that probability's negative log: about 1 is
  ordinary, 3 means a 5 % event. Each term is weighted by the launch's stake (the expected improvement the
  model promised, ``PROMISED_GAIN``, over ``STAKE_GAIN``, at most 1; not the smaller part of it one noisy launch
  can reveal, which the stop rule judges: on a noisy machine that part is small for every launch, and the model
  could never be called wrong). The window lets a model that promised much long ago and keeps its modest promises
  now be called right again (without it, one bad stretch kept the explorer busy and the stop rule off for good).
- **Intervals kept.** Each launch's measured tok/s against the predictive distribution it was chosen under
  (``search:predicted_tok_per_s``, ``search:predicted_log_sd``, launch noise included): over the last ``WINDOW`` model
  launches, a measurement more than ``MISS_Z`` standard deviations away is a *miss*, and the root mean square of
  the z-scores says how much too narrow the model's uncertainty is.
- **Regions that said no.** Near-identical configurations (same topk and algorithm, steps within one, draft tokens
  within a factor ``NEAR_DRAFT``) that were pruned or failed after launch at least ``REJECT_SAME`` times with the
  same settings (``REJECT_ANY`` with any), with none of them measured to the end, are not launched again: the data
  has answered, whatever the model still expects there.

What follows: the model's spread is widened by the z-scores' RMS; a share of the launches, growing with
``surprise + misses`` (``explore_share``), goes to a model-free explorer (Optuna's independent TPE, which learns
only from the measured values; ``StructuredSampler.explore`` launches the valid, untried configuration nearest its
proposal); and the sampler does not call itself confident (the stop rule) while the model
has been wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from ..study import records as R
from .candidates import CandidateTable

PREDICTED = "search:predicted_tok_per_s"
PRED_LOG_SD = "search:predicted_log_sd"
P_IMPROVE = "search:p_improve"
EXPECTED_GAIN = "search:expected_gain"
#: the plain expected improvement the model promised for a launch (the stake of a broken promise); the expected
#: gain above is the part one noisy launch can reveal, which the stop rule judges
PROMISED_GAIN = "search:promised_gain"
#: the launch-to-launch noise (log scale) the model assumed when it chose the launch (its residuals' estimate)
LAUNCH_NOISE = "search:launch_noise"
CHOOSER = "search:chooser"  # "model" or "explorer"
EXPLORE_SHARE = "search:explore_share"  # the share of launches the explorer had when this one was chosen
MODEL, EXPLORER = "model", "explorer"

#: a launch that promised less than this expected gain counts in proportion: a model that promises little and
#: delivers nothing is not wrong where it matters (late in a study every launch is a long shot near the best)
STAKE_GAIN = 0.03
WINDOW = 6  # recent model launches whose z-scores and broken promises are checked
MISS_Z = 2.0  # |z| beyond this is a measurement outside the predictive interval (~5 % under calibration)
#: log-scale launch-to-launch noise the model assumes (widened by its residuals, ``ThroughputModel.noise_scale``)
LAUNCH_NOISE_SD = 0.04
PRUNED_WIDER = 1.5
#: study user attribute: the launch noise the model's residuals imply, for the pruner while none was measured
LAUNCH_NOISE_ESTIMATE = R.LAUNCH_NOISE_ESTIMATE
#: explore share = (surprise + misses) / this, at most MAX_EXPLORE: surprise 3 (a 5 % event) gives a half
SURPRISE_PER_SHARE = 6.0
MAX_EXPLORE = 0.5
#: below this the model counts as calibrated (and may call itself confident)
CALIBRATED_BELOW = 2.3
MAX_WIDEN = 3.0
NEAR_DRAFT = 1.5
REJECT_SAME, REJECT_ANY = 2, 3


@dataclass
class Calibration:
    surprise: float = 0.0  # -log P(no improvement) over the model's launches since its last improvement
    misses: int = 0  # recent model launches measured outside their predictive interval
    z_rms: float = 1.0  # root mean square of the recent z-scores (1 when calibrated)
    checked: int = 0  # recent model launches with a prediction

    @property
    def wrongness(self) -> float:
        return self.surprise + self.misses

    @property
    def explore_share(self) -> float:
        return min(MAX_EXPLORE, self.wrongness / SURPRISE_PER_SHARE) if self.wrongness >= CALIBRATED_BELOW else 0.0

    @property
    def widen(self) -> float:
        return float(min(MAX_WIDEN, max(1.0, self.z_rms))) if self.checked >= 3 else 1.0

    @property
    def calibrated(self) -> bool:
        return self.wrongness < CALIBRATED_BELOW

    def describe(self) -> str:
        return (
            f"surprise {self.surprise:.2f}, {self.misses} of the last {self.checked} launches outside their "
            f"interval, z rms {self.z_rms:.2f}, explorer share {self.explore_share:.0%}"
        )


def _measured(t: FrozenTrial) -> float | None:
    if t.state == TrialState.COMPLETE and t.user_attrs.get(R.OUTCOME) == R.COMPLETE and t.value:
        return float(t.value)
    if t.state == TrialState.PRUNED and t.intermediate_values:
        return float(np.mean(list(t.intermediate_values.values())))
    return None


def assess(trials: list[FrozenTrial]) -> Calibration:
    """The model's record over the finished launches (in trial order)."""
    cal = Calibration()
    best: float | None = None
    zs: list[float] = []
    broken: list[float] = []  # the model's broken promises since its last improvement
    for t in sorted(trials, key=lambda t: t.number):
        if not t.state.is_finished() or t.user_attrs.get(R.OUTCOME) == R.DUPLICATE:
            continue
        ua = t.user_attrs
        value = _measured(t)
        complete = t.state == TrialState.COMPLETE and value is not None
        if ua.get(CHOOSER) == MODEL and ua.get(R.LAUNCHED):
            improved = complete and (best is None or value > best)
            if improved:
                broken.clear()
            else:
                p = min(0.95, max(0.0, float(ua.get(P_IMPROVE) or 0.0)))
                promised = ua.get(PROMISED_GAIN, ua.get(EXPECTED_GAIN))
                stake = min(1.0, float(promised or 0.0) / STAKE_GAIN)
                broken.append(-math.log1p(-p) * stake)
            pred, sd = ua.get(PREDICTED), ua.get(PRED_LOG_SD)
            if value and pred and sd:  # a pruned launch measured fewer chunks: a little wider
                sd = float(sd) * (PRUNED_WIDER if t.state == TrialState.PRUNED else 1.0)
                zs.append((math.log(value) - math.log(float(pred))) / sd)
        if complete:
            best = value if best is None else max(best, value)
    cal.surprise = float(sum(broken[-WINDOW:]))
    recent = zs[-WINDOW:]
    cal.checked = len(recent)
    cal.misses = sum(abs(z) > MISS_Z for z in recent)
    cal.z_rms = float(np.sqrt(np.mean(np.square(recent)))) if recent else 1.0
    return cal


def explorer_wasted(trials: list[FrozenTrial], exclude: int) -> bool:
    """The explorer's last proposal was not launched (a duplicate or refused before launch): the model goes next,
    so a model-free sampler cannot spin on configurations that cost no restart but teach nothing."""
    earlier = [t for t in trials if t.number != exclude and t.state.is_finished()]
    if not earlier:
        return False
    last = max(earlier, key=lambda t: t.number)
    return last.user_attrs.get(CHOOSER) == EXPLORER and not last.user_attrs.get(R.LAUNCHED)


def rejected_mask(
    table: CandidateTable, rejected: list[tuple[int, int]], completed: list[tuple[int, int]]
) -> np.ndarray:
    """(n_tree, n_other) True where a candidate sits among near-identical launches that were pruned or failed
    (module doc: ``REJECT_SAME`` with its settings, ``REJECT_ANY`` with any) and none completed."""
    if len(rejected) < REJECT_SAME:
        return np.zeros(table.valid.shape, dtype=bool)
    near = _near_trees(table)
    rej_same = np.zeros(table.valid.shape, dtype=int)
    rej_any = np.zeros(table.valid.shape[0], dtype=int)
    done_same = np.zeros(table.valid.shape, dtype=bool)
    done_any = np.zeros(table.valid.shape[0], dtype=bool)
    for i, j in rejected:
        rej_same[near[i], j] += 1
        rej_any[near[i]] += 1
    for i, j in completed:
        done_same[near[i], j] = True
        done_any[near[i]] = True
    same = (rej_same >= REJECT_SAME) & ~done_same
    anyset = ((rej_any >= REJECT_ANY) & ~done_any)[:, None]
    return (same | anyset) & table.spec[:, None]


def _near_trees(table: CandidateTable) -> np.ndarray:
    """(n_tree, n_tree) True where two speculative trees are near-identical (module doc)."""
    steps, topk, draft = table.trees.T
    algos = np.array([str(a) for a in table.algos])
    ratio = np.maximum(draft[:, None], draft[None, :]) / np.maximum(1.0, np.minimum(draft[:, None], draft[None, :]))
    return (
        (algos[:, None] == algos[None, :])
        & (topk[:, None] == topk[None, :])
        & (np.abs(steps[:, None] - steps[None, :]) <= 1)
        & (ratio <= NEAR_DRAFT)
        & table.spec[:, None]
        & table.spec[None, :]
    )
