"""A second, independent family of generated landscapes: other functional forms than ``benchmarks/landscapes.py``.

The first family draws its landscapes from the simulator's own step-time and acceptance formulas (linear step-time
coefficients, geometric-like accept curves, one tree-gain factor). A search tuned on it can learn those forms. This
family keeps only the simulator's interface (``optimizer.sim.model.Profile``: ``failure``, ``step_times``,
``accept_length``, boot phases, the noisy chunk measurement) and replaces what happens inside, so a search can be
judged on landscapes it was not built around. It was fixed before any search was measured on it; the split never
changes: tune only on ``TUNING`` (seeds 2000-2029), report ``HELD_OUT`` (seeds 3000-3029).

What a landscape is made of (every range below is drawn uniformly unless said otherwise; "logU" is log-uniform)

Machine and model
  - TP size 1/2/4/8 (p = .25/.25/.2/.3). A TP > 1 machine has NVLink (p .55) or only PCIe; a PCIe machine has
    working GPU peer-to-peer (p .5) or goes through host memory. SGLang's custom all-reduce (CAR) runs on NVLink
    and on two PCIe GPUs; on more than two PCIe-only GPUs it is unsupported (and the probe line is logged).
  - hidden size 4096-8192, 32-80 layers (2 all-reduces each per forward), vocabulary 32k-160k (the vocab-parallel
    logits are all-gathered through NCCL on every pass, custom all-reduce or not), MoE with p .4.
Step time (ms) for ``b`` running requests verifying ``n`` tokens each (n = steps + 1 for a chain, draft tokens for a
tree), ``T = b * n``
  - target pass: smooth maximum of a weight-read floor (logU 4-35 ms) and a compute term ``T * floor / knee`` (knee
    logU 64-1024 tokens, smoothness exponent 1.5-4), times ``exp(g(log2 T))`` with ``g`` a Gaussian-process draw
    (squared-exponential, amplitude 2-10 %, length 0.6-2 octaves, relative to one token and ramped in over the
    first 6 octaves: kernel tile and wave quantisation). MoE: the
    experts read grow as ``1 - (1 + T k / (E nu))^-nu`` (a heavy-tailed expert popularity, nu 0.5-2, all experts
    logU 1.5-6 x the floor), not the binomial coverage of the first family.
  - attention: per request 0.005-0.08 ms, times ``1 + w (n - 1)`` (w 0.01-0.06); a tree's masked attention costs
    1-1.6 x that, plus building the tree mask, ``tb0 + tb1 (D / 8)^p`` (tb0 0.02-0.6 ms, tb1 0.01-0.25 ms, p 1-2).
  - verify extras: a fixed speculative overhead 0.2-2.5 ms, and per request ``v (n - 1)^p exp(g(log2 n))`` (v
    0.005-0.08 ms, p 0.8-1.3, g a GP draw of amplitude 5-25 %): not linear in the width.
  - drafting: per step ``d0 + d1 (b topk)^p`` (d0 0.15-1.2 ms, d1 0.002-0.03 ms, p 0.7-1.2) plus the drafter's
    own all-reduces and logits gather, times ``exp(g(steps))`` (GP, 3-15 %); topk > 1 adds the per-step top-k
    selection, ``0.0005-0.006 ms * b * topk^2``.
  - communication per all-reduce of ``m = T * 2 * hidden`` bytes: CAR (when active and m <= 8 MiB) ``lat + m / bw``
    (NVLink: 4-12 us and 50-200 GB/s; two PCIe GPUs: 8-30 us and 6-20 GB/s; times a CAR quality factor 0.6-2.5;
    above 512 KiB the two-shot kernel's bandwidth part x 0.8-2). Otherwise NCCL: per protocol LL / LL128 / Simple a
    latency and a bandwidth (ranges per interconnect in ``_NCCL``), the latency times ``1 + 0.35 log2(TP / 2)``, the
    bytes times ``2 (TP - 1) / TP``; Tree against Ring changes latency 0.8-1.4 x and bandwidth 0.7-1.1 x. Unset
    variables are NCCL's own choice: the protocol and algorithm its cost estimate prefers, where the estimate is the
    true cost times a log-normal bias per protocol (sigma .15 on NVLink, .35 with P2P, .6 without: NCCL's model is
    mis-tuned on boxes it was not built for), so forcing a protocol can gain a lot, nothing, or lose.
    ``NCCL_P2P_LEVEL`` picks the transport: on a PCIe box with P2P (across the CPU), NVL and PIX turn P2P off (host
    memory, 0.4-0.8 x bandwidth, 0.7-1.3 x latency); without P2P, SYS forces it on (1.2-2.5 x bandwidth) or hangs the init
    (p .35, ACS). On NVLink the level changes under 3 %. So an NCCL setting's effect scales with the bytes (verify
    width x batch), is small with CAR on (only the logits gather and messages above 8 MiB go through NCCL) and can
    decide the result with CAR off or unsupported.
Acceptance (tokens per verify step, the bonus token included)
  - a chain: per-position conditional acceptance ``alpha_i = sigmoid(logit(a1) + trend (i - 1) + g(i))`` with a1
    0.45-0.88 (p .8) or 0.3-0.55 (p .2: a drafter trained on little data or on other prompts), trend -0.45..+0.05 per position, g a GP draw (amplitude 0.1-0.6, length 0.8-2.5 positions) so the
    table can rise again with depth; per prompt category a logit shift (code 0-0.5, math 0-0.6, summarisation
    -0.6..-0.1) and its own small GP. ``L(k) = 1 + sum_i prod_{j <= i} alpha_j``.
  - with p .2 a drafter that hurts past its trained depth m (2-5): ``L`` falls by 0.05-0.2 x (steps - m)^1.2, so a
    deeper chain accepts less (a stress form: nothing here assumes accept curves are monotone).
  - a tree (topk > 1, D draft tokens): the D - 1 nodes are the main path plus siblings of its nodes, chosen as
    SGLang does by the drafter's own score (its belief: ``alpha^c`` with a calibration exponent c 0.5-1.2, sibling
    mass ``(1 - alpha^c) * 0.2-0.6 * r^-zeta``, zeta 0.7-1.5). What a sibling is truly worth: given the top-1 token
    was wrong, the chance that one of r siblings is right is ``S (1 - exp(-r / kappa))`` (kappa 0.7-3); S is 0.3-0.8,
    or with p .3 only 0.01-0.08 (trees that never pay: the drafter's alternatives are almost never right, though
    it believes they are). A sibling hit yields its token plus rho (0.3-1) of the continuation below it. An
    overconfident drafter spends the budget deep, so more steps at the same draft tokens can accept less.
Failures
  - out of memory (at boot) where ``(D / Dcap)^1.5 (topk / 4)^0.25 + steps topk / SKcap > 1`` (Dcap logU 40-240,
    SKcap logU 40-240).
  - crash while serving (a server that boots, serves ``6 + hash % 24`` requests, then dies; the benchmark runs 32),
    p .45: trees with topk >= 2/4/8 and draft tokens >= 6-32, or chains of >= 5-8 steps; and on PCIe boxes
    forcing ``NCCL_PROTO=LL128`` corrupts data (p .5: crash while serving, p .2 of the rest: init hang).
  - ``NCCL_ALGO=Tree`` fails CUDA-graph capture with "invalid usage" (p .45 of TP > 1: AllGather has no Tree);
    ``Tree`` with ``Simple`` hangs the init (p .15).
  - the baseline and SGLang's default tree at default settings always boot and serve.
Load and noise
  - concurrency 1, 1, 1, 2, 4, 8, 16, 32 or 64 (uniform over that list); launch-to-launch noise sigma logU 5-20 %.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.landscapes import Landscape
from optimizer.sglang import flags as sgl
from optimizer.sim.model import (
    CRASH_MESSAGE,
    NCCL_HANG_MESSAGE,
    NCCL_INVALID_MESSAGE,
    OOM_MESSAGE,
    Profile,
    _truthy,
)

TUNING = tuple(range(2000, 2030))
HELD_OUT = tuple(range(3000, 3030))
LOADS = (1, 1, 1, 2, 4, 8, 16, 32, 64)
CATS = ("chat", "code", "math", "summarization")
PROTOS = ("LL", "LL128", "Simple")
ALGOS = ("Ring", "Tree")
CAR_MAX_BYTES = 8 * 1024 * 1024
TWO_SHOT_BYTES = 512 * 1024
DRAFT_VOCAB = 32000
MAX_DEPTH = 16

# per interconnect: {protocol: ((latency us low, high), (bandwidth GB/s low, high))} for a 2-GPU ring
_NCCL = {
    "nvlink": {"LL": ((6, 15), (15, 40)), "LL128": ((8, 20), (60, 150)), "Simple": ((15, 40), (100, 250))},
    "pcie_p2p": {"LL": ((10, 25), (3, 8)), "LL128": ((12, 30), (5, 12)), "Simple": ((25, 60), (8, 20))},
    "pcie_shm": {"LL": ((12, 30), (2, 6)), "LL128": ((18, 45), (3, 8)), "Simple": ((30, 90), (5, 12))},
}


def _gp(rng: np.random.Generator, xs: np.ndarray, amp: float, length: float) -> np.ndarray:
    """One draw of a zero-mean Gaussian process with a squared-exponential kernel on the points xs."""
    d = xs[:, None] - xs[None, :]
    k = amp**2 * np.exp(-0.5 * (d / length) ** 2) + 1e-9 * np.eye(len(xs))
    return np.linalg.cholesky(k) @ rng.standard_normal(len(xs))


def _logu(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _interp(grid: tuple[float, ...], x: float) -> float:
    """Linear interpolation of a table on the integer grid 0, 1, 2, ... (clamped at the ends)."""
    if x <= 0:
        return grid[0]
    i = int(x)
    if i >= len(grid) - 1:
        return grid[-1]
    f = x - i
    return grid[i] * (1 - f) + grid[i + 1] * f


@dataclass(frozen=True)
class Draw:
    """Everything one landscape drew (see the module docstring for the ranges)."""

    link: str  # none, nvlink, pcie_p2p, pcie_shm
    hidden: int
    layers: int
    vocab: int
    floor_ms: float
    knee: float
    smooth: float
    g_tokens: tuple[float, ...]  # GP on log2(T) = 0..14
    moe_k_over_e: float
    moe_nu: float
    expert_full_ms: float
    attn_req_ms: float
    attn_width: float
    tree_attn: float
    tb0: float
    tb1: float
    tbp: float
    spec_fixed_ms: float
    v_tok: float
    v_pow: float
    g_width: tuple[float, ...]  # GP on log2(n) = 0..7
    d0: float
    d1: float
    dp: float
    sel_ms: float
    g_steps: tuple[float, ...]  # GP on steps = 0..16
    host_req_ms: float
    sched_ms: float
    # communication
    car_supported: bool
    car_lat: float
    car_bw: float
    car_two_shot: float
    nccl_lat: Mapping[str, float]
    nccl_bw: Mapping[str, float]
    nccl_bias: Mapping[str, float]
    tree_lat: float
    tree_bw: float
    algo_bias: float
    p2p: Mapping[str, tuple[float, float]]  # NCCL_P2P_LEVEL -> (latency factor, bandwidth factor)
    # acceptance
    alpha: Mapping[str, tuple[float, ...]]  # per category, conditional acceptance at positions 1..MAX_DEPTH
    dip_depth: int  # 0 = none
    dip: float
    calib: float
    sib_belief: float
    zeta: float
    sib_true: float
    kappa: float
    rho: float
    # failures
    d_cap: float
    sk_cap: float
    crash_tree: tuple[int, int] | None  # (topk_min, draft_min)
    crash_chain_steps: int | None
    ll128_fatal: str | None  # crash_serving / nccl_hang
    tree_invalid: bool
    tree_simple_hang: bool
    sys_hang: bool


@dataclass
class OODProfile(Profile):
    """A ``Profile`` whose acceptance, step time and failures come from ``draw`` instead of the linear forms."""

    draw: Draw | None = None
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ communication
    def _nccl_us(self, nbytes: float, env: Mapping[str, str], gather: bool = False) -> float:
        d = self.draw
        tp = self.tp_size
        lat_scale = 1 + 0.35 * math.log2(tp / 2)
        share = (tp - 1) / tp if gather else 2 * (tp - 1) / tp
        p2p_lat, p2p_bw = d.p2p.get(env.get("NCCL_P2P_LEVEL") or "unset", (1.0, 1.0))

        def cost(proto: str, algo: str) -> float:
            lat = d.nccl_lat[proto] * lat_scale * p2p_lat
            bw = d.nccl_bw[proto] * p2p_bw
            if algo == "Tree":
                lat *= d.tree_lat
                bw *= d.tree_bw
            return lat + nbytes * share / (bw * 1e3)  # GB/s -> bytes per us

        proto = env.get("NCCL_PROTO")
        algo = env.get("NCCL_ALGO")
        if proto not in PROTOS or algo not in ALGOS:
            # NCCL's own choice: what its (biased) estimate prefers; LL128 is only a default on NVLink
            protos = (proto,) if proto in PROTOS else tuple(p for p in PROTOS if p != "LL128" or d.link == "nvlink")
            algos = (algo,) if algo in ALGOS else ALGOS
            est = {
                (p, a): cost(p, a) * d.nccl_bias[p] * (d.algo_bias if a == "Tree" else 1.0)
                for p in protos
                for a in algos
            }
            proto, algo = min(est, key=est.get)
        return cost(proto, algo)

    def _comm_ms(self, tokens: int, vocab: int, n_ar: int, env: Mapping[str, str], car_disabled: bool) -> float:
        """All-reduces of a pass of ``tokens`` (n_ar of them) plus the all-gather of its logits."""
        if self.tp_size <= 1:
            return 0.0
        key = ("comm", tokens, vocab, n_ar, tuple(sorted(env.items())), car_disabled)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        d = self.draw
        m = tokens * 2 * d.hidden
        if d.car_supported and not car_disabled and m <= CAR_MAX_BYTES:
            bw = d.car_bw * 1e3 / (d.car_two_shot if m > TWO_SHOT_BYTES else 1.0)
            ar = d.car_lat + m / bw
        else:
            ar = self._nccl_us(m, env)
        gather = self._nccl_us(tokens * vocab * 2, env, gather=True)
        out = (n_ar * ar + gather) / 1000.0
        self._cache[key] = out
        return out

    # ------------------------------------------------------------------ step time
    def _target_ms(self, tokens: int) -> float:
        key = ("target", tokens)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        d = self.draw
        compute = tokens * d.floor_ms / d.knee
        base = (d.floor_ms**d.smooth + compute**d.smooth) ** (1 / d.smooth)
        x = math.log2(max(1, tokens))
        # kernel tile / wave quantisation: grows in from a few tokens on, none at a single token
        base *= math.exp((_interp(d.g_tokens, x) - d.g_tokens[0]) * min(1.0, x / 6))
        if d.moe_k_over_e > 0:

            def cover(t: float) -> float:
                return 1 - (1 + t * d.moe_k_over_e / d.moe_nu) ** (-d.moe_nu)

            base += d.expert_full_ms * (cover(tokens) - cover(1))
        self._cache[key] = base
        return base

    def step_times(
        self, b: int, flags_resolved: Mapping[str, Any], env: Mapping[str, str]
    ) -> tuple[float, float, float]:
        d = self.draw
        r = flags_resolved
        b = max(1, int(b))
        algo, triple = r["algo"], r["triple"]
        spec = algo is not None and triple is not None
        steps, topk, n = triple if spec else (0, 1, 1)
        car_off = r["car_disabled"]
        tokens = b * n
        attn = b * d.attn_req_ms * (1 + d.attn_width * (n - 1))
        if spec and topk > 1:
            attn *= d.tree_attn
        verify = self._target_ms(tokens) + attn + self._comm_ms(tokens, d.vocab, 2 * d.layers, env, car_off)
        draft = 0.0
        if spec:
            verify += d.spec_fixed_ms + b * d.v_tok * (n - 1) ** d.v_pow * math.exp(_interp(d.g_width, math.log2(n)))
            if topk > 1:
                verify += d.tb0 + d.tb1 * (n / 8) ** d.tbp
            per_step = d.d0 + d.d1 * (b * topk) ** d.dp + self._comm_ms(b * topk, DRAFT_VOCAB, 2, env, car_off)
            if topk > 1:
                per_step += d.sel_ms * b * topk * topk
            draft = steps * per_step * math.exp(_interp(d.g_steps, steps))
        cycle = verify + draft + d.sched_ms + d.host_req_ms * b
        if b > r["cgbs"]:
            cycle *= self.nograph_factor
        return cycle, verify, draft

    # ------------------------------------------------------------------ acceptance
    def _tree_accept(self, alpha: tuple[float, ...], steps: int, topk: int, draft: int) -> float:
        d = self.draw
        s = min(steps, MAX_DEPTH)
        # candidate nodes by the drafter's belief: ('m', i) main path at depth i, ('s', i, r) the r-th sibling there
        believed = [a**d.calib for a in alpha[:s]]
        nodes = []
        path = 1.0
        for i in range(s):
            sib_mass = (1 - believed[i]) * d.sib_belief
            for r in range(1, topk):
                nodes.append((path * sib_mass * r ** (-d.zeta), i, r))
            path *= believed[i]
            nodes.append((path, i, 0))
        nodes.sort(key=lambda x: (-x[0], x[1], x[2]))
        main = [False] * s
        sibs = [0] * s
        budget = max(0, draft - 1)
        for _, i, r in nodes:
            if budget == 0:
                break
            if i > 0 and not main[i - 1]:
                continue  # its parent is not in the tree
            if r == 0:
                main[i] = True
            else:
                sibs[i] += 1
            budget -= 1
        depth = 0
        while depth < s and main[depth]:
            depth += 1
        total, reach = 1.0, 1.0
        for i in range(s):
            if i > 0 and not main[i - 1]:
                break
            a = alpha[i]
            m = 1.0 if main[i] else 0.0
            sib = d.sib_true * (1 - math.exp(-sibs[i] / d.kappa)) if sibs[i] else 0.0
            cont, run = 0.0, 1.0
            for j in range(i + 1, depth):
                run *= alpha[j]
                cont += run
            total += reach * (m * a + (1 - a) * sib * (1 + d.rho * cont))
            reach *= a * m
        return total

    def accept_length(self, algo: str | None, triple: tuple[int, int, int] | None, category: str = "chat") -> float:
        if algo is None or triple is None:
            return 1.0
        key = ("accept", algo, triple, category)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        d = self.draw
        steps, topk, draft = triple
        depth = max(0, min(steps, draft - 1))
        if depth == 0:
            return 1.0
        alpha = d.alpha.get(category) or d.alpha["chat"]
        if topk <= 1:
            total, run = 1.0, 1.0
            for i in range(min(depth, MAX_DEPTH)):
                run *= alpha[i]
                total += run
        else:
            total = self._tree_accept(alpha, steps, topk, draft)
        if d.dip_depth and steps > d.dip_depth:
            total -= d.dip * (steps - d.dip_depth) ** 1.2
        if algo != "EAGLE3":
            total = 1.0 + min(0.1, 0.03 * depth)  # an EAGLE-3 drafter run as anything else accepts almost nothing
        out = max(1.0, min(total, depth + 1 - 1e-3, float(draft)))
        self._cache[key] = out
        return out

    # ------------------------------------------------------------------ failures
    def failure(
        self, flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> tuple[str | None, str, int | None, list[str]]:
        kind, message, crash_after, warnings = super().failure(flags, env)
        if kind is not None:
            return kind, message, crash_after, warnings
        d = self.draw
        r = self._resolve(flags)
        triple = r["triple"]
        env = dict(env)
        proto, algo_env, p2p = env.get("NCCL_PROTO"), env.get("NCCL_ALGO"), env.get("NCCL_P2P_LEVEL")
        pcie = d.link.startswith("pcie")
        if self.tp_size > 1:
            if (
                (d.sys_hang and p2p == "SYS")
                or (d.tree_simple_hang and algo_env == "Tree" and proto == "Simple")
                or (pcie and proto == "LL128" and d.ll128_fatal == "nccl_hang")
            ):
                return "nccl_hang", NCCL_HANG_MESSAGE, None, warnings
        if triple is not None and r["algo"] in sgl.EAGLE_FAMILY:
            steps, topk, draft = triple
            need = (draft / d.d_cap) ** 1.5 * (topk / 4) ** 0.25 + steps * topk / d.sk_cap
            if need > 1.0:
                return "oom", OOM_MESSAGE, None, warnings
        if self.tp_size > 1 and d.tree_invalid and algo_env == "Tree":
            return "nccl_invalid", NCCL_INVALID_MESSAGE, None, warnings
        crash = self.tp_size > 1 and pcie and proto == "LL128" and d.ll128_fatal == "crash_serving"
        if triple is not None and r["algo"] in sgl.EAGLE_FAMILY:
            steps, topk, draft = triple
            if d.crash_tree is not None and topk >= d.crash_tree[0] and draft >= d.crash_tree[1]:
                crash = True
            if d.crash_chain_steps is not None and topk == 1 and steps >= d.crash_chain_steps:
                crash = True
        if crash:
            key = (self.name, r["algo"], triple, sorted(env.items()), r["car_disabled"])
            n = 6 + zlib.crc32(repr(key).encode()) % 24
            return "crash_serving", CRASH_MESSAGE, n, warnings
        return None, "", None, warnings

    def pcie_only_allreduce(self, flags: Mapping[str, Any]) -> bool:
        d = self.draw
        return bool(
            self.tp_size > 2
            and d.link.startswith("pcie")
            and not d.car_supported
            and not _truthy(flags.get("disable-custom-all-reduce"))
        )


def _alpha_tables(rng: np.random.Generator) -> dict[str, tuple[float, ...]]:
    # a drafter trained on little data (or on other prompts) with p .2
    a1 = float(rng.uniform(0.3, 0.55)) if rng.random() < 0.2 else float(rng.uniform(0.45, 0.88))
    trend = float(rng.uniform(-0.45, 0.05))
    xs = np.arange(MAX_DEPTH, dtype=float)
    g = _gp(rng, xs, float(rng.uniform(0.1, 0.6)), float(rng.uniform(0.8, 2.5)))
    shifts = {
        "chat": 0.0,
        "code": float(rng.uniform(0.0, 0.5)),
        "math": float(rng.uniform(0.0, 0.6)),
        "summarization": -float(rng.uniform(0.1, 0.6)),
    }
    base = math.log(a1 / (1 - a1)) + trend * xs + g
    out = {}
    for c in CATS:
        logit = base + shifts[c] + _gp(rng, xs, 0.15, 1.5)
        out[c] = tuple(float(np.clip(1 / (1 + math.exp(-v)), 0.01, 0.97)) for v in logit)
    return out


def landscape(seed: int) -> Landscape:
    rng = np.random.default_rng([seed, 25])
    u = rng.uniform
    tp = int(rng.choice([1, 2, 4, 8], p=[0.25, 0.25, 0.2, 0.3]))
    if tp == 1:
        link = "none"
    elif rng.random() < 0.55:
        link = "nvlink"
    else:
        link = "pcie_p2p" if rng.random() < 0.5 else "pcie_shm"
    moe = bool(rng.random() < 0.4)
    floor_ms = _logu(rng, 4.0, 35.0)
    # communication
    table = _NCCL.get(link, _NCCL["nvlink"])
    nccl_lat = {p: float(u(*table[p][0])) for p in PROTOS}
    nccl_bw = {p: float(u(*table[p][1])) for p in PROTOS}
    bias_sigma = {"nvlink": 0.15, "pcie_p2p": 0.35, "pcie_shm": 0.6}.get(link, 0.15)
    nccl_bias = {p: float(math.exp(rng.normal(0.0, bias_sigma))) for p in PROTOS}
    car_supported = link == "nvlink" or (link.startswith("pcie") and tp == 2)
    if link == "nvlink":
        car_lat, car_bw = float(u(4, 12)), float(u(50, 200))
    else:
        car_lat, car_bw = float(u(8, 30)), float(u(6, 20))
    car_quality = float(u(0.6, 2.5))
    if link == "pcie_p2p":
        p2p = {lvl: (float(u(0.7, 1.3)), float(u(0.4, 0.8))) for lvl in ("NVL", "PIX")}
        p2p["SYS"] = (1.0, 1.0)
    elif link == "pcie_shm":
        p2p = {"NVL": (1.0, 1.0), "PIX": (1.0, 1.0), "SYS": (float(u(0.7, 1.1)), float(u(1.2, 2.5)))}
    else:
        p2p = {lvl: (float(u(0.97, 1.03)), float(u(0.97, 1.03))) for lvl in ("NVL", "PIX", "SYS")}
    trees_pay = rng.random() >= 0.3
    dip = rng.random() < 0.2
    crash_kind = rng.random()
    crash_tree = None
    crash_chain = None
    if crash_kind < 0.3:
        crash_tree = (int(rng.choice([2, 4, 8])), int(rng.choice([6, 8, 12, 16, 24, 32])))
    elif crash_kind < 0.45:
        crash_chain = int(rng.choice([5, 6, 7, 8]))
    pcie = link.startswith("pcie")
    ll128 = None
    if pcie:
        x = rng.random()
        ll128 = "crash_serving" if x < 0.5 else ("nccl_hang" if x < 0.6 else None)
    draw = Draw(
        link=link,
        hidden=int(rng.choice([4096, 5120, 7168, 8192])),
        layers=int(rng.integers(32, 81)),
        vocab=int(rng.choice([32000, 64000, 128256, 151936, 163840])),
        floor_ms=floor_ms,
        knee=_logu(rng, 64, 1024),
        smooth=float(u(1.5, 4.0)),
        g_tokens=tuple(map(float, _gp(rng, np.arange(15.0), float(u(0.02, 0.10)), float(u(0.6, 2.0))))),
        moe_k_over_e=float(8 / rng.choice([64, 128, 256, 384])) if moe else 0.0,
        moe_nu=float(u(0.5, 2.0)),
        expert_full_ms=floor_ms * _logu(rng, 1.5, 6.0) if moe else 0.0,
        attn_req_ms=float(u(0.005, 0.08)),
        attn_width=float(u(0.01, 0.06)),
        tree_attn=float(u(1.0, 1.6)),
        tb0=float(u(0.02, 0.6)),
        tb1=float(u(0.01, 0.25)),
        tbp=float(u(1.0, 2.0)),
        spec_fixed_ms=float(u(0.2, 2.5)),
        v_tok=float(u(0.005, 0.08)),
        v_pow=float(u(0.8, 1.3)),
        g_width=tuple(map(float, _gp(rng, np.arange(8.0), float(u(0.05, 0.25)), float(u(0.8, 2.0))))),
        d0=float(u(0.15, 1.2)),
        d1=float(u(0.002, 0.03)),
        dp=float(u(0.7, 1.2)),
        sel_ms=float(u(0.0005, 0.006)),
        g_steps=tuple(map(float, _gp(rng, np.arange(17.0), float(u(0.03, 0.15)), float(u(1.0, 3.0))))),
        host_req_ms=float(u(0.01, 0.2)),
        sched_ms=float(u(0.3, 3.0)),
        car_supported=car_supported,
        car_lat=car_lat * car_quality,
        car_bw=car_bw / car_quality,
        car_two_shot=float(u(0.8, 2.0)),
        nccl_lat=nccl_lat,
        nccl_bw=nccl_bw,
        nccl_bias=nccl_bias,
        tree_lat=float(u(0.8, 1.4)),
        tree_bw=float(u(0.7, 1.1)),
        algo_bias=float(math.exp(rng.normal(0.0, bias_sigma))),
        p2p=p2p,
        alpha=_alpha_tables(rng),
        dip_depth=int(rng.integers(2, 6)) if dip else 0,
        dip=float(u(0.05, 0.2)),
        calib=float(u(0.5, 1.2)),
        sib_belief=float(u(0.2, 0.6)),
        zeta=float(u(0.7, 1.5)),
        sib_true=float(u(0.3, 0.8)) if trees_pay else float(u(0.01, 0.08)),
        kappa=float(u(0.7, 3.0)),
        rho=float(u(0.3, 1.0)),
        d_cap=_logu(rng, 40, 240),
        sk_cap=_logu(rng, 40, 240),
        crash_tree=crash_tree,
        crash_chain_steps=crash_chain,
        ll128_fatal=ll128,
        tree_invalid=tp > 1 and rng.random() < 0.45,
        tree_simple_hang=tp > 1 and rng.random() < 0.15,
        sys_hang=link == "pcie_shm" and rng.random() < 0.35,
    )
    boot = dict(
        imports=float(u(12, 30)),
        server_args=float(u(2, 10)),
        init_distributed=float(u(3, 20)),
        load_weights=_logu(rng, 30.0, 900.0),
        load_draft_weights=float(u(3, 20)),
        memory_pool=float(u(3, 20)),
        capture_prefill=float(u(20, 90)),
        capture_decode=float(u(10, 60)),
        capture_verify=float(u(10, 60)),
        capture_draft_prefill=float(u(5, 20)),
        capture_draft_decode=float(u(10, 40)),
        capture_draft_extend=float(u(5, 20)),
        warmup=float(u(5, 20)),
    )
    concurrency = int(rng.choice(LOADS))
    noise = _logu(rng, 0.05, 0.20)
    prof = OODProfile(
        name=f"ood-{seed}",
        description=(
            f"out-of-family landscape {seed}: TP {tp} ({link}), {'MoE' if moe else 'dense'}, "
            f"trees {'pay' if trees_pay else 'never pay'}{', deep chains dip' if dip else ''}"
        ),
        figures=[],
        model_path=f"generated/ood-target-{seed}",
        draft_model_path=f"generated/ood-eagle3-{seed}",
        architecture="GeneratedForCausalLM",
        model_type="generated",
        tp_size=tp,
        gpu_sm=90,
        gpu_name="generated",
        gpu_mem_gb=80.0,
        context_len=32768,
        dense_ms=floor_ms,
        per_req_ms=draw.host_req_ms,
        sched_ms=draw.sched_ms,
        attention={"fa3": 1.0},
        attention_tree={"fa3": 1.0},
        accept={c: [1.0] for c in CATS},
        tree_budget=1e12,  # memory is the draw's own boundary (OODProfile.failure)
        default_mem_fraction=0.85,
        min_mem_fraction=0.5,
        default_cuda_graph_max_bs=64,
        boot=boot,
        rules=(),
        launch_noise=noise,
        draw=draw,
    )
    return Landscape(seed=seed, profile=prof, concurrency=concurrency, launch_noise=noise)


def family(seeds: tuple[int, ...]) -> list[Landscape]:
    return [landscape(s) for s in seeds]


# ---------------------------------------------------------------------- what a landscape looks like
def describe(land: Landscape) -> dict[str, Any]:
    """The optimum, its gain over the baseline, the best chain and tree, what the settings are worth, failures."""
    from benchmarks.strategies import space_for, truth
    from optimizer.sglang import flags as sgl_flags

    prof = land.profile
    space = space_for(prof)
    tr = truth(prof, space, land.concurrency)
    table, values = tr["table"], tr["values"]
    i, j = tr["optimum_ij"]
    d_j = table.other_values.index(table.default_other)
    topk = table.trees[:, 1]
    spec = table.spec
    chain = spec & (topk == 1)
    tree = spec & (topk > 1)
    best_chain = float(values[chain].max()) if chain.any() else 0.0
    best_tree = float(values[tree].max()) if tree.any() else 0.0
    best_default_settings = float(values[:, d_j].max())
    changed = {
        name: (table.default_other[k], table.other_values[j][k])
        for k, name in enumerate(table.other_names)
        if table.other_values[j][k] != table.default_other[k]
    }
    kinds: dict[str, int] = {}
    crash_after: list[int] = []
    for a, b in zip(*np.nonzero(table.valid)):
        cand = space.candidate(table.params(int(a), int(b)))
        env = {k: str(v) for k, v in cand.env.items() if v is not None and str(v) != "unset"}
        kind, _, n, _ = prof.failure(dict(cand.flags), env)
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "crash_serving" and n is not None:
                crash_after.append(n)
    default_triple = sgl_flags.resolved_triple({sgl_flags.ALGO: "EAGLE3"}, architecture=prof.architecture)
    return {
        "seed": land.seed,
        "tp": prof.tp_size,
        "link": prof.draw.link,
        "concurrency": land.concurrency,
        "noise": land.launch_noise,
        "optimum": tr["optimum"],
        "optimum_tree": tuple(int(x) for x in table.trees[i]) if spec[i] else None,
        "optimum_config": tr["optimum_config"],
        "ratio_to_baseline": tr["optimum"] / tr["baseline"] if tr["baseline"] else float("inf"),
        "chain_over_tree": best_chain / best_tree if best_tree else float("inf"),
        "settings_gain": tr["optimum"] / best_default_settings if best_default_settings else float("inf"),
        "settings_changed": changed,
        "failures": kinds,
        "crash_after_min": min(crash_after) if crash_after else None,
        "default_triple": default_triple,
        "valid": tr["valid"],
    }


def kind_of(desc: dict[str, Any]) -> set[str]:
    """The labels a landscape earns (a reader's summary of the family's diversity)."""
    out = set()
    tree = desc["optimum_tree"]
    if tree is None:
        out.add("baseline-optimum")
    elif tree[1] == 1:
        out.add("chain-optimum")
    else:
        out.add("tree-optimum")
    if desc["ratio_to_baseline"] < 1.05:
        out.add("baseline-level")
    if desc["settings_gain"] >= 1.05:
        out.add("settings-decide")
    if (
        desc["settings_changed"].get("disable-custom-all-reduce", (False, False))[1] is True
        and desc["settings_gain"] > 1.0
    ):
        out.add("car-off-optimum")
    if desc["chain_over_tree"] > 1.0:
        out.add("trees-lose")
    if desc["failures"].get("crash_serving"):
        out.add("crash-serving")
    if desc["failures"].get("oom"):
        out.add("oom")
    if desc["failures"].get("nccl_hang") or desc["failures"].get("nccl_invalid"):
        out.add("fatal-nccl")
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("tuning", "held-out", "both"), default="both")
    args = ap.parse_args(argv)
    seeds = {"tuning": TUNING, "held-out": HELD_OUT, "both": TUNING + HELD_OUT}[args.half]
    counts: dict[str, int] = {}
    for s in seeds:
        d = describe(landscape(s))
        kinds = kind_of(d)
        for k in kinds:
            counts[k] = counts.get(k, 0) + 1
        tree = d["optimum_tree"]
        tree_s = "baseline" if tree is None else f"({tree[0]},{tree[1]},{tree[2]})"
        changed = ", ".join(f"{k}={v[1]}" for k, v in d["settings_changed"].items()) or "default settings"
        fails = " ".join(f"{k}:{v}" for k, v in sorted(d["failures"].items()))
        print(
            f"{s} TP{d['tp']} {d['link']:8s} c{d['concurrency']:<2d} noise {d['noise']:.0%} "
            f"opt {tree_s:11s} x{d['ratio_to_baseline']:.2f} of baseline, settings x{d['settings_gain']:.2f} "
            f"({changed}); chain/tree {d['chain_over_tree']:.2f}; fails {fails or '-'}"
        )
    print("kinds:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
