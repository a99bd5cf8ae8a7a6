#!/usr/bin/env bash
# Refresh docs/report.png, docs/dashboard.png and docs/dashboard-trial.png from a study, with the project's own
# commands (report and dashboard) and a headless Chromium (`make system-deps` installs it).
#   docs/screenshots.sh [STUDY] [STUDIES_DIR] [TRIAL]      default: demo studies 11
# Make the study first, e.g. `make optimize STUDY=demo TRIALS=16` (or any real study).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY=${1:-demo}
DIR=${2:-studies}
TRIAL=${3:-11}
PY=${PYTHON:-.venv/bin/python}
PORT=${PORT:-18239}
shot() {  # url png height
  local profile; profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$2" --window-size="1400,$3" --virtual-time-budget=10000 "$1" 2>/dev/null
  rm -rf "$profile"
}
"$PY" -m optimizer report --study "$STUDY" --studies-dir "$DIR"
shot "file://$(realpath "$DIR/$STUDY/report.html")" docs/report.png 2250
"$PY" -m optimizer dashboard --study "$STUDY" --studies-dir "$DIR" --port "$PORT" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -fs "http://127.0.0.1:$PORT/api/meta" >/dev/null && break; sleep 0.5; done
shot "http://127.0.0.1:$PORT/dashboard/studies/0" docs/dashboard.png 1000
shot "http://127.0.0.1:$PORT/dashboard/studies/0/trials?numbers=$TRIAL" docs/dashboard-trial.png 1000
echo "wrote docs/report.png docs/dashboard.png docs/dashboard-trial.png"
