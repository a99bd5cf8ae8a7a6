"""Noise between launches in the simulator: set per profile, per executor and on the simulator's command line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from optimizer.loadgen.workload import Workload
from optimizer.sim import cli
from optimizer.sim.model import LAUNCH_NOISE_SIGMA
from optimizer.sim.profiles import load_profile
from optimizer.simexec import ModelExecutor

KIMI = "kimi-k2.5-8x-rtxpro6000"


@pytest.mark.parametrize("sigma", [0.03, 0.20])
def test_profile_launch_factor_has_the_profile_spread(sigma):
    prof = dataclasses.replace(load_profile(KIMI), launch_noise=sigma)
    rng = np.random.default_rng(1)
    xs = np.array([prof.launch_factor(rng) for _ in range(4000)])
    assert abs(xs.std() / sigma - 1) < 0.1 and abs(xs.mean() - 1) < 0.01 and xs.min() > 0


def test_default_spread_and_no_noise():
    assert load_profile(KIMI).launch_noise == LAUNCH_NOISE_SIGMA
    prof = dataclasses.replace(load_profile(KIMI), launch_noise=0.0)
    assert prof.launch_factor(np.random.default_rng(0)) == 1.0


def test_model_executor_takes_a_launch_noise():
    ex = ModelExecutor(KIMI, ["h0"], Workload(), launch_noise=0.2)
    assert ex.profile.launch_noise == 0.2 and load_profile(KIMI).launch_noise == LAUNCH_NOISE_SIGMA


def test_sim_command_line_options():
    o = cli.parse(
        [
            "--sim-launch-noise",
            "0.2",
            "--sim-launch-seed",
            "7",
            "--sim-broken-verify",
            "--sim-override",
            "attention-backend=triton,max-running-requests=48",
            "--model-path",
            "m",
        ],
        KIMI,
    )
    assert o.launch_noise == 0.2 and o.launch_seed == 7 and o.broken_verify
    assert o.overrides == {"attention-backend": "triton", "max-running-requests": 48}
    assert o.flags == {"model-path": "m"}  # the simulator's options are not SGLang flags


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sim-launch-noise", "-0.1"], "argument --sim-launch-noise: must be in [0, 1)"),
        (["--sim-launch-noise", "x"], "argument --sim-launch-noise: invalid float value: 'x'"),
        (["--sim-override", "attention-backend"], "argument --sim-override: expected FLAG=VALUE"),
        (["--sim-override", "max-running-requests=many"], "argument --max-running-requests: invalid int value"),
        (["--sim-broken-verify=1"], "argument --sim-broken-verify: ignored explicit argument '1'"),
    ],
)
def test_sim_rejects_bad_options(argv, message):
    p = subprocess.run([sys.executable, "-m", "optimizer.sim", *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and message in p.stderr
