"""How close is the simulator's served tok/s to its own ground truth? (a benchmark, not a unit test)

Starts ``python -m optimizer.sim`` with real step times for a few configurations, drives it with a plain httpx
streaming client (``/v1/chat/completions``, ``ignore_eos``, ``max_tokens`` 1024, include_usage) for ``--seconds`` at
concurrency 1 and 64, counts output tokens from ``usage.completion_tokens`` of requests finished in the window,
and prints measured vs truth tok/s and the error in percent.

    .venv/bin/python bench/sim_accuracy.py --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimizer.sim.profiles import load_profile  # noqa: E402

EAGLE = "EAGLE3"
CONFIGS = [
    ("kimi-k2.5-8x-rtxpro6000", "baseline", {}, {}),
    (
        "kimi-k2.5-8x-rtxpro6000",
        "eagle3 2/1/3 LL/Ring",
        {
            "speculative-algorithm": EAGLE,
            "speculative-num-steps": 2,
            "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 3,
            "max-running-requests": 64,
        },
        {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"},
    ),
    ("glm-4.7-flash-h200", "eagle3 auto (3/1/4)", {"speculative-algorithm": EAGLE, "max-running-requests": 64}, {}),
    ("llama-3.1-8b-h100", "eagle3 auto (5/4/8)", {"speculative-algorithm": EAGLE, "max-running-requests": 64}, {}),
]
PROMPT = "Tell me about the history of the printing press in a few paragraphs."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def argv_of(flags: dict) -> list[str]:
    out = []
    for k, v in flags.items():
        out += [f"--{k}"] if v is True else [f"--{k}", str(v)]
    return out


async def run_client(base: str, concurrency: int, seconds: float, max_tokens: int) -> tuple[float, int]:
    body = {
        "model": "x",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens = 0
    # count the tokens whose chunks arrive inside [t_start, t_end); each request's chunk tokens must add up to
    # its usage.completion_tokens (checked).
    # one client (one kept-alive connection) per stream: a shared httpx pool serialises badly at 64 streams
    # (created before the clock starts: each client builds its own SSL context, tens of ms on a busy machine)
    clients = [httpx.AsyncClient(base_url=base, timeout=60) for _ in range(concurrency)]
    warm = min(3.0, seconds / 5)  # let all streams connect first
    t_start = time.monotonic() + warm
    t_end = t_start + seconds
    try:

        async def worker(client: httpx.AsyncClient) -> None:
            nonlocal tokens
            while time.monotonic() < t_end:
                async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                    arrivals: list[float] = []
                    n_chunks_tokens: list[int] = []
                    usage = 0
                    buf = b""
                    # cheap parsing keeps a one-process client from falling behind at 64 streams: raw bytes, split
                    # into SSE events; the simulator's words are one token each, start with a space and need no
                    # JSON escaping, so a content chunk's tokens are its spaces
                    async for raw in resp.aiter_raw():
                        now = time.monotonic()
                        buf += raw
                        *events, buf = buf.split(b"\n\n")
                        for ev in events:
                            if b'"usage":{' in ev:
                                usage = json.loads(ev[6:])["usage"]["completion_tokens"]
                                continue
                            i = ev.find(b',"content":"')
                            if i >= 0:
                                text = ev[i + 12 : ev.index(b'"', i + 12)]
                                if text:
                                    arrivals.append(now)
                                    n_chunks_tokens.append(text.count(b" "))
                    assert sum(n_chunks_tokens) == usage, (sum(n_chunks_tokens), usage)
                    tokens += sum(n for t, n in zip(arrivals, n_chunks_tokens) if t_start <= t < t_end)

        await asyncio.gather(*(worker(c) for c in clients))
    finally:
        for c in clients:
            await c.aclose()
    return tokens / seconds, tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 64])
    ap.add_argument("--only", default="", help="substring of profile/label to run")
    args = ap.parse_args()
    rows = []
    for profile, label, flags, env in CONFIGS:
        if args.only and args.only not in f"{profile} {label}":
            continue
        prof = load_profile(profile)
        port = free_port()
        full = dict(flags)
        if "speculative-algorithm" in full:
            full["speculative-draft-model-path"] = prof.draft_model_path
        cmd = [
            sys.executable,
            "-m",
            "optimizer.sim",
            "--sim-profile",
            profile,
            "--sim-time-scale",
            "0.001",
            "--port",
            str(port),
            *argv_of(full),
        ]
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.time() + 30
            while time.time() < deadline:
                try:
                    if httpx.get(base + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            for conc in args.concurrency:
                truth = prof.evaluate(full, env, conc).tok_per_s
                measured, _ = asyncio.run(run_client(base, conc, args.seconds, args.max_tokens))
                err = (measured - truth) / truth * 100
                rows.append((profile, label, conc, truth, measured, err))
                print(
                    f"{profile:26s} {label:24s} c={conc:<3d} truth {truth:9.1f}  measured {measured:9.1f}  "
                    f"error {err:+6.2f}%",
                    flush=True,
                )
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    worst = max((abs(r[5]) for r in rows), default=0.0)
    print(f"worst error {worst:.2f}% over {len(rows)} runs of {args.seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
