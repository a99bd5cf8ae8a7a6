"""LocalHost and the hosts file, with real processes (no mocks)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pydantic
import pytest

from optimizer.errors import ConfigError, HostError
from optimizer.hosts import HostConfig, LocalHost, _proc, load_hosts, local_host, make_host

try:
    from tests.sshd import TOY_SERVER, free_port, log_line, pid_alive, wait_for
except ImportError:  # pragma: no cover - tests/ is not a package
    from sshd import TOY_SERVER, free_port, log_line, pid_alive, wait_for


def toy_argv(host: LocalHost, port: int, *extra: str) -> list[str]:
    return host.launch_argv("-c", TOY_SERVER, str(port), *extra)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


@pytest.fixture
def host(tmp_path: Path):
    h = LocalHost("local", tmp_path / "state", env={"TOY_HOST": "from-host"}, cuda_visible_devices="3")
    yield h
    if h._current is not None:
        h._current.stop(timeout_s=2)


def boot(host: LocalHost, tmp_path: Path, *extra: str, env=None):
    port = host.pick_port()
    log = tmp_path / "trials" / "0" / "server.log"
    handle = host.start(toy_argv(host, port, *extra), env or {}, log, port)
    wait_for(lambda: log_line(log, "READY") is not None or handle.returncode() is not None, 10, "READY")
    assert handle.returncode() is None, log.read_text()
    return handle, port, log


def test_start_stop_kills_whole_group_and_frees_port(host: LocalHost, tmp_path: Path) -> None:
    handle, port, log = boot(host, tmp_path, "--flag", "a b")
    assert handle.base_url == f"http://127.0.0.1:{port}"
    assert get(handle.base_url + "/") == b"ok"
    assert json.loads(log_line(log, "ARGV")) == [str(port), "--flag", "a b"]
    child = int(log_line(log, "CHILD"))
    # own process group, not ours
    assert os.getpgid(handle.pid) == handle.pgid == handle.pid
    assert handle.pgid != os.getpgrp()
    assert os.getpgid(child) == handle.pgid
    # pid file with start time and run id
    rec = json.loads((host.run_dir / f"{port}.json").read_text())
    assert rec["pgid"] == handle.pgid and rec["port"] == port and rec["run_id"]
    assert rec["start_time"] == _proc.start_time(handle.pid)
    assert rec["argv"][-3:] == [str(port), "--flag", "a b"]

    handle.stop(timeout_s=5)
    assert handle.returncode() == -signal.SIGTERM
    assert not pid_alive(child), "grandchild survived the stop"
    assert not _proc.group_alive(handle.pgid)
    assert _proc.port_free("127.0.0.1", port)
    assert not (host.run_dir / f"{port}.json").exists()
    handle.stop()  # idempotent


def test_env_layers(host: LocalHost, tmp_path: Path) -> None:
    handle, _, log = boot(host, tmp_path, env={"TOY_CALL": "$(echo no)", "TOY_HOST": "overridden"})
    env = json.loads(log_line(log, "ENV"))
    assert env == {"CUDA_VISIBLE_DEVICES": "3", "TOY_CALL": "$(echo no)", "TOY_HOST": "overridden"}
    handle.stop(timeout_s=5)


def test_returncode_of_exited_server(host: LocalHost, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    port = host.pick_port()
    h = host.start(host.launch_argv("-c", "print('bye'); raise SystemExit(3)"), {}, log, port)
    wait_for(lambda: h.returncode() is not None, 10, "exit")
    assert h.returncode() == 3
    assert "bye" in log.read_text()
    h.stop()  # already gone: no error
    assert not (host.run_dir / f"{port}.json").exists()


def test_sigkill_after_timeout(host: LocalHost, tmp_path: Path) -> None:
    handle, port, log = boot(host, tmp_path, "--ignore-term")
    child = int(log_line(log, "CHILD"))
    handle.stop(timeout_s=0.3)
    assert handle.returncode() == -signal.SIGKILL
    assert not pid_alive(child)
    assert _proc.port_free("127.0.0.1", port)


def test_one_server_per_host(host: LocalHost, tmp_path: Path) -> None:
    handle, _, _ = boot(host, tmp_path)
    with pytest.raises(HostError, match="already running"):
        host.start(toy_argv(host, free_port()), {}, tmp_path / "b.log", free_port())
    handle.stop(timeout_s=5)


def test_missing_command_is_a_host_error(host: LocalHost, tmp_path: Path) -> None:
    with pytest.raises(HostError, match="command not found"):
        host.start(["no-such-sglang-binary-xyz", "--port", "1"], {}, tmp_path / "s.log", free_port())


def test_taken_port_is_a_host_error(host: LocalHost, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(HostError, match=f"port {port}.*taken"):
            host.start(toy_argv(host, port), {}, tmp_path / "s.log", port)
    assert not list(host.run_dir.glob("*.json"))


def test_reap_orphans_of_a_dead_driver(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = LocalHost("local", state)
    handle, port, log = boot(first, tmp_path)
    pgid, child = handle.pgid, int(log_line(log, "CHILD"))
    del first, handle  # the "driver" dies without stopping its server

    # A stale pid file whose pid was reused by an unrelated live process must not be killed.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    rec = _proc.pid_record(bystander.pid, port=free_port(), bind_host="127.0.0.1")
    rec["start_time"] -= 1
    _proc.write_json_atomic(state / "run" / "reused.json", rec)
    try:
        second = LocalHost("local", state)
        assert second.reap_orphans() == [pgid]
        assert not _proc.group_alive(pgid)
        assert not pid_alive(child)
        assert _proc.port_free("127.0.0.1", port)
        assert pid_alive(bystander.pid), "reaped an unrelated process with a reused pid"
        assert not list((state / "run").glob("*.json"))
        assert second.reap_orphans() == []
    finally:
        bystander.kill()
        bystander.wait()


def test_reap_orphans_when_leader_is_gone(tmp_path: Path) -> None:
    """The launcher died but a child it left in the group still holds the port: still reaped."""
    state = tmp_path / "state"
    host = LocalHost("local", state)
    port = free_port()
    script = textwrap.dedent(f"""
        import subprocess, sys
        c = subprocess.Popen([sys.executable, "-c", {TOY_SERVER!r}, "{port}"])
        print("GRANDCHILD", c.pid, flush=True)
    """)
    log = tmp_path / "server.log"
    h = host.start(host.launch_argv("-c", script), {}, log, port)
    try:
        wait_for(lambda: h.returncode() is not None, 10, "launcher exit")
        grandchild = int(log_line(log, "GRANDCHILD"))
        wait_for(lambda: log_line(log, "READY") is not None, 10, "READY")
        assert pid_alive(grandchild)
        host._current = None  # forget it, as a dead driver would
        assert LocalHost("local", state).reap_orphans() == [h.pgid]
        assert not pid_alive(grandchild)
        assert _proc.port_free("127.0.0.1", port)
    finally:
        _proc.stop_group(h.pgid, 1.0)  # never leave the grandchild behind when the test fails


def test_pick_port(tmp_path: Path) -> None:
    auto = LocalHost("a", tmp_path)
    p = auto.pick_port()
    assert 1024 <= p <= 65535 and _proc.port_free("127.0.0.1", p)
    assert LocalHost("f", tmp_path, server_port=31234).pick_port() == 31234


# ------------------------------------------------------------------------------------------------ hosts file


def test_load_hosts_and_make_host(tmp_path: Path) -> None:
    f = tmp_path / "hosts.yaml"
    f.write_text(
        textwrap.dedent("""
        hosts:
          - name: local
            type: local
            cuda_visible_devices: 0
            env: {HF_HOME: /data/hf, NCCL_P2P_LEVEL: NVL}
          - name: gpu-box.1
            type: ssh
            address: 10.0.0.12
            user: ubuntu
            key_file: ~/.ssh/id_ed25519
    """)
    )
    local, remote = load_hosts(f)
    assert local.python == sys.executable and local.server_port == "auto" and local.cuda_visible_devices == "0"
    assert remote.python == "python3" and remote.server_port == 30000 and remote.workdir == "~/.sglang-optimizer"
    assert remote.ssh_port == 22 and remote.use_agent and not remote.accept_new_host_keys and remote.forward_port
    h = make_host(local, tmp_path / "studies" / "s" / "hosts" / "local")
    assert isinstance(h, LocalHost) and h.env["CUDA_VISIBLE_DEVICES"] == "0" and h.env["HF_HOME"] == "/data/hf"
    assert h.run_dir == (tmp_path / "studies" / "s" / "hosts" / "local" / "run").absolute()
    assert local_host().type == "local" and local_host().name == "local"


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "hosts:\n  - {name: a, type: local}\n  - {name: b, type: sssh}\n",
            "hosts.yaml: hosts[1].type: must be 'local' or 'ssh', got 'sssh'",
        ),
        ("hosts:\n  - {name: 'a b'}\n", "hosts.yaml: hosts[0].name: must match [A-Za-z0-9_.-]+"),
        ("hosts:\n  - {name: a}\n  - {name: a}\n", "hosts.yaml: hosts[1].name: duplicate host name 'a'"),
        ("hosts:\n  - {name: a, type: ssh}\n", "hosts.yaml: hosts[0].address: required for an ssh host"),
        (
            "hosts:\n  - {name: a, server_port: x}\n",
            "hosts.yaml: hosts[0].server_port: must be a port number 1-65535 or 'auto', got 'x'",
        ),
        ("hosts:\n  - {name: a, colour: red}\n", "hosts.yaml: hosts[0].colour: unknown key (allowed: name, type"),
        ("hosts:\n  - {name: a, env: {BAD-NAME: 1}}\n", "hosts.yaml: hosts[0].env: variable names must match"),
        (
            "hosts:\n  - {name: a, type: ssh, address: h, use_agent: false}\n",
            "hosts.yaml: hosts[0].key_file: required when use_agent is false",
        ),
        ("hosts: []\n", "hosts.yaml: hosts: must be a non-empty list"),
        ("hosts: [\n", "hosts.yaml: not valid YAML"),
    ],
)
def test_hosts_file_errors(tmp_path: Path, body: str, message: str) -> None:
    f = tmp_path / "hosts.yaml"
    f.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_hosts(f)
    assert str(e.value).replace(str(tmp_path) + "/", "").startswith(message), str(e.value)


def test_example_hosts_file_loads() -> None:
    from optimizer.hosts.config import EXAMPLE, state_dir_for

    local, box = load_hosts(EXAMPLE)
    assert local.type == "local" and box.type == "ssh" and box.server_port == 30000 and box.env["NCCL_DEBUG"]
    assert state_dir_for("studies/s", box) == Path("studies/s/hosts/gpu-box-1")


def test_host_config_is_validated_directly() -> None:
    with pytest.raises(pydantic.ValidationError):
        HostConfig(name="x", type="ssh")
    assert HostConfig(name="x", type="ssh", address="h", server_port="auto").server_port == "auto"


def test_reap_finds_a_server_whose_pid_was_never_recorded(tmp_path: Path) -> None:
    """A driver killed between starting a server and writing its pid leaves only the intent record; the server
    is found through the run id the optimizer planted in its environment, and only that server is stopped."""
    state = tmp_path / "state"
    run_dir = state / "run"
    port = free_port()
    run_id = "intent-test-" + os.urandom(4).hex()
    _proc.write_json_atomic(
        run_dir / f"{port}.json",
        {"intent": True, "run_id": run_id, "port": port, "boot_id": _proc.boot_id(), "bind_host": "127.0.0.1"},
    )
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    orphan = subprocess.Popen(sleeper, start_new_session=True, env={**os.environ, _proc.RUN_ID_ENV: run_id})
    other = subprocess.Popen(sleeper, start_new_session=True, env={**os.environ, _proc.RUN_ID_ENV: run_id + "-other"})
    try:
        wait_for(lambda: _proc.groups_with_run_id(run_id) == [orphan.pid], 5.0, "the orphan to be visible")
        assert LocalHost("local", state).reap_orphans() == [orphan.pid]
        assert orphan.wait(5) is not None
        assert other.poll() is None, "stopped a process of another launch"
        assert not list(run_dir.glob("*.json"))
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()
