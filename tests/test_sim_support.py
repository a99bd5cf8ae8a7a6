"""Helpers for the simulator tests: start ``python -m optimizer.sim`` as a real process on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


#: The real server's recorded replies, logs and timelines (SGLang 0.5.17 on one H200, dummy weights), kept in the
#: repository: tests/data/sglang-0.5.17-h200/PROVENANCE.md says where they came from.
RECORDINGS = REPO / "tests" / "data" / "sglang-0.5.17-h200"


def recordings_dir() -> Path:
    return RECORDINGS


def load_recording(name: str) -> dict:
    return json.loads((recordings_dir() / name).read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sim:
    """One simulator process; logs (stdout and stderr merged) go to a temporary file."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, time_scale: float = 0.002, profile: str | None = None
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "optimizer.sim",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--sim-time-scale",
            str(time_scale),
        ]
        if profile:
            cmd += ["--sim-profile", profile]
        cmd += list(args)
        self.cmd = cmd
        self.logfile = tempfile.NamedTemporaryFile("w+", prefix="sim-", suffix=".log", delete=False)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        full_env.update(env or {})
        full_env["PYTHONUNBUFFERED"] = "1"
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=full_env, stdout=self.logfile, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log(self) -> str:
        return Path(self.logfile.name).read_text(errors="replace")

    def port_open(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def wait_ready(self, timeout: float = 20.0) -> Sim:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"simulator exited {self.proc.returncode}:\n{self.log()[-3000:]}")
                if self.port_open():
                    try:
                        if client.get(self.base + "/health").status_code == 200:
                            return self
                    except httpx.HTTPError:
                        pass
                time.sleep(0.02)
        raise AssertionError(f"simulator not ready after {timeout}s:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"simulator still running after {timeout}s:\n{self.log()[-3000:]}") from exc

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.logfile.close()
        try:
            os.unlink(self.logfile.name)
        except OSError:
            pass

    def __enter__(self) -> Sim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sse_events(raw: str) -> list[str]:
    """The payloads of ``data: ...`` events; asserts SGLang's framing (events separated by a blank line)."""
    assert raw.endswith("\n\n"), raw[-200:]
    blocks = raw.split("\n\n")[:-1]
    out = []
    for b in blocks:
        assert b.startswith("data: ") and "\n" not in b, b[:200]
        out.append(b[len("data: ") :])
    return out


def chat_body(content: str = "Say hello in five words.", max_tokens: int = 16, stream: bool = True, **extra) -> dict:
    body = {
        "model": "x",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def test_support_locates_recordings() -> None:
    assert (recordings_dir() / "launch_B_eagle3_topk1.json").is_file()
