#!/usr/bin/env bash
# The server command of the real-GPU study: sets SGLANG_SIMULATE_ACC_LEN from the trial's own
# --speculative-num-steps (dummy weights accept nothing by themselves) using the published EAGLE-3 chat accept
# lengths for k = 1..5 (docs/calibration.md: 1.76, 2.285, 2.655, 2.89, 3.035; topk > 1 trees get the same depth's value),
# then execs SGLang itself, so the process group, pid and exit status are SGLang's. The step count is read from the
# command line, else from a `--config FILE` (the exported best.yaml), so a round trip gets the same accept length.
steps=""
cfg=""
prev=""
for a in "$@"; do
  [ "$prev" = "--speculative-num-steps" ] && steps="$a"
  [ "$prev" = "--config" ] && cfg="$a"
  prev="$a"
done
if [ -z "$steps" ] && [ -n "$cfg" ] && [ -f "$cfg" ]; then
  steps="$(python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])) or {}; print(d.get("speculative-num-steps", ""))' "$cfg")"
fi
case "$steps" in
  1) acc=1.76 ;; 2) acc=2.285 ;; 3) acc=2.655 ;; 4) acc=2.89 ;; 5) acc=3.035 ;; 6) acc=3.12 ;; 7) acc=3.17 ;;
  *) acc="" ;;
esac
if [ -n "$acc" ]; then export SGLANG_SIMULATE_ACC_LEN="$acc"; fi
echo "[launch_sglang.sh] SGLANG_SIMULATE_ACC_LEN=${SGLANG_SIMULATE_ACC_LEN:-unset} steps=${steps:-none}"
exec python3 -m sglang.launch_server "$@"
