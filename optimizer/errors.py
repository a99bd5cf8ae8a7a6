"""The optimizer's exceptions.

    OptimizerError
    ├── ConfigError        bad user input (search space, study or hosts file, CLI); names file, key, allowed
    ├── HostError          the host is at fault, not the configuration: unreachable, port taken, command
    │                      missing. The trial is re-queued on another host; the configuration stays feasible.
    └── ServerError        the configuration is at fault: the server could not serve it
        ├── BootError      crashed, printed a fatal line, or hung while booting (kind: crash|fatal|timeout|invalid)
        └── ServingError   died or broke while the benchmark ran

A failed trial is data: the driver turns ServerError into a constraint violation and HostError into a
re-queue. Neither ever ends a study.
"""

from __future__ import annotations


class OptimizerError(Exception):
    """Base of every error the optimizer raises on purpose."""


class ConfigError(OptimizerError):
    """Bad user input. The message names the file, the key and what is allowed."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None) -> None:
        where = ""
        if file:
            where = f"{file}: "
        if key:
            where += f"{key}: "
        super().__init__(where + message)
        self.file = file
        self.key = key


class HostError(OptimizerError):
    """The host cannot run a server right now (not the configuration's fault)."""

    def __init__(self, message: str, *, host: str = "", log_tail: str = "") -> None:
        super().__init__(message)
        self.host = host
        self.log_tail = log_tail


class ServerError(OptimizerError):
    """The server failed because of the configuration it was given."""

    kind = "server"

    def __init__(self, reason: str, *, log_tail: str = "", kind: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail
        if kind:
            self.kind = kind


class BootError(ServerError):
    """The server never became ready: kind is crash, fatal, timeout or invalid."""

    kind = "boot"


class ServingError(ServerError):
    """The server stopped serving during the benchmark."""

    kind = "serving"
