#!/usr/bin/env python3
"""A random-weight safetensors checkpoint of a Llama config (the 8B-sized model of models_8b.py): real bytes on disk
for measuring weight loading (cold, from the page cache, multithreaded), without downloading anything. The config,
tokenizer and chat template files are copied beside the shards.

    python3 tools/gpu_run/write_random_safetensors.py --config-dir /tmp/models/llama-8b-dims --out /data/llama-8b-random
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

SHARD_BYTES = 4 << 30


def tensors(cfg: dict):
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // heads
    yield "model.embed_tokens.weight", (vocab, h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "self_attn.q_proj.weight", (heads * hd, h)
        yield p + "self_attn.k_proj.weight", (kv * hd, h)
        yield p + "self_attn.v_proj.weight", (kv * hd, h)
        yield p + "self_attn.o_proj.weight", (h, heads * hd)
        yield p + "mlp.gate_proj.weight", (inter, h)
        yield p + "mlp.up_proj.weight", (inter, h)
        yield p + "mlp.down_proj.weight", (h, inter)
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)
    yield "model.norm.weight", (h,)
    if not cfg.get("tie_word_embeddings", False):
        yield "lm_head.weight", (vocab, h)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config-dir", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    src, out = Path(args.config_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin")) and f.name != "model.safetensors.index.json":
            shutil.copy2(f, out / f.name)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=dev).manual_seed(0)
    shard: dict[str, torch.Tensor] = {}
    size, n, index, t0 = 0, 0, {}, time.time()
    names = []

    def flush() -> None:
        nonlocal shard, size, n
        if not shard:
            return
        name = f"model-{n:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        names.append(name)
        for k in shard:
            index[k] = name
        shard, size, n = {}, 0, n + 1

    for key, shape in tensors(cfg):
        t = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16, device=dev)
        shard[key] = t.cpu()
        size += t.numel() * 2
        if size >= SHARD_BYTES:
            flush()
    flush()
    total = sum((out / f).stat().st_size for f in names)
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1)
    )
    print(
        f"[write_random_safetensors] {len(names)} shards, {total / 2**30:.1f} GiB in {time.time() - t0:.0f} s -> {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
