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
