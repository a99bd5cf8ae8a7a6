"""The local host: the server is a subprocess of the driver, in its own process group (session)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from optimizer.errors import HostError
from optimizer.hosts import _proc
from optimizer.hosts.base import Host, ServerHandle

log = logging.getLogger(__name__)

#: How long ``stop`` waits for the port to refuse after the group is gone (SGLang: ~5.5 s after SIGTERM, and the
#: group is empty before that; this only matters for children that left the group while holding the port).
PORT_WAIT_S = 30.0


def _url_host(bind_host: str) -> str:
    host = _proc._connect_host(bind_host)
    return f"[{host}]" if ":" in host else host


class LocalServerHandle(ServerHandle):
    def __init__(self, host: LocalHost, proc: subprocess.Popen, log_path: Path, port: int, pid_file: Path):
        self._host = host
        self._proc = proc
        self.log_path = log_path
        self.port = port
        self.pid = proc.pid
        self.pgid = proc.pid  # start_new_session: the child is the leader of a new session and group
        self.pid_file = pid_file
        self.base_url = f"http://{_url_host(host.server_host)}:{port}"
        self._lock = threading.Lock()
        self._stopped = False

    def returncode(self) -> int | None:
        return self._proc.poll()

    def stop(self, timeout_s: float = 30.0) -> None:
        with self._lock:
            if self._stopped:
                return
            if _proc.group_alive(self.pgid):
                fast_log = self.log_path if self.fast_stop else None
                offset = _proc.log_size(fast_log)
                _proc.kill_group(self.pgid, 15)
                # poll: reap the leader so it does not linger as a zombie
                _proc.wait_group_gone(self.pgid, timeout_s, fast_log=fast_log, offset=offset, poll=self._proc.poll)
                if _proc.group_alive(self.pgid):
                    log.warning(
                        "%s: process group %d still alive %.0f s after SIGTERM; SIGKILL",
                        self._host.name,
                        self.pgid,
                        timeout_s,
                    )
                    _proc.stop_group(self.pgid, 0.0)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - the leader was SIGKILLed above
                pass
            free = _proc.wait_port_free(self._host.server_host, self.port, PORT_WAIT_S)
            self.pid_file.unlink(missing_ok=True)
            self._stopped = True
            if self._host._current is self:
                self._host._current = None
        if not free:
            raise HostError(
                f"{self._host.name}: port {self.port} still in use after the server's group was stopped",
                host=self._host.name,
            )

    def __repr__(self) -> str:
        return f"LocalServerHandle(pgid={self.pgid}, url={self.base_url!r})"


class LocalHost(Host):
    """Runs the server as a subprocess of this process, with pid files under ``state_dir/run``.

    ``python`` is the command prefix used to run Python on this host (``launch_argv`` prepends it); ``env`` and
    ``cuda_visible_devices`` are added to the driver's environment for every server, and the ``env`` passed to
    ``start`` is added on top. ``server_port`` is a fixed port or ``"auto"`` (a free port per trial)."""

    def __init__(
        self,
        name: str = "local",
        state_dir: Path | str = ".",
        *,
        python: Sequence[str] | str | None = None,
        env: Mapping[str, str] | None = None,
        cuda_visible_devices: str | None = None,
        server_port: int | str = "auto",
        server_host: str = "127.0.0.1",
        cwd: Path | str | None = None,
    ) -> None:
        import shlex

        self.name = name
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.run_dir = self.state_dir / "run"
        if python is None:
            self.python = [sys.executable]
        elif isinstance(python, str):
            self.python = shlex.split(python)
        else:
            self.python = list(python)
        self.env = dict(env or {})
        if cuda_visible_devices is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = str(cuda_visible_devices)
        self.server_port = server_port
        self.server_host = server_host
        self.cwd = None if cwd is None else Path(cwd)
        self._current: LocalServerHandle | None = None

    # -- helpers beyond the Host interface

    def launch_argv(self, *args: str) -> list[str]:
        """``[*python, *args]``, e.g. ``host.launch_argv("-m", "sglang.launch_server", "--port", "30000")``."""
        return [*self.python, *args]

    def pid_files(self) -> list[Path]:
        return sorted(self.run_dir.glob("*.json"))

    # -- Host

    def pick_port(self) -> int:
        if self.server_port == "auto":
            return _proc.free_port(self.server_host)
        return int(self.server_port)

    def start(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, port: int) -> ServerHandle:
        argv = self._checked_argv(argv)
        full_env = dict(os.environ)
        full_env.update(self.env)
        full_env.update({str(k): str(v) for k, v in env.items()})
        if shutil.which(argv[0], path=full_env.get("PATH")) is None:
            raise HostError(f"{self.name}: command not found: {argv[0]!r}", host=self.name)
        if not _proc.port_free(self.server_host, port):
            raise HostError(f"{self.name}: port {port} on {self.server_host} is taken", host=self.name)

        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pid_file = self.run_dir / f"{port}.json"
        run_id = uuid.uuid4().hex
        full_env[_proc.RUN_ID_ENV] = run_id
        # Intent first: a driver killed before the pid is recorded still leaves what finds the server.
        _proc.write_json_atomic(
            pid_file,
            {
                "intent": True,
                "run_id": run_id,
                "port": port,
                "boot_id": _proc.boot_id(),
                "bind_host": self.server_host,
                "driver_pid": os.getpid(),
            },
        )
        with open(log_path, "ab", buffering=0) as logf:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=self.cwd,
                    start_new_session=True,  # own session and process group: stop() signals the whole group
                    close_fds=True,
                )
            except OSError as e:
                pid_file.unlink(missing_ok=True)
                raise HostError(f"{self.name}: cannot start {argv[0]!r}: {e}", host=self.name) from e
        rec = _proc.pid_record(
            proc.pid,
            argv=argv,
            run_id=run_id,
            port=port,
            bind_host=self.server_host,
            log_path=str(log_path.absolute()),
            driver_pid=os.getpid(),
            created=time.time(),
        )
        _proc.write_json_atomic(pid_file, rec)
        handle = LocalServerHandle(self, proc, log_path, port, pid_file)
        self._current = handle
        return handle

    def reap_orphans(self) -> list[int]:
        cur = self._current
        skip = (cur.pgid,) if cur is not None and not cur._stopped else ()
        return _proc.reap(self.run_dir, timeout_s=30.0, port_timeout_s=PORT_WAIT_S, skip_pgids=skip)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"LocalHost({self.name!r}, state_dir={str(self.state_dir)!r})"
