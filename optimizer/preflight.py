"""Try the hosts before spending a launch: each host is reached, the server command's program (and the Python
module it runs with ``-m``) is there, and a fixed server port is free. Every problem is collected and raised as one
``OptimizerError`` before the study is created, so an unreachable host, a typo in ``--server-command`` or a port
another server holds ends the run at once with a non-zero exit, instead of quarantining every host one launch at a
time and exiting 0.
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .errors import HostError, OptimizerError
from .hosts.config import HostConfig, state_dir_for

CHECK_TIMEOUT_S = 30.0

#: Exit statuses of the check script (``_script``) and what they mean.
_MISSING_PROGRAM, _MISSING_MODULE, _PORT_TAKEN = 3, 4, 5


def _argv(command: Sequence[str], python: str | None) -> list[str]:
    out: list[str] = []
    for w in command:
        out += shlex.split(python or "python3") if w == "{python}" else [w]
    return out


def _module(argv: Sequence[str]) -> str | None:
    """The top-level package a ``python -m pkg.mod`` command runs (found without importing it), else None."""
    if "-m" in argv[:-1]:
        return str(argv[argv.index("-m") + 1]).split(".")[0]
    return None


def _script(argv: Sequence[str], port: int | None, bind_host: str, python: str = "python3") -> str:
    prog = argv[0]
    q = shlex.quote
    lines = [f"command -v {q(prog)} >/dev/null 2>&1 || {{ echo {q(f'program not found: {prog}')}; exit 3; }}"]
    mod = _module(argv)
    if mod is not None:
        probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 4)"
        py = " ".join(q(a) for a in argv[: argv.index("-m")])
        lines.append(f"{py} -c {q(probe)} {q(mod)} || {{ echo {q(f'No module named {mod!r} for {prog}')}; exit 4; }}")
    if port is not None:
        probe = (
            "import socket, sys; s = socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2])))"
        )
        lines.append(
            f"{python} -c {q(probe)} {q(bind_host)} {port} 2>/dev/null || "
            f"{{ echo {q(f'port {port} is taken on {bind_host}')}; exit 5; }}"
        )
    return "\n".join(lines)


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _check_local(h: HostConfig, argv: list[str]) -> str | None:
    port = h.server_port if isinstance(h.server_port, int) else None
    if port is not None and not _port_free(h.server_host, port):
        return f"port {port} is taken on {h.server_host} (another server holds it; stop it or set server_port: auto)"
    env = {**os.environ, **h.env}
    try:
        p = subprocess.run(
            ["sh", "-c", _script(argv, None, h.server_host)],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return f"checking the server command took over {CHECK_TIMEOUT_S:.0f} s"
    return None if p.returncode == 0 else (p.stdout.strip() or p.stderr.strip() or f"status {p.returncode}")


def _check_ssh(h: HostConfig, argv: list[str], study_dir: Path) -> str | None:
    from .hosts.ssh import SSHHost  # paramiko only for SSH hosts

    # paramiko logs a failed connection with a traceback from its transport thread; the HostError says it once.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    host = SSHHost(h, state_dir_for(study_dir, h))
    try:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in h.env.items())
        port = h.server_port if isinstance(h.server_port, int) else None
        status, out, err = host.run(
            (f"export {env}; " if env else "") + _script(argv, port, h.server_host, h.python or "python3"),
            timeout_s=CHECK_TIMEOUT_S,
        )
    except HostError as exc:
        return str(exc).removeprefix(f"{h.name}: ")
    finally:
        try:
            host.close()
        except Exception:  # noqa: BLE001 - closing a connection that never opened
            pass
    return None if status == 0 else (out.strip() or err.strip() or f"status {status}")


def check_hosts(command: Sequence[str], hosts: Sequence[HostConfig], study_dir: Path) -> None:
    """Raise OptimizerError naming every host that cannot run the server command, and why."""
    problems = []
    for h in hosts:
        argv = _argv(command, h.python)
        why = _check_local(h, argv) if h.type == "local" else _check_ssh(h, argv, study_dir)
        if why:
            problems.append(f"{h.name}: {why}")
    if problems:
        raise OptimizerError(
            "checked before the study starts, no launch spent:\n  "
            + "\n  ".join(problems)
            + f"\n  server command: {' '.join(command)}"
        )
