"""Readiness, shutdown and every failure mode of the simulator, as a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import httpx
from test_sim_support import REPO, Sim, chat_body

from optimizer.sim.profiles import load_profile

DRAFT = ["--speculative-draft-model-path", "/models/draft"]


def eagle3(steps: int, topk: int, draft: int, algo: str = "EAGLE3") -> list[str]:
    return [
        "--speculative-algorithm",
        algo,
        *DRAFT,
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        str(topk),
        "--speculative-num-draft-tokens",
        str(draft),
    ]


def test_readiness_refused_then_503_then_200() -> None:
    with Sim(profile="smollm2-135m-h200", time_scale=0.05) as sim, httpx.Client(timeout=5) as client:
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                r = client.get(sim.base + "/health")
                seen.append(r.status_code)
                if r.status_code == 200:
                    assert r.content == b""
                    break
            except httpx.ConnectError:
                seen.append("refused")
            time.sleep(0.01)
        assert seen[0] == "refused" and seen[-1] == 200 and 503 in seen
        first_503 = seen.index(503)
        assert "refused" not in seen[first_503:]
        log = sim.log()
        order = [
            "Init torch distributed begin",
            "Load weight end",
            "Memory pool end",
            "Capture cuda graph begin",
            "Capture cuda graph end. Time elapsed:",
            "Uvicorn running on",
            "The server is fired up and ready to roll!",
        ]
        pos = [log.index(s) for s in order]
        assert pos == sorted(pos)


def test_skip_server_warmup_has_no_503_phase() -> None:
    with (
        Sim("--skip-server-warmup", profile="smollm2-135m-h200", time_scale=0.05) as sim,
        httpx.Client(timeout=5) as client,
    ):
        seen = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                r = client.get(sim.base + "/health")
                seen.add(r.status_code)
                if r.status_code == 200:
                    break
            except httpx.ConnectError:
                seen.add("refused")
            time.sleep(0.005)
        assert 503 not in seen and 200 in seen


def test_boot_takes_profile_time_times_scale() -> None:
    prof = load_profile("kimi-k2.5-8x-rtxpro6000")
    real = prof.evaluate({}, {}, 1).boot_s
    assert 600 <= real <= 900
    t = time.monotonic()
    with Sim(profile="kimi-k2.5-8x-rtxpro6000", time_scale=0.002) as sim:
        sim.wait_ready()
        took = time.monotonic() - t
    assert real * 0.002 <= took <= real * 0.002 + 4.0


def test_sigterm_drains_and_exits() -> None:
    with Sim() as sim:
        sim.wait_ready()
        t = time.monotonic()
        sim.proc.send_signal(signal.SIGTERM)
        rc = sim.wait_exit(10)
        assert time.monotonic() - t < 3
        assert rc == -signal.SIGKILL
        log = sim.log()
        assert "SIGTERM received" in log and "Draining requests and shutting down..." in log
        assert "kill_process_tree called" in log


def test_invalid_combinations_fail_like_sglang() -> None:
    cases = [
        (["--speculative-algorithm", "EAGLE3", *DRAFT, "--speculative-eagle-topk", "2"], "AssertionError"),
        (
            [*eagle3(3, 4, 8), "--attention-backend", "trtllm_mha"],
            "ValueError: TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). "
            "Please use a different prefill backend.",
        ),
        (
            ["--speculative-algorithm", "EAGLE3"],
            "ValueError: speculative_draft_model_path is required for EAGLE/EAGLE3 speculative decoding.",
        ),
    ]
    for args, last in cases:
        with Sim(*args) as sim:
            rc = sim.wait_exit(20)
            assert rc == 1
            lines = sim.log().strip().splitlines()
            assert lines[-1] == last and "Traceback (most recent call last):" in sim.log()
            assert "Uvicorn running" not in sim.log() and not sim.port_open()


def test_topk1_rewrite_warning_and_unknown_flags() -> None:
    with Sim(
        *eagle3(3, 1, 9),
        "--sampling-backend",
        "pytorch",
        "--cuda-graph-backend-prefill",
        "disabled",
        "--sim-step-scale",
        "0",
    ) as sim:
        sim.wait_ready()
        info = httpx.get(sim.base + "/server_info").json()
        assert info["speculative_num_draft_tokens"] == 4
        assert info["sampling_backend"] == "pytorch" and info["cuda_graph_backend_prefill"] == "disabled"
        log = sim.log()
        assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in log
        assert "Max running requests is reset to 48 for speculative decoding." in log


def test_malformed_argv_exits_2() -> None:
    for args in (["garbage"], ["--port", "abc"], ["--speculative-num-steps"]):
        r = subprocess.run(
            [sys.executable, "-m", "optimizer.sim", *args], cwd=REPO, capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2 and "error:" in r.stderr, (args, r.stderr)


def test_oom_at_boot() -> None:
    with Sim(*eagle3(8, 8, 64)) as sim:
        rc = sim.wait_exit(20)
        log = sim.log()
        assert rc == -signal.SIGKILL
        assert "Not enough memory. Please try to increase --mem-fraction-static" in log
        assert "Scheduler hit an exception" in log and "Received sigquit from a child process" in log
        assert "Memory pool end" not in log and not sim.port_open()


def test_cuda_graph_capture_failure() -> None:
    with Sim(*eagle3(3, 8, 16), "--attention-backend", "flashinfer") as sim:
        rc = sim.wait_exit(20)
        log = sim.log()
        assert rc == -signal.SIGKILL and "Capture cuda graph failed" in log
        assert "Scheduler hit an exception" in log and "Uvicorn running" not in log


def test_nccl_hang_is_silent_and_never_ready() -> None:
    env = {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Tree"}
    with Sim(env=env, profile="kimi-k2.5-8x-rtxpro6000", time_scale=0.002) as sim:
        deadline = time.monotonic() + 10
        while "Init torch distributed begin." not in sim.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        size = len(sim.log())
        time.sleep(2.5)  # a healthy boot of this profile takes ~1.3 s at this scale
        assert sim.proc.poll() is None and not sim.port_open()
        log = sim.log()
        assert len(log) == size and log.rstrip().endswith("Init torch distributed begin.")


def test_crash_mid_serving_cuts_streams() -> None:
    prof = load_profile("llama-3.1-8b-h100")
    flags = {
        "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "/d",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 4,
        "speculative-num-draft-tokens": 16,
        "attention-backend": "triton",
    }
    ev = prof.evaluate(flags, {}, 1)
    assert ev.failure == "crash_serving"
    n = ev.crash_after_requests
    with Sim(*eagle3(3, 4, 16), "--attention-backend", "triton", "--sim-step-scale", "0.02") as sim:
        sim.wait_ready()
        cut: list[str] = []

        def long_stream() -> None:
            try:
                with httpx.stream(
                    "POST", sim.base + "/v1/chat/completions", json=chat_body(max_tokens=100000), timeout=30
                ) as r:
                    for _ in r.iter_lines():
                        pass
                cut.append("completed")
            except httpx.HTTPError as exc:
                cut.append(type(exc).__name__)

        t = threading.Thread(target=long_stream)
        t.start()
        done = 0
        for _ in range(n + 5):
            try:
                r = httpx.post(
                    sim.base + "/v1/chat/completions", json=chat_body(max_tokens=4, stream=False), timeout=10
                )
                if r.status_code == 200:
                    done += 1
            except httpx.HTTPError:
                break
        t.join(30)
        rc = sim.wait_exit(10)
        log = sim.log()
        assert done == n
        assert cut and cut[0] != "completed"
        assert rc == -signal.SIGKILL
        assert "CUDA error: an illegal memory access was encountered" in log
        assert "Scheduler hit an exception" in log


def test_eagle_with_eagle3_drafter_accepts_almost_nothing() -> None:
    with Sim(*eagle3(3, 1, 4, algo="EAGLE"), "--sim-step-scale", "0") as sim:
        sim.wait_ready()
        j = httpx.post(
            sim.base + "/generate",
            json={"text": "Tell me a story", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}},
            timeout=30,
        ).json()
        acc = j["meta_info"]["spec_accept_length"]
        assert 1.0 <= acc <= 1.12
        ist = httpx.get(sim.base + "/server_info").json()["internal_states"][0]
        assert 1.0 <= ist["avg_spec_accept_length"] <= 1.12
