"""A family of generated landscapes for judging the search on servers the project has never seen.

Each landscape is a simulator ``Profile`` (model on a machine) plus a load level, drawn at random from published
ranges (docs/search.md, docs/calibration.md): chain accept curves from decaying per-position acceptance rates,
tree gains, step-time coefficients for target, verify width and drafter, host overhead, tensor-parallel size and
the NCCL / custom all-reduce costs, an out-of-memory boundary on the draft tree, random fatal settings, boot times
and launch-to-launch noise.

The split is fixed by the generator's seeds and never changes: seeds ``TUNING`` are the only landscapes the search
may be tuned on; seeds ``HELD_OUT`` are reported, never looked at while tuning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.sim.model import Comm, Profile, Rule

TUNING = tuple(range(0, 30))
HELD_OUT = tuple(range(1000, 1030))
#: more generator seeds, outside both halves, whose PCIe-only machines (TP > 2, no custom all-reduce) add to the
#: tuning half's for the question of how much the NCCL settings matter there (``python -m benchmarks.run --only pcie``)
PCIE_EXTRA = range(31, 101)
LOADS = (1, 1, 1, 4, 8, 16, 32, 64)  # concurrency levels, weighted towards the single stream of the field report


@dataclass(frozen=True)
class Landscape:
    seed: int
    profile: Profile
    concurrency: int
    launch_noise: float

    @property
    def name(self) -> str:
        return self.profile.name


def _curve(rng: np.random.Generator, a0: float, decay: float, k: int = 8) -> list[float]:
    """Chain accept lengths L(1..k): 1 + sum over positions of the product of per-position acceptance rates."""
    out, run, total = [], 1.0, 1.0
    for i in range(k):
        run *= min(0.97, a0 * decay**i)
        total += run
        out.append(round(total, 4))
    return out


def landscape(seed: int) -> Landscape:
    rng = np.random.default_rng(seed)
    u = rng.uniform
    tp = int(rng.choice([1, 2, 4, 8], p=[0.3, 0.25, 0.2, 0.25]))
    moe = bool(rng.random() < 0.5)
    dense_ms = float(u(4.0, 30.0))
    # acceptance: per-position rates a0 * decay^i (EAGLE-3's published curves decay with depth)
    a0, decay = float(u(0.55, 0.92)), float(u(0.65, 0.97))
    cats = {}
    for c, shift in (("chat", 0.0), ("code", 0.04), ("math", 0.06), ("summarization", -0.06)):
        cats[c] = _curve(rng, float(np.clip(a0 + shift + rng.normal(0, 0.02), 0.3, 0.95)), decay)
    comm = None
    if tp > 1:
        pcie = bool(rng.random() < 0.5)
        ll = float(u(0.5, 4.0)) * (2.0 if pcie else 1.0) * math.log2(tp) / 3
        comm = Comm(
            nccl_lat={"LL": ll, "LL128": ll * float(u(1.0, 1.6)), "Simple": ll * float(u(1.5, 4.0))},
            nccl_slope={"LL": float(u(0.01, 0.25)), "LL128": float(u(0.005, 0.12)), "Simple": float(u(0.003, 0.06))},
            algo_factor={"Ring": 1.0, "Tree": float(u(0.9, 1.35))},
            p2p_factor={
                "SYS": float(u(0.85, 1.1)),
                "PIX": float(u(0.9, 1.1)),
                "NVL": float(u(0.9, 1.15)),
            },
            auto_ll_max_tokens=int(rng.choice([1, 4, 16, 64])),
            auto_algo_ll="Ring",
            auto_algo_simple=str(rng.choice(["Ring", "Tree"])),
            car_supported=(not pcie) or tp == 2,
            car_lat=float(u(0.05, 0.6)),
            car_slope=float(u(0.001, 0.02)),
            car_max_tokens=int(rng.choice([256, 512, 1024])),
        )
    rules: list[Rule] = []
    if tp > 1 and rng.random() < 0.3:
        rules.append(Rule("nccl_hang", env={"NCCL_PROTO": ("LL128",), "NCCL_ALGO": ("Tree",)}, why="generated"))
    if tp > 1 and rng.random() < 0.2:
        rules.append(Rule("cuda_graph", env={"NCCL_ALGO": ("Tree",)}, why="generated: NCCL_ALGO=Tree fatal"))
    if rng.random() < 0.35:
        rules.append(
            Rule(
                "crash_serving",
                topk_min=int(rng.choice([4, 8])),
                draft_min=int(rng.choice([8, 16, 32])),
                why="generated: wide trees crash",
            )
        )
    load_s = float(u(60.0, 600.0))
    boot = dict(
        imports=float(u(12, 30)),
        server_args=float(u(2, 10)),
        init_distributed=float(u(3, 20)),
        load_weights=load_s,
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
    prof = Profile(
        name=f"landscape-{seed}",
        description=f"generated landscape {seed}: TP {tp}, {'MoE' if moe else 'dense'}, a0 {a0:.2f} decay {decay:.2f}",
        figures=[],
        model_path=f"generated/target-{seed}",
        draft_model_path=f"generated/eagle3-{seed}",
        architecture="GeneratedForCausalLM",
        model_type="generated",
        tp_size=tp,
        gpu_sm=90,
        gpu_name="generated",
        gpu_mem_gb=80.0,
        context_len=32768,
        dense_ms=dense_ms,
        per_req_ms=float(u(0.01, 0.3)),
        sched_ms=float(u(0.2, 3.0)),
        n_experts=int(rng.choice([64, 128, 256, 384])) if moe else 0,
        experts_active=8 if moe else 0,
        expert_ms=float(u(0.05, 0.8)) if moe else 0.0,
        verify_fixed_ms=dense_ms * float(u(0.02, 0.5)),
        verify_per_req_ms=float(u(0.0, 0.2)),
        verify_tok_ms=float(u(0.01, 0.3)),
        tree_ms=float(u(0.0, 3.0)),
        draft_fixed_ms=float(u(0.2, 2.0)),
        draft_tok_ms=float(u(0.002, 0.05)),
        comm=comm,
        attention={"fa3": 1.0, "flashinfer": float(u(0.97, 1.1)), "triton": float(u(1.05, 1.3))},
        attention_tree={"fa3": float(u(1.0, 1.15)), "flashinfer": float(u(1.0, 1.15)), "triton": float(u(1.05, 1.2))},
        accept=cats,
        tree_beta=float(u(0.03, 0.35)),
        tree_budget=float(u(12.0, 120.0)),
        default_mem_fraction=0.85,
        min_mem_fraction=0.5,
        default_cuda_graph_max_bs=64,
        boot=boot,
        rules=tuple(rules),
    )
    return Landscape(seed=seed, profile=prof, concurrency=int(rng.choice(LOADS)), launch_noise=float(u(0.005, 0.04)))


def family(seeds: tuple[int, ...]) -> list[Landscape]:
    return [landscape(s) for s in seeds]


def pcie_only(land: Landscape) -> bool:
    """More than two GPUs without NVLink: SGLang disables its custom all-reduce and NCCL carries every all-reduce."""
    return land.profile.pcie_only_allreduce({})


def pcie_only_seeds() -> tuple[int, ...]:
    """The tuning half's PCIe-only landscapes, then those among ``PCIE_EXTRA``."""
    return tuple(k for k in (*TUNING, *PCIE_EXTRA) if pcie_only(landscape(k)))
