"""SGLang's flag names and the allowed values of the settings the optimizer searches, to refuse a misspelt flag or
value before a launch is spent on it (real SGLang exits with ``unrecognized arguments``; NCCL with an unknown
protocol ``Simpel`` warns and falls back, so the study would measure something else than it records).

The names are ``python -m sglang.launch_server --help`` of sglang 0.5.x (``server_args.py``: every dataclass field
``foo_bar`` is ``--foo-bar``, plus the aliases and deprecated flags registered by hand). SGLang adds flags in every
release, so a name missing here is refused only when it is a near miss of a known one (a typo: ``tp-sise``,
``speculative-num-step``); a name far from every known flag is let through with a warning, and the baseline's
launch shows whether the server accepts it (a baseline that fails stops the study with its log line).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

FLAGS = frozenset(
    """
model-path model tokenizer-path tokenizer-mode tokenizer-worker-num skip-tokenizer-init load-format
model-loader-extra-config trust-remote-code context-length is-embedding enable-multimodal revision model-impl
host port skip-server-warmup warmups nccl-port dtype quantization quantization-param-path kv-cache-dtype
enable-fp32-lm-head modelopt-quant modelopt-checkpoint-restore-path modelopt-checkpoint-save-path
mem-fraction-static max-running-requests max-queued-requests max-total-tokens chunked-prefill-size
max-prefill-tokens schedule-policy enable-priority-scheduling schedule-low-priority-values-first
priority-scheduling-preemption-threshold schedule-conservativeness page-size hybrid-kvcache-ratio
swa-full-tokens-ratio disable-hybrid-swa-memory radix-eviction-policy device tp-size tensor-parallel-size tp
pp-size pipeline-parallel-size pp-max-micro-batch-size stream-interval stream-output random-seed
constrained-json-whitespace-pattern constrained-json-disable-any-whitespace watchdog-timeout dist-timeout
download-dir base-gpu-id gpu-id-step sleep-on-idle log-level log-level-http log-requests log-requests-level
crash-dump-folder show-time-cost enable-metrics enable-metrics-for-all-schedulers tokenizer-metrics-custom-labels-header
bucket-time-to-first-token bucket-inter-token-latency bucket-e2e-request-latency collect-tokens-histogram
prompt-tokens-buckets generation-tokens-buckets gc-warning-threshold-secs decode-log-interval
enable-request-time-stats-logging kv-events-config enable-trace otlp-traces-endpoint api-key served-model-name
weight-version chat-template completion-template file-storage-path enable-cache-report reasoning-parser
tool-call-parser tool-server sampling-defaults data-parallel-size dp-size load-balance-method
load-watch-interval prefill-round-robin-balance dist-init-addr nnodes node-rank json-model-override-args
preferred-sampling-params enable-lora max-lora-rank lora-target-modules lora-paths max-loaded-loras
max-loras-per-batch lora-backend max-lora-chunk-size attention-backend prefill-attention-backend
decode-attention-backend sampling-backend grammar-backend mm-attention-backend nsa-prefill-backend
nsa-decode-backend dsa-prefill-backend dsa-decode-backend speculative-algorithm speculative-draft-model-path
speculative-draft-model-revision speculative-draft-load-format speculative-num-steps speculative-eagle-topk
speculative-num-draft-tokens speculative-accept-threshold-single speculative-accept-threshold-acc
speculative-token-map speculative-attention-mode speculative-moe-runner-backend speculative-moe-a2a-backend
speculative-draft-attention-backend speculative-ngram-min-match-window-size speculative-ngram-max-match-window-size
speculative-ngram-min-bfs-breadth speculative-ngram-max-bfs-breadth speculative-ngram-match-type
speculative-ngram-branch-length speculative-ngram-capacity speculative-dflash-draft-window-size
speculative-draft-window-size speculative-adaptive speculative-adaptive-config enable-speculative-adaptive
expert-parallel-size ep-size moe-a2a-backend moe-runner-backend flashinfer-mxfp4-moe-precision
enable-flashinfer-allreduce-fusion deepep-mode ep-num-redundant-experts ep-dispatch-algorithm
init-expert-location expert-distribution-recorder-mode expert-distribution-recorder-buffer-size
enable-expert-distribution-metrics deepep-config moe-dense-tp-size enable-eplb eplb-algorithm
eplb-rebalance-num-iterations eplb-rebalance-layers-per-chunk eplb-min-rebalancing-utilization-threshold
max-mamba-cache-size mamba-ssm-dtype mamba-full-memory-ratio mamba-scheduler-strategy mamba-radix-cache-strategy
enable-hierarchical-cache hicache-ratio hicache-size hicache-write-policy hicache-io-backend hicache-mem-layout
hicache-storage-backend hicache-storage-prefetch-policy hicache-storage-backend-extra-config
enable-double-sparsity ds-channel-config-path ds-heavy-channel-num ds-heavy-token-num ds-heavy-channel-type
ds-sparse-decode-threshold cpu-offload-gb offload-group-size offload-num-in-group offload-prefetch-step
offload-mode disable-radix-cache cuda-graph-max-bs cuda-graph-bs cuda-graph-max-bs-decode cuda-graph-bs-decode
cuda-graph-backend-prefill cuda-graph-bs-prefill cuda-graph-config disable-cuda-graph disable-cuda-graph-padding
enable-breakable-cuda-graph disable-piecewise-cuda-graph enforce-piecewise-cuda-graph piecewise-cuda-graph-tokens
piecewise-cuda-graph-max-tokens piecewise-cuda-graph-compiler enable-piecewise-cuda-graph
enable-profile-cuda-graph enable-cudagraph-gc enable-nccl-nvls enable-symm-mem disable-flashinfer-cutlass-moe-fp4-allgather
enable-tokenizer-batch-encode disable-outlines-disk-cache disable-custom-all-reduce enable-mscclpp
enable-torch-symm-mem disable-overlap-schedule enable-mixed-chunk enable-dp-attention enable-dp-lm-head
enable-two-batch-overlap enable-single-batch-overlap tbo-token-distribution-threshold enable-torch-compile
enable-torch-compile-debug-mode torch-compile-max-bs torchao-config enable-nan-detection enable-p2p-check
triton-attention-reduce-in-fp32 triton-attention-num-kv-splits triton-attention-split-tile-size
num-continuous-decode-steps delete-ckpt-after-loading enable-memory-saver enable-weights-cpu-backup
allow-auto-truncate enable-custom-logit-processor flashinfer-mla-disable-ragged disable-shared-experts-fusion
disable-chunked-prefix-cache disable-fast-image-processor keep-mm-feature-on-device enable-return-hidden-states
scheduler-recv-interval numa-node enable-deterministic-inference rl-on-policy-target enable-dynamic-batch-tokenizer
dynamic-batch-tokenizer-batch-size dynamic-batch-tokenizer-batch-timeout debug-tensor-dump-output-folder
debug-tensor-dump-input-file debug-tensor-dump-inject disaggregation-mode disaggregation-transfer-backend
disaggregation-bootstrap-port disaggregation-decode-tp disaggregation-decode-dp disaggregation-prefill-pp
disaggregation-ib-device disaggregation-decode-enable-offload-kvcache num-reserved-decode-tokens
disaggregation-decode-polling-interval custom-weight-loader weight-loader-disable-mmap remote-instance-weight-loader-seed-instance-ip
remote-instance-weight-loader-seed-instance-service-port remote-instance-weight-loader-send-weights-group-ports
enable-pdmux pdmux-config-path sm-group-num mm-max-concurrent-calls mm-per-request-timeout
enable-broadcast-mm-inputs-process decrypted-config-file decrypted-draft-config-file enable-layerwise-nvtx-marker
config incremental-streaming-output enable-ep-moe enable-deepep-moe enable-flashinfer-cutlass-moe
enable-flashinfer-trtllm-moe enable-triton-kernel-moe enable-flashinfer-mxfp4-moe fp8-gemm-backend
fp4-gemm-backend bf16-gemm-backend enable-fused-qk-norm-rope kt-weight-path kt-method kt-cpuinfer
kt-threadpool-count kt-num-gpu-experts kt-max-deferred-experts-per-token lora-eviction-policy
enable-lora-overlap-loading lora-strict-loading experts-shared-outer-loras max-prefill-bs
enable-attn-tp-input-scattered enable-multi-layer-eagle dllm-algorithm dllm-algorithm-config dllm-fdfo
dcp-replicate-q-proj decode-context-parallel-size dcp-size attention-context-parallel-size
enable-prefill-context-parallel prefill-cp-split nsa-prefill-cp-mode dsa-prefill-cp-split
linear-attn-backend linear-attn-kernel-backend mamba-backend hpc-ops-config encoder-transfer-backend
language-only encoder-only encoder-urls enable-adaptive-dispatch-to-encoder
""".split()
)

#: Allowed values of the flags and variables the optimizer searches (SGLang's ``choices``; NCCL's documentation:
#: NCCL_PROTO and NCCL_ALGO take a comma-separated list, optionally negated with a leading ``^``).
ATTENTION_BACKENDS = (
    "triton torch_native flex_attention dsa nsa dsv4 compressed cutlass_mla fa3 fa4 flashinfer flashmla trtllm_mla "
    "cutedsl_mla tokenspeed_mla trtllm_mha dual_chunk_flash_attn hpc_ops minicpm_flashattn minicpm_flashinfer aiter "
    "wave intel_amx ascend intel_xpu"
).split()
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_ALGORITHMS = ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
NCCL_P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4", "5")

#: How close (difflib ratio) an unknown name must be to a known one to be called a typo of it.
NEAR_MISS = 0.85


def near_miss(name: str, known: Iterable[str] = FLAGS) -> str | None:
    """The known flag an unknown name is most likely a typo of, or None."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=NEAR_MISS)
    return close[0] if close else None


def check_flag_name(name: str) -> tuple[str | None, str | None]:
    """(error, warning) for a flag name: an error for a near miss of a known flag (or an unknown speculative flag),
    a warning for a name that is merely not in this table."""
    if name in FLAGS:
        return None, None
    guess = near_miss(name)
    if guess is not None:
        return f"is not an SGLang flag; did you mean {guess!r}?", None
    if name.startswith("speculative-"):
        spec = sorted(f for f in FLAGS if f.startswith("speculative-"))
        return f"is not an SGLang flag; SGLang's speculative flags are {', '.join(spec)}", None
    return None, f"{name!r} is not among the flags of sglang 0.5.x known here; the baseline's launch will tell"


def _listed(value: Any, allowed: Iterable[str]) -> str | None:
    """None when ``value`` is a comma-separated list of allowed levels (NCCL matches them case-insensitively)."""
    table = {a.upper(): a for a in allowed}
    text = str(value).strip()
    for part in text.lstrip("^").split(","):
        if part.strip().upper() not in table:
            return part.strip()
    return None


def check_value(name: str, value: Any) -> str | None:
    """An error for a value SGLang (or NCCL) does not accept for this flag or variable; None when it does or the
    name has no known set. ``unset``/``None`` (leave it out) is always allowed."""
    if value is None or str(value) == "unset":
        return None
    if name == "attention-backend" or name.endswith("-attention-backend"):
        if str(value) not in ATTENTION_BACKENDS:
            return f"{value!r} is not an SGLang attention backend; allowed: {', '.join(ATTENTION_BACKENDS)}"
        return None
    for var, allowed in (
        ("NCCL_PROTO", NCCL_PROTOCOLS),
        ("NCCL_ALGO", NCCL_ALGORITHMS),
        ("NCCL_P2P_LEVEL", NCCL_P2P_LEVELS),
    ):
        if name == var:
            bad = _listed(value, allowed)
            if bad is not None:
                guess = difflib.get_close_matches(bad, list(allowed), n=1, cutoff=0.6)
                hint = f" (did you mean {guess[0]!r}?)" if guess else ""
                return f"{bad!r} is not a {var} value NCCL knows{hint}; allowed: {', '.join(allowed)} or unset"
    return None
