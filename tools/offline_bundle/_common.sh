# Shared helpers for the offline bundle builders (sourced, not run).
# Target: CPython 3.12 on x86_64 Linux (the GPU image: PyTorch 2.11 + CUDA 13, Python 3.12).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
GPU_DIR="${GPU_DIR:-$REPO/.gpu}"          # ignored via .git/info/exclude (/.gpu/)
CACHE="${CACHE:-$GPU_DIR/cache}"           # downloaded wheels; never carried, never committed
PIP_PY="${PIP_PY:-python3}"                # any local Python with pip >= 23 (it only downloads/unpacks)
XZ_LEVEL="${XZ_LEVEL:--9}"

# pip matches manylinux_2_N exactly, so list every N the GPU image's glibc (2.39) can load.
PLAT_ARGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for n in $(seq 39 -1 5); do PLAT_ARGS+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT_ARGS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64 --platform any)

pip_() { PIP_DISABLE_PIP_VERSION_CHECK=1 "$PIP_PY" -m pip "$@"; }

# download_pinned DIR NAME==VER ...   (no dependency resolution: every needed dist is listed explicitly)
download_pinned() {
  local dir="$1"; shift
  mkdir -p "$dir"
  pip_ download -q --no-deps "${PLAT_ARGS[@]}" -d "$dir" "$@"
}

# install_wheels TARGET WHEEL...   (unpacks cp312 wheels into a flat site dir, no deps, no bytecode)
install_wheels() {
  local tgt="$1"; shift
  mkdir -p "$tgt"
  pip_ install -q --no-deps --no-index --no-compile --no-cache-dir "${PLAT_ARGS[@]}" --target "$tgt" "$@"
}

# wheel_for DIR NAME VERSION -> path of the downloaded wheel (normalized name match)
wheel_for() {
  local dir="$1" name="$2" ver="$3" norm
  norm="$(echo "$name" | tr 'A-Z-.' 'a-z__')"
  ls "$dir"/* 2>/dev/null | while read -r f; do
    b="$(basename "$f")"; bn="$(echo "${b%%-*}" | tr 'A-Z-.' 'a-z__')"; bv="$(echo "$b" | cut -d- -f2)"
    if [ "$bn" = "$norm" ] && [ "$bv" = "$ver" ]; then echo "$f"; fi
  done | head -1
}

pack_dir() {  # pack_dir SRC_DIR OUT.tar.xz  (paths relative to SRC_DIR, deterministic order)
  local src="$1" out="$2"
  find "$src" -name __pycache__ -type d -prune -exec rm -rf {} +
  (cd "$src" && find . -mindepth 1 -print0 | LC_ALL=C sort -z | tar --null --no-recursion -T - \
     --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00:00' -cf -) \
    | xz -T0 "$XZ_LEVEL" > "$out.tmp"
  mv "$out.tmp" "$out"
}
