#!/usr/bin/env bash
# Builds .gpu/ray-bundle.tar.xz: Ray 2.60.0 for CPython 3.12 / x86_64, trimmed to what `ray.init()` on one node
# and the optimizer's actors need. Too big to travel with the SGLang bundle in one 64 MiB transfer, so it is sent
# in a second call to a machine still held (files in ignored folders stay between calls).
# Unpack on the GPU host into the same site dir:  tar -xJf ray-bundle.tar.xz -C /tmp/site
# Needs: network to PyPI here, python3 with pip >= 23, binutils (strip), xz.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

OUT="$GPU_DIR/ray-bundle.tar.xz"
STAGE="${STAGE:-$GPU_DIR/stage/ray-site}"
WHEELS="$CACHE/ray"
download_pinned "$WHEELS" ray==2.60.0
rm -rf "$STAGE"; mkdir -p "$STAGE"
install_wheels "$STAGE" "$(wheel_for "$WHEELS" ray 2.60.0)"
cd "$STAGE"
# Java workers, the dashboard's web front-end and the libraries the optimizer never imports (Tune, Train, RLlib,
# Serve, Data, LLM): about 80 MB of the 202 MB.
rm -rf ray/jars ray/dashboard/client/build ray/rllib ray/tune ray/train ray/serve ray/data ray/llm
find . -name '*.map' -delete
find . -type d -name tests -prune -exec rm -rf {} +
# Symbols the three native parts carry for debugging: about 30 % of their 120 MB.
strip --strip-unneeded ray/_raylet.so ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet
du -sh "$STAGE" | awk '{print "[ray-bundle] unpacked size: " $1 "; packing (xz '"$XZ_LEVEL"')..."}'
pack_dir "$STAGE" "$OUT"
ls -la "$OUT"
