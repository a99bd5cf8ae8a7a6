"""SSHHost through a real OpenSSH server on loopback (own host key, user key, authorized_keys and port).

The "remote" machine is this machine, so the tests can look at the remote processes and files directly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from optimizer.errors import HostError
from optimizer.hosts import HostConfig, SSHHost, _proc, make_host

try:
    from tests.sshd import TOY_SERVER, Sshd, free_port, log_line, pid_alive, wait_for
except ImportError:  # pragma: no cover - tests/ is not a package
    from sshd import TOY_SERVER, Sshd, free_port, log_line, pid_alive, wait_for


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def config(sshd: Sshd, tmp_path: Path, **over) -> HostConfig:
    base = dict(
        name="box",
        type="ssh",
        address="127.0.0.1",
        ssh_port=sshd.port,
        user=sshd.user,
        key_file=str(sshd.user_key),
        use_agent=False,
        known_hosts=str(sshd.trust()),
        connect_timeout_s=5,
        keepalive_s=5,
        python=sys.executable,
        workdir=str(tmp_path / "remote"),
        env={"TOY_HOST": "from-host"},
        cuda_visible_devices="1",
        server_port="auto",
    )
    base.update(over)
    return HostConfig(**base)


@pytest.fixture
def host(sshd: Sshd, tmp_path: Path):
    h = make_host(config(sshd, tmp_path), tmp_path / "state")
    assert isinstance(h, SSHHost)
    yield h
    if h._current is not None and not h._current._stopped:
        h._current.stop(timeout_s=2)
    h.close()


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def boot(host: SSHHost, tmp_path: Path, *extra: str, env=None):
    port = host.pick_port()
    log = tmp_path / "trials" / "0" / "server.log"
    h = host.start(host.launch_argv("-c", TOY_SERVER, str(port), *extra), env or {}, log, port)
    wait_for(lambda: log_line(log, "READY") is not None or h.returncode() is not None, 15, "READY in local log")
    assert h.returncode() is None, log.read_text()
    return h, port, log


def test_start_stream_forward_stop(host: SSHHost, tmp_path: Path) -> None:
    h, port, log = boot(host, tmp_path)
    # The log was streamed back into the local file.
    assert json.loads(log_line(log, "ARGV")) == [str(port)]
    assert json.loads(log_line(log, "ENV")) == {"CUDA_VISIBLE_DEVICES": "1", "TOY_HOST": "from-host"}
    # Reached through the SSH port forward.
    assert h.base_url.startswith("http://127.0.0.1:") and h.base_url != f"http://127.0.0.1:{port}"
    assert get(h.base_url + "/") == b"ok"
    # Detached in its own process group, with a pid file holding the start time.
    child = int(log_line(log, "CHILD"))
    assert _proc.proc_stat(child)[1] == h.pgid == _proc.proc_stat(h.pid)[1]
    rec = json.loads(Path(host.run_dir, f"{port}.json").read_text())
    assert rec["pgid"] == h.pgid and rec["start_time"] == _proc.start_time(h.pid) and rec["port"] == port
    assert rec["run_id"] == h.run_id
    # A dropped connection is re-established (commands and new forwarded connections).
    host._client.get_transport().close()
    assert h.returncode() is None
    assert get(h.base_url + "/") == b"ok"

    h.stop(timeout_s=5)
    assert h.returncode() == -signal.SIGTERM
    assert not pid_alive(child) and not _proc.group_alive(h.pgid)
    assert _proc.port_free("127.0.0.1", port)
    assert not Path(host.run_dir, f"{port}.json").exists()
    h.stop()  # idempotent


def test_hostile_values_reach_the_server_literally(host: SSHHost, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    pwned = [Path(f"/tmp/pwned_{tag}_{i}") for i in range(4)]
    env = {
        "TOY_SUBST": f"$(touch {pwned[0]})",
        "TOY_SEMI": f"; touch {pwned[1]}; rm -rf x",
        "TOY_VAR": "$HOME ${PATH} \\ 'single' \"double\"",
    }
    flag = f'it\'s "q" `touch {pwned[2]}` $(touch {pwned[3]}) | & > y\nnew line'
    h, port, log = boot(host, tmp_path, "--flag", flag, "", "--x=$HOME", env=env)
    assert json.loads(log_line(log, "ARGV")) == [str(port), "--flag", flag, "", "--x=$HOME"]
    got = json.loads(log_line(log, "ENV"))
    assert {k: got[k] for k in env} == env
    h.stop(timeout_s=5)
    assert not any(p.exists() for p in pwned), "a hostile value was executed by a shell"


def test_exit_status_and_sigkill(host: SSHHost, tmp_path: Path) -> None:
    log = tmp_path / "exit.log"
    port = host.pick_port()
    h = host.start(host.launch_argv("-c", "print('bye'); raise SystemExit(3)"), {}, log, port)
    wait_for(lambda: h.returncode() is not None, 10, "exit")
    assert h.returncode() == 3
    h.stop()
    assert "bye" in log.read_text()

    h, port, log = boot(host, tmp_path, "--ignore-term")
    child = int(log_line(log, "CHILD"))
    h.stop(timeout_s=0.3)
    assert h.returncode() == -signal.SIGKILL
    assert not pid_alive(child) and _proc.port_free("127.0.0.1", port)


def test_host_faults(host: SSHHost, tmp_path: Path, sshd: Sshd) -> None:
    with pytest.raises(HostError, match="command not found"):
        host.start(["no-such-sglang-binary-xyz"], {}, tmp_path / "a.log", free_port())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(HostError, match=f"port {port} .* taken"):
            host.start(host.launch_argv("-c", TOY_SERVER, str(port)), {}, tmp_path / "b.log", port)
    unreachable = SSHHost(config(sshd, tmp_path, ssh_port=free_port(), connect_timeout_s=2))
    with pytest.raises(HostError, match="cannot reach"):
        unreachable.start(["true"], {}, tmp_path / "c.log", free_port())


def test_unknown_host_key_is_rejected(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    h = SSHHost(config(sshd, tmp_path, known_hosts=str(known)))
    with pytest.raises(HostError, match="is not in .*known_hosts.*accept_new_host_keys"):
        h.pick_port()
    # A different key for the same host is refused even with accept-new.
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    kind, key = (tmp_path / "other.pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")
    h = SSHHost(config(sshd, tmp_path, known_hosts=str(known), accept_new_host_keys=True))
    with pytest.raises(HostError, match="does not match"):
        h.pick_port()


def test_accept_new_host_key_writes_known_hosts(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "sub" / "known_hosts"
    h = SSHHost(config(sshd, tmp_path, known_hosts=str(known), accept_new_host_keys=True))
    try:
        assert h.run("true")[0] == 0
    finally:
        h.close()
    assert known.read_text() == sshd.host_key_line()
    # Now known: a strict host connects.
    strict = SSHHost(config(sshd, tmp_path, known_hosts=str(known), server_port=None))
    try:
        assert strict.run("echo hi")[1] == "hi\n"
        assert strict.remote_path("~/.sglang-optimizer") == os.path.expanduser("~/.sglang-optimizer")
        assert strict.remote_path("rel/dir") == os.path.expanduser("~/rel/dir")
        assert strict.pick_port() == 30000  # server_port default of an ssh host
    finally:
        strict.close()


def test_reap_orphans_of_a_dead_driver(sshd: Sshd, tmp_path: Path) -> None:
    first = SSHHost(config(sshd, tmp_path))
    h, port, log = boot(first, tmp_path)
    pgid, child = h.pgid, int(log_line(log, "CHILD"))
    first.close()  # the driver goes away without stopping its server
    assert pid_alive(child)
    second = SSHHost(config(sshd, tmp_path))
    try:
        assert second.reap_orphans() == [pgid]
        assert not pid_alive(child) and _proc.port_free("127.0.0.1", port)
        assert not list(Path(second.run_dir).glob("*.json"))
        assert second.reap_orphans() == []
    finally:
        second.close()
        _proc.stop_group(pgid, 1.0)  # never leave the server behind when the test fails


def test_log_tail_without_sftp(tmp_path: Path) -> None:
    """A host without the SFTP subsystem: the log is streamed with tail(1) over exec channels."""
    plain = Sshd(tmp_path / "sshd-nosftp", sftp=False)
    try:
        host = SSHHost(config(plain, tmp_path))
        h, port, log = boot(host, tmp_path)
        assert not h._tail.use_sftp
        assert json.loads(log_line(log, "ARGV")) == [str(port)]
        h.stop(timeout_s=5)
        host.close()
    finally:
        plain.stop()
