#!/usr/bin/env bash
# Issue 24's probe of SGLang's default adaptive config on a real H200 (tools/gpu_run/adaptive_probe.py says which
# launches and why), from the repository root on the GPU host with the bundles of tools/offline_bundle in .gpu/.
# Writes $OUT/adaptive-probe.json and the launches' logs in $OUT/adaptive-probe.tgz.
#   OUT       where the results go (default /tmp/h200-out)
#   DEADLINE  start no launch after this many seconds of the probe (default 420)
#   ARGS      more arguments for adaptive_probe.py (e.g. "--arms default-launch-7,static-3")
set -u -o pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
OUT="${OUT:-/tmp/h200-out}"
SITE="${SITE:-/tmp/site}"
MODELS="${MODELS:-/tmp/models}"
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[adaptive_probe +$(( $(date +%s) - T0 ))s] $*"; }
source tools/gpu_run/_site.sh
unpack_bundles
compile_site
site_env
write_models
say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | head -1)"
# shellcheck disable=SC2086
python3 tools/gpu_run/adaptive_probe.py --out "$OUT/adaptive-probe.json" --deadline-s "${DEADLINE:-420}" ${ARGS:-}
rc=$?
tar czf "$OUT/adaptive-probe.tgz" studies/adaptive-probe 2>/dev/null
say "done (exit $rc)"
exit $rc
