# Sourced by the GPU scripts of this folder: the air-gapped bundles of tools/offline_bundle (.gpu/) unpacked once
# into $SITE, the environment SGLang and the optimizer run with, and the 8B-sized models of models_8b.py.
# Needs REPO, SITE, MODELS and a `say` function.
unpack_bundles() {
  [ -f "$SITE/.unpacked" ] && return 0
  mkdir -p "$SITE"
  for b in sglang-bundle.tar.xz optimizer-deps.tar.xz; do tar -xJf "$REPO/.gpu/$b" -C "$SITE" || exit 2; done
  touch "$SITE/.unpacked"
  say "bundles unpacked"
}
site_env() {
  export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
  # NVLink multicast stays off on the lent machines
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}
write_models() {
  python3 "$REPO/tools/gpu_run/models_8b.py" --root "$MODELS" --tokenizer "$SITE/_offline_assets/smollm2-tokenizer" >/dev/null
}
compile_site() {
  # bytecode for the site dir once (unpacked from .gpu/sglang-pyc.tar.xz when sent, else compiled here); unchecked-hash:
  # the interpreter never stats the sources to validate them (the bundle's mtimes are fixed)
  [ -f "$SITE/.compiled" ] && return 0
  if [ -f "$REPO/.gpu/sglang-pyc.tar.xz" ] && tar -xJf "$REPO/.gpu/sglang-pyc.tar.xz" -C "$SITE"; then
    say "bytecode unpacked from the bundle"
  else
    python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash "$SITE" >/dev/null 2>&1
    say "site bytecode compiled ($(find "$SITE" -name '*.pyc' | wc -l) files)"
  fi
  touch "$SITE/.compiled"
}
