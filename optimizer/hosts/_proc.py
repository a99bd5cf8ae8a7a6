"""Process-group, pid-file and port helpers shared by the local and the SSH host.

This module imports nothing but the standard library and nothing from the optimizer: the SSH host sends its
source to the remote machine and runs it there with ``python -c <source> <command> <args...>`` (see ``main``),
so the local and the remote side use the same code to check ports, find a process group and reap orphans.

Pid files (``<state dir>/run/<port>.json``) record the server's pid and pgid together with the process start
time from ``/proc/<pid>/stat`` and the kernel boot id: a later run only kills a group whose leader still has the
recorded start time (or, when the leader is gone, members that started after it), so a reused pid is never hit.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POLL_S = 0.05
#: The launcher's lines once its scheduler has exited after SIGTERM (``optimizer.sglang.logs.SCHEDULER_GONE_LINES``;
#: repeated here because this module runs on remote hosts with the standard library alone; a test keeps them equal).
SCHEDULER_GONE_LINES = (
    "Sleeping 5 seconds before crash diagnostics",
    "No live scheduler processes found",
)


# --------------------------------------------------------------------------------------------- /proc readers


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start time in clock ticks since boot) of ``pid``, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[2]), int(rest[19])
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    st = proc_stat(pid)
    return None if st is None else st[2]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def group_members(pgid: int, *, min_start: int | None = None) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``.

    Zombies are left out on purpose: an orphaned grandchild whose new parent never reaps it would otherwise keep
    a dead group "alive" forever."""
    if pgid <= 0:
        return []
    try:
        os.killpg(pgid, 0)  # fast path: no process at all in the group
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is None or st[1] != pgid or st[0] in ("Z", "X"):
            continue
        if min_start is not None and st[2] < min_start:
            continue
        out.append(int(name))
    return out


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def kill_group(pgid: int, sig: int) -> None:
    if pgid <= 1:  # never signal "every process" (-1) or our own group by accident (0)
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def scheduler_gone(log_path: str | Path | None, offset: int) -> bool:
    """Whether the server's log, past ``offset`` (its size at SIGTERM), says the scheduler has exited and the
    launcher only sleeps before its crash diagnostics (``optimizer.sglang.logs.SCHEDULER_GONE_LINES``)."""
    if log_path is None:
        return False
    try:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            text = fh.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return False
    return any(line in text for line in SCHEDULER_GONE_LINES)


def log_size(log_path: str | Path | None) -> int:
    try:
        return os.path.getsize(log_path) if log_path is not None else 0
    except OSError:
        return 0


def wait_group_gone(
    pgid: int,
    timeout_s: float,
    *,
    fast_log: str | Path | None = None,
    offset: int = 0,
    poll: Callable[[], Any] | None = None,
) -> bool:
    """Wait up to ``timeout_s`` for the group to be gone after SIGTERM. With ``fast_log`` (the fast stop), SIGKILL
    the group as soon as that log shows the scheduler has exited. True when the group is gone."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    while time.monotonic() < deadline:
        if poll is not None:
            poll()
        if not group_alive(pgid):
            return True
        if fast_log is not None and scheduler_gone(fast_log, offset):
            kill_group(pgid, signal.SIGKILL)
            fast_log = None
        time.sleep(POLL_S)
    return not group_alive(pgid)


def stop_group(pgid: int, timeout_s: float = 30.0, fast_log: str | Path | None = None) -> bool:
    """SIGTERM the group, SIGKILL whatever is left after ``timeout_s`` (or, with ``fast_log``, as soon as that log
    says the scheduler has exited); True when the group is gone."""
    if not group_alive(pgid):
        return True
    offset = log_size(fast_log)
    kill_group(pgid, signal.SIGTERM)
    if wait_group_gone(pgid, timeout_s, fast_log=fast_log, offset=offset):
        return True
    for _ in range(3):
        kill_group(pgid, signal.SIGKILL)
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            if not group_alive(pgid):
                return True
            time.sleep(POLL_S)
    return not group_alive(pgid)


# --------------------------------------------------------------------------------------------------- ports


def _connect_host(bind_host: str) -> str:
    """Where to connect to reach a server bound to ``bind_host`` from the same machine."""
    if bind_host in ("", "0.0.0.0", "*"):
        return "127.0.0.1"
    if bind_host == "::":
        return "::1"
    return bind_host


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def port_free(bind_host: str, port: int) -> bool:
    """True when nothing listens on ``port`` and a server could bind it on ``bind_host``.

    Binds with SO_REUSEADDR (as uvicorn does), so sockets of a stopped server in TIME_WAIT do not count as busy;
    a connect test catches a listener bound to another address of the machine."""
    target = _connect_host(bind_host)
    with socket.socket(_family(target), socket.SOCK_STREAM) as c:
        c.settimeout(1.0)
        try:
            c.connect((target, port))
            return False  # somebody answers
        except OSError:
            pass
    host = "0.0.0.0" if bind_host in ("", "*") else bind_host
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def wait_port_free(bind_host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if port_free(bind_host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def free_port(bind_host: str = "127.0.0.1") -> int:
    """A port the kernel considers free right now on ``bind_host``."""
    host = "0.0.0.0" if bind_host in ("", "*") else bind_host
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# ----------------------------------------------------------------------------------------------- pid files


def pid_record(pid: int, **extra: object) -> dict:
    return {"pid": pid, "pgid": pid, "start_time": start_time(pid), "boot_id": boot_id(), **extra}


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, path)


def record_members(rec: dict) -> list[int]:
    """Live members of the group a pid-file record describes, or [] when it is gone or not ours any more."""
    try:
        pgid = int(rec["pgid"])
        pid = int(rec["pid"])
        started = rec.get("start_time")
    except (KeyError, TypeError, ValueError):
        return []
    if pgid <= 1 or started is None:
        return []
    if rec.get("boot_id") and rec["boot_id"] != boot_id():
        return []  # the machine rebooted since: every pid in the file belongs to someone else
    st = proc_stat(pid)
    if st is not None and st[0] not in ("Z", "X"):
        if st[2] != int(started):
            return []  # the pid was reused by an unrelated process
        return group_members(pgid)
    # Leader gone: a group id cannot be handed out again while the group has members, so members that started
    # no earlier than the leader are the server's children.
    return group_members(pgid, min_start=int(started))


#: Environment variable carrying a launch's run id into the server: how an intent record (written before the
#: server's pid is known) finds its server if the driver died in between. Only the optimizer plants it.
RUN_ID_ENV = "SGLANG_OPTIMIZER_RUN_ID"


def groups_with_run_id(run_id: str) -> list[int]:
    """Process groups of the live processes whose environment carries ``RUN_ID_ENV=run_id``."""
    token = f"{RUN_ID_ENV}={run_id}".encode()
    groups = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if token not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        st = proc_stat(int(entry))
        if st is not None and st[0] not in ("Z", "X") and st[1] > 1:
            groups.add(st[1])
    return sorted(groups)


def reap(
    run_dir: Path, timeout_s: float = 30.0, port_timeout_s: float = 30.0, skip_pgids: tuple[int, ...] = ()
) -> list[int]:
    """Stop the servers recorded in ``run_dir/*.json``, wait for their ports, remove the files; return pgids.

    ``skip_pgids``: groups the caller is running right now (never reaped)."""
    reaped: list[int] = []
    if not run_dir.is_dir():
        return reaped
    for path in sorted(run_dir.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if rec.get("pgid") in skip_pgids:
            continue
        if "pid" not in rec and rec.get("run_id") and rec.get("boot_id") == boot_id():
            # An intent record: the driver died between starting the server and recording its pid.
            for pgid in groups_with_run_id(str(rec["run_id"])):
                if pgid not in skip_pgids:
                    stop_group(pgid, timeout_s)
                    reaped.append(pgid)
            path.unlink(missing_ok=True)
            continue
        if record_members(rec):
            pgid = int(rec["pgid"])
            stop_group(pgid, timeout_s)
            reaped.append(pgid)
            port = rec.get("port")
            if isinstance(port, int):
                wait_port_free(str(rec.get("bind_host") or "127.0.0.1"), port, port_timeout_s)
        path.unlink(missing_ok=True)
    return reaped


# ------------------------------------------------------------------------------------------ remote commands


def main(args: list[str]) -> int:
    """``<command> <args...>``: one JSON line on stdout. Used by the SSH host on the remote machine."""
    cmd, rest = args[0], args[1:]
    if cmd == "portfree":
        out: object = port_free(rest[0], int(rest[1]))
    elif cmd == "freeport":
        out = free_port(rest[0])
    elif cmd == "record":  # record <pid> <json extra> <path>: wait for the pid file, write the record
        pid = int(rest[0])
        rec = pid_record(pid, **json.loads(rest[1]))
        write_json_atomic(Path(rest[2]), rec)
        out = rec
    elif cmd == "alive":
        out = group_alive(int(rest[0]))
    elif cmd == "stop":  # stop <pgid> <timeout_s> <bind_host> <port> <port_timeout_s> [<log for a fast stop>]
        gone = stop_group(int(rest[0]), float(rest[1]), fast_log=rest[5] if len(rest) > 5 else None)
        out = {"gone": gone, "port_free": wait_port_free(rest[2], int(rest[3]), float(rest[4]))}
    elif cmd == "reap":  # reap <run_dir> <timeout_s> <port_timeout_s> [<pgid>,<pgid>... to skip]
        skip = tuple(int(p) for p in rest[3].split(",") if p) if len(rest) > 3 else ()
        out = reap(Path(rest[0]), float(rest[1]), float(rest[2]), skip_pgids=skip)
    else:
        print(json.dumps({"error": f"unknown command {cmd!r}"}))
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":  # pragma: no cover - run remotely through ``python -c``
    sys.exit(main(sys.argv[1:]))
