"""A model of speculative-decoding throughput, learned from every launch.

Throughput is tokens accepted per verify step over the time of one step:

    log tok/s = log L(tree) - log t(tree, settings) + const

- ``L``, the accept length, depends only on the draft tree and the workload. Modelled as
  ``log(L - 1) = w . f(depth, topk, extra draft tokens)``: a curve in log depth that saturates as published EAGLE-3
  curves do, plus a gain from branching (topk) that grows with the draft tokens beyond the chain's depth.
  Every launch that reports an accept length teaches it, pruned launches included. The curve's form may be wrong
  for a machine (siblings that pay at topk 2 and add nothing at 8, a drafter that falls off past its trained depth),
  so each topk level and each chain depth also has its own deviation from it, with a prior spread
  (``TOPK_ACCEPT_SD``, ``DEPTH_ACCEPT_SD``): launches at topk 8 leave topk 4 uncertain, so it stays worth a launch
  until one is measured, which then teaches every tree of that topk.
- ``t``, the step time, is ``exp(w . g(tree) + v . h(settings) + spec * u . h1(settings))``: the tree's cost
  (draft passes grow with steps and topk, the verify pass with its width and the batch), times a factor for the
  other settings (custom all-reduce, NCCL protocol / algorithm / P2P level and their pairs) that is the same for
  every tree (each topk level with its own small deviation in the drafter's cost, ``TOPK_STEP_SD``), and a prior
  belief that speculation's multi-token verify pass feels them more than the baseline's
  1-token decode (the field report: NCCL tuning helped the verify pass, not plain decoding).
  The step time of a launch is read from its measured tok/s and accept length, so a launch teaches ``t`` whatever
  its tree, and the settings' factor is learned from a few launches and then combined with the best tree.
  Levels that mean alike share an effect besides their own (``SETTING_GROUPS``: LL and LL128, NCCL's low-latency
  protocols), so a gain measured with LL128 makes LL, never launched, worth a launch too.

Both parts are Bayesian linear regressions with Gaussian priors (published curves and costs as prior means, wide
enough to be overruled by a few launches), so every prediction has an uncertainty the search can weigh.

``adaptive_settings`` is for machines where the communication settings may matter a lot (PCIe-only, TP > 2, and
untuned speculation slower than none; the sampler turns it on when both show, ``sampler.adaptive_settings``):
every level gets an effect, the default ones too, so when speculation at the default
settings is far slower than the tree's cost explains, part of the excess is put on the defaults and other levels
become worth a launch; and how much the settings matter is learned: the step time is fitted once per prior scale
of their effects (``SETTING_SCALES``) and the fits are averaged, each weighted by its evidence (the marginal
likelihood of the launches under that scale). On the Kimi PCIe TP 8 profile this cut the restarts to 98 % from
8.5 / 14 to 5.5 / 10.2 (median / p90); on generated machines where the settings matter little it cost restarts
(README, Benchmarks), which is why it waits for those signs. The scale widens the single settings' effects only: a
pair's extra effect (LL with Ring) keeps its own prior, so a single launch of a combination cannot carry it far
from what its settings measured apart (scaled too, on four hosts at 3 % launch noise the search's answer followed
one lucky combination and was within 2 % of Kimi's optimum in 39 of 60 runs; unscaled, in 50; docs/answer.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import adaptive_chains
from .candidates import CAR, CandidateTable, acts_on_communication

# Prior of log(L - 1) against log(depth): a fit to the published EAGLE-3 chat curve (L = 1.76 at 1 step up to 3.17
# at 7), wide enough for drafters from the weak (L = 1.5 at 3 steps) to the strong (L > 4).
ACCEPT_PRIOR_MEAN = np.array([-0.27, 0.85, -0.15, 0.0, 0.10, 0.0])
ACCEPT_PRIOR_SD = np.array([0.6, 0.35, 0.12, 0.15, 0.15, 0.08])
ACCEPT_NOISE_SD = 0.06
#: prior spread of each topk level's own deviation from the curve above (log(L - 1) for trees, log step time): the
#: curve is linear in log2(topk), but siblings may pay off at 2 and saturate by 4, or never pay; what a launch with
#: topk 8 taught leaves topk 4 this unsure
TOPK_ACCEPT_SD = 0.2
TOPK_STEP_SD = 0.05
DEPTH_ACCEPT_SD = 0.1
STEP_NOISE_SD = 0.04
# Prior spread of one setting's effect on step time (log scale) and of a pair's extra effect: the field report's
# NCCL tuning moved a TP 8 PCIe server by ~6 % overall (27 % of the verify pass); with one GPU they cannot matter.
SETTING_SD = 0.06
SETTING_PAIR_SD = 0.02
SETTING_SPEC_SD = 0.06  # how much more speculation's verify pass may feel a setting than plain decoding
#: multipliers of the settings' prior spread, one step-time regression each (weighted by evidence)
SETTING_SCALES = (1.0, 2.5, 5.0)
#: levels that share an effect besides their own, so a gain measured with one carries over in part to the others:
#: LL and LL128 are NCCL's low-latency protocols, the ones made for decoding's small all-reduces (docs/search.md)
SETTING_GROUPS = {"NCCL_PROTO": (("LL", "LL128"),)}
#: prior scale of an NCCL level's effect while custom all-reduce is on (NCCL then carries only what custom
#: all-reduce does not: large prefill all-reduces, some collectives)
NCCL_UNDER_CAR = 0.35
#: prior mean of turning custom all-reduce off (log step time) where SGLang runs it: its one-shot kernels beat
#: NCCL on decode's small all-reduces, so off is slower unless an NCCL setting wins the difference back
CAR_OFF_COST = 0.03
#: on a PCIe-only box SGLang has disabled its custom all-reduce itself, so this flag changes nothing there
PRUNED_NOISE_FACTOR = 2.0  # a pruned launch measured fewer chunks
#: a shorter chain's accept length read off a deeper chain's histogram is this much less sure than a launch of it:
#: the histogram's shape comes from the warm-up's few native requests, not from the benchmark's stream
HISTOGRAM_NOISE_FACTOR = 1.5


@dataclass
class Observation:
    i: int  # tree row of the candidate table
    j: int  # settings column
    tok_per_s: float | None
    accept_length: float | None
    pruned: bool = False
    #: verify steps that accepted 0, 1, 2, ... drafts (SGLang's histogram), for a chain: every shorter chain's L
    histogram: tuple[int, ...] | None = None


class BayesLinear:
    """Linear regression with a Gaussian prior on the weights and a known noise level per observation."""

    def __init__(self, prior_mean: np.ndarray, prior_sd: np.ndarray) -> None:
        self.prior_mean = np.asarray(prior_mean, dtype=float)
        self.prior_prec = 1.0 / np.asarray(prior_sd, dtype=float) ** 2
        self.mean = self.prior_mean.copy()
        self.cov = np.diag(1.0 / self.prior_prec)

    def fit(self, X: np.ndarray, y: np.ndarray, noise_sd: np.ndarray) -> BayesLinear:
        if len(y) == 0:
            self.mean, self.cov = self.prior_mean.copy(), np.diag(1.0 / self.prior_prec)
            return self
        w = 1.0 / np.asarray(noise_sd, dtype=float) ** 2
        A = (X * w[:, None]).T @ X + np.diag(self.prior_prec)
        b = (X * w[:, None]).T @ y + self.prior_prec * self.prior_mean
        L = np.linalg.cholesky(A + 1e-9 * np.eye(len(A)))
        self.mean = np.linalg.solve(A, b)
        Linv = np.linalg.solve(L, np.eye(len(A)))
        self.cov = Linv.T @ Linv
        return self

    def log_evidence(self, X: np.ndarray, y: np.ndarray, noise_sd: np.ndarray) -> float:
        """log p(y | prior): the data's marginal likelihood under this prior (weights integrated out)."""
        if len(y) == 0:
            return 0.0
        C = (X / self.prior_prec) @ X.T + np.diag(np.asarray(noise_sd, dtype=float) ** 2)
        L = np.linalg.cholesky(C + 1e-12 * np.eye(len(y)))
        z = np.linalg.solve(L, y - X @ self.prior_mean)
        return float(-0.5 * z @ z - np.log(np.diag(L)).sum() - 0.5 * len(y) * math.log(2 * math.pi))

    def effective_parameters(self, X: np.ndarray, noise_sd: np.ndarray) -> float:
        """How many parameters the fit spent on the data (the trace of its hat matrix, between 0 and the number of
        weights): the residuals' degrees of freedom are the observations less this many."""
        w = 1.0 / np.asarray(noise_sd, dtype=float) ** 2
        return float(np.sum((X @ self.cov) * X * w[:, None]))

    def residual_sd(self, X: np.ndarray, y: np.ndarray) -> float:
        if len(y) < 2:
            return 0.0
        r = y - X @ self.mean
        return float(np.sqrt(np.mean(r**2)))

    def samples(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, d) weight draws; the first is the posterior mean."""
        d = len(self.mean)
        L = np.linalg.cholesky(self.cov + 1e-12 * np.eye(d))
        z = rng.standard_normal((n, d))
        z[0] = 0.0
        return self.mean + z @ L.T


class ThroughputModel:
    """Accept length and step time over a candidate table; ``fit`` on observations, then ``draw`` log tok/s."""

    def __init__(
        self,
        table: CandidateTable,
        concurrency: int,
        tp_size: int,
        adaptive_settings: bool = False,
        car_always_off: bool = False,
        histograms: bool = False,
    ) -> None:
        self.table = table
        #: learn shorter chains from chain launches' accept histograms (``_shorter_chains``). Off in the search: on
        #: the held-out out-of-family landscapes it cost runs (docs/out-of-family.md, accept histograms)
        self.histograms = histograms
        self.concurrency = max(1, int(concurrency))
        self.spec = table.spec.astype(float)
        self.acc_X, acc_mean, acc_sd = _accept_features(table)
        self.tree_X, tree_mean, tree_sd = _tree_features(table, concurrency)
        # SGLang's adaptive mode: a mixture of the chains its slot runs (adaptive_chains), each chain's features
        self.adaptive = adaptive_chains.layout(table, concurrency)
        self.chains = self.adaptive.chains
        chain_trees = np.array([(k, 1, k + 1) for k in self.chains], dtype=float).reshape(-1, 3)
        topk_levels, depth_levels = _accept_levels(table)
        self.chain_acc_X = _accept_rows(chain_trees, chain_trees[:, 0] > 0, topk_levels, depth_levels)
        self.chain_tree_X = _tree_rows(chain_trees, np.ones(len(self.chains), dtype=bool), topk_levels)
        self.shares: dict[int, np.ndarray] = {}  # adaptive row -> share of verify steps per chain, set by fit
        self.main_X, self.pair_X, main_scale, main_mean, comm = _setting_features(
            table, all_levels=adaptive_settings, car_always_off=car_always_off
        )
        # With one GPU there is no all-reduce: the communication settings cannot matter (still learned, from a tight
        # prior); the others (SGLang's adaptive mode, ...) keep their spread.
        idle = comm & (tp_size <= 1)
        sd_main = np.where(idle, 0.01, SETTING_SD)
        sd_spec = np.where(idle, 0.005, SETTING_SPEC_SD)
        sd_pair = 0.005 if tp_size <= 1 else SETTING_PAIR_SD
        nm, npair = self.main_X.shape[1], self.pair_X.shape[1]
        self.accept = BayesLinear(acc_mean, acc_sd)
        # one step-time regression per prior scale of the settings' effects, averaged by evidence (module doc)
        scales = SETTING_SCALES if tp_size > 1 and adaptive_settings else (1.0,)
        main_mean = np.where(idle, 0.0, main_mean)
        prior_mean = np.concatenate([tree_mean, main_mean, np.zeros(npair + nm)])
        # the scale widens the single settings' effects; a pair's extra effect keeps its own prior (module doc)
        self.steps = [
            BayesLinear(
                prior_mean,
                np.concatenate([tree_sd, sd_main * main_scale * s, np.full(npair, sd_pair), sd_spec * main_scale * s]),
            )
            for s in scales
        ]
        self.step_weights = np.full(len(scales), 1.0 / len(scales))
        self.step_mean = prior_mean  # the weighted posterior mean of the step-time weights, set by fit
        self.noise_scale = 1.0

    def step_row(self, i: int, j: int) -> np.ndarray:
        return np.concatenate([self.tree_X[i], self.main_X[j], self.pair_X[j], self.spec[i] * self.main_X[j]])

    def fit(self, obs: list[Observation]) -> ThroughputModel:
        mixed = [o for o in obs if self.adaptive.is_adaptive(o.i, o.j)]
        plain = [o for o in obs if not self.adaptive.is_adaptive(o.i, o.j)]
        # an adaptive launch's accept length is its chains' mixture, not its row's chain: the curve learns from
        # static launches only
        acc = [o for o in plain if o.accept_length is not None and self.spec[o.i] and o.accept_length > 1.0]
        Xa = self.acc_X[[o.i for o in acc]] if acc else np.zeros((0, self.acc_X.shape[1]))
        ya = np.array([math.log(max(o.accept_length - 1.0, 0.02)) for o in acc])
        na = np.array([ACCEPT_NOISE_SD * (PRUNED_NOISE_FACTOR if o.pruned else 1.0) for o in acc])
        if self.histograms:
            Xh, yh, nh = self._shorter_chains(plain)
            Xa, ya, na = np.concatenate([Xa, Xh]), np.concatenate([ya, yh]), np.concatenate([na, nh])
        self.accept.fit(Xa, ya, na)
        self.shares = {i: self._shares(i) for i in self.adaptive.rows}
        self._fit_steps(plain)
        if mixed:  # what the mixture (at the static launches' fit) leaves unexplained goes to the flag's effect
            self._fit_steps(plain, mixed)
        return self

    def _shorter_chains(self, plain: list[Observation]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Accept-curve rows for every chain shorter than a launched chain with a histogram. A chain's first m
        drafts are the same whatever its depth, so with s_i the share of verify steps accepting at least i drafts,
        the m-step chain accepts 1 + sum_{i <= m} s_i. The histogram gives the shape; the launch's own accept
        length (the benchmark's stream) gives the scale. Depths launched themselves keep their own launches, and
        each other depth gets one point, the mean over the launches that tell it: they all read the same warm-up
        prompts, so ten launches of one chain are not ten independent looks at the shorter ones."""
        launched = {int(self.table.trees[o.i, 0]) for o in plain if self._chain(o.i)}
        seen: dict[int, list[float]] = {}
        for o in plain:
            h = np.asarray(o.histogram or (), dtype=float)
            if not self._chain(o.i) or len(h) < 3 or h.sum() <= 0 or self.adaptive.is_adaptive(o.i, o.j):
                continue
            survival = np.cumsum(h[::-1])[::-1][1:] / h.sum()  # s_1 .. s_k
            S = np.cumsum(survival)
            if S[-1] <= 0:
                continue
            scale = (o.accept_length - 1.0) / S[-1] if o.accept_length and o.accept_length > 1.0 else 1.0
            for m in range(1, len(S)):
                if m not in launched:
                    seen.setdefault(m, []).append(math.log(max(scale * S[m - 1], 0.02)))
        if not seen:
            return np.zeros((0, self.acc_X.shape[1])), np.zeros(0), np.zeros(0)
        depths = sorted(seen)
        trees = np.array([(m, 1, m + 1) for m in depths], dtype=float)
        X = _accept_rows(trees, np.ones(len(trees), dtype=bool), *_accept_levels(self.table))
        y = np.array([float(np.mean(seen[m])) for m in depths])
        return X, y, np.full(len(depths), ACCEPT_NOISE_SD * HISTOGRAM_NOISE_FACTOR)

    def _chain(self, i: int) -> bool:
        steps, topk, draft = self.table.trees[i]
        return bool(self.spec[i]) and topk == 1 and steps >= 1 and draft == steps + 1

    def _fit_steps(self, plain: list[Observation], mixed: list[Observation] | None = None) -> None:
        mixed = mixed or []
        rows, ys, ns = [], [], []
        dt = self.tree_X.shape[1]
        mixed_ids = {id(o) for o in mixed}
        for o in plain + mixed:
            if not (o.tok_per_s and o.tok_per_s > 0):
                continue
            if not self.spec[o.i]:
                L = 1.0
            elif id(o) in mixed_ids:  # log tps = mixture - settings: the target puts the rest on the settings' effects
                own = float(self.tree_X[o.i] @ self.step_mean[:dt])
                L = math.exp(self._mixture_mean(o.i) + own)
            else:
                L = self.accept_length(o.i) if o.accept_length is None else o.accept_length
            rows.append(self.step_row(o.i, o.j))
            ys.append(math.log(max(L, 1.0)) - math.log(o.tok_per_s))
            ns.append(STEP_NOISE_SD * (PRUNED_NOISE_FACTOR if o.pruned else 1.0))
        X = np.array(rows) if rows else np.zeros((0, len(self.steps[0].prior_mean)))
        y, n = np.array(ys), np.array(ns)
        base = self.steps[0].fit(X, y, n)
        # launch-to-launch noise larger than assumed: widen the noise and refit, so one lucky launch can't dominate
        if len(y) >= 6:
            sd = base.residual_sd(X, y) * math.sqrt(len(y) / max(1.0, len(y) - base.effective_parameters(X, n)))
            self.noise_scale = max(1.0, sd / STEP_NOISE_SD)
            if self.noise_scale > 1.2:
                n = n * self.noise_scale
                base.fit(X, y, n)
        for m in self.steps[1:]:
            m.fit(X, y, n)
        if len(self.steps) > 1:  # weigh the prior scales by their evidence
            evidence = np.array([m.log_evidence(X, y, n) for m in self.steps])
            w = np.exp(evidence - evidence.max())
            self.step_weights = w / w.sum()
        self.step_mean = sum(w * m.mean for w, m in zip(self.step_weights, self.steps))

    def _shares(self, i: int) -> np.ndarray:
        """Share of verify steps at each chain of ``self.chains`` for adaptive row i (the accept curve's mean)."""
        k_of = {k: n for n, k in enumerate(self.chains)}

        def accept_length(k: int) -> float:
            return 1.0 + math.exp(float(self._chain_acc_row(k) @ self.accept.mean))

        out = np.zeros(len(self.chains))
        for k, f in adaptive_chains.shares(self.adaptive.rows[i], accept_length, self.concurrency).items():
            out[k_of[k]] = f
        return out

    def _chain_acc_row(self, k: int) -> np.ndarray:
        if k in self.chains:
            return self.chain_acc_X[self.chains.index(k)]
        trees = np.array([[k, 1, k + 1]], dtype=float)
        return _accept_rows(trees, np.array([True]), *_accept_levels(self.table))[0]

    def _mixture_mean(self, i: int) -> float:
        """The tree part of log tok/s of adaptive row i at the posterior mean: log sum f L - log sum f t."""
        f = self.shares[i]
        L = np.where(np.array(self.chains) > 0, 1.0 + np.exp(self.chain_acc_X @ self.accept.mean), 1.0)
        t = np.exp(self.chain_tree_X @ self.step_mean[: self.tree_X.shape[1]])
        return float(math.log(f @ L) - math.log(f @ t))

    def expected_steps(self, i: int) -> dict[int, float] | None:
        """For an adaptive row: the share of verify steps the model expects at each step count; else None."""
        if i not in self.shares:
            return None
        return {k: round(float(f), 3) for k, f in zip(self.chains, self.shares[i]) if f > 0}

    @property
    def launch_noise(self) -> float:
        """The launch-to-launch spread of tok/s the fit implies (log scale, about relative): the assumed step-time
        noise, widened by what the residuals showed."""
        return STEP_NOISE_SD * self.noise_scale

    def accept_length(self, i: int) -> float:
        if not self.spec[i]:
            return 1.0
        return 1.0 + math.exp(float(self.acc_X[i] @ self.accept.mean))

    def mean_log_tps(self, i: int, j: int) -> float:
        value = math.log(self.accept_length(i)) - float(self.step_row(i, j) @ self.step_mean)
        if self.adaptive.is_adaptive(i, j):  # the chains' mixture in place of the row's own chain
            value += self._mixture_mean(i) - self._tree_mean(i)
        return value

    def _tree_mean(self, i: int) -> float:
        return math.log(self.accept_length(i)) - float(self.tree_X[i] @ self.step_mean[: self.tree_X.shape[1]])

    def draw(self, n: int, rng: np.random.Generator) -> Draws:
        """Posterior draws of log tok/s (:class:`Draws`); draw 0 is the posterior mean."""
        wa = self.accept.samples(n, rng)  # (n, da)
        # draws from each scale's posterior in proportion to its weight; draw 0 is the weighted posterior mean
        counts = rng.multinomial(n - 1, self.step_weights)
        ws = np.concatenate([self.step_mean[None, :]] + [m.samples(c + 1, rng)[1:] for m, c in zip(self.steps, counts)])
        dt, dm, dp = self.tree_X.shape[1], self.main_X.shape[1], self.pair_X.shape[1]
        log_L = np.where(self.spec[:, None] > 0, np.log1p(np.exp(self.acc_X @ wa.T)), 0.0)
        tree = log_L - self.tree_X @ ws[:, :dt].T
        settings = np.concatenate([self.main_X, self.pair_X], axis=1) @ ws[:, dt : dt + dm + dp].T
        settings_spec = self.main_X @ ws[:, dt + dm + dp :].T
        delta = np.zeros_like(tree)
        if self.shares:  # adaptive rows: the mixture of the chains in each draw, in place of the row's own chain
            chain_L = np.where(np.array(self.chains)[:, None] > 0, 1.0 + np.exp(self.chain_acc_X @ wa.T), 1.0)
            chain_t = np.exp(self.chain_tree_X @ ws[:, :dt].T)
            for i, f in self.shares.items():
                delta[i] = np.log(f @ chain_L) - np.log(f @ chain_t) - tree[i]
        return Draws(tree, settings, settings_spec, self.spec, self.adaptive.columns, delta)


@dataclass
class Draws:
    """Posterior draws of log tok/s over the table, kept factored: configuration (i, j) in draw s is
    ``tree[i, s] - settings[j, s] - spec[i] * settings_spec[j, s] + adaptive[j] * adaptive_delta[i, s]`` (the tree,
    the settings, the part of the settings felt by speculation only, and for SGLang's adaptive mode the chains'
    mixture in place of the row's own chain)."""

    tree: np.ndarray  # (n_tree, n)
    settings: np.ndarray  # (n_other, n)
    settings_spec: np.ndarray  # (n_other, n)
    spec: np.ndarray  # (n_tree,)
    adaptive: np.ndarray  # (n_other,)
    adaptive_delta: np.ndarray  # (n_tree, n)

    def block(self, a: int, b: int) -> np.ndarray:
        """(b - a, n_other, n): every configuration of tree rows a..b-1."""
        y = self.tree[a:b, None, :] - self.settings[None] - self.spec[a:b, None, None] * self.settings_spec[None]
        if self.adaptive.any():
            y = y + self.adaptive_delta[a:b, None, :] * self.adaptive[None, :, None]
        return y

    def at(self, i: int, j: int) -> np.ndarray:
        """(n,): configuration (i, j) in every draw."""
        y = self.tree[i] - self.settings[j] - self.spec[i] * self.settings_spec[j]
        return y + self.adaptive[j] * self.adaptive_delta[i]

    def widened(self, factor: float) -> Draws:
        """Every part's spread around draw 0 (the posterior mean) times ``factor``."""

        def w(x: np.ndarray) -> np.ndarray:
            return x[:, :1] + factor * (x - x[:, :1])

        return Draws(
            w(self.tree), w(self.settings), w(self.settings_spec), self.spec, self.adaptive, w(self.adaptive_delta)
        )


def _accept_features(table: CandidateTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Accept-length features of the tree and their prior: the smooth curve, then one deviation per topk > 1 and
    one per chain depth of the space (the curve may bend anywhere)."""
    topk_levels, depth_levels = _accept_levels(table)
    X = _accept_rows(table.trees, table.spec, topk_levels, depth_levels)
    mean = np.concatenate([ACCEPT_PRIOR_MEAN, np.zeros(len(topk_levels) + len(depth_levels))])
    sd = np.concatenate(
        [ACCEPT_PRIOR_SD, np.full(len(topk_levels), TOPK_ACCEPT_SD), np.full(len(depth_levels), DEPTH_ACCEPT_SD)]
    )
    return X, mean, sd


def _depth(trees: np.ndarray) -> np.ndarray:
    return np.maximum(1.0, np.minimum(trees[:, 0], trees[:, 2] - 1))


def _accept_levels(table: CandidateTable) -> tuple[list[int], list[int]]:
    topk = table.trees[:, 1]
    return _level_values(topk, table.spec & (topk > 1)), _level_values(_depth(table.trees), table.spec)


def _accept_rows(trees: np.ndarray, spec: np.ndarray, topk_levels: list[int], depth_levels: list[int]) -> np.ndarray:
    """The accept-length features of any (steps, topk, draft) rows, with the table's level columns."""
    topk, draft = trees[:, 1], trees[:, 2]
    depth = _depth(trees)
    x = np.log(depth)
    lt = np.log2(np.maximum(topk, 1.0))
    extra = np.maximum(0.0, draft - 1 - depth)
    fill = np.minimum(1.0, extra / depth)
    base = np.stack([np.ones_like(x), x, x**2, lt * fill, lt * np.log1p(extra) / 3, lt * x], axis=1)
    by_topk = _indicators(topk, spec & (topk > 1), topk_levels)
    by_depth = _indicators(depth, spec, depth_levels)
    return np.concatenate([base, by_topk, by_depth], axis=1)


def _level_values(values: np.ndarray, where: np.ndarray) -> list[int]:
    return sorted({int(v) for v in values[where]})


def _indicators(values: np.ndarray, where: np.ndarray, levels: list[int]) -> np.ndarray:
    """(n, k) one indicator column per level, 1 where ``where`` holds and the value is that level."""
    return np.array([(values == v) & where for v in levels], dtype=float).T.reshape(len(values), len(levels))


def _tree_features(table: CandidateTable, concurrency: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step-time features of the tree and their prior: the verify pass grows with width x batch, the drafter with
    steps (and more with topk); a tree (topk > 1) adds a fixed mask/sort cost."""
    topk_levels = _accept_levels(table)[0]
    X = _tree_rows(table.trees, table.spec, topk_levels)
    b = max(1, int(concurrency))
    width_slope = 0.08 + 0.06 * math.log2(b)
    mean = np.concatenate([[0.0, 0.1, 0.1, 0.05, width_slope, 0.1, 0.03], np.zeros(len(topk_levels))])
    sd = np.concatenate([[10.0, 0.3, 0.1, 0.1, 0.12, 0.12, 0.1], np.full(len(topk_levels), TOPK_STEP_SD)])
    return X, mean, sd


def _tree_rows(trees: np.ndarray, spec_rows: np.ndarray, topk_levels: list[int]) -> np.ndarray:
    """The step-time features of any (steps, topk, draft) rows (0 steps: the verify path with one token), with the
    table's level columns."""
    spec = spec_rows.astype(float)
    steps, topk, draft = trees[:, 0], trees[:, 1], trees[:, 2]
    lt = np.log2(np.maximum(topk, 1.0))
    width = np.where(topk > 1, draft, steps + 1)
    X = np.stack(
        [
            np.ones_like(spec),
            spec,
            spec * steps / 4,
            spec * steps * lt / 4,
            spec * np.log(np.maximum(width, 1.0)),
            spec * (width - 1) / 16,
            spec * (topk > 1),
        ],
        axis=1,
    )
    return np.concatenate([X, _indicators(topk, spec_rows & (topk > 1), topk_levels)], axis=1)


def _holds(value: object, level: object) -> bool:
    return value in level if isinstance(level, frozenset) else value == level


def car_off(table: CandidateTable, car_always_off: bool = False) -> np.ndarray:
    """(n_other,) True where SGLang's custom all-reduce is off, so NCCL carries the decode all-reduces: the flag
    is set (searched or fixed), or SGLang disabled it itself (a PCIe-only box of more than two GPUs)."""
    n = len(table.other_values)
    if car_always_off:
        return np.ones(n, dtype=bool)
    if CAR in table.other_names:
        k = table.other_names.index(CAR)
        return np.array([_truthy(v[k]) for v in table.other_values], dtype=bool)
    return np.full(n, _truthy(table.space.model.fixed.get(CAR, False)), dtype=bool)


def _truthy(v: object) -> bool:
    return v is True or str(v).lower() in ("true", "1", "yes")


def _setting_features(
    table: CandidateTable, all_levels: bool = False, car_always_off: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One-hot indicators of every non-default level of every setting (every level with ``all_levels``), and of
        every pair of such levels of two settings (LL with Ring, ...); and each indicator's prior scale and mean (only
    custom all-reduce turned off has a mean other than 0: ``CAR_OFF_COST``), and whether it acts on communication
    only.

        An NCCL variable acts only on what NCCL carries: with SGLang's custom all-reduce on, the decode all-reduces
        bypass NCCL, so a protocol may change nothing there and decide the result once custom all-reduce is off. Each
        NCCL level therefore has two effects, one with custom all-reduce on (prior scale ``NCCL_UNDER_CAR``) and one
        with it off (full scale), and what a launch with custom all-reduce on taught does not settle the other."""
    off = car_off(table, car_always_off)
    car_k = table.other_names.index(CAR) if CAR in table.other_names else -1
    gated = CAR in table.other_names or car_always_off or bool(off.any())
    cols: list[tuple[int, object, bool | None]] = []
    for k, name in enumerate(table.other_names):
        levels = sorted({v[k] for v in table.other_values}, key=str)
        mine = [lv for lv in levels if all_levels or lv != table.default_other[k]]
        mine += [frozenset(g) for g in SETTING_GROUPS.get(name, ()) if len(set(g) & set(levels)) > 1]
        gates: tuple[bool | None, ...] = (False, True) if gated and name.startswith("NCCL_") else (None,)
        cols += [(k, lv, gate) for lv in mine for gate in gates]
    V = table.other_values
    main = np.array(
        [
            [1.0 if _holds(v[k], lv) and (gate is None or off[j] == gate) else 0.0 for k, lv, gate in cols]
            for j, v in enumerate(V)
        ]
    ).reshape(len(V), len(cols))
    keep = main.any(axis=0) | ~np.array([gate is not None for _, _, gate in cols], dtype=bool)
    cols = [c for c, kept in zip(cols, keep) if kept]
    main = main[:, keep]
    scale = np.array([NCCL_UNDER_CAR if gate is False else 1.0 for _, _, gate in cols])
    # turning custom all-reduce off where it works hands every small all-reduce to NCCL: slower, as a rule
    mean = np.array([CAR_OFF_COST if k == car_k and _truthy(lv) and not car_always_off else 0.0 for k, lv, _ in cols])
    pairs = [
        (a, b)
        for a in range(len(cols))
        for b in range(a + 1, len(cols))
        if cols[a][0] != cols[b][0]
        # the gate is already custom all-reduce's pair with an NCCL level; gated levels pair within one gate
        and not (car_k in (cols[a][0], cols[b][0]) and (cols[a][2] is not None or cols[b][2] is not None))
        and (cols[a][2] is None or cols[b][2] is None or cols[a][2] == cols[b][2])
    ]
    pair = np.array([[main[j, a] * main[j, b] for a, b in pairs] for j in range(len(V))]).reshape(len(V), len(pairs))
    comm = np.array([acts_on_communication(table.other_names[k]) for k, _, _ in cols], dtype=bool)
    return main, pair, scale, mean, comm
