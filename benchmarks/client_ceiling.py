"""How many streamed tokens per second the benchmark client can take on one core.

Starts a server with zero step time, pins this process (the client) to one CPU and the server to the others,
and runs the real client (`optimizer.loadgen.run_benchmark`) against it. Reports the wall-clock rate and the rate
per client CPU-second (the ceiling when the client is the bottleneck; when the server is slower than the client,
the wall-clock rate is the server's limit and the per-CPU-second figure still shows the client's headroom).

    .venv/bin/python bench/client_ceiling.py                  # against the simulator (--sim-step-scale 0)
    .venv/bin/python bench/client_ceiling.py --server raw     # against a minimal asyncio SSE server
    .venv/bin/python bench/client_ceiling.py --json

The target is 20,000 tok/s on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ---- a minimal SGLang-shaped SSE server (no framework), used with --server raw ----------------------------
_CHUNK = (
    '{"id":"c0","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
    '{"reasoning_content":null,"content":"%s"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}'
)
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"


def _frame(payload: str) -> bytes:
    data = b"data: " + payload.encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class _RawSSE(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            clen = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    clen = int(v)
            if len(self.buf) < end + 4 + clen:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + clen], self.buf[end + 4 + clen :]
            if head.startswith("GET"):
                msg = b'{"data":[{"id":"m"}]}' if "/v1/models" in head else b"{}"
                self.t.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(msg), msg)
                )
                continue
            req = json.loads(body or b"{}")
            asyncio.get_running_loop().create_task(
                self.stream(int(req.get("max_tokens", 16)), int(os.environ.get("CEILING_TOKENS_PER_CHUNK", "1")))
            )

    async def stream(self, n, per):
        t = self.t
        t.write(_HEAD + _frame('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'))
        sent = 0
        while sent < n:
            k = min(per, n - sent)
            t.write(_frame(_CHUNK % ("t" * k)))
            sent += k
            await asyncio.sleep(0)  # one decode step per loop turn, as a server with zero step time would
        t.write(
            _frame(
                '{"id":"c0","choices":[],"usage":{"prompt_tokens":10,"total_tokens":'
                f'{10 + n},"completion_tokens":{n}}}}}'
            )
            + _frame("[DONE]")
            + b"0\r\n\r\n"
        )


def serve_raw(port: int) -> None:
    async def main():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(_RawSSE, "127.0.0.1", port)
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


# ---- the measurement --------------------------------------------------------------------------------------
def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    import httpx

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                return
            if httpx.get(url + "/v1/models", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("server not ready in time")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=["sim", "raw"], default="sim")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--requests", type=int, default=128, help="measured requests (split over --chunks)")
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=0, help="the CPU the client is pinned to")
    ap.add_argument("--speculative", action="store_true", help="sim with EAGLE3 (3,1,4): several tokens per chunk")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--serve-raw", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve_raw:
        serve_raw(a.serve_raw)
        return 0

    from optimizer.loadgen import Workload, run_benchmark

    port = _free_port()
    if a.server == "sim":
        cmd = [
            sys.executable,
            "-m",
            "optimizer.sim",
            "--model-path",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--sim-step-scale",
            "0",
            "--sim-time-scale",
            "0.002",
            "--max-running-requests",
            str(max(a.concurrency, 48)),
            "--cuda-graph-max-bs",
            str(max(a.concurrency, 16)),
        ]
        if a.speculative:
            cmd += [
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                "d",
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4",
            ]
    else:
        cmd = [sys.executable, __file__, "--serve-raw", str(port)]
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu = a.cpu if a.cpu in cpus else cpus[0]
    others = [c for c in cpus if c != client_cpu] or cpus
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, others),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc)
        os.sched_setaffinity(0, {client_cpu})
        per_chunk = max(1, a.requests // a.chunks)
        w = Workload(
            concurrency=a.concurrency,
            max_tokens=a.max_tokens,
            warmup_requests=a.concurrency,
            chunks=a.chunks,
            requests_per_chunk=per_chunk,
            send_category=True,
        )
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        res = run_benchmark(url, w)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
    # CPU time includes the unmeasured warmup; scale it to the measured share of requests.
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    toks = sum(r.completion_tokens for c in res.chunks for r in c.records if r.ok)
    measured_share = (a.chunks * per_chunk) / (a.chunks * per_chunk + a.concurrency)
    out = {
        "server": a.server,
        "speculative": a.speculative,
        "concurrency": a.concurrency,
        "max_tokens": a.max_tokens,
        "client_cpu": client_cpu,
        "tok_per_s": round(res.tok_per_s, 1),
        "completed": res.completed,
        "failed": res.failed,
        "failure_reasons": res.failure_reasons,
        "client_cpu_s": round(cpu_s, 3),
        "tok_per_client_cpu_s": round(toks / (cpu_s * measured_share), 1) if cpu_s > 0 else None,
        "tokens_per_chunk": res.tokens_per_chunk,
        "target_tok_per_s": 20000,
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(
            f"client ceiling ({a.server} server, concurrency {a.concurrency}, max_tokens {a.max_tokens}, "
            f"client on CPU {client_cpu}): {out['tok_per_s']:,.0f} tok/s wall-clock, "
            f"{out['tok_per_client_cpu_s'] or 0:,.0f} tok per client CPU-second "
            f"({res.completed} ok, {res.failed} failed)"
        )
    return 0 if res.failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
