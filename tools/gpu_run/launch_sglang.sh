#!/usr/bin/env bash
# The server command of the real-GPU study. SGLANG_SIMULATE_ACC_LEN comes from the study's server.env (so the
# optimizer knows SGLang forces the accept length): a single number is passed to SGLang as it is; a comma list
# holds the accept lengths for --speculative-num-steps 1, 2, 3, ... (study.yaml: the published EAGLE-3 chat
# curve, docs/calibration.md; topk > 1 trees get the same depth's value) and SGLang gets the trial's own entry.
# Without speculation (no step count) the variable is left out. Then execs SGLang itself, so the process group,
# pid and exit status are SGLang's. The step count is read from the command line, else from a `--config FILE`
# (the exported best.yaml), so a round trip gets the same accept length.
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
# An adaptive server may run without a step count (an exported schedule: the steps per batch size are in its JSON);
# SGLang simulates one accept length per server whatever the steps, so it gets the entry of ADAPTIVE_ACC_STEPS.
adaptive=""
for a in "$@"; do [ "$a" = "--speculative-adaptive" ] && adaptive=1; done
if [ -z "$adaptive" ] && [ -n "$cfg" ] && [ -f "$cfg" ]; then
  adaptive="$(python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])) or {}; print("1" if d.get("speculative-adaptive") else "")' "$cfg")"
fi
# The step count that server runs at batch 1: the first candidate of the smallest batch size in its
# --speculative-adaptive-config, else SGLang's default config's middle candidate (3), or ADAPTIVE_ACC_STEPS.
if [ -z "$steps" ] && [ -n "$adaptive" ]; then
  acfg=""
  prev=""
  for a in "$@"; do [ "$prev" = "--speculative-adaptive-config" ] && acfg="$a"; prev="$a"; done
  if [ -z "$acfg" ] && [ -n "$cfg" ] && [ -f "$cfg" ]; then
    acfg="$(python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])) or {}; print(d.get("speculative-adaptive-config") or "")' "$cfg")"
  fi
  if [ -n "$acfg" ] && [ -f "$acfg" ]; then
    steps="$(python3 -c 'import sys, json; d = json.load(open(sys.argv[1])); print(d[min(d, key=int)]["candidate_steps"][0])' "$acfg" 2>/dev/null)"
  fi
  steps="${ADAPTIVE_ACC_STEPS:-${steps:-3}}"
fi
acc="${SGLANG_SIMULATE_ACC_LEN:-}"
case "$acc" in
  *,*)
    acc=""
    if [ -n "$steps" ]; then
      IFS=, read -r -a curve <<< "$SGLANG_SIMULATE_ACC_LEN"
      if [ "$steps" -ge 1 ] 2>/dev/null; then
        i=$(( steps <= ${#curve[@]} ? steps - 1 : ${#curve[@]} - 1 ))
        acc="${curve[$i]}"
      fi
    fi
    ;;
esac
if [ -n "$steps" ] && [ -n "$acc" ]; then export SGLANG_SIMULATE_ACC_LEN="$acc"; else unset SGLANG_SIMULATE_ACC_LEN; fi
echo "[launch_sglang.sh] SGLANG_SIMULATE_ACC_LEN=${SGLANG_SIMULATE_ACC_LEN:-unset} steps=${steps:-none}"
exec python3 -m sglang.launch_server "$@"
