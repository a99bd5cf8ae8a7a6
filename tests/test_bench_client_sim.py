"""End to end: the benchmark client against the project's simulator, started like SGLang as a real process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from optimizer.loadgen import Workload, run_benchmark

ROOT = Path(__file__).resolve().parents[1]
EAGLE = [
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


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _start_sim(extra: list[str]):
    port = _free_port()
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
        "--sim-time-scale",
        "0.002",
        *extra,
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-2000:]
        try:
            if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("simulator not ready within 60 s")


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


@pytest.fixture(params=["baseline", "eagle3"])
def sim(request):
    proc, url = _start_sim(EAGLE if request.param == "eagle3" else [])
    try:
        yield request.param, url
    finally:
        _stop(proc)


def test_benchmark_against_the_simulator(sim):
    kind, url = sim
    seen = []
    w = Workload(concurrency=4, max_tokens=64, warmup_requests=2, chunks=2, requests_per_chunk=4)
    res = run_benchmark(url, w, on_chunk=lambda c: seen.append(c) or True)
    assert res.failed == 0, res.failure_reasons
    assert res.completed == 8 and len(res.chunks) == 2 and [c.index for c in seen] == [0, 1]
    assert all(r.completion_tokens == 64 for c in res.chunks for r in c.records)  # ignore_eos
    assert res.tok_per_s > 0 and all(c.tok_per_s > 0 for c in res.chunks)
    assert res.ttft_ms["p50"] > 0 and res.itl_ms["p50"] > 0 and res.e2e_ms["p99"] >= res.e2e_ms["p50"]
    assert all(len(r.itl_ms) == 63 for c in res.chunks for r in c.records)
    if kind == "eagle3":
        assert res.tokens_per_chunk > 1.2  # several tokens per SSE chunk: one chunk per verify step
        assert res.accept_length is not None and res.accept_length > 1.2
        # the warm-up's native requests: verify steps accepting 0..3 drafts of the 3-step chain, 2 x 64 tokens
        h = res.accept_histogram
        assert h is not None and len(h) == 4 and res.to_metrics()["accept_histogram"] == h
        steps = sum(h)
        assert 2 * 64 / 4 <= steps <= 2 * 64 and sum((n + 1) * c for n, c in enumerate(h)) >= 2 * 64 - 4
    else:
        assert res.tokens_per_chunk == pytest.approx(1.0, abs=0.05)
        assert res.accept_length is None
        assert res.accept_histogram is None and "accept_histogram" not in res.to_metrics()


def test_client_ceiling_script_runs_against_the_simulator():
    """bench/client_ceiling.py end to end, small: the figure itself is measured by hand (see its docstring)."""
    import json

    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "client_ceiling.py"),
            "--json",
            "--concurrency",
            "4",
            "--max-tokens",
            "32",
            "--requests",
            "8",
            "--chunks",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["server"] == "sim" and res["completed"] == 8 and res["failed"] == 0 and res["tok_per_s"] > 0


def test_bench_cli_against_the_simulator(tmp_path):
    import json

    (tmp_path / "w.yaml").write_text(
        "concurrency: 2\nmax_tokens: 16\nchunks: 1\nrequests_per_chunk: 2\ncategories: [code]\n"
    )
    proc, url = _start_sim([])
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "optimizer.loadgen",
                url,
                "--workload",
                str(tmp_path / "w.yaml"),
                "--warmup-requests",
                "1",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        _stop(proc)
    assert out.returncode == 0, out.stderr[-2000:]
    m = json.loads(out.stdout)
    assert m["completed"] == 2 and m["failed"] == 0 and m["chunks_run"] == 1 and m["tok_per_s"] > 0
    assert "chunk 0:" in out.stderr
