"""Test helpers for the hosts tests: a tiny real server program and a real OpenSSH server on loopback.

``TOY_SERVER`` is a Python program (run with ``python -c TOY_SERVER <port> [args...]``) that prints its argv and
its ``TOY_*``/``CUDA_VISIBLE_DEVICES`` environment as JSON lines, spawns a sleeping child in its own process
group (so stopping must kill grandchildren too), then serves HTTP on 127.0.0.1:<port> and prints ``READY``.
With ``--ignore-term`` it ignores SIGTERM (to test the SIGKILL escalation).

``Sshd`` runs ``/usr/sbin/sshd -D -e -f <config>`` as the current user (root) on a free loopback port with its
own host key, user key and authorized_keys in a temporary directory. A missing sshd is an error, not a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

TOY_SERVER = r"""
import http.server, json, os, signal, subprocess, sys
port = int(sys.argv[1])
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
env = {k: v for k, v in os.environ.items() if k.startswith("TOY_") or k == "CUDA_VISIBLE_DEVICES"}
print("ENV " + json.dumps(env, sort_keys=True), flush=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("CHILD %d" % child.pid, flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", port), H)
print("READY", flush=True)
srv.serve_forever()
"""


def wait_for(pred: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        val = pred()
        if val:
            return val
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def log_line(path: Path, prefix: str) -> str | None:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return data[data.rfind(")") + 2] not in "ZX"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


class Sshd:
    """A real OpenSSH server on 127.0.0.1:<free port>, for the current (root) user, keys in ``tmp``."""

    def __init__(self, tmp: Path, *, sftp: bool = True) -> None:
        if not Path(SSHD).exists():
            raise AssertionError(f"{SSHD} is missing: install openssh-server (apt-get install -y openssh-server)")
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o700)
        self.host_key = tmp / "ssh_host_ed25519_key"
        self.user_key = tmp / "id_ed25519"
        self.authorized_keys = tmp / "authorized_keys"
        self.known_hosts = tmp / "known_hosts"
        for key in (self.host_key, self.user_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        shutil.copy(f"{self.user_key}.pub", self.authorized_keys)
        os.chmod(self.authorized_keys, 0o600)
        self.port = free_port()
        self.config = tmp / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {tmp / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "MaxSessions 50\n"
            "MaxStartups 50\n"
            "LogLevel ERROR\n" + (f"Subsystem sftp {SFTP_SERVER}\n" if sftp else "")
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.log = open(tmp / "sshd.log", "ab")
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._listening, 10.0, "sshd to listen")
        self.user = os.environ.get("USER") or __import__("getpass").getuser()

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"sshd exited: {(self.tmp / 'sshd.log').read_text()}")
        with socket.socket() as s:
            try:
                s.connect(("127.0.0.1", self.port))
                return True
            except OSError:
                return False

    def host_key_line(self) -> str:
        """A known_hosts line for this server (``[127.0.0.1]:port type key``)."""
        kind, key = Path(f"{self.host_key}.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {key}\n"

    def trust(self) -> Path:
        self.known_hosts.write_text(self.host_key_line())
        return self.known_hosts

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, 15)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(5)
        self.log.close()
