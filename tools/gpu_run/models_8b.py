#!/usr/bin/env python3
"""An 8B-sized Llama (Llama-3.1-8B dimensions, the SmolLM2 tokenizer's 49152-token vocabulary) and its EAGLE-3
draft head, as dummy-weight model directories: realistic step times on a real GPU without downloading weights.
These are the dimensions docs/calibration.md's "8B-sized Llama on 1x H200" measurements used.

    python3 tools/gpu_run/models_8b.py --root /tmp/models --tokenizer /tmp/site/_offline_assets/smollm2-tokenizer
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "offline_bundle"))
import models  # noqa: E402  (tools/offline_bundle/models.py)

DIMS = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/models")
    ap.add_argument("--tokenizer", required=True)
    a = ap.parse_args()
    models.TARGET_NAME, models.DRAFT_NAME = "llama-8b-dims", "llama-8b-eagle3-draft"
    models.TARGET_CONFIG = {**models.TARGET_CONFIG, **DIMS, "num_hidden_layers": 32}
    models.DRAFT_CONFIG = {**models.DRAFT_CONFIG, **DIMS, "num_hidden_layers": 1, "target_hidden_size": 4096}
    print(models.write_models(a.root, a.tokenizer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
