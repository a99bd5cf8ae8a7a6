"""The simulator's performance model: pure functions of a profile and a launch configuration, no I/O.

A *profile* (``profiles.py``) describes one model on one machine: how long a decode or verify step takes as a
function of the batch, the verify width, the draft tree, the attention backend, NCCL settings and custom
all-reduce; how many tokens the drafter gets accepted per prompt category; how long a boot takes; and which
configurations fail and how. ``Profile.evaluate`` turns a configuration into an :class:`Evaluation` (steady-state
tok/s, accept length, cycle time, boot time, failure). The HTTP server (``server.py``) runs the same step-time and
acceptance functions in real time, so what a client measures matches ``evaluate`` at steady state.

Step-time model (milliseconds), for ``b`` running requests each verifying ``n`` tokens (``n = 1`` without
speculation), ``T = b * n`` tokens in the forward pass::

    target = dense * max(1, T / knee) + per_req * b + expert * distinct_experts(T) + comm(T)
    verify = target + verify_fixed + verify_per_req * b + verify_tok * b * (n - 1) [+ tree if topk > 1]
    draft  = steps * (draft_fixed + draft_tok * b * topk)
    cycle  = (verify + draft) * attention_factor + sched   (x nograph_factor if b > cuda-graph-max-bs)

``knee`` (``compute_knee_tokens``; 0 = never) is the pass size in tokens where a dense model's forward pass stops
being bound by reading its weights and becomes bound by compute: above it the dense part grows with the tokens
(the roofline), which is what makes wide verify passes at large batch expensive and moves the optimum to fewer
steps and to chains as the load grows. ``distinct_experts(T) = E * (1 - (1 - k/E)^T)`` is the number of MoE experts whose weights a pass of T tokens reads.
``comm(T)`` is the tensor-parallel all-reduce time: custom all-reduce when it is on and supported, else NCCL with
the protocol/algorithm/P2P level from ``NCCL_PROTO``/``NCCL_ALGO``/``NCCL_P2P_LEVEL`` (NCCL's own choice when unset).

Acceptance: per category a chain curve ``L(k)`` (accept length at ``k`` steps, topk 1, bonus token included). A tree
(topk > 1) raises ``L - 1`` by ``1 + beta * log2(topk) * min(1, extra / depth)``; ``EAGLE`` given an EAGLE-3
drafter accepts almost nothing (the auxiliary hidden states are skipped). Tokens per verify step are drawn from a
chain with constant per-position acceptance ``a`` solved so that the mean is exactly ``L``.
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..sglang import adaptive
from ..sglang import flags as sgl
from ..sglang import logs as sglang_logs

CATEGORIES = ("chat", "code", "math", "summarization")
FAILURES = ("invalid", "oom", "cuda_graph", "nccl_invalid", "nccl_hang", "crash_serving")
#: failures that end the boot (the rest crash while serving)
BOOT_FAILURES = ("invalid", "oom", "cuda_graph", "nccl_invalid", "nccl_hang")

OOM_MESSAGE = sglang_logs.NOT_ENOUGH_MEMORY
#: SGLang 0.5.17 on an H200 with Triton attention, building an adaptive runtime state deeper than the launch's (issue 24)
ADAPTIVE_CAPTURE_MESSAGE = f"{sglang_logs.CUDA_GRAPH_FAILED}: CUDA error: an illegal memory access was encountered"
CUDA_GRAPH_MESSAGE = (
    f"{sglang_logs.CUDA_GRAPH_FAILED}: CUDA error: operation not permitted when stream is capturing\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "
)
CRASH_MESSAGE = (
    f"CUDA error: an {sglang_logs.ILLEGAL_MEMORY_ACCESS} was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
    "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
NCCL_INVALID_MESSAGE = (
    f"{sglang_logs.CUDA_GRAPH_FAILED}: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details), "
    "NCCL version 2.27.7\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "
)
NCCL_HANG_MESSAGE = "NCCL init hangs: no log output after 'Init torch distributed begin.'"

#: the launch-to-launch noise docs/calibration.md reports (repeating a launch moved tok/s by 3-4%): one sigma. A
#: profile sets its own (``Profile.launch_noise``); real machines range from ~1 % to 15-30 % (issue 15's H200s).
LAUNCH_NOISE_SIGMA = 0.018


@dataclass(frozen=True)
class Evaluation:
    ok: bool
    failure: str | None
    message: str
    tok_per_s: float
    accept_length: float
    step_ms: float
    boot_s: float
    crash_after_requests: int | None
    # extras (not part of the stable contract, useful for tests and reports)
    batch: int = 1
    verify_ms: float = 0.0
    draft_ms: float = 0.0
    triple: tuple[int, int, int] | None = None
    warnings: tuple[str, ...] = ()
    per_category_accept: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AdaptiveMix:
    """What adaptive mode runs at one batch size in steady state: the share of verify steps at each step count,
    the mean accept length (bonus token included; 1 at 0 steps), the mean cycle time and the tok/s they give."""

    fractions: Mapping[int, float]
    accept_length: float
    cycle_ms: float
    tok_per_s: float


_MIX_CACHE: dict[tuple, AdaptiveMix] = {}


@dataclass(frozen=True)
class Comm:
    """Tensor-parallel all-reduce cost for one forward pass of T tokens: ``lat + slope * (T - 1)`` ms."""

    nccl_lat: Mapping[str, float]  # by protocol: LL, LL128, Simple
    nccl_slope: Mapping[str, float]
    algo_factor: Mapping[str, float]  # Ring, Tree, ...
    p2p_factor: Mapping[str, float]  # NCCL_P2P_LEVEL
    auto_ll_max_tokens: int = 1  # NCCL's own choice: LL for tiny messages, Simple above
    auto_algo_ll: str = "Ring"
    auto_algo_simple: str = "Tree"
    car_supported: bool = False
    car_lat: float = 0.0
    car_slope: float = 0.0
    car_max_tokens: int = 512  # 8 MiB / (hidden * 2 bytes)

    def ms(self, tokens: int, env: Mapping[str, str], car_disabled: bool) -> float:
        extra = max(0, tokens - 1)
        if self.car_supported and not car_disabled and tokens <= self.car_max_tokens:
            return self.car_lat + self.car_slope * extra
        proto = env.get("NCCL_PROTO") or ("LL" if tokens <= self.auto_ll_max_tokens else "Simple")
        if proto not in self.nccl_lat:
            proto = "Simple"
        # NCCL's own algorithm choice goes by message size, whatever protocol was forced.
        auto_algo = self.auto_algo_ll if tokens <= self.auto_ll_max_tokens else self.auto_algo_simple
        algo = env.get("NCCL_ALGO") or auto_algo
        af = self.algo_factor.get(algo, 1.1)
        pf = self.p2p_factor.get(env.get("NCCL_P2P_LEVEL") or "", 1.0)
        # the algorithm sets the latency; the P2P level (which transport moves the bytes) the bandwidth part.
        return self.nccl_lat[proto] * af + self.nccl_slope[proto] * extra * pf


@dataclass(frozen=True)
class Rule:
    """A deterministic failure: ``kind`` happens when every given condition holds."""

    kind: str
    algo: tuple[str, ...] | None = None
    attention: tuple[str, ...] | None = None
    topk_min: int | None = None
    steps_min: int | None = None
    draft_min: int | None = None
    env: Mapping[str, tuple[str, ...]] | None = None
    car_active: bool | None = None
    cgbs_min: int | None = None
    why: str = ""

    def matches(
        self,
        algo: str | None,
        attn: str,
        triple: tuple[int, int, int] | None,
        env: Mapping[str, str],
        car_active: bool,
        cgbs: int,
    ) -> bool:
        if self.algo is not None and algo not in self.algo:
            return False
        if self.attention is not None and attn not in self.attention:
            return False
        if any(x is not None for x in (self.topk_min, self.steps_min, self.draft_min)):
            if triple is None:
                return False
            steps, topk, draft = triple
            if self.topk_min is not None and topk < self.topk_min:
                return False
            if self.steps_min is not None and steps < self.steps_min:
                return False
            if self.draft_min is not None and draft < self.draft_min:
                return False
        if self.env is not None:
            for key, allowed in self.env.items():
                if (env.get(key) or "unset") not in allowed:
                    return False
        if self.car_active is not None and car_active != self.car_active:
            return False
        if self.cgbs_min is not None and cgbs < self.cgbs_min:
            return False
        return True


def capture_batch_sizes(max_bs: int, spec: bool = False) -> list[int]:
    """SGLang's default decode CUDA-graph batch sizes up to ``max_bs`` (0.5.17: 1-8, then steps of 2, 4, 8, 16 with
    speculative decoding; 1, 2, 4, 8, 12, 16, then steps of 8 without); ``max_bs`` itself is always captured."""
    if spec:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
        sizes += list(range(272, 4097, 16))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 4097, 16))
    out = [s for s in sizes if s <= max_bs]
    if max_bs >= 1 and max_bs not in out:
        out.append(max_bs)
    return out or [1]


#: A decode-graph capture costs a fixed part plus a part per captured batch size; the fixed part is worth this many
#: sizes. Calibrated on the 8B-sized model on one H200 (issue 23, warm caches): the speculative graphs took 9.9 s
#: with 35 sizes and 3.4 s with 2, i.e. 3.0 s + 0.197 s per size (3.0 / 0.197 = 15.2).
GRAPH_FIXED_SIZES = 15.2
#: With ``--skip-server-warmup`` SGLang's warm-up request goes, but the first ``/health`` still runs a generation
#: after ``await asyncio.sleep(1)``: about a second remains. Calibrated so the issue's boot goes from 65.3 s (35
#: sizes, warm-up) to 57.0 s (2 sizes, no warm-up): 6.5 s of graphs and 1.8 s of warm-up.
HEALTH_AFTER_SKIPPED_WARMUP_S = 1.0


@lru_cache(maxsize=4096)
def _chain_acceptance(mean: float, depth: int) -> float:
    """Per-position acceptance a with (1 - a^(depth+1)) / (1 - a) == mean (bisection)."""
    if depth <= 0 or mean <= 1.0:
        return 0.0
    mean = min(mean, depth + 1 - 1e-6)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        m = depth + 1.0 if a >= 1.0 else (1 - a ** (depth + 1)) / (1 - a)
        if m < mean:
            lo = a
        else:
            hi = a
    return (lo + hi) / 2


@lru_cache(maxsize=4096)
def accept_cdf(mean: float, depth: int) -> tuple[float, ...]:
    """Cumulative probabilities of accepting 1..depth+1 tokens per verify step, with the given mean."""
    if depth <= 0 or mean <= 1.0:
        return (1.0,)
    a = _chain_acceptance(mean, depth)
    pmf = [(a**j) * (1 - a) for j in range(depth)] + [a**depth]
    cdf, acc = [], 0.0
    for p in pmf:
        acc += p
        cdf.append(acc)
    cdf[-1] = 1.0
    return tuple(cdf)


def draw_accept(cdf: Sequence[float], u: float) -> int:
    """Tokens accepted in one verify step (bonus included) for a uniform draw u in [0, 1)."""
    return bisect.bisect_right(cdf, u) + 1 if len(cdf) > 1 else 1


def _key_hash(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode())


@dataclass
class Profile:
    name: str
    description: str
    figures: list[dict]
    model_path: str
    draft_model_path: str
    architecture: str
    model_type: str
    tp_size: int
    gpu_sm: int
    gpu_name: str
    gpu_mem_gb: float
    context_len: int
    # step time (ms)
    dense_ms: float
    per_req_ms: float
    sched_ms: float
    n_experts: int = 0
    experts_active: int = 0
    expert_ms: float = 0.0
    verify_fixed_ms: float = 0.0
    verify_per_req_ms: float = 0.0
    verify_tok_ms: float = 0.0
    tree_ms: float = 0.0
    draft_fixed_ms: float = 0.0
    draft_tok_ms: float = 0.0
    nograph_factor: float = 1.35
    compute_knee_tokens: float = 0.0  # tokens per pass where the dense part turns compute-bound (0 = never)
    comm: Comm | None = None
    attention: Mapping[str, float] = field(default_factory=dict)  # factor per backend; first = SGLang's default
    attention_tree: Mapping[str, float] = field(default_factory=dict)  # extra factor when topk > 1
    # acceptance
    accept: Mapping[str, Sequence[float]] = field(default_factory=dict)  # chain L(k), k = 1..len
    tree_beta: float = 0.12
    drafter: str = "EAGLE3"
    default_categories: Mapping[str, float] = field(default_factory=lambda: {"chat": 1.0})
    # memory and limits
    tree_budget: float = 64.0  # steps * topk + draft tokens that fit at the default mem fraction
    default_mem_fraction: float = 0.85
    min_mem_fraction: float = 0.5  # below: the KV pool does not fit (Not enough memory)
    default_cuda_graph_max_bs: int = 160
    max_total_num_tokens: int = 500000
    # boot (real seconds)
    boot: Mapping[str, float] = field(default_factory=dict)
    # failures
    rules: Sequence[Rule] = ()
    #: one sigma of the per-launch speed factor (each boot runs a little faster or slower, for all its chunks)
    launch_noise: float = LAUNCH_NOISE_SIGMA

    # ------------------------------------------------------------------ configuration helpers
    @property
    def default_attention(self) -> str:
        return next(iter(self.attention))

    def _resolve(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        algo = sgl.algorithm(flags)
        spec = algo in sgl.EAGLE_FAMILY or algo == "NGRAM"
        triple = sgl.resolved_triple(flags, architecture=self.architecture) if spec else None
        attn = str(flags.get("attention-backend") or self.default_attention)
        cgbs = int(flags.get("cuda-graph-max-bs") or self.default_cuda_graph_max_bs)
        graph_bs = flags.get("cuda-graph-bs-decode") or flags.get("cuda-graph-bs")
        if isinstance(graph_bs, (list, tuple)) and graph_bs:  # SGLang: an explicit list sets max_bs = max(list)
            cgbs = max(int(b) for b in graph_bs)
        mrr = flags.get("max-running-requests")
        if mrr is None:
            max_running = 48 if algo is not None else 4096
        else:
            max_running = int(mrr)
        car_disabled = _truthy(flags.get("disable-custom-all-reduce"))
        car_active = bool(self.comm and self.comm.car_supported and not car_disabled)
        mfs = float(flags.get("mem-fraction-static") or self.default_mem_fraction)
        adaptive_cfg = sgl.adaptive_config(flags) if spec and adaptive.requested(flags) else None
        return dict(
            algo=algo,
            triple=triple,
            adaptive=adaptive_cfg,
            attn=attn,
            cgbs=cgbs,
            max_running=max_running,
            car_disabled=car_disabled,
            car_active=car_active,
            mfs=mfs,
            graph_bs=sorted({int(b) for b in graph_bs}) if isinstance(graph_bs, (list, tuple)) and graph_bs else None,
        )

    # ------------------------------------------------------------------ acceptance
    def _curve(self, category: str, depth: int) -> float:
        curve = self.accept.get(category) or self.accept["chat"]
        if depth <= 0:
            return 1.0
        if depth <= len(curve):
            return float(curve[depth - 1])
        last, prev = curve[-1], curve[-2] if len(curve) > 1 else 1.0
        gain = max(0.0, last - prev)
        return float(last + gain * (1 - 0.5 ** (depth - len(curve))))

    def accept_length(self, algo: str | None, triple: tuple[int, int, int] | None, category: str = "chat") -> float:
        if algo is None or triple is None:
            return 1.0
        steps, topk, draft = triple
        depth = max(0, min(steps, draft - 1))
        if depth == 0:
            return 1.0
        base = self._curve(category, depth)
        if topk > 1:
            extra = max(0, draft - 1 - depth)
            base = 1 + (base - 1) * (1 + self.tree_beta * math.log2(topk) * min(1.0, extra / depth))
        if algo == "EAGLE" and self.drafter == "EAGLE3":
            # EAGLE given an EAGLE-3 drafter: the auxiliary hidden states are skipped, almost nothing is accepted.
            base = 1.0 + min(0.1, 0.03 * depth)
        elif algo == "NGRAM":
            base = 1 + (base - 1) * 0.35
        elif algo == "STANDALONE":
            base = 1 + (base - 1) * 0.9
        return min(base, depth + 1 - 1e-3, float(draft))

    def mixed_accept_length(
        self, algo: str | None, triple: tuple[int, int, int] | None, categories: Mapping[str, float] | None = None
    ) -> tuple[float, dict[str, float]]:
        """Accept length of a prompt mix: the harmonic mean weighted by request share (equal output lengths)."""
        cats = dict(categories or self.default_categories)
        total = sum(w for w in cats.values() if w > 0) or 1.0
        per = {c: self.accept_length(algo, triple, c) for c, w in cats.items() if w > 0}
        inv = sum((cats[c] / total) / per[c] for c in per)
        return (1.0 / inv if inv > 0 else 1.0), per

    def accept_survival(
        self, algo: str | None, triple: tuple[int, int, int] | None, categories: Mapping[str, float] | None = None
    ) -> list[float] | None:
        """For a chain (topk 1): the share of verify steps that accept at least i drafts, i = 1..steps, over a
        prompt mix (what SGLang's ``spec_correct_drafts_histogram`` counts). A chain's first m drafts are the same
        whatever its depth, so position i's share is L(i) - L(i - 1) of this profile's accept curve (clipped to a
        share that never rises with i). None for trees and without speculation."""
        if algo is None or triple is None or triple[1] != 1:
            return None
        depth = min(triple[0], triple[2] - 1)
        if depth < 1:
            return None
        cats = dict(categories or self.default_categories)
        pooled = np.zeros(depth)
        weight = 0.0
        for c, share in cats.items():
            if share <= 0:
                continue
            curve = [self.accept_length(algo, (m, 1, m + 1), c) if m else 1.0 for m in range(depth + 1)]
            s = np.minimum.accumulate(np.clip(np.diff(curve), 0.0, 1.0))
            w = share / max(curve[-1], 1.0)  # a category's verify steps per request: its tokens over its accept length
            pooled += w * s
            weight += w
        return [float(v) for v in pooled / max(weight, 1e-12)]

    # ------------------------------------------------------------------ step time
    def step_times(
        self, b: int, flags_resolved: Mapping[str, Any], env: Mapping[str, str]
    ) -> tuple[float, float, float]:
        """(cycle_ms, verify_ms, draft_ms) for one decode/verify step of b running requests."""
        r = flags_resolved
        b = max(1, int(b))
        algo, triple = r["algo"], r["triple"]
        spec = algo is not None and triple is not None
        steps, topk, n = triple if spec else (0, 1, 1)
        tokens = b * n
        experts = 0.0
        if self.n_experts:
            e, k = self.n_experts, self.experts_active
            experts = e * (1 - (1 - k / e) ** tokens) / k  # in units of one token's experts
        dense = self.dense_ms
        if self.compute_knee_tokens > 0:
            dense *= max(1.0, tokens / self.compute_knee_tokens)
        verify = dense + self.per_req_ms * b + self.expert_ms * experts
        if self.comm is not None and self.tp_size > 1:
            verify += self.comm.ms(tokens, env, r["car_disabled"])
        draft = 0.0
        if spec and steps == 0:
            # adaptive mode at 0 steps (eagle_worker_v2: a trivial verify input, no drafting): the target's decode
            # pass with the verify path's fixed cost, and the draft-extend pass SGLang still runs to keep the draft
            # KV warm; no per-request tree or acceptance work (an assumption: not yet measured on a GPU)
            verify += self.verify_fixed_ms
            draft = self.draft_fixed_ms + self.draft_tok_ms * b
        elif spec:
            verify += self.verify_fixed_ms + self.verify_per_req_ms * b + self.verify_tok_ms * b * (n - 1)
            if topk > 1:
                verify += self.tree_ms
            draft = steps * (self.draft_fixed_ms + self.draft_tok_ms * b * topk)
            if algo == "STANDALONE":
                draft *= 4.0
            elif algo == "NGRAM":
                draft = 0.05 * steps
        factor = self.attention.get(r["attn"], 1.15)
        if spec and topk > 1:
            factor *= self.attention_tree.get(r["attn"], 1.1)
        cycle = (verify + draft) * factor + self.sched_ms
        if b > r["cgbs"]:
            cycle *= self.nograph_factor
        return cycle, verify * factor, draft * factor

    def step_ms(self, b: int, flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> float:
        return self.step_times(b, self._resolve(flags), dict(env or {}))[0]

    # ------------------------------------------------------------------ boot
    def boot_phases(self, flags: Mapping[str, Any]) -> list[tuple[str, float]]:
        """The boot phases and their real (unscaled) durations in seconds."""
        r = self._resolve(flags)
        bt = self.boot
        spec_graphs = r["algo"] is not None and r["triple"] is not None
        n_bs = len(r["graph_bs"] or capture_batch_sizes(r["cgbs"], spec_graphs))
        n_bs_default = len(capture_batch_sizes(self.default_cuda_graph_max_bs, spec_graphs))
        # the profile's capture times are at its default sizes; a fixed part stays whatever the list
        graph_scale = (GRAPH_FIXED_SIZES + n_bs) / (GRAPH_FIXED_SIZES + n_bs_default)
        phases = [
            ("imports", bt["imports"]),
            ("server_args", bt["server_args"]),
            ("init_distributed", bt["init_distributed"]),
            ("load_weights", bt["load_weights"]),
        ]
        spec = r["algo"] is not None and r["triple"] is not None
        if spec:
            phases.append(("load_draft_weights", bt["load_draft_weights"]))
        phases.append(("memory_pool", bt["memory_pool"]))
        phases.append(("capture_prefill", bt["capture_prefill"]))
        if spec:
            steps, topk, draft = r["triple"]
            phases.append(("capture_target_verify", bt["capture_verify"] * graph_scale * (1 + 0.05 * draft)))
            phases.append(("capture_draft_prefill", bt["capture_draft_prefill"]))
            phases.append(
                (
                    "capture_draft_decode",
                    bt["capture_draft_decode"] * graph_scale * (1 + 0.1 * steps) * (1 + 0.6 * math.log2(topk)),
                )
            )
            phases.append(("capture_draft_extend", bt["capture_draft_extend"] * graph_scale))
            cfg = r.get("adaptive")
            if cfg is not None:
                # one more runtime state (attention backends, target-verify, draft-decode and draft-extend graphs)
                # per candidate step count beyond the initial one, for the graph sizes whose slot can run it
                for k in cfg.candidate_steps:
                    if k != steps:
                        phases.append((f"adaptive_state_{k}", self.adaptive_state_cost(r, k)[0]))
        else:
            phases.append(("capture_decode", bt["capture_decode"] * graph_scale))
        if _truthy(flags.get("skip-server-warmup")):
            phases.append(("health", min(bt["warmup"], HEALTH_AFTER_SKIPPED_WARMUP_S)))
        else:
            phases.append(("warmup", bt["warmup"]))
        return [(name, round(float(sec), 3)) for name, sec in phases]

    def adaptive_state_cost(self, r: Mapping[str, Any], k: int) -> tuple[float, float]:
        """(seconds, GB) to build one extra adaptive runtime state of ``k`` steps: attention backends and the
        target-verify, draft-decode (k >= 2 only: no multi-step draft backend for 0 or 1) and draft-extend graphs,
        for the captured batch sizes whose slot can run k. Mostly a fixed cost: on one H200 (8B-sized model,
        SGLang 0.5.17) a steps-2 state captured for one batch size took 4.44 s and 0.21 GB (issue 24)."""
        bt = self.boot
        sizes = capture_batch_sizes(r["cgbs"])
        gs = len(r["adaptive"].graph_batch_sizes(k, sizes)) / max(1, len(sizes))
        sec = bt["capture_verify"] * (1 + 0.05 * (k + 1)) + bt["capture_draft_extend"]
        if k >= 2:
            sec += bt["capture_draft_decode"] * (1 + 0.1 * k)
        return sec * (0.8 + 0.2 * gs), 0.1 * (k + 1) * (0.6 + 0.4 * gs)

    def adaptive_capture_failure(self, r: Mapping[str, Any]) -> int | None:
        """The step count of the adaptive runtime state whose CUDA-graph capture fails, or None: under Triton, a
        state deeper than the launch's (``optimizer.sglang.adaptive.deeper_state``, as an H200 showed it)."""
        cfg = r.get("adaptive")
        if cfg is None or not r.get("triple"):
            return None
        return adaptive.deeper_state(cfg, r["triple"][0], r.get("attn"))

    def boot_seconds(self, flags: Mapping[str, Any]) -> float:
        return sum(s for _, s in self.boot_phases(flags))

    # ------------------------------------------------------------------ failures
    def failure(
        self, flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> tuple[str | None, str, int | None, list[str]]:
        """(failure kind, SGLang's message, crash_after_requests, warnings) in the order SGLang would hit them."""
        violations = sgl.startup_violations(flags, architecture=self.architecture, gpu_sm=self.gpu_sm)
        if violations:
            v = violations[0]
            return "invalid", f"{v.exc}: {v.message}" if v.message else v.exc, None, []
        _, warnings = sgl.normalize(flags, architecture=self.architecture)
        r = self._resolve(flags)
        algo, triple = r["algo"], r["triple"]
        env = dict(env)

        def hit(kind: str) -> Rule | None:
            for rule in self.rules:
                if rule.kind == kind and rule.matches(algo, r["attn"], triple, env, r["car_active"], r["cgbs"]):
                    return rule
            return None

        if self.tp_size > 1 and hit("nccl_hang"):
            return "nccl_hang", NCCL_HANG_MESSAGE, None, warnings
        # memory: the KV pool must fit next to the weights, and the draft tree's buffers and graphs must fit.
        if r["mfs"] < self.min_mem_fraction:
            return "oom", OOM_MESSAGE, None, warnings
        if triple is not None and algo in sgl.EAGLE_FAMILY:
            steps, topk, draft = triple
            if r["adaptive"] is not None:
                # buffers sized for the deepest candidate (max_speculative_num_draft_tokens), plus each state's graphs
                steps = max(r["adaptive"].candidate_steps)
                draft = steps + 1 + len(r["adaptive"].candidate_steps) - 1
            headroom = max(0.0, (1 - r["mfs"]) / (1 - self.default_mem_fraction))
            # graphs for batch sizes above the profile's default need room too
            over = max(1.0, r["cgbs"] / self.default_cuda_graph_max_bs)
            need = (steps * topk + draft) * (1.0 + 0.15 * math.log2(over))
            if need > self.tree_budget * min(1.0, headroom) or hit("oom"):
                return "oom", OOM_MESSAGE, None, warnings
        elif hit("oom"):
            return "oom", OOM_MESSAGE, None, warnings
        if self.tp_size > 1 and hit("nccl_invalid"):
            return "nccl_invalid", NCCL_INVALID_MESSAGE, None, warnings
        if hit("cuda_graph"):
            return "cuda_graph", CUDA_GRAPH_MESSAGE, None, warnings
        if self.adaptive_capture_failure(r) is not None:
            return "cuda_graph", ADAPTIVE_CAPTURE_MESSAGE, None, warnings
        crash = hit("crash_serving")
        limit_broken = triple is not None and algo in sgl.EAGLE_FAMILY and not sgl.runtime_limit_ok(*triple)
        if crash or limit_broken:
            # deterministic per configuration (what SGLang runs: algorithm, tree, backend, NCCL), not per path
            key = (self.name, algo, triple, r["attn"], r["cgbs"], sorted(env.items()))
            n = 1 if limit_broken else 3 + _key_hash(*key) % 40
            return "crash_serving", CRASH_MESSAGE, n, warnings
        return None, "", None, warnings

    # ------------------------------------------------------------------ evaluation
    def effective_batch(self, flags: Mapping[str, Any], concurrency: int) -> int:
        return max(1, min(int(concurrency), self._resolve(flags)["max_running"]))

    def evaluate(
        self,
        flags: Mapping[str, Any],
        env: Mapping[str, str] | None = None,
        concurrency: int = 1,
        categories: Mapping[str, float] | None = None,
    ) -> Evaluation:
        env = {k: str(v) for k, v in (env or {}).items() if v is not None and str(v) != "unset"}
        flags = {k: v for k, v in flags.items() if v is not None}
        kind, message, crash_after, warnings = self.failure(flags, env)
        if kind == "invalid":
            return Evaluation(False, kind, message, 0.0, 0.0, 0.0, self.boot["imports"], None, warnings=tuple(warnings))
        r = self._resolve(flags)
        boot = self.boot_seconds(flags)
        b = max(1, min(int(concurrency), r["max_running"]))
        cycle, verify, draft = self.step_times(b, r, env)
        L, per = self.mixed_accept_length(r["algo"], r["triple"], categories)
        tps = b * L / (cycle / 1000.0)
        if r["adaptive"] is not None:
            mix = self.adaptive_mixture(r, b, env, categories)
            L, cycle, tps = mix.accept_length, mix.cycle_ms, mix.tok_per_s
        ok = kind is None
        if kind in ("oom", "cuda_graph", "nccl_invalid", "nccl_hang"):
            tps_out = 0.0
            boot = self._boot_until_failure(flags, kind)
        else:
            tps_out = tps
        return Evaluation(
            ok,
            kind,
            message,
            tps_out,
            L,
            cycle,
            boot,
            crash_after,
            batch=b,
            verify_ms=verify,
            draft_ms=draft,
            triple=r["triple"],
            warnings=tuple(warnings),
            per_category_accept=per,
        )

    def adaptive_mixture(
        self,
        r: Mapping[str, Any],
        b: int,
        env: Mapping[str, str] | None = None,
        categories: Mapping[str, float] | None = None,
        batches: int = 3000,
    ) -> AdaptiveMix:
        """Steady state of SGLang's adaptive mode at a constant batch b: the slot's rule run on simulated verify
        results (each request's accepted drafts drawn from the chain at the running step count, the prompt mix's
        categories in proportion), and tok/s as the mixture of the step counts it ran: b * mean(L) / mean(cycle)
        over the verify steps after the first 50."""
        cfg = r["adaptive"]
        key = (
            self.name,
            id(self),
            cfg,
            int(b),
            r["algo"],
            r["attn"],
            r["cgbs"],
            r["car_disabled"],
            tuple(sorted((env or {}).items())),
            tuple(sorted((categories or self.default_categories).items())),
            batches,
        )
        hit = _MIX_CACHE.get(key)
        if hit is not None:
            return hit
        cats = dict(categories or self.default_categories)
        total = sum(w for w in cats.values() if w > 0) or 1.0
        names = [c for c, w in cats.items() if w > 0]
        weights = np.array([cats[c] / total for c in names])
        sizes = capture_batch_sizes(r["cgbs"])
        slot = adaptive.Slot(cfg.slot_for(b, sizes), r["triple"][0])
        pmfs: dict[int, np.ndarray] = {}
        cycles: dict[int, float] = {}
        means: dict[int, float] = {}

        def prepare(k: int) -> None:
            rk = dict(r, triple=(k, 1, k + 1))
            cycles[k] = self.step_times(b, rk, dict(env or {}))[0]
            pmf = np.zeros(k + 1)
            for c, w in zip(names, weights):
                L = self.accept_length(r["algo"], (k, 1, k + 1), c) if k > 0 else 1.0
                cdf = accept_cdf(round(L, 6), k) if k > 0 else (1.0,)
                # requests of equal length: a category's share of verify steps goes as its share / its accept length
                pmf += (w / L) * np.diff(np.concatenate([[0.0], cdf]))
            pmf = pmf / pmf.sum()
            pmfs[k] = pmf
            means[k] = float((pmf * np.arange(1, k + 2)).sum())

        def pmf_of(k: int) -> np.ndarray:
            if k not in pmfs:
                prepare(k)
            return pmfs[k]

        rng = np.random.default_rng(_key_hash(self.name, b, cfg.batch_sizes))
        frac = adaptive.steady_shares(slot, pmf_of, b, rng, batches)
        for k in frac:
            if k not in pmfs:
                prepare(k)
        acc = sum(f * means[k] for k, f in frac.items())
        cyc = sum(f * cycles[k] for k, f in frac.items())
        mix = AdaptiveMix(frac, acc, cyc, b * acc / (cyc / 1000.0))
        if len(_MIX_CACHE) > 4096:
            _MIX_CACHE.clear()
        _MIX_CACHE[key] = mix
        return mix

    def _boot_until_failure(self, flags: Mapping[str, Any], kind: str) -> float:
        """Seconds from launch until the failure shows: the end of the phase that fails, or for a NCCL init hang
        the begin line of the distributed init, logged right after the server args, after which nothing comes."""
        stop = {
            "nccl_hang": "server_args",
            "oom": "memory_pool",
            "cuda_graph": "capture_prefill",
            "nccl_invalid": "capture_prefill",
        }[kind]
        deeper = self.adaptive_capture_failure(self._resolve(flags)) if kind == "cuda_graph" else None
        if deeper is not None:
            stop = f"adaptive_state_{deeper}"
        total = 0.0
        for name, sec in self.boot_phases(flags):
            total += sec
            if name == stop:
                break
        return total

    # ------------------------------------------------------------------ noisy measurements
    def pcie_only_allreduce(self, flags: Mapping[str, Any]) -> bool:
        """Whether SGLang logs that custom all-reduce is unsupported (``sglang.logs.PCIE_ONLY_ALLREDUCE``): more
        than two GPUs not all linked by NVLink, and custom all-reduce not disabled by flag."""
        return bool(
            self.tp_size > 2
            and self.comm is not None
            and not self.comm.car_supported
            and not _truthy(flags.get("disable-custom-all-reduce"))
        )

    def launch_factor(self, rng: np.random.Generator) -> float:
        """One launch's multiplicative speed factor, spread ``launch_noise`` (clipped at 4 sigma)."""
        s = max(0.0, self.launch_noise)
        return float(np.clip(rng.normal(1.0, s), max(0.2, 1.0 - 4 * s), 1.0 + 4 * s)) if s > 0 else 1.0

    def chunk_tok_per_s(
        self, ev: Evaluation, n_tokens: int, rng: np.random.Generator, launch_factor: float | None = None
    ) -> float:
        """A noisy measurement of a benchmark chunk of n_tokens output tokens, as a real server would give.

        Acceptance randomness: the chunk's mean accept length over its verify steps varies like a sample mean;
        launch noise: pass the trial's ``launch_factor`` (drawn once per launch), or one is drawn here.
        """
        if ev.tok_per_s <= 0:
            return 0.0
        lf = self.launch_factor(rng) if launch_factor is None else launch_factor
        L = max(ev.accept_length, 1.0)
        steps = max(1.0, n_tokens / L)
        if L > 1.0 and ev.triple is not None:
            depth = max(1, min(ev.triple[0], ev.triple[2] - 1))
            a = _chain_acceptance(L, depth)
            # variance of the truncated-geometric accept count
            pmf = np.array([(a**j) * (1 - a) for j in range(depth)] + [a**depth])
            vals = np.arange(1, depth + 2)
            var = float((pmf * (vals - L) ** 2).sum())
            rel = math.sqrt(var / steps) / L
        else:
            rel = 0.0
        rel = math.hypot(rel, 0.004)  # scheduling jitter
        return float(ev.tok_per_s * lf * max(0.5, rng.normal(1.0, rel)))


def nccl_warn_lines(env: Mapping[str, str], ranks: int) -> list[str]:
    """What NCCL prints on each rank when NCCL_ALGO/NCCL_PROTO leave AllGather no algorithm (enqueue.cc)."""
    suffix = "".join(f" {k} was set to {env[k]}." for k in ("NCCL_ALGO", "NCCL_PROTO") if env.get(k))
    return [
        f"sim-gpu:{1000 + r}:{1000 + r} [{r}] NCCL WARN Error : no algorithm/protocol available for function "
        f"AllGather with datatype ncclInt8.{suffix}"
        for r in range(ranks)
    ]


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)
