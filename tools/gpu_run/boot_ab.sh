#!/usr/bin/env bash
# Issue 23's "Done means" on a real H200, from the repository root on the GPU host with the bundles of
# tools/offline_bundle in .gpu/ (as run_on_h200.sh): 3 interleaved launches each of the production boot and the
# search boot of one configuration (EAGLE-3 (5, 1, 6) on the 8B-sized dummy-weight model of tools/gpu_run/, the
# production flags being tools/gpu_run/space.yaml's fixed flags), after one unmeasured launch of each to warm the
# JIT caches: every restart cycle (stop + boot to ready) by phase, and tok/s at concurrency 1 and 16.
# Writes $OUT/boot-ab.json (and the launches' logs in $OUT/boot-ab.tgz).
#   OUT       where the results go (default /tmp/h200-out)
#   ROUNDS    interleaved rounds (default 3)
#   PYC       1 (default): compile the site dir's bytecode once, as the bundle now ships it (an older bundle has none)
#   WEIGHTS   a directory for the real-weights stage (a random-weight safetensors 8B checkpoint, ~16 GB, written
#             there when missing; loaded cold, from the page cache, and single-threaded). Empty: skipped.
#   ARGS      more arguments for boot_ab.py (e.g. "--graph-bs levels", "--drop cuda-graph-max-bs")
set -u -o pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
OUT="${OUT:-/tmp/h200-out}"
SITE="${SITE:-/tmp/site}"
MODELS="${MODELS:-/tmp/models}"
ROUNDS="${ROUNDS:-3}"
PYC="${PYC:-1}"
WEIGHTS="${WEIGHTS:-}"
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[boot_ab +$(( $(date +%s) - T0 ))s] $*"; }

source tools/gpu_run/_site.sh
unpack_bundles
[ "$PYC" = 1 ] && compile_site
site_env
write_models
say "GPU: $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | head -1)"

# shellcheck disable=SC2086
python3 tools/gpu_run/boot_ab.py --rounds "$ROUNDS" --out "$OUT/boot-ab.json" --work studies/boot-ab \
    ${WEIGHTS:+--weights "$WEIGHTS"} ${ARGS:-}
rc=$?
tar czf "$OUT/boot-ab.tgz" studies/boot-ab 2>/dev/null
say "done (exit $rc): $OUT/boot-ab.json"
exit $rc
