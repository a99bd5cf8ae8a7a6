#!/usr/bin/env bash
# Runs ON the air-gapped GPU host, from the repository root, after the bundles are copied into .gpu/:
#   .gpu/sglang-bundle.tar.xz  .gpu/optimizer-deps.tar.xz       (built by build_*_bundle.sh)
# 1. unpacks both into $SITE (/tmp/site), 2. exports PYTHONPATH etc., 3. writes the dummy-weight models,
# 4. import check (sglang + optimizer deps) with timings, 5. checks the EAGLE -> DSA -> deep_gemm import
# chain (applies patch_eagle_dsa_import.py only if it fails), 6. boots one real sglang server with EAGLE3,
# waits for /health 200, sends one chat request, SIGTERMs the process group (smoke_driver.py).
# Env: OUT (logs, default /tmp/smoke-out), SITE, MODELS, EAGLE ("3,1,4"; "" = baseline), ACC_LEN (3.0),
#      BOOT_TIMEOUT (s, default 420), SKIP_BOOT=1 (stop after the checks).
set -u -o pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
GPU_DIR="${GPU_DIR:-$REPO/.gpu}"
SITE="${SITE:-/tmp/site}"
MODELS="${MODELS:-/tmp/models}"
OUT="${OUT:-/tmp/smoke-out}"
mkdir -p "$OUT" "$SITE"
T0=$(date +%s.%N)
el() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
say() { echo "[gpu_smoke $(el)s] $*"; }

say "host: $(nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -1); python3 $(python3 -V 2>&1)"
for b in sglang-bundle.tar.xz optimizer-deps.tar.xz; do
  if [ -f "$GPU_DIR/$b" ]; then
    t=$(date +%s.%N); tar -xJf "$GPU_DIR/$b" -C "$SITE" || { say "unpack of $b failed"; exit 2; }
    say "unpacked $b ($(du -b "$GPU_DIR/$b" | cut -f1) bytes) in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  else
    say "WARNING: $GPU_DIR/$b missing"
  fi
done

# The environment every sglang server and the optimizer need on this host.
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

python3 "$HERE/models.py" write --root "$MODELS" --tokenizer "$SITE/_offline_assets/smollm2-tokenizer" || exit 2
say "models written under $MODELS"

python3 - <<'PY' 2>&1 | tee "$OUT/import_check.txt"
import importlib, time, sys
mods = ["torch", "triton", "transformers", "tokenizers", "sgl_kernel", "flashinfer", "xgrammar", "tvm_ffi",
        "deep_gemm", "sglang", "sglang.srt.server_args", "sglang.srt.entrypoints.http_server",
        "optuna", "sqlalchemy", "alembic", "colorlog", "paramiko", "plotly", "httpx", "pydantic", "yaml",
        "rich", "scipy", "numpy", "starlette", "uvicorn", "optimizer"]
bad = []
t_all = time.time()
for m in mods:
    t = time.time()
    try:
        mod = importlib.import_module(m)
        v = getattr(mod, "__version__", "")
        print(f"OK   {m:40s} {str(v):22s} {time.time()-t:6.2f}s  {getattr(mod, '__file__', '')}")
    except Exception as e:
        bad.append(m)
        print(f"FAIL {m:40s} {type(e).__name__}: {e}"[:400])
print(f"import check: {len(mods)-len(bad)}/{len(mods)} ok in {time.time()-t_all:.1f}s; failed: {bad}")
sys.exit(1 if bad else 0)
PY
IMPORT_RC=$?
say "import check rc=$IMPORT_RC"

# EAGLE's CUDA-graph capture imports the DSA / DeepSeek-V4 / FlashMLA backends (DSA imports deep_gemm).
if python3 -c "import sglang.srt.layers.attention.dsa_backend, sglang.srt.layers.attention.deepseek_v4_backend, sglang.srt.layers.attention.flashmla_backend" > "$OUT/dsa_chain.txt" 2>&1; then
  say "EAGLE->DSA->deep_gemm import chain OK (no patch needed)"
else
  say "EAGLE->DSA import chain FAILED: $(tail -1 "$OUT/dsa_chain.txt"); applying the fallback patch"
  python3 "$HERE/patch_eagle_dsa_import.py" "$SITE"
fi

[ "${SKIP_BOOT:-0}" = 1 ] && { say "SKIP_BOOT=1: done"; exit $IMPORT_RC; }
python3 "$HERE/smoke_driver.py" --eagle "${EAGLE-3,1,4}" --acc-len "${ACC_LEN-3.0}" --out "$OUT" \
  --model "$MODELS/smollm2-135m" --draft "$MODELS/eagle3-draft" --boot-timeout "${BOOT_TIMEOUT:-420}"
RC=$?
say "smoke driver rc=$RC (total $(el) s)"
exit $RC
