#!/usr/bin/env bash
# Builds .gpu/optimizer-deps.tar.xz: the optimizer's own runtime dependencies for CPython 3.12 / x86_64
# that the GPU image lacks, as one archive to unpack into the same site dir as the sglang bundle:
#   mkdir -p /tmp/site && tar -xJf optimizer-deps.tar.xz -C /tmp/site
# Shared with the sglang bundle (NOT repeated here): pydantic, pydantic-core, annotated-types,
# typing-inspection, starlette, uvicorn, jsonschema & co, cffi, pycparser. Build with WITH_SHARED=1 to
# include them anyway (for a host that gets this archive alone).
# Already in the GPU image (never carried): httpx, httpcore, h11, anyio, pyyaml, rich, numpy, scipy,
# packaging, tqdm, typing-extensions, narwhals, markupsafe, requests, psutil, msgpack, aiohttp, ...
# NOT carried: ray (see README: the cp312 x86_64 wheel alone is larger than the whole 64 MiB carry),
# optuna-dashboard (UI only).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

OUT="$GPU_DIR/optimizer-deps.tar.xz"
STAGE="${STAGE:-$GPU_DIR/stage/optimizer-site}"
WHEELS="$CACHE/optimizer-wheels"
WITH_PLOTLY="${WITH_PLOTLY:-1}"

PINS=(
  optuna==5.0.0 alembic==1.20.1 mako==1.4.3 sqlalchemy==2.1.9 colorlog==6.12.0
  paramiko==5.1.0 bcrypt==5.0.0 cryptography==50.0.2 pynacl==1.6.2 invoke==3.0.3
)
[ "$WITH_PLOTLY" = 1 ] && PINS+=(plotly==7.1.0)
if [ "${WITH_SHARED:-0}" = 1 ]; then
  PINS+=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
         starlette==1.10.0 uvicorn==0.54.0 cffi==2.1.1 pycparser==3.12)
fi

echo "[optimizer-deps] downloading ${#PINS[@]} pinned wheels into $WHEELS"
download_pinned "$WHEELS" "${PINS[@]}"
FILES=()
for p in "${PINS[@]}"; do
  f="$(wheel_for "$WHEELS" "${p%%==*}" "${p##*==}")"; [ -n "$f" ] || { echo "missing wheel for $p" >&2; exit 1; }
  FILES+=("$f")
done
rm -rf "$STAGE"; mkdir -p "$STAGE"
install_wheels "$STAGE" "${FILES[@]}"
rm -rf "$STAGE/bin"
# SQLAlchemy: its Cython speed-ups are optional (pure-Python fallback, checked with optuna's RDB storage).
find "$STAGE/sqlalchemy" -name '*_cy*.so' -delete
# plotly: the bundled plotly.js copies are only for offline HTML export / notebooks; figures still build
# and `write_html(include_plotlyjs="cdn")` / `write_json` work without them.
if [ "$WITH_PLOTLY" = 1 ]; then
  rm -rf "$STAGE/plotly/package_data/plotly.min.js" "$STAGE/plotly/labextension" "$STAGE/jupyterlab_plotly" \
         "$STAGE/share" 2>/dev/null || true
fi
{
  echo "# optimizer-deps manifest: dists carried (name version)"
  for d in "$STAGE"/*.dist-info; do b="$(basename "$d" .dist-info)"; echo "dist ${b%-*} ${b##*-}"; done
} > "$GPU_DIR/optimizer-deps.manifest.txt"
echo "[optimizer-deps] unpacked size: $(du -sh "$STAGE" | cut -f1); packing (xz $XZ_LEVEL)..."
pack_dir "$STAGE" "$OUT"
echo "[optimizer-deps] wrote $OUT ($(du -b "$OUT" | cut -f1) bytes)"
