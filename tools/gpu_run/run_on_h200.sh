#!/usr/bin/env bash
# Runs the optimizer itself against a real `python -m sglang.launch_server` on an air-gapped GPU host, from the
# repository root, with the bundles of tools/offline_bundle in .gpu/. Safe to call again: a driver still running
# (started detached, so it outlives this script) is waited for; a dead one is resumed by running the same study
# again (completed trials kept, interrupted ones re-queued, orphan servers stopped through their pid files).
#   WAIT_S   how long this call waits for the study before packing what it has (default 540)
#   OUT      where the results go (default /tmp/h200-out)
set -u -o pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
OUT="${OUT:-/tmp/h200-out}"
WAIT_S="${WAIT_S:-540}"
SITE="${SITE:-/tmp/site}"
MODELS="${MODELS:-/tmp/models}"
STUDY_DIR="studies/h200"
mkdir -p "$OUT" "$STUDY_DIR"
T0=$(date +%s)
say() { echo "[run_on_h200 +$(( $(date +%s) - T0 ))s] $*"; }

# (tools/offline_bundle/gpu_smoke.sh with SKIP_BOOT=1 unpacks the same plus a full import check.)
source tools/gpu_run/_site.sh
unpack_bundles
site_env
# A fresh machine after a lost one: continue from the study state an earlier call sent back.
if [ ! -f "$STUDY_DIR/journal.log" ] && [ -f .gpu/h200-study.tgz ]; then
  tar xzf .gpu/h200-study.tgz && rm -f "$STUDY_DIR/driver.pid" && say "restored the study from .gpu/h200-study.tgz"
fi
write_models
say "GPU: $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | head -1)"

alive() { [ -f "$STUDY_DIR/driver.pid" ] && kill -0 "$(cat "$STUDY_DIR/driver.pid")" 2>/dev/null; }
if [ -f "$STUDY_DIR/DONE" ]; then
  say "study already finished"
elif alive; then
  say "driver $(cat "$STUDY_DIR/driver.pid") still running: waiting"
else
  runs=$(ls "$STUDY_DIR"/driver-*.log 2>/dev/null | wc -l)
  say "starting the driver (run $((runs + 1)); a later run resumes the study)"
  setsid bash -c "python3 -m optimizer optimize --config tools/gpu_run/study.yaml --executor thread --plain \
      > '$STUDY_DIR/driver-$((runs + 1)).log' 2>&1 && touch '$STUDY_DIR/DONE'" &
  echo $! > "$STUDY_DIR/driver.pid"
fi
while alive && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done
say "driver $(alive && echo running || echo finished)"
tail -n 40 "$STUDY_DIR"/driver-*.log 2>/dev/null | tail -n 60
python3 -m optimizer export --config tools/gpu_run/study.yaml 2>&1 | tail -1
tar czf "$OUT/h200-study.tgz" "$STUDY_DIR" 2>/dev/null
ls -la "$OUT"
