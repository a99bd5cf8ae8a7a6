"""Hardware profiles of the simulator, each calibrated to published figures (docs/calibration.md).

Every profile lists in ``figures`` the published numbers it reproduces (``tests/test_sim_model.py`` holds it to
them within 5%). Acceptance curves are chain accept lengths L(k) for k = 1..7 steps at topk 1, bonus token
included. Step-time parameters are in milliseconds, boot phases in real seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from .model import Comm, Profile, Rule

# Published EAGLE-3 accept lengths by k (docs/calibration.md): Llama-4-Maverick drafter (code, math, summarization)
# and the chat curve used for the 8B measurements on an H200.
MAVERICK = {
    "code": [1.83, 2.45, 2.94, 3.26, 3.47, 3.57, 3.62],
    "math": [1.86, 2.56, 3.08, 3.53, 3.73, 3.91, 4.02],
    "summarization": [1.69, 2.12, 2.37, 2.52, 2.60, 2.63, 2.63],
    "chat": [1.76, 2.285, 2.655, 2.89, 3.035, 3.12, 3.17],
}


def _scaled(curves: dict[str, list[float]], q: float) -> dict[str, list[float]]:
    return {c: [round(1 + (x - 1) * q, 4) for x in v] for c, v in curves.items()}


def kimi_k25_8x_rtxpro6000() -> Profile:
    """Kimi-K2.5 (INT4, 1T MoE: 384 experts, 8 active) on 8x RTX PRO 6000 Blackwell (PCIe, no P2P), TP 8.

    Reproduces the field report in docs/calibration.md:
    - no speculation: 88.8-90 tok/s single stream (model: ~89.3);
    - NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS cut the 5-step verify pass ~27% (28.7 ms -> 21.7 ms);
    - with that tuning, EAGLE3 2 steps (3 draft tokens) = 94.0 tok/s, the best at concurrency 1; more steps worse;
      without NCCL tuning speculation loses to the baseline;
    - the target's verify pass is >= 95% of each cycle; the drafter under 5%;
    - accept length about 2.1 at 4-5 steps (the drafter saturates early);
    - restarts take 10-15 minutes (weights + CUDA graph capture).
    On this box custom all-reduce is unsupported (PCIe without P2P), so ``--disable-custom-all-reduce`` changes
    nothing and NCCL_* always matter. NCCL's own choice is LL for single-token messages and Simple/Tree above,
    which is slow on PCIe: forcing LL/Ring helps the multi-token verify pass, not the 1-token decode, and LL's low
    bandwidth loses at large batches.
    With load: speculation loses to the baseline at concurrency 8 and 32 (verifying 2-3 tokens per request reads up
    to 2-3x the experts while few are shared), and a 1-step chain wins back ~4 % at 64 where a pass reads nearly all
    384 experts anyway; LL/Ring stops paying at high batch. Only single-stream figures are published for this box.
    Not reproduced: the weaker 10K-sample drafter's 53.2/56.7 tok/s (a different drafter).
    Failures: NCCL_PROTO=LL128 with NCCL_ALGO=Tree hangs at NCCL init (LL128 is unsafe without NVLink);
    trees (topk > 1) with the triton backend fail CUDA graph capture; steps*topk + draft > 20 runs out of memory;
    topk >= 4 with >= 8 draft tokens crashes mid-serving (illegal memory access).
    """
    return Profile(
        name="kimi-k2.5-8x-rtxpro6000",
        description="Kimi-K2.5 INT4 on 8x RTX PRO 6000 Blackwell (PCIe, no P2P), TP 8, EAGLE-3 drafter",
        figures=[
            dict(name="baseline_c1", value=89.3, range=[88.8, 90.0], unit="tok/s", concurrency=1, flags={}, env={}),
            dict(
                name="best_2steps_llring_c1",
                value=94.0,
                unit="tok/s",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 2,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 3,
                },
                env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"},
            ),
            dict(
                name="verify_5steps_untuned",
                value=28.7,
                unit="verify ms",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 5,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 6,
                },
                env={},
            ),
            dict(
                name="verify_5steps_tuned",
                value=21.7,
                unit="verify ms",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 5,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 6,
                },
                env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"},
            ),
            dict(name="boot_minutes", value=[10, 15], unit="min"),
        ],
        model_path="moonshotai/Kimi-K2.5",
        draft_model_path="lightseekorg/kimi-k2.5-eagle3",
        architecture="KimiK25ForConditionalGeneration",
        model_type="kimi_k25",
        tp_size=8,
        gpu_sm=120,
        gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        gpu_mem_gb=95.6,
        context_len=262144,
        dense_ms=7.12,
        per_req_ms=0.06,
        sched_ms=0.3,
        n_experts=384,
        experts_active=8,
        expert_ms=0.72,
        verify_fixed_ms=5.72,
        verify_per_req_ms=0.08,
        verify_tok_ms=0.097,
        tree_ms=2.5,
        draft_fixed_ms=0.45,
        draft_tok_ms=0.01,
        nograph_factor=1.3,
        comm=Comm(
            nccl_lat={"LL": 3.0, "LL128": 4.2, "Simple": 9.0},
            nccl_slope={"LL": 0.22, "LL128": 0.12, "Simple": 0.06},
            algo_factor={
                "Ring": 1.0,
                "Tree": 1.2,
                "CollnetDirect": 1.3,
                "CollnetChain": 1.3,
                "NVLS": 1.4,
                "NVLSTree": 1.4,
                "PAT": 1.15,
            },
            p2p_factor={"SYS": 0.93, "PHB": 0.97, "PXB": 1.0, "PIX": 1.0, "NVL": 1.06, "LOC": 1.08},
            auto_ll_max_tokens=1,
            car_supported=False,
        ),
        attention={"flashinfer": 1.0, "triton": 1.06, "flashmla": 0.99, "fa3": 1.02, "trtllm_mla": 0.98},
        attention_tree={"flashinfer": 1.05, "triton": 1.12, "flashmla": 1.08, "fa3": 1.06},
        accept={
            "chat": [1.62, 1.873, 1.96, 2.05, 2.10, 2.12, 2.13],
            "code": [1.70, 2.02, 2.16, 2.26, 2.31, 2.33, 2.34],
            "math": [1.72, 2.06, 2.22, 2.33, 2.39, 2.42, 2.43],
            "summarization": [1.55, 1.76, 1.84, 1.89, 1.92, 1.93, 1.93],
        },
        tree_beta=0.10,
        tree_budget=20,
        default_mem_fraction=0.88,
        min_mem_fraction=0.80,
        default_cuda_graph_max_bs=64,
        max_total_num_tokens=412000,
        boot=dict(
            imports=24.0,
            server_args=9.0,
            init_distributed=14.0,
            load_weights=430.0,
            load_draft_weights=12.0,
            memory_pool=14.0,
            capture_prefill=55.0,
            capture_decode=48.0,
            capture_verify=40.0,
            capture_draft_prefill=12.0,
            capture_draft_decode=30.0,
            capture_draft_extend=14.0,
            warmup=15.0,
        ),
        rules=(
            Rule(
                "nccl_hang",
                env={"NCCL_PROTO": ("LL128",), "NCCL_ALGO": ("Tree",)},
                why="LL128 is unsafe without NVLink; with Tree the PCIe ring never completes its setup",
            ),
            Rule("cuda_graph", attention=("triton",), topk_min=2, why="MLA tree verify graph with triton"),
            Rule("crash_serving", topk_min=4, draft_min=8, why="tree kernels overflow on deep topk-4 trees"),
        ),
    )


def llama31_8b_h100() -> Profile:
    """Llama-3.1-8B-Instruct on 1x H100 80GB, TP 1, EAGLE-3 drafter, MT-Bench (SGLang documentation).

    Reproduces: no speculation 158.34 tok/s; EAGLE-3 at SGLang's auto defaults for LlamaForCausalLM (steps 5,
    topk 4, draft tokens 8) 373.25 tok/s, both at batch 1 on the chat (MT-Bench) mix. Step-time shape (verify
    cost per step and per extra request, tree overhead) scaled from the 8B measurements on an H200 in
    docs/calibration.md. TP 1: NCCL settings and custom all-reduce change nothing.
    Failures: flashinfer with topk >= 8 fails CUDA graph capture; steps*topk + draft > 64 runs out of memory;
    triton with topk >= 4 and >= 16 draft tokens crashes mid-serving; draft tokens beyond SGLang's runtime limit
    crash on the first request.
    """
    return Profile(
        name="llama-3.1-8b-h100",
        description="Llama-3.1-8B-Instruct on 1x H100 80GB SXM, TP 1, EAGLE-3 drafter (MT-Bench)",
        figures=[
            dict(name="baseline_c1", value=158.34, unit="tok/s", concurrency=1, flags={}, env={}),
            dict(
                name="eagle3_auto_c1",
                value=373.25,
                unit="tok/s",
                concurrency=1,
                flags={"speculative-algorithm": "EAGLE3"},
                env={},
            ),
            dict(name="auto_triple", value=[5, 4, 8], unit="(steps, topk, draft)"),
        ],
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        draft_model_path="jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
        architecture="LlamaForCausalLM",
        model_type="llama",
        tp_size=1,
        gpu_sm=90,
        gpu_name="NVIDIA H100 80GB HBM3",
        gpu_mem_gb=79.6,
        context_len=131072,
        dense_ms=5.935,
        per_req_ms=0.0312,
        sched_ms=0.35,
        verify_fixed_ms=0.691,
        verify_per_req_ms=0.14,
        verify_tok_ms=0.0057,
        tree_ms=0.28,
        draft_fixed_ms=0.34,
        draft_tok_ms=0.0043,
        nograph_factor=1.35,
        compute_knee_tokens=256,
        attention={"fa3": 1.0, "flashinfer": 1.03, "triton": 1.08},
        attention_tree={"fa3": 1.0, "flashinfer": 1.02, "triton": 1.06},
        accept=_scaled(MAVERICK, 1.10),
        tree_beta=0.12,
        tree_budget=64,
        default_mem_fraction=0.85,
        min_mem_fraction=0.25,
        default_cuda_graph_max_bs=160,
        max_total_num_tokens=440000,
        boot=dict(
            imports=16.0,
            server_args=6.0,
            init_distributed=3.0,
            load_weights=14.0,
            load_draft_weights=2.0,
            memory_pool=2.0,
            capture_prefill=20.0,
            capture_decode=7.0,
            capture_verify=5.0,
            capture_draft_prefill=2.0,
            capture_draft_decode=6.0,
            capture_draft_extend=2.0,
            warmup=4.0,
        ),
        rules=(
            Rule("cuda_graph", attention=("flashinfer",), topk_min=8, why="flashinfer tree capture at topk 8"),
            Rule(
                "crash_serving",
                attention=("triton",),
                topk_min=4,
                draft_min=16,
                why="triton tree verify with wide trees",
            ),
        ),
    )


def glm47_flash_h200() -> Profile:
    """GLM-4.7-Flash (30B MoE, 3B active: 64 experts, 4 active) + EAGLE-3 on 1x H200, TP 1 (published).

    Reproduces, at SGLang's auto defaults (steps 3, topk 1, draft tokens 4) on the chat (MT-Bench) mix:
    - batch 1: baseline 128.7 tok/s, EAGLE-3 213.4 tok/s (1.66x), accept length 2.88 (MT-Bench);
      agentic/code prompts accept more (about 3.4 at 3 steps, 3.77 at 4+);
    - batch 32: baseline 1,495 tok/s, EAGLE-3 1,731 tok/s in total (only 1.16x): the verify pass of 32 x 4 tokens
      reads every expert, so speculation pays less as the batch grows and the optimum moves to fewer steps:
      a tree (3, 8, 7) at concurrency 1, a 3-step chain at 8 and 32, a 2-step chain (+2 %) at 64.
    TP 1: NCCL settings and custom all-reduce change nothing.
    Failures: flashinfer with topk > 1 and --cuda-graph-max-bs >= 128 fails CUDA graph capture; steps*topk + draft > 40
    runs out of memory; topk >= 4 with >= 5 steps crashes mid-serving (illegal memory access).
    """
    return Profile(
        name="glm-4.7-flash-h200",
        description="GLM-4.7-Flash (30B-A3B MoE) on 1x H200, TP 1, EAGLE-3 drafter",
        figures=[
            dict(name="baseline_c1", value=128.7, unit="tok/s", concurrency=1, flags={}, env={}),
            dict(
                name="eagle3_auto_c1",
                value=213.4,
                unit="tok/s",
                concurrency=1,
                flags={"speculative-algorithm": "EAGLE3"},
                env={},
            ),
            dict(name="accept_auto_chat", value=2.88, unit="accept length", flags={"speculative-algorithm": "EAGLE3"}),
            dict(name="baseline_c32", value=1495.0, unit="tok/s", concurrency=32, flags={}, env={}),
            dict(
                name="eagle3_auto_c32",
                value=1731.0,
                unit="tok/s",
                concurrency=32,
                flags={"speculative-algorithm": "EAGLE3"},
                env={},
            ),
        ],
        model_path="zai-org/GLM-4.7-Flash",
        draft_model_path="zai-org/GLM-4.7-Flash-EAGLE3",
        architecture="Glm4MoeLiteForCausalLM",
        model_type="glm4_moe_lite",
        tp_size=1,
        gpu_sm=90,
        gpu_name="NVIDIA H200",
        gpu_mem_gb=139.8,
        context_len=202752,
        dense_ms=6.78,
        per_req_ms=0.293,
        sched_ms=0.3,
        n_experts=64,
        experts_active=4,
        expert_ms=0.35,
        verify_fixed_ms=2.0,
        verify_per_req_ms=0.2,
        verify_tok_ms=0.209,
        tree_ms=0.6,
        draft_fixed_ms=0.66,
        draft_tok_ms=0.008,
        nograph_factor=1.3,
        attention={"fa3": 1.0, "flashinfer": 1.04, "triton": 1.1, "flashmla": 1.01},
        attention_tree={"fa3": 1.05, "flashinfer": 1.04, "triton": 1.08, "flashmla": 1.1},
        accept={
            "chat": [1.80, 2.46, 2.88, 3.16, 3.28, 3.37, 3.42],
            "code": [1.90, 2.75, 3.40, 3.77, 3.98, 4.10, 4.16],
            "math": [1.88, 2.62, 3.15, 3.55, 3.75, 3.90, 3.98],
            "summarization": [1.70, 2.15, 2.42, 2.58, 2.66, 2.70, 2.71],
        },
        tree_beta=0.12,
        tree_budget=40,
        default_mem_fraction=0.85,
        min_mem_fraction=0.3,
        default_cuda_graph_max_bs=256,
        max_total_num_tokens=1200000,
        boot=dict(
            imports=18.0,
            server_args=6.0,
            init_distributed=4.0,
            load_weights=38.0,
            load_draft_weights=3.0,
            memory_pool=3.0,
            capture_prefill=32.0,
            capture_decode=10.0,
            capture_verify=8.0,
            capture_draft_prefill=3.0,
            capture_draft_decode=9.0,
            capture_draft_extend=3.0,
            warmup=5.0,
        ),
        rules=(
            Rule(
                "cuda_graph",
                attention=("flashinfer",),
                topk_min=2,
                cgbs_min=128,
                why="flashinfer tree graphs at large bs",
            ),
            Rule("crash_serving", topk_min=4, steps_min=5, why="deep topk-4 trees in the MLA verify kernel"),
        ),
    )


def smollm2_135m_h200() -> Profile:
    """SmolLM2-135M with dummy weights on 1x H200 (the recorded real server, tests/data/sglang-0.5.17-h200).

    Reproduces the recorded launches (launch-overhead bound, so only shapes): baseline 413.6 tok/s at
    concurrency 1; EAGLE3 (3,1,4) 855 tok/s and (3,4,8) 665 tok/s at concurrency 1 with accept length 3.0
    (SGLANG_SIMULATE_ACC_LEN=3.0); boots of about 70 s with warm caches. Triton attention as recorded.
    """
    flat = {c: [2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0] for c in ("chat", "code", "math", "summarization")}
    return Profile(
        name="smollm2-135m-h200",
        description="SmolLM2-135M (dummy weights) on 1x H200, TP 1, as recorded with sglang 0.5.17",
        figures=[
            dict(name="baseline_c1", value=413.6, unit="tok/s", concurrency=1, flags={}, env={}),
            dict(
                name="eagle3_314_c1",
                value=855.3,
                unit="tok/s",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 3,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 4,
                },
                env={},
            ),
            dict(
                name="eagle3_348_c1",
                value=664.8,
                unit="tok/s",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 3,
                    "speculative-eagle-topk": 4,
                    "speculative-num-draft-tokens": 8,
                },
                env={},
            ),
        ],
        model_path="/tmp/models/smollm2-135m",
        draft_model_path="/tmp/models/eagle3-draft",
        architecture="LlamaForCausalLM",
        model_type="llama",
        tp_size=1,
        gpu_sm=90,
        gpu_name="NVIDIA H200",
        gpu_mem_gb=139.8,
        context_len=8192,
        dense_ms=2.05,
        per_req_ms=0.02,
        sched_ms=0.35,
        verify_fixed_ms=0.3,
        verify_per_req_ms=0.1,
        verify_tok_ms=0.005,
        tree_ms=0.6,
        draft_fixed_ms=0.22,
        draft_tok_ms=0.002,
        attention={"triton": 1.0, "fa3": 0.97, "flashinfer": 0.99},
        attention_tree={"triton": 1.1, "fa3": 1.1, "flashinfer": 1.1},
        accept=flat,
        tree_beta=0.0,
        tree_budget=200,
        default_mem_fraction=0.3,
        min_mem_fraction=0.01,
        default_cuda_graph_max_bs=16,
        max_total_num_tokens=1930503,
        boot=dict(
            imports=13.0,
            server_args=6.0,
            init_distributed=20.0,
            load_weights=0.25,
            load_draft_weights=0.1,
            memory_pool=1.5,
            capture_prefill=6.0,
            capture_decode=4.4,
            capture_verify=1.6,
            capture_draft_prefill=1.2,
            capture_draft_decode=4.6,
            capture_draft_extend=1.5,
            warmup=4.0,
        ),
    )


def llama8b_dims_2x_h200() -> Profile:
    """An 8B-sized Llama (Llama-3.1-8B dimensions, dummy weights, EAGLE-3 head) on 2x H200 (NVLink), TP 2.

    The real-GPU setup of ``tools/gpu_run/`` at TP 2: triton attention, decode CUDA graphs up to batch 16,
    ``--cuda-graph-backend-prefill disabled``, and ``SGLANG_SIMULATE_ACC_LEN`` set from the published EAGLE-3
    chat accept lengths for the step count (every prompt category gets that curve). Reproduces the issue-14 run
    on a lent two-GPU H200 machine (sglang 0.5.17, concurrency 1, 128-token answers):
    - EAGLE-3 (5, 1, 6) 478.8 tok/s, +66.6 % over no speculation (baseline 287.4 tok/s); the exported files
      measured 507.8 tok/s when booted again, within that machine's launch-to-launch spread (15-33 %; under 3 %
      on a second machine of the same kind; the simulator keeps its usual ~2 % launch noise);
    - custom all-reduce on or off: no measurable difference (two NVLink GPUs: SGLang's custom all-reduce and
      NCCL's LL/Ring cost about the same for decode-sized messages), and the NCCL protocol hardly matters;
    - ``NCCL_ALGO=Tree`` is fatal in every launch: Tree implements AllReduce only, so the ncclInt8 AllGather
      has no algorithm (``NCCL WARN Error : no algorithm/protocol available for function AllGather with
      datatype ncclInt8. NCCL_ALGO was set to Tree.``) and CUDA graph capture fails with
      ``NCCL error: invalid usage``;
    - boots of about 56 s with warm caches (the exported configuration's round trip).
    Step-time shape (draft cost per step, verify overhead) from the one-H200 run of the same model in the README
    (baseline 204 -> 287 tok/s with TP 2; (5, 1, 6) 405 -> 479 tok/s). Trees (topk > 1) are not calibrated.
    """
    chat = MAVERICK["chat"]
    return Profile(
        name="llama-8b-dims-2x-h200",
        description="8B-sized Llama (dummy weights) + EAGLE-3 head on 2x H200 NVLink, TP 2, as run with sglang 0.5.17",
        figures=[
            dict(name="baseline_c1", value=287.4, unit="tok/s", concurrency=1, flags={}, env={}),
            dict(
                name="eagle3_516_c1",
                value=478.8,
                unit="tok/s",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 5,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 6,
                },
                env={"NCCL_PROTO": "Simple"},
            ),
            dict(
                name="eagle3_516_c1_no_custom_all_reduce",
                value=478.8,
                unit="tok/s",
                concurrency=1,
                flags={
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 5,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 6,
                    "disable-custom-all-reduce": True,
                },
                env={"NCCL_PROTO": "Simple"},
            ),
            dict(name="boot_s", value=56.0, unit="s"),
        ],
        model_path="/tmp/models/llama-8b-dims",
        draft_model_path="/tmp/models/llama-8b-eagle3-draft",
        architecture="LlamaForCausalLM",
        model_type="llama",
        tp_size=2,
        gpu_sm=90,
        gpu_name="NVIDIA H200",
        gpu_mem_gb=139.8,
        context_len=131072,
        dense_ms=2.6,
        per_req_ms=0.03,
        sched_ms=0.35,
        verify_fixed_ms=1.2,
        verify_per_req_ms=0.1,
        verify_tok_ms=0.012,
        tree_ms=0.3,
        draft_fixed_ms=0.295,
        draft_tok_ms=0.005,
        nograph_factor=1.35,
        comm=Comm(
            nccl_lat={"LL": 0.5, "LL128": 0.505, "Simple": 0.51},
            nccl_slope={"LL": 0.003, "LL128": 0.002, "Simple": 0.0015},
            algo_factor={"Ring": 1.0, "Tree": 1.0, "NVLS": 1.0, "NVLSTree": 1.0, "PAT": 1.0},
            p2p_factor={"SYS": 1.0, "PHB": 1.0, "PXB": 1.0, "PIX": 1.0, "NVL": 1.0, "LOC": 1.0},
            auto_ll_max_tokens=64,
            auto_algo_simple="Ring",
            car_supported=True,
            car_lat=0.5,
            car_slope=0.002,
        ),
        attention={"triton": 1.0, "fa3": 0.97, "flashinfer": 0.99},
        attention_tree={"triton": 1.06, "fa3": 1.04, "flashinfer": 1.04},
        accept={c: list(chat) for c in ("chat", "code", "math", "summarization")},
        tree_beta=0.12,
        tree_budget=64,
        default_mem_fraction=0.85,
        min_mem_fraction=0.1,
        default_cuda_graph_max_bs=16,
        max_total_num_tokens=1500000,
        boot=dict(
            imports=14.0,
            server_args=7.0,
            init_distributed=21.0,
            load_weights=2.5,
            load_draft_weights=0.5,
            memory_pool=2.0,
            capture_prefill=0.5,
            capture_decode=3.5,
            capture_verify=1.5,
            capture_draft_prefill=0.5,
            capture_draft_decode=2.0,
            capture_draft_extend=0.8,
            warmup=2.8,  # SGLang's warm-up request and the first /health; 1.8 s of it goes with --skip-server-warmup
        ),
        rules=(
            Rule(
                "nccl_invalid",
                env={"NCCL_ALGO": ("Tree",)},
                why="Tree implements AllReduce only: the ncclInt8 AllGather has no algorithm (NCCL invalid usage)",
            ),
        ),
    )


PROFILES: dict[str, Callable[[], Profile]] = {
    "llama-3.1-8b-h100": llama31_8b_h100,
    "kimi-k2.5-8x-rtxpro6000": kimi_k25_8x_rtxpro6000,
    "glm-4.7-flash-h200": glm47_flash_h200,
    "smollm2-135m-h200": smollm2_135m_h200,
    "llama-8b-dims-2x-h200": llama8b_dims_2x_h200,
}
DEFAULT_PROFILE = "llama-3.1-8b-h100"


def load_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise KeyError(f"unknown simulator profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    return PROFILES[name]()


def list_profiles() -> list[str]:
    return list(PROFILES)
