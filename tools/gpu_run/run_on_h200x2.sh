#!/usr/bin/env bash
# The two-GPU validation (2x H200, TP 2) with the default Ray executor, in stages that fit the device tool's calls
# (64 MiB per transfer, 10 minutes per command): run from the repository root on the GPU host.
#   STAGE=prep       unpack the SGLang and optimizer bundles (.gpu/), write the models, record the machine, and
#                    check optimizer/sglang/config_file.py against the real --config parser
#   STAGE=study      unpack Ray (.gpu/ray-bundle.tar.xz, sent in this second call), start the study detached
#                    (setsid: it outlives the call) and wait up to WAIT_S
#   STAGE=roundtrip  wait for the study, export, check the server logs (both GPUs, NCCL variables), then boot the
#                    exported best.sh LAUNCHES times and measure each launch (tools/gpu_run/roundtrip.py)
# Each stage packs what it made into OUT/<stage>.tgz plus OUT/<stage>.txt (the tool returns at most 8 files).
set -u -o pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
OUT="${OUT:-/tmp/h200x2-out}"
WAIT_S="${WAIT_S:-540}"
SITE="${SITE:-/tmp/site}"
MODELS="${MODELS:-/tmp/models}"
# STUDY_FILE/STUDY_DIR pick another study (tools/gpu_run/study.yaml + studies/h200 runs the one-GPU space);
# OPT_ARGS adds optimizer flags (e.g. --trials 4).
STUDY_DIR="${STUDY_DIR:-studies/h200x2}"
STUDY_FILE="${STUDY_FILE:-tools/gpu_run/study_tp2.yaml}"
W="/tmp/h200x2-work/${STAGE:-none}"
mkdir -p "$OUT" "$STUDY_DIR" "$W"
T0=$(date +%s)
say() { echo "[run_on_h200x2 $STAGE +$(( $(date +%s) - T0 ))s] $*"; }
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# NVLink multicast must stay off on the lent machines (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
alive() { [ -f "$STUDY_DIR/driver.pid" ] && kill -0 "$(cat "$STUDY_DIR/driver.pid")" 2>/dev/null; }
wait_driver() { while alive && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done; }

case "${STAGE:-}" in
prep)
  if [ ! -f "$SITE/.unpacked" ]; then
    mkdir -p "$SITE"
    for b in sglang-bundle.tar.xz optimizer-deps.tar.xz; do tar -xJf ".gpu/$b" -C "$SITE" || exit 2; done
    touch "$SITE/.unpacked"
    say "bundles unpacked"
  fi
  python3 tools/gpu_run/models_8b.py --root "$MODELS" --tokenizer "$SITE/_offline_assets/smollm2-tokenizer" >/dev/null
  { git log -1 --oneline 2>/dev/null; nvidia-smi -L; nvidia-smi topo -m; nproc; free -g | head -2
    python3 -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'; } \
    > "$W/machine.txt" 2>&1
  cat "$W/machine.txt"
  python3 tools/gpu_run/sglang_config_facts.py > "$W/config_facts.json" 2> "$W/config_facts.err"
  say "config facts: exit $? ($(wc -c < "$W/config_facts.json") bytes)"
  tail -c 1500 "$W/config_facts.json"; tail -5 "$W/config_facts.err"
  ;;
study)
  if [ ! -f "$SITE/.ray" ]; then
    tar -xJf .gpu2/ray-bundle.tar.xz -C "$SITE" && touch "$SITE/.ray" && say "ray unpacked"
  fi
  python3 -c 'import ray; print("ray", ray.__version__)' || exit 3
  if [ -f "$STUDY_DIR/DONE" ]; then
    say "study already finished"
  elif alive; then
    say "driver $(cat "$STUDY_DIR/driver.pid") still running: waiting"
  else
    runs=$(ls "$STUDY_DIR"/driver-*.log 2>/dev/null | wc -l)
    say "starting the driver (default executor: Ray), run $((runs + 1))"
    setsid bash -c "python3 -m optimizer optimize --config $STUDY_FILE ${OPT_ARGS:-} --plain \
        > '$STUDY_DIR/driver-$((runs + 1)).log' 2>&1 && touch '$STUDY_DIR/DONE'" &
    echo $! > "$STUDY_DIR/driver.pid"
  fi
  wait_driver
  say "driver $(alive && echo running || echo finished)"
  tail -n 40 "$STUDY_DIR"/driver-*.log
  cp "$STUDY_DIR"/driver-*.log "$W/" 2>/dev/null
  ;;
roundtrip)
  wait_driver
  say "driver $(alive && echo 'still running' || echo finished)"
  python3 -m optimizer export --config "$STUDY_FILE" 2>&1 | tail -2
  cp "$STUDY_DIR"/driver-*.log "$STUDY_DIR/summary.json" "$STUDY_DIR/best.sh" "$STUDY_DIR/best.yaml" \
     "$STUDY_DIR/best.env" "$W/" 2>/dev/null
  # What the Ray actors' servers saw: both GPUs and the NCCL variables (NCCL_DEBUG=INFO in the study's env).
  for d in "$STUDY_DIR"/trials/*/; do
    n=$(basename "$d")
    { echo "== trial $n: $(grep -o 'NCCL_[A-Z_]*=[^ ]*' "$d/command.sh" 2>/dev/null | tr '\n' ' ')"
      grep -m 6 -E 'set by environment to|nRanks 2|NCCL WARN|Capture cuda graph failed|Init torch distributed' "$d/server.log"
    } >> "$W/server-evidence.txt" 2>/dev/null
  done
  tail -c 3000 "$W/server-evidence.txt"
  python3 tools/gpu_run/roundtrip.py --study-dir "$STUDY_DIR" --config "$STUDY_FILE" \
      --launches "${LAUNCHES:-3}" --out "$W/roundtrip.json"
  tar czf "$W/h200x2-study.tgz" --exclude='artifacts' "$STUDY_DIR" 2>/dev/null
  ;;
*)
  echo "STAGE must be prep, study or roundtrip" >&2; exit 2 ;;
esac
tar czf "$OUT/$STAGE.tgz" -C "$W" . && ls -la "$W" > "$OUT/$STAGE.txt" && say "packed $(du -h "$OUT/$STAGE.tgz" | cut -f1)"
