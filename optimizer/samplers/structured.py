"""The structured sampler: an Optuna sampler that knows how speculative decoding works.

Each call fits ``ThroughputModel`` (accept length x step time, with the settings' factor apart from the tree) and
the failure model to every launch so far (complete and pruned ones; failures for feasibility; host faults never),
scores every configuration of the space by expected improvement over the best measured tok/s (with
adaptive settings: over the model's estimate of the best completed launch, so one launch measured a few per cent
high by luck does not raise the bar), times the chance it boots and serves, and suggests the best. Adaptive
settings (``sampler.adaptive_settings``, ``ThroughputModel``) are on by default while two signs hold: a launch's
log showed that SGLang found the GPUs PCIe-only (more than two without NVLink: NCCL carries every all-reduce), and
speculation at the default settings measured slower than no speculation (as in the field report, where NCCL tuning
made the difference). On a PCIe-only box ``--disable-custom-all-reduce`` changes nothing (SGLang has disabled it
already), so only its default is launched there. Launches
still running are counted at the model's prediction (a "believer") to refit the model, and the bar each candidate
must beat is, in every posterior draw, the best measured or a running launch's value in that draw, whichever is
higher (expected improvement over the batch, with the running launches integrated over the model's uncertainty);
so with several idle hosts each gets a launch worth its boot rather than a copy of one guess.

The expected gain stored with a launch and judged by the stop rule (``search:expected_gain``) is what one noisy
launch can reveal: the expected improvement times ``1 - noise / hypot(model spread, noise)`` (Huang et al.'s
augmented expected improvement), so a configuration the model already knows within the launch noise promises
little, and the search can stop on a machine whose launches scatter by a few per cent. The choice itself is by the
plain expected improvement (scoring by the augmented one favoured uncertain corners and reached 98 % later on the
out-of-family landscapes).

Being a ``BaseSampler``, it leaves storage, resume, optuna-dashboard, the report and the pruner unchanged. What it
predicted for a launch is stored on the trial (``search:predicted_tok_per_s``, ``search:expected_gain``,
``search:p_feasible``, ``search:adaptive_settings``), so the dashboard shows why a configuration was launched.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState
from scipy.special import ndtr

from ..sglang import flags as rules
from ..space import UNSET, CategoricalParam, IntParam, SearchSpace
from ..study import records as R
from . import calibration as C
from .candidates import CandidateTable, build_table
from .feasibility import Failure, feasible_probability
from .throughput_model import Observation, ThroughputModel

N_DRAWS = 96
TREE_CHUNK = 128
#: improvements beyond this factor count as this factor: a far extrapolation's wide tails must not outbid a
#: well-understood candidate (no configuration of a sane space is 1.5x the best measured after a few launches)
MAX_GAIN = 0.5
#: expected gain is discounted by exp(-LOCALITY x distance) to the nearest launch that served (distance: steps,
#: log2 topk and log2 draft tokens apart, plus settings that differ), so early launches stay near what is known
LOCALITY = 0.15
#: with launches still running, expected gain is also discounted by (1 - exp(-SPREAD x distance to the nearest
#: running launch)): measured on the Kimi profile with 4 hosts (8 seeds), wall-clock to 98 % fell from 0.78 to 0.62 h
SPREAD = 1.0
#: asks in a row whose best expected gain is below ``stop_below_gain`` before the sampler calls itself confident
CONFIDENT_ASKS = 2
#: launches measured before the explorer's TPE leaves random sampling (it only runs once the model was wrong)
EXPLORER_STARTUP = 4
TOKENS_PER_CHUNK = "tokens_per_chunk"
#: launches scatter this many times more than the model assumes (its residuals): the measurements are noisy, so the
#: bar is the model's estimate of the best launch and the pruner is told the noise
NOISY_SCALE = 1.5  # the client's stream measurement (optimizer.loadgen.client.BenchResult)
PREDICTED = C.PREDICTED
EXPECTED_GAIN = "search:expected_gain"
#: the explorer never launches what the failure model gives less than this chance to boot and serve
EXPLORE_MIN_FEASIBLE = 0.5
P_FEASIBLE = "search:p_feasible"
ADAPTIVE_STEPS = "search:adaptive_steps"  # for an adaptive-mode launch: share of verify steps per step count
ADAPTIVE = "search:adaptive_settings"  # whether the model that chose the launch learned how much settings matter


class StructuredSampler(optuna.samplers.BaseSampler):
    def __init__(
        self,
        space: SearchSpace,
        *,
        concurrency: int = 1,
        gpu_sm: int = 90,
        seed: int | None = None,
        n_draws: int = N_DRAWS,
        locality: float = LOCALITY,
        stop_below_gain: float | None = None,
        adaptive_settings: bool | str = "auto",
    ) -> None:
        self._space = space
        self._concurrency = concurrency
        self._gpu_sm = gpu_sm
        self._rng = np.random.default_rng(seed)
        self._n_draws = n_draws
        self._locality = locality
        self._fallback = optuna.samplers.RandomSampler(seed=seed)
        # the model-free explorer (calibration module): learns only from measured values, never from our priors
        self._explorer = optuna.samplers.TPESampler(seed=seed, n_startup_trials=EXPLORER_STARTUP, constant_liar=True)
        self.calibration = C.Calibration()
        self._distributions = _distributions(space)
        self._tp = tp_size(space)
        self.last_expected_gain: float | None = None
        self._stop_below_gain = stop_below_gain
        self._low_gain_asks = 0
        if adaptive_settings not in (True, False, "auto"):
            raise ValueError(f"adaptive_settings must be true, false or 'auto', not {adaptive_settings!r}")
        self._adaptive_settings = adaptive_settings
        self.adaptive = adaptive_settings is True  # what the last choice used ("auto": set by each choice)

    @property
    def confident(self) -> bool:
        """True once the best expected gain has stayed below ``stop_below_gain`` for CONFIDENT_ASKS asks in a row:
        the driver then stops launching (the model expects nothing left to beat the best by that much)."""
        return (
            self._stop_below_gain is not None and self._low_gain_asks >= CONFIDENT_ASKS and self.calibration.calibrated
        )

    # ------------------------------------------------------------------ BaseSampler
    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._fallback.reseed_rng()
        self._explorer.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space or trial.system_attrs.get("fixed_params"):
            return {}
        table = build_table(self._space, gpu_sm=self._gpu_sm)
        trials = study.get_trials(deepcopy=False)
        storage = study._storage
        self.calibration = C.assess(trials)
        share = self.calibration.explore_share
        if share > 0 and not C.explorer_wasted(trials, trial.number) and self._rng.random() < share:
            # the model has been wrong: this launch is the explorer's
            explored = self.explore(study, trial, table, trials, search_space)
            if explored is not None:
                storage.set_trial_user_attr(trial._trial_id, C.CHOOSER, C.EXPLORER)
                storage.set_trial_user_attr(trial._trial_id, C.EXPLORE_SHARE, round(share, 3))
                return explored
        pick = self.choose(table, trials, exclude=trial.number, storage=storage, study_id=study._study_id)
        if pick is None:
            return {}
        (i, j), info = pick
        for key, value in info.items():
            storage.set_trial_user_attr(trial._trial_id, key, value)
        params = table.params(i, j)
        return {k: v for k, v in params.items() if k in search_space}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    # ------------------------------------------------------------------ the explorer
    def explore(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        table: CandidateTable,
        trials: list[FrozenTrial],
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any] | None:
        """The explorer's launch: Optuna's TPE proposes every parameter on its own (it learns only from the
        measured values, never from the model), and the launch is the configuration nearest that proposal which
        can still teach something: valid under SGLang's rules and the space's constraints (TPE, parameter by
        parameter, would often propose more draft tokens than the tree holds), not launched or running already,
        not an idle setting's other level, not in a region the data rejected. Without that, a proposal refused
        before launch or repeating a launch hands the turn back to the model, and the explorer never launches."""
        proposal = {
            name: self._explorer.sample_independent(study, trial, name, dist)
            for name, dist in self._distributions.items()
        }
        allowed = self._launchable(table, trials, trial.number)
        # the explorer doubts the throughput model, not the failures seen: a tree larger than one that ran out of
        # memory, or a setting a failure singled out, would teach only that failure again
        _, failures, served, *_ = _collect(table, trials, trial.number)
        failing = feasible_probability(table, failures, served) < EXPLORE_MIN_FEASIBLE
        if (allowed & ~failing).any():
            allowed &= ~failing
        if not allowed.any():
            return None
        d = _distance_to(table, proposal)
        d = np.where(allowed, d, np.inf)
        flat = np.flatnonzero(d <= d.min() + 1e-9)
        i, j = np.unravel_index(int(self._rng.choice(flat)), d.shape)
        params = table.params(int(i), int(j))
        return {k: v for k, v in params.items() if k in search_space}

    def _launchable(self, table: CandidateTable, trials: list[FrozenTrial], exclude: int) -> np.ndarray:
        """(n_tree, n_other) True where a speculative configuration may be launched next (``choose``'s rules)."""
        obs, _, _, taken, pending, _, fatal, rejected = _collect(table, trials, exclude)
        pcie_only = any(_pcie_only(t) for t in trials)
        allowed = table.valid.copy()
        allowed[~table.spec] = False  # the driver measures the baseline itself
        for i, j in taken | set(pending):
            allowed[i, j] = False
        for name, value in table.idle_settings(self._tp, pcie_only).items():  # other levels: the same server
            k = table.other_names.index(name)
            allowed[:, [v[k] != value for v in table.other_values]] = False
        for name, value in fatal:  # a setting whose log proved it fatal on its own (the driver skips it anyway)
            if name in table.other_names:
                k = table.other_names.index(name)
                allowed[:, [str(v[k]) == value for v in table.other_values]] = False
        # near-identical launches that were pruned or failed: the data has answered there (calibration module)
        completed = [(o.i, o.j) for o in obs if not o.pruned]
        return allowed & ~C.rejected_mask(table, rejected, completed)

    # ------------------------------------------------------------------ the choice
    def choose(
        self,
        table: CandidateTable,
        trials: list[FrozenTrial],
        exclude: int = -1,
        storage: optuna.storages.BaseStorage | None = None,
        study_id: int | None = None,
    ) -> tuple[tuple[int, int], dict[str, float | bool]] | None:
        obs, failures, served, _, pending, best, _, _ = _collect(table, trials, exclude)
        served = [loc for loc in served if table.spec[loc[0]]] or served
        model, self.adaptive, _ = fit_model(
            table, trials, obs, concurrency=self._concurrency, tp=self._tp, adaptive_settings=self._adaptive_settings
        )
        if pending:  # believer: count running launches at the model's prediction, then refit
            fantasies = [
                Observation(i, j, math.exp(model.mean_log_tps(i, j)), model.accept_length(i)) for i, j in pending
            ]
            model.fit(obs + fantasies)
        p_ok = feasible_probability(table, failures, served)
        allowed = self._launchable(table, trials, exclude)
        if not allowed.any():
            return None
        noisy = model.noise_scale >= NOISY_SCALE
        if noisy and study_id is not None:  # the pruner's margin between launches (optimizer.pruning)
            storage.set_study_user_attr(study_id, C.LAUNCH_NOISE_ESTIMATE, round(model.launch_noise, 4))
        complete = [(o.i, o.j) for o in obs if not o.pruned] if self.adaptive or noisy else []
        if complete:  # the bar: the model's estimate of the best launch, not its luckiest measurement
            best = max(math.exp(model.mean_log_tps(i, j)) for i, j in complete)
        if best is None and not pending:  # nothing measured or running yet: the model's prior alone
            best = max(math.exp(model.mean_log_tps(i, j)) for i, j in zip(*np.nonzero(allowed)[:2]))
        near = _proximity(table, served + list(pending), self._locality)
        if pending:  # idle hosts spread out: a launch right next to one still running teaches little more
            near = near * (1.0 - _proximity(table, list(pending), SPREAD))
        draws = model.draw(self._n_draws, self._rng)
        widen = self.calibration.widen
        if widen > 1.0:  # measurements fell further from the predictions than the model's spread said
            draws = draws.widened(widen)
        n_tree = len(draws.tree)
        # The bar in each posterior draw: the best measured, or a running launch's value in that draw if higher.
        # A candidate that rises and falls with a running launch then gains little in every draw (batch expected
        # improvement with the running launches integrated over the posterior, not fixed at its mean).
        log_best = np.full(draws.tree.shape[1], -np.inf if best is None else math.log(best))
        if pending:
            running = [draws.at(i, j) for i, j in pending]
            log_best = np.maximum(log_best, np.max(running, axis=0))
        noise = C.LAUNCH_NOISE_SD * model.noise_scale  # a launch measures its configuration's value this far off
        score = np.full(allowed.shape, -1.0)
        mean = np.zeros(allowed.shape)
        for a in range(0, n_tree, TREE_CHUNK):
            b = min(n_tree, a + TREE_CHUNK)
            y = draws.block(a, b)
            mean[a:b] = y[:, :, 0]
            ei = expected_gain(y, log_best)
            score[a:b] = np.where(allowed[a:b], ei * p_ok[a:b] * near[a:b], -1.0)
        top = float(score.max())
        if top <= 1e-12:  # confident: nothing is expected to beat the best; take the best predicted mean
            score = np.where(allowed, mean + np.log(np.maximum(p_ok, 1e-9)), -np.inf)
            top = float(score.max())
        flat = np.flatnonzero(score >= top - 1e-12)
        i, j = np.unravel_index(int(self._rng.choice(flat)), score.shape)
        i, j = int(i), int(j)
        y = draws.at(i, j)
        promised = float(expected_gain(y, log_best))
        self.last_expected_gain = float(revealed_gain(promised, np.std(y), noise))  # the stop rule's measure
        below = self._stop_below_gain is not None and self.last_expected_gain < self._stop_below_gain
        self._low_gain_asks = self._low_gain_asks + 1 if below else 0
        info = {
            PREDICTED: round(math.exp(model.mean_log_tps(i, j)), 3),
            C.PRED_LOG_SD: round(math.hypot(float(np.std(y)), noise), 5),
            C.P_IMPROVE: round(float(np.mean(ndtr((y - log_best) / noise))), 4),
            C.LAUNCH_NOISE: round(noise, 5),
            EXPECTED_GAIN: round(self.last_expected_gain, 5),
            C.PROMISED_GAIN: round(promised, 5),
            P_FEASIBLE: round(float(p_ok[i, j]), 3),
            ADAPTIVE: self.adaptive,
            C.CHOOSER: C.MODEL,
        }
        steps = model.expected_steps(i) if model.adaptive.is_adaptive(i, j) else None
        if steps:  # SGLang's adaptive mode: the step counts the model expects its slot to run, and how often
            info[ADAPTIVE_STEPS] = {str(k): f for k, f in steps.items()}
        return (i, j), info


def tp_size(space: SearchSpace) -> int:
    """The tensor-parallel size the space fixes (1 when it fixes none)."""
    return int(space.model.fixed.get("tp-size") or space.model.fixed.get("tensor-parallel-size") or 1)


def fit_model(
    table: CandidateTable,
    trials: list[FrozenTrial],
    obs: list[Observation],
    *,
    concurrency: int,
    tp: int,
    adaptive_settings: bool | str,
) -> tuple[ThroughputModel, bool, bool]:
    """The throughput model fitted to the launches, and whether it used adaptive settings and found the host
    PCIe-only. "auto" turns adaptive settings on where a launch showed a PCIe-only host and untuned speculation lost
    to none (module doc)."""
    pcie_only = any(_pcie_only(t) for t in trials)
    if adaptive_settings == "auto":
        adaptive = pcie_only and _speculation_loses_untuned(table, obs)
    else:
        adaptive = adaptive_settings is True
    model = ThroughputModel(table, concurrency, tp, adaptive, car_always_off=pcie_only).fit(obs)
    return model, adaptive, pcie_only


def expected_gain(y: np.ndarray, log_best: np.ndarray) -> np.ndarray:
    """Expected improvement over the bar, per configuration: posterior draws of log tok/s on the last axis, each
    improvement capped at ``MAX_GAIN``."""
    return np.clip(np.exp(y - log_best) - 1.0, 0.0, MAX_GAIN).mean(axis=-1)


def revealed_gain(expected_gain: np.ndarray, spread: np.ndarray, noise: float) -> np.ndarray:
    """What one launch can reveal of a configuration's expected gain: all of it where the model's spread (log tok/s)
    dwarfs the launch noise, little where the model already knows the configuration within the noise (augmented
    expected improvement, Huang et al. 2006: the factor ``1 - noise / hypot(spread, noise)``)."""
    return expected_gain * (1.0 - noise / np.hypot(spread, noise))


def _proximity(table: CandidateTable, seen: list[tuple[int, int]], locality: float) -> np.ndarray:
    """exp(-locality * distance to the nearest configuration that served): a step away from what is known costs
    a little expected gain, so a far jump needs a model that expects much more there."""
    if not seen or locality <= 0:
        return np.ones(table.valid.shape)
    steps, topk, draft = table.trees.T
    feats = np.stack([steps, np.log2(np.maximum(topk, 1)), np.log2(np.maximum(draft, 1))], axis=1)
    settings = np.array(table.other_values, dtype=object).reshape(len(table.other_values), -1)
    d = np.full(table.valid.shape, np.inf)
    for i, j in seen:
        dt = np.abs(feats - feats[i]).sum(axis=1)
        ds = (settings != settings[j]).sum(axis=1).astype(float)
        d = np.minimum(d, dt[:, None] + ds[None, :])
    return np.exp(-locality * d)


def _distance_to(table: CandidateTable, proposal: dict[str, Any]) -> np.ndarray:
    """(n_tree, n_other) how far each configuration is from a proposal of parameter values: steps, log2 topk and
    log2 draft tokens apart (as SGLang resolves them: a chain drafts steps + 1), another algorithm 1, and 1 for each
    setting that differs (``_proximity``'s distance)."""
    steps = float(proposal.get(rules.STEPS) or 1)
    topk = float(proposal.get(rules.TOPK) or 1)
    draft = float(proposal.get(rules.DRAFT) or steps + 1) if topk > 1 else steps + 1
    t_steps, t_topk, t_draft = table.trees.T
    dt = (
        np.abs(t_steps - steps)
        + np.abs(np.log2(np.maximum(t_topk, 1)) - math.log2(topk))
        + np.abs(np.log2(np.maximum(t_draft, 1)) - math.log2(max(draft, 1.0)))
    )
    algo = proposal.get(rules.ALGO)
    if algo is not None:
        dt = dt + np.array([a is not None and a != algo for a in table.algos], dtype=float)
    wanted = [_norm_setting(proposal.get(n, table.default_other[k])) for k, n in enumerate(table.other_names)]
    ds = np.array([sum(str(a) != str(b) for a, b in zip(v, wanted)) for v in table.other_values], dtype=float)
    return dt[:, None] + ds[None, :]


def _norm_setting(v: Any) -> Any:
    return UNSET if v is None else v


def _collect(table: CandidateTable, trials: list[FrozenTrial], exclude: int):
    obs: list[Observation] = []
    failures: list[Failure] = []
    served: list[tuple[int, int]] = []
    taken: set[tuple[int, int]] = set()
    pending: list[tuple[int, int]] = []
    best = None
    fatal: list[tuple[str, str]] = []
    rejected: list[tuple[int, int]] = []  # pruned, or failed after a launch
    for t in trials:
        if t.number == exclude:
            continue
        ua = t.user_attrs
        proven = ua.get(R.FATAL_SETTING)
        if isinstance(proven, dict) and "name" in proven:
            fatal.append((str(proven["name"]), str(proven.get("value"))))
        loc = table.locate_trial(t)
        if loc is None:
            continue
        outcome = ua.get(R.OUTCOME)
        if t.state == TrialState.RUNNING:
            pending.append(loc)
            continue
        if outcome == R.DUPLICATE or t.state == TrialState.FAIL:
            continue
        taken.add(loc)
        accept = _accept_length(ua)
        hist = _histogram(ua)
        if t.state == TrialState.COMPLETE and outcome == R.COMPLETE and t.value:
            obs.append(Observation(*loc, tok_per_s=float(t.value), accept_length=accept, histogram=hist))
            served.append(loc)
            best = float(t.value) if best is None else max(best, float(t.value))
        elif t.state == TrialState.PRUNED and t.intermediate_values:
            mean = float(np.mean(list(t.intermediate_values.values())))
            obs.append(Observation(*loc, mean, accept, pruned=True, histogram=hist))
            served.append(loc)
            rejected.append(loc)
        elif outcome == R.INFEASIBLE and ua.get(R.LAUNCHED) and ua.get(R.FAILURE_KIND) not in ("precheck", None):
            failures.append(Failure(*loc, kind=str(ua.get(R.FAILURE_KIND))))
            rejected.append(loc)
    return obs, failures, served, taken, pending, best, fatal, rejected


def _accept_length(ua: dict[str, Any]) -> float | None:
    """The server's accept length, or else the one seen in the stream (completion tokens per content chunk: with
    EAGLE one chunk carries one verify step), pooled over the load levels of a multi-level run."""
    for key in (R.ACCEPT_LENGTH, TOKENS_PER_CHUNK):
        v = ua.get(key)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    levels = ua.get(R.LEVELS)
    if isinstance(levels, dict):
        seen = [
            float(m[k])
            for m in levels.values()
            if isinstance(m, dict)
            for k in (R.ACCEPT_LENGTH, TOKENS_PER_CHUNK)
            if isinstance(m.get(k), (int, float)) and m[k] > 0
        ]
        if seen:
            return float(np.mean(seen))
    return None


def _histogram(ua: dict[str, Any]) -> tuple[int, ...] | None:
    """The warm-up's accept histogram (verify steps accepting 0, 1, 2, ... drafts), if the server gave one."""
    h = ua.get(R.ACCEPT_HISTOGRAM)
    if isinstance(h, (list, tuple)) and h and all(isinstance(v, int) and v >= 0 for v in h):
        return tuple(h)
    return None


def _speculation_loses_untuned(table: CandidateTable, obs: list[Observation]) -> bool:
    """Every speculative launch at the default settings so far was slower than no speculation (the field report's
    sign that the all-reduces, not the tree, hold speculation back)."""
    default = table.other_values.index(table.default_other)
    base = [o.tok_per_s for o in obs if not table.spec[o.i] and not o.pruned and o.tok_per_s]
    untuned = [o.tok_per_s for o in obs if table.spec[o.i] and o.j == default and o.tok_per_s]
    return bool(base and untuned and max(untuned) < max(base))


def _pcie_only(trial: FrozenTrial) -> bool:
    facts = trial.user_attrs.get(R.HOST_FACTS)
    return isinstance(facts, dict) and bool(facts.get(R.PCIE_ONLY))


def _distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for name, p in space.params.items():
        if isinstance(p, IntParam):
            out[name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, CategoricalParam):
            out[name] = CategoricalDistribution(p.choices)
        else:
            out[name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    return out
