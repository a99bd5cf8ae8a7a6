"""Shared fixtures: one Ray runtime per test session (2 CPUs, a resource per test host) and the simulator command."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests import their helpers (tests/sshd.py) and benchmarks/ scripts

# A suite started in the background (`make test &`, nohup) inherits SIGINT ignored, and so would every driver the
# tests start: Python then never turns Ctrl-C into KeyboardInterrupt, which the Ctrl-C tests send. A handler (not
# an ignore) here gives each child process the default disposition again, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TEST_HOSTS = ("local", "h0", "h1", "h2", "h3", "ssh0")
KIMI = "kimi-k2.5-8x-rtxpro6000"


def sim_command(profile: str = KIMI, time_scale: float = 0.002, step_scale: float = 0.1) -> list[str]:
    return [
        "{python}",
        "-m",
        "optimizer.sim",
        "--sim-profile",
        profile,
        "--sim-time-scale",
        str(time_scale),
        "--sim-step-scale",
        str(step_scale),
    ]


@pytest.fixture(scope="session")
def ray_runtime():
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        num_cpus=2,
        resources={f"host:{h}": 1 for h in TEST_HOSTS},
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    yield ray
    ray.shutdown()
