#!/usr/bin/env bash
# Issue 24's real-GPU check of SGLang's adaptive speculation, from the repository root on the GPU host with the
# bundles of tools/offline_bundle in .gpu/ (as run_on_h200.sh): the per-level study of tools/gpu_run/
# study_adaptive.yaml (EAGLE-3 chains, one tree and SGLang's default adaptive config at 1 and 16 streams), its
# export (best-adaptive.json and its launch files), then one interleaved round of the adaptive confirmation (the
# tuned schedule, SGLang's default adaptive config, the static best). Safe to call again: a running job is waited
# for. Writes $OUT/adaptive-h200.tgz (the study folder with every launch's log) and $OUT/adaptive-h200.txt.
#   OUT      where the results go (default /tmp/h200-out)
#   WAIT_S   how long this call waits before packing what it has (default 560)
#   ROUNDS   confirmation rounds (default 1)
#   CONFIRM_AGAIN  1: only the adaptive confirmation again (ROUNDS rounds), on the finished study (restored from
#            .gpu/h200-adaptive-study.tgz on a fresh machine)
set -u -o pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
OUT="${OUT:-/tmp/h200-out}"
SITE="${SITE:-/tmp/site}"
MODELS="${MODELS:-/tmp/models}"
WAIT_S="${WAIT_S:-560}"
ROUNDS="${ROUNDS:-1}"
DIR=studies/h200-adaptive
CFG=tools/gpu_run/study_adaptive.yaml
mkdir -p "$OUT" "$DIR"
T0=$(date +%s)
say() { echo "[adaptive_h200 +$(( $(date +%s) - T0 ))s] $*"; }
source tools/gpu_run/_site.sh
unpack_bundles
site_env
write_models
if [ ! -f "$DIR/journal.log" ] && [ -f .gpu/h200-adaptive-study.tgz ]; then
  tar xzf .gpu/h200-adaptive-study.tgz && rm -f "$DIR/job.pid" && say "restored the study from .gpu/h200-adaptive-study.tgz"
fi
if [ "${CONFIRM_AGAIN:-0}" = 1 ] && [ -f "$DIR/DONE" ]; then
  rm -f "$DIR/DONE" "$DIR/job.pid"
  setsid bash -c "
    python3 -m optimizer.adaptive_confirm --config $CFG --rounds $ROUNDS --executor thread > $DIR/confirm.log 2>&1
    echo \"confirm again ($ROUNDS rounds) exit \$?\" >> $DIR/steps.log
    touch $DIR/DONE" > /dev/null 2>&1 &
  echo $! > "$DIR/job.pid"
  say "confirming again: $ROUNDS rounds"
fi
alive() { [ -f "$DIR/job.pid" ] && kill -0 "$(cat "$DIR/job.pid")" 2>/dev/null; }
if [ -f "$DIR/DONE" ]; then
  say "already finished"
elif alive; then
  say "job $(cat "$DIR/job.pid") still running: waiting"
else
  say "GPU: $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | head -1); starting the job"
  setsid bash -c "
    python3 -m optimizer optimize --config $CFG --executor thread --plain > $DIR/optimize.log 2>&1
    echo \"optimize exit \$?\" >> $DIR/steps.log
    python3 -m optimizer export --config $CFG > $DIR/export.log 2>&1
    echo \"export exit \$?\" >> $DIR/steps.log
    python3 -m optimizer.adaptive_confirm --config $CFG --rounds $ROUNDS --executor thread > $DIR/confirm.log 2>&1
    echo \"confirm exit \$?\" >> $DIR/steps.log
    touch $DIR/DONE" > /dev/null 2>&1 &
  echo $! > "$DIR/job.pid"
fi
while alive && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done
say "job $(alive && echo running || echo finished)"
{
  cat "$DIR/steps.log" 2>/dev/null
  tail -n 30 "$DIR/optimize.log" 2>/dev/null
  tail -n 5 "$DIR/export.log" 2>/dev/null
  cat "$DIR/best-adaptive.json" 2>/dev/null
  tail -n 80 "$DIR/confirm.log" 2>/dev/null
  echo "--- adaptive log lines"
  grep -rhoE "Built adaptive runtime state.*|Adaptive spec params updated.*|Switch adaptive runtime state.*" "$DIR" 2>/dev/null | sort | uniq -c | head -40
} > "$OUT/adaptive-h200.txt"
tar czf "$OUT/adaptive-h200.tgz" "$DIR" 2>/dev/null
tail -n 60 "$OUT/adaptive-h200.txt"
