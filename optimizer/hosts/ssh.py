"""The SSH host: the server runs on another machine, reached with paramiko.

How a server is run there:

* Every remote command is a fixed shell text plus arguments that went through ``shlex.quote``; environment values
  are passed as quoted ``env NAME=value`` arguments, never interpolated by a shell.
* The server is started detached (``setsid``) in its own session and process group under a small ``sh`` wrapper
  that writes the group's pid to a file and, when the server exits, its exit status to another file. The
  optimizer then writes ``<workdir>/run/<port>.json`` (pid, pgid, process start time, boot id, argv, run id) with
  the helper in ``_proc`` run remotely, so ``reap_orphans`` can find servers a dead driver left behind.
* Its log goes to ``<workdir>/logs/<port>-<run id>.log`` on the host; a background thread tails it over SFTP into
  the local ``log_path`` while the server boots and runs.
* The optimizer reaches the server through an SSH local port forward (``base_url`` is ``http://127.0.0.1:<local
  port>``), or, with ``forward_port: false``, directly at ``address:port``.
* Stopping SIGTERMs the remote group, SIGKILLs it after the timeout and checks on the host that the port is free.

A dropped connection is re-established on the next use (commands, the log tail and new forwarded connections).
"""

from __future__ import annotations

import json
import logging
import os
import select
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import paramiko

from optimizer.errors import HostError
from optimizer.hosts import _proc
from optimizer.hosts.base import Host, ServerHandle
from optimizer.hosts.config import HostConfig

log = logging.getLogger(__name__)

q = shlex.quote

#: The helper module, run remotely with ``python -c`` (stdlib only).
_HELPER_SRC = Path(_proc.__file__).read_text()

#: The wrapper that runs the server: ``sh -c WRAPPER sh <pid file> <exit file> <command...>``. It is a constant;
#: the pid file, exit file and command reach it as positional parameters, so nothing is interpolated.
#: ``trap : TERM INT`` (a handler, not "ignore", so the server does not inherit it) keeps the wrapper alive when the
#: group gets SIGTERM, so it can record the server's exit status after the server has exited.
_WRAPPER = 'p=$1; x=$2; shift 2; echo $$ >"$p.tmp" && mv "$p.tmp" "$p"; trap : TERM INT; "$@"; echo $? >"$x"'

#: Seconds allowed for short remote commands.
CMD_TIMEOUT_S = 30.0
#: Seconds ``stop`` waits for the port to be free on the host once the group is gone.
PORT_WAIT_S = 30.0
#: Seconds between two reads of the remote log.
TAIL_POLL_S = 0.2
#: Most bytes of log copied in one read.
CHUNK = 4 << 20


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


class _RejectPolicy(paramiko.MissingHostKeyPolicy):
    """Default: a host whose key is not in known_hosts is refused (OpenSSH's StrictHostKeyChecking=yes)."""

    def missing_host_key(self, client, hostname, key):  # noqa: ANN001 - paramiko's signature
        raise UnknownHostKey(hostname, key)


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """``accept_new_host_keys``: a new host's key is accepted and appended to known_hosts (OpenSSH's
    StrictHostKeyChecking=accept-new). A host whose key *changed* is still refused: paramiko raises
    BadHostKeyException before asking the policy."""

    def __init__(self, path: str) -> None:
        self.path = path

    def missing_host_key(self, client, hostname, key):  # noqa: ANN001
        client.get_host_keys().add(hostname, key.get_name(), key)
        p = Path(self.path)
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        log.warning(
            "accepted new host key for %s (%s %s), added to %s",
            hostname,
            key.get_name(),
            key.fingerprint if hasattr(key, "fingerprint") else "",
            self.path,
        )


def _fingerprint(key: paramiko.PKey) -> str:
    fp = getattr(key, "fingerprint", None)  # SHA256:... on paramiko >= 3.2
    return str(fp) if fp else key.get_fingerprint().hex()


class SSHHost(Host):
    """A machine reached over SSH; its settings are a ``HostConfig`` of type ``ssh``."""

    def __init__(self, cfg: HostConfig, state_dir: Path | str | None = None) -> None:
        if cfg.type != "ssh":
            raise ValueError(f"{cfg.name}: not an ssh host")
        self.cfg = cfg
        self.name = cfg.name
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.python = shlex.split(cfg.python or "python3")
        self.env = dict(cfg.env)
        if cfg.cuda_visible_devices is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = cfg.cuda_visible_devices
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.RLock()
        self._home: str | None = None
        self._current: SSHServerHandle | None = None

    # ------------------------------------------------------------------------------------------ connection

    def launch_argv(self, *args: str) -> list[str]:
        """``[*python, *args]``: the server command line for this host."""
        return [*self.python, *args]

    def _where(self) -> str:
        return f"{self.cfg.user}@{self.cfg.address}:{self.cfg.ssh_port}"

    def _connect(self) -> paramiko.SSHClient:
        cfg = self.cfg
        client = paramiko.SSHClient()
        known = cfg.known_hosts_path()
        # Only the configured known_hosts file decides which host keys are trusted (no system files): what is
        # checked is exactly what the hosts file says. load_host_keys also makes it the file paramiko would save.
        if os.path.exists(known):
            client.load_host_keys(known)
        # Unknown host keys are refused unless the hosts file opts into accept-new; changed keys always are.
        client.set_missing_host_key_policy(_AcceptNewPolicy(known) if cfg.accept_new_host_keys else _RejectPolicy())
        try:
            client.connect(
                hostname=cfg.address,
                port=cfg.ssh_port,
                username=cfg.user,
                key_filename=cfg.key_path(),  # the key named in the hosts file, if any
                allow_agent=cfg.use_agent,  # the SSH agent, when the hosts file allows it (default)
                look_for_keys=False,  # no guessing from ~/.ssh/id_*: only the key file or agent configured
                timeout=cfg.connect_timeout_s,  # TCP connect timeout: an unreachable host fails fast
                banner_timeout=cfg.connect_timeout_s,  # a host that accepts TCP but never speaks SSH fails fast
                auth_timeout=cfg.connect_timeout_s,  # an authentication that hangs fails fast
                channel_timeout=cfg.connect_timeout_s,  # opening a session channel that hangs fails fast
            )
        except UnknownHostKey as e:
            client.close()
            raise HostError(
                f"{self.name}: host key of {e.hostname} ({e.key.get_name()} {_fingerprint(e.key)}) is not in "
                f"{known}; add it (ssh-keyscan -p {cfg.ssh_port} {cfg.address} >> {known}) or set "
                "accept_new_host_keys: true",
                host=self.name,
            ) from None
        except paramiko.BadHostKeyException as e:
            client.close()
            raise HostError(
                f"{self.name}: host key of {cfg.address}:{cfg.ssh_port} does not match {known} (got "
                f"{e.key.get_name()} {_fingerprint(e.key)}): refusing to connect, possible man-in-the-middle",
                host=self.name,
            ) from None
        except paramiko.AuthenticationException as e:
            client.close()
            raise HostError(f"{self.name}: authentication as {cfg.user} failed: {e}", host=self.name) from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            raise HostError(f"{self.name}: cannot reach {self._where()}: {e}", host=self.name) from None
        transport = client.get_transport()
        assert transport is not None
        if cfg.keepalive_s > 0:
            # Keepalive packets keep NAT/firewall state alive through long quiet boots, and a connection that died
            # shows up as a failed send (inactive transport), which makes the next use reconnect.
            transport.set_keepalive(int(max(1, cfg.keepalive_s)))
        return client

    def _transport(self) -> paramiko.Transport:
        """The live transport, reconnecting if the connection dropped."""
        with self._lock:
            t = self._client.get_transport() if self._client is not None else None
            if t is None or not t.is_active():
                if self._client is not None:
                    log.warning("%s: SSH connection lost; reconnecting", self.name)
                    self._client.close()
                    self._client = None
                self._client = self._connect()
                t = self._client.get_transport()
            assert t is not None
            return t

    def run(self, command: str, timeout_s: float = CMD_TIMEOUT_S) -> tuple[int, str, str]:
        """Run a shell command line (the caller quotes every value in it) and return (status, stdout, stderr)."""
        status, out, err = self.run_bytes(command, timeout_s)
        return status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def run_bytes(self, command: str, timeout_s: float = CMD_TIMEOUT_S) -> tuple[int, bytes, bytes]:
        """``run`` without decoding the output."""
        for attempt in (1, 2):
            transport = self._transport()
            try:
                chan = transport.open_session(timeout=self.cfg.connect_timeout_s)
            except (paramiko.SSHException, OSError, EOFError) as e:
                if attempt == 2:
                    raise HostError(f"{self.name}: cannot open an SSH session: {e}", host=self.name) from None
                transport.close()  # forces a reconnect on the retry; the command has not run yet
                continue
            break
        try:
            chan.settimeout(timeout_s)
            chan.exec_command(command)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout_s
            while True:  # stdout until EOF (recv blocks, up to the channel timeout); stderr as it comes
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                data = chan.recv(65536)
                if not data:
                    break
                out += data
                if time.monotonic() > deadline:
                    raise TimeoutError()
            if not chan.status_event.wait(max(0.1, deadline - time.monotonic())):
                raise TimeoutError()
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            status = chan.recv_exit_status()
        except TimeoutError:
            transport.close()  # a silently dead connection looks like this: reconnect on the next use
            raise HostError(f"{self.name}: remote command timed out after {timeout_s:.0f} s", host=self.name) from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise HostError(f"{self.name}: SSH command failed: {e}", host=self.name) from None
        finally:
            chan.close()
        return status, bytes(out), bytes(err)

    def _helper(self, *args: object, timeout_s: float = CMD_TIMEOUT_S) -> object:
        """Run ``_proc.main(args)`` on the host with its Python; return the JSON it prints."""
        cmd = " ".join(q(a) for a in [*self.python, "-c", _HELPER_SRC, *map(str, args)])
        status, out, err = self.run(cmd, timeout_s)
        lines = out.strip().splitlines()
        if status != 0 or not lines:
            raise HostError(
                f"{self.name}: helper {args[0]!r} failed with status {status} using "
                f"{' '.join(self.python)!r}: {(err or out).strip()[-500:]}",
                host=self.name,
                log_tail=err[-2000:],
            )
        return json.loads(lines[-1])

    def home(self) -> str:
        if self._home is None:
            status, out, err = self.run('printf "%s" "$HOME"')
            if status != 0 or not out.startswith("/"):
                raise HostError(f"{self.name}: cannot find the remote home directory: {err.strip()}", host=self.name)
            self._home = out
        return self._home

    def remote_path(self, path: str) -> str:
        """``~`` and relative paths resolved against the remote home (no shell expansion needed later)."""
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return self.home().rstrip("/") + "/" + path[2:]
        if not path.startswith("/"):
            return self.home().rstrip("/") + "/" + path
        return path

    @property
    def workdir(self) -> str:
        return self.remote_path(self.cfg.workdir or "~/.sglang-optimizer").rstrip("/") or "/"

    @property
    def run_dir(self) -> str:
        return f"{self.workdir}/run"

    # ------------------------------------------------------------------------------------------------ Host

    def pick_port(self) -> int:
        if self.cfg.server_port == "auto":
            return int(self._helper("freeport", self.cfg.server_host))  # type: ignore[arg-type]
        return int(self.cfg.server_port or 30000)

    def start(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, port: int) -> ServerHandle:
        argv = self._checked_argv(argv)
        full_env = dict(self.env)
        full_env.update({str(k): str(v) for k, v in env.items()})
        for k in full_env:
            if not k or "=" in k or "\0" in k:
                raise ValueError(f"invalid environment variable name {k!r}")
        env_args = ["env", *(f"{k}={v}" for k, v in full_env.items())]

        run_id = uuid.uuid4().hex
        wd, run_dir = self.workdir, self.run_dir
        logs = f"{wd}/logs"
        remote_log = f"{logs}/{port}-{run_id}.log"
        pid_file = f"{run_dir}/{port}-{run_id}.pid"
        exit_file = f"{run_dir}/{port}-{run_id}.exit"
        json_file = f"{run_dir}/{port}.json"
        extra = {
            "argv": argv,
            "run_id": run_id,
            "port": port,
            "bind_host": self.cfg.server_host,
            "log_path": remote_log,
            "exit_file": exit_file,
            "created": time.time(),
        }
        py = " ".join(q(a) for a in self.python)
        helper = f"{py} -c {q(_HELPER_SRC)}"
        # One round trip: check the host faults first (exit 127: the command is missing, with the same
        # environment and PATH the server gets; 97: the helper's Python failed; 98: the port is taken), then
        # launch the wrapper detached, wait for its pid file and record the pid file JSON.
        check = " ".join(q(a) for a in [*env_args, "sh", "-c", 'command -v "$1"', "sh", argv[0]])
        launch = (
            f"{check} >/dev/null 2>&1 || exit 127; "
            f"free=$({helper} portfree {q(self.cfg.server_host)} {int(port)}) || exit 97; "
            '[ "$free" = true ] || exit 98; '
            f"mkdir -p {q(run_dir)} {q(logs)} || exit 1; "
            f"{{ setsid sh -c {q(_WRAPPER)} sh {q(pid_file)} {q(exit_file)} "
            f"{' '.join(q(a) for a in [*env_args, *argv])} </dev/null >{q(remote_log)} 2>&1 & }}; "
            f"i=0; while [ ! -s {q(pid_file)} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
            f'{helper} record "$(cat {q(pid_file)})" {q(json.dumps(extra))} {q(json_file)}'
        )
        status, out, err = self.run(launch, 60.0)
        if status == 127:
            raise HostError(f"{self.name}: command not found on {self.cfg.address}: {argv[0]!r}", host=self.name)
        if status == 98:
            raise HostError(
                f"{self.name}: port {port} on {self.cfg.address} ({self.cfg.server_host}) is taken", host=self.name
            )
        if status == 97:
            raise HostError(
                f"{self.name}: cannot run {' '.join(self.python)!r} on {self.cfg.address}: {err.strip()[-500:]}",
                host=self.name,
            )
        lines = out.strip().splitlines()
        if status != 0 or not lines:
            raise HostError(f"{self.name}: could not start the server: {(err or out).strip()[-500:]}", host=self.name)
        rec = json.loads(lines[-1])
        handle = SSHServerHandle(self, rec, Path(log_path), remote_log, pid_file, exit_file, json_file, port)
        self._current = handle
        return handle

    def reap_orphans(self) -> list[int]:
        cur = self._current
        skip = str(cur.pgid) if cur is not None and not cur._stopped else ""
        pgids = self._helper("reap", self.run_dir, 30.0, PORT_WAIT_S, skip, timeout_s=300.0)
        return [int(p) for p in pgids]  # type: ignore[union-attr]

    def close(self) -> None:
        cur = self._current
        if cur is not None:
            cur._detach()
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __repr__(self) -> str:
        return f"SSHHost({self.name!r}, {self._where()})"


def _status(word: str) -> int:
    """The wrapper's exit-status file content as a Popen-style return code."""
    if word.isdigit():
        n = int(word)
        return -(n - 128) if n > 128 else n  # the shell reports death by signal N as 128+N
    return -9  # gone without an exit status: the wrapper itself was SIGKILLed


class SSHServerHandle(ServerHandle):
    def __init__(
        self,
        host: SSHHost,
        rec: dict,
        log_path: Path,
        remote_log: str,
        pid_file: str,
        exit_file: str,
        json_file: str,
        port: int,
    ) -> None:
        self._host = host
        self.pid = int(rec["pid"])
        self.pgid = int(rec["pgid"])
        self.run_id = str(rec.get("run_id", ""))
        self.port = port
        self.log_path = log_path
        self.remote_log = remote_log
        self._pid_file, self._exit_file, self._json_file = pid_file, exit_file, json_file
        self._rc: int | None = None
        self._checked = 0.0
        self._stopped = False
        self._lock = threading.Lock()
        self._tail = _LogTail(host, remote_log, log_path)
        self._forward: _Forward | None = None
        cfg = host.cfg
        if cfg.forward_port:
            dest = _proc._connect_host(cfg.server_host)
            self._forward = _Forward(host, dest, port)
            self.base_url = f"http://127.0.0.1:{self._forward.port}"
        else:
            addr = f"[{cfg.address}]" if ":" in (cfg.address or "") else cfg.address
            self.base_url = f"http://{addr}:{port}"

    def returncode(self) -> int | None:
        if self._rc is not None:
            return self._rc
        if time.monotonic() - self._checked < 0.25:  # polled in loops: at most 4 round trips a second
            return None
        pid = self.pid
        cmd = (
            f"if [ -s {q(self._exit_file)} ]; then cat {q(self._exit_file)}; "
            f"elif s=$(cat /proc/{pid}/stat 2>/dev/null); then s=${{s##*) }}; "
            'case "$s" in Z*|X*) echo gone;; *) echo alive;; esac; else echo gone; fi'
        )
        status, out, _ = self._host.run(cmd)
        self._checked = time.monotonic()
        word = out.strip()
        if word == "alive":
            return None
        if status != 0 or not (word == "gone" or word.isdigit()):
            # The check itself did not run (a cut connection prints nothing): the host's fault, not a crash of
            # the server, which must not be blamed on the configuration.
            raise HostError(
                f"lost contact with {self._host.name} while checking server {self.pgid} "
                f"(status {status}, output {word[:80]!r})",
                host=self._host.name,
            )
        self._rc = _status(word)
        return self._rc

    def stop(self, timeout_s: float = 30.0) -> None:
        with self._lock:
            if self._stopped:
                return
            host = self._host
            try:
                # One round trip: stop the group on the host (TERM, KILL after timeout_s, then wait for the
                # port), print the wrapper's exit status if it wrote one, and remove this run's files.
                cmd = (
                    f"{' '.join(q(a) for a in host.python)} -c {q(_HELPER_SRC)} stop {self.pgid} "
                    f"{float(timeout_s)} {q(host.cfg.server_host)} {int(self.port)} {PORT_WAIT_S}"
                    f"{' ' + q(self.remote_log) if self.fast_stop else ''}; "
                    f"cat {q(self._exit_file)} 2>/dev/null || echo none; "
                    f"rm -f {q(self._json_file)} {q(self._pid_file)} {q(self._pid_file + '.tmp')} "
                    f"{q(self._exit_file)}"
                )
                status, out, err = host.run(cmd, timeout_s + PORT_WAIT_S + 60.0)
                lines = out.strip().splitlines()
                if len(lines) < 2 or not lines[0].startswith("{"):
                    raise HostError(
                        f"{host.name}: stopping pgid {self.pgid} failed: {(err or out).strip()[-500:]}", host=host.name
                    )
                res = json.loads(lines[0])
                if self._rc is None:
                    self._rc = _status(lines[1].strip())
            finally:
                self._detach()
            self._stopped = True
            if host._current is self:
                host._current = None
        if not res.get("port_free", True):  # type: ignore[union-attr]
            raise HostError(
                f"{self._host.name}: port {self.port} still in use after the server's group was stopped",
                host=self._host.name,
            )

    def _detach(self) -> None:
        """Stop streaming the log (after a last read) and close the port forward."""
        self._tail.close()
        if self._forward is not None:
            self._forward.close()

    def __repr__(self) -> str:
        return f"SSHServerHandle({self._host.name!r}, pgid={self.pgid}, url={self.base_url!r})"


class _LogTail:
    """Copies a growing remote file into a local file over SFTP, in a background thread."""

    def __init__(self, host: SSHHost, remote: str, local: Path) -> None:
        self.host, self.remote, self.local = host, remote, local
        local.parent.mkdir(parents=True, exist_ok=True)
        self.offset = 0
        self._stop = threading.Event()
        self._sftp: paramiko.SFTPClient | None = None
        self.use_sftp = True
        self._out = open(local, "ab", buffering=0)
        self._thread = threading.Thread(target=self._loop, name=f"logtail-{host.name}", daemon=True)
        self._thread.start()

    def _read_new(self) -> bool:
        """Append what is new; True if anything was read."""
        if not self.use_sftp:
            return self._read_new_exec()
        if self._sftp is None:
            transport = self.host._transport()
            try:
                self._sftp = paramiko.SFTPClient.from_transport(transport)
            except paramiko.SSHException as e:
                if not transport.is_active():
                    raise
                # The host has no SFTP subsystem: read with tail(1) over exec channels instead.
                log.info("%s: no SFTP (%s); tailing the log with exec channels", self.host.name, e)
                self.use_sftp = False
                return self._read_new_exec()
            assert self._sftp is not None
        size = self._sftp.stat(self.remote).st_size or 0
        if size < self.offset:  # truncated: start over
            self.offset = 0
        if size == self.offset:
            return False
        with self._sftp.open(self.remote, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(size - self.offset, CHUNK))
        return self._append(data)

    def _read_new_exec(self) -> bool:
        status, out, err = self.host.run_bytes(f"tail -c +{self.offset + 1} {q(self.remote)} | head -c {CHUNK}")
        if status != 0:
            raise OSError(f"tail failed ({status}): {err.decode('utf-8', 'replace').strip()}")
        return self._append(out)

    def _append(self, data: bytes) -> bool:
        if data:
            self._out.write(data)
            self.offset += len(data)
        return bool(data)

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                more = self._read_new()
                failures = 0
            except (paramiko.SSHException, OSError, EOFError, HostError) as e:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("%s: log tail of %s: %s (retrying)", self.host.name, self.remote, e)
                self._close_sftp()
                more = False
                self._stop.wait(min(5.0, 0.5 * failures))
                continue
            if not more:
                self._stop.wait(TAIL_POLL_S)
        try:  # a final read so the local log ends like the remote one
            while self._read_new():
                pass
        except (paramiko.SSHException, OSError, EOFError, HostError):
            pass
        self._close_sftp()
        self._out.close()

    def _close_sftp(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: BLE001 - closing a broken channel
                pass
            self._sftp = None

    def close(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)


class _Forward:
    """A local listening socket on 127.0.0.1 whose connections are bridged to ``dest:port`` on the host through
    ``direct-tcpip`` channels (what ``ssh -L`` does)."""

    def __init__(self, host: SSHHost, dest: str, dest_port: int) -> None:
        self.host, self.dest, self.dest_port = host, dest, dest_port
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.5)
        self.port = int(self._sock.getsockname()[1])
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"forward-{host.name}-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            threading.Thread(target=self._bridge, args=(conn, peer), daemon=True).start()

    def _bridge(self, conn: socket.socket, peer: tuple) -> None:
        try:
            chan = self.host._transport().open_channel(
                "direct-tcpip", (self.dest, self.dest_port), peer[:2], timeout=self.host.cfg.connect_timeout_s
            )
        except (paramiko.SSHException, OSError, EOFError, HostError) as e:
            log.debug("%s: forward to %s:%d refused: %s", self.host.name, self.dest, self.dest_port, e)
            conn.close()  # the client sees a closed connection, like a refused port
            return
        with self._lock:
            self._conns.add(conn)
        try:
            while not self._closed.is_set():
                r, _, _ = select.select([conn, chan], [], [], 0.5)
                if conn in r:
                    data = conn.recv(65536)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in r:
                    data = chan.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            chan.close()
            conn.close()
            with self._lock:
                self._conns.discard(conn)

    def close(self) -> None:
        self._closed.set()
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            for c in list(self._conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
