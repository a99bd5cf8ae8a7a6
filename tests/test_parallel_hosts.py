"""Several hosts at once: a study on three hosts (two local, one over a real OpenSSH server on loopback) runs
trials in parallel through Ray, one server per host, and the sampler's constant liar keeps them apart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import sim_command
from optuna.trial import TrialState
from sshd import Sshd

from optimizer.executors import RayExecutor
from optimizer.hosts.config import HostConfig, local_host
from optimizer.settings import parse_study
from optimizer.space import load_space
from optimizer.study import Driver, Progress

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd(tmp_path_factory.mktemp("sshd-par"))
    yield server
    server.stop()


def test_three_hosts_run_trials_at_the_same_time(tmp_path, sshd, ray_runtime):
    ssh = HostConfig(
        name="ssh0",
        type="ssh",
        address="127.0.0.1",
        ssh_port=sshd.port,
        user=sshd.user,
        key_file=str(sshd.user_key),
        use_agent=False,
        known_hosts=str(sshd.trust()),
        python=sys.executable,
        workdir=str(tmp_path / "remote"),
        server_port="auto",
        connect_timeout_s=5,
        keepalive_s=5,
    )
    hosts = [local_host("h0"), local_host("h1"), ssh]
    cfg = parse_study(
        {
            "study": "par",
            "studies_dir": str(tmp_path / "studies"),
            "space": str(ROOT / "search_spaces/demo.yaml"),
            "server": {"command": sim_command(), "boot_timeout_s": 20},
            "workload": {"max_tokens": 32, "chunks": 3, "requests_per_chunk": 2, "warmup_requests": 1},
            "budget": {"trials": 7},
            "sampler": {"seed": 5},
            "pruner": {"name": "none"},
        },
        "test",
    )
    executor = RayExecutor(hosts, cfg.study_dir.absolute())
    try:
        study = Driver(cfg, load_space(cfg.space), hosts, executor, progress=Progress(lambda s: None)).run()
    finally:
        executor.shutdown()

    launched = [t for t in study.get_trials() if t.user_attrs.get("launched")]
    assert len(launched) == 7
    assert not [t for t in study.get_trials() if t.state == TrialState.RUNNING]
    used = {t.user_attrs["host"] for t in launched}
    assert used == {"h0", "h1", "ssh0"}
    # One server per host at a time: a host's trials never overlap ...
    for h in used:
        spans = sorted((t.user_attrs["t_start"], t.user_attrs["t_end"]) for t in launched if t.user_attrs["host"] == h)
        assert all(a[1] <= b[0] + 0.05 for a, b in zip(spans, spans[1:])), spans
    # ... while trials on different hosts do.
    overlaps = 0
    for i, a in enumerate(launched):
        for b in launched[i + 1 :]:
            if a.user_attrs["host"] != b.user_attrs["host"]:
                lo = max(a.user_attrs["t_start"], b.user_attrs["t_start"])
                hi = min(a.user_attrs["t_end"], b.user_attrs["t_end"])
                overlaps += hi - lo > 0.5
    assert overlaps >= 3
    # The SSH host's server log was streamed back to the driver's machine while it ran.
    ssh_trials = [t for t in launched if t.user_attrs["host"] == "ssh0"]
    log = Path(ssh_trials[0].user_attrs["log_path"]).read_text()
    assert "Init torch distributed begin" in log
    # Constant liar: the parallel trials asked together are not all the same configuration.
    keys = [t.user_attrs["candidate_key"] for t in launched]
    assert len(set(keys)) == len(keys)
