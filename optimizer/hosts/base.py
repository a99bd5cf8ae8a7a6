"""What a host is: somewhere one server runs at a time.

A host starts a command in its own process group, makes the server's log available as a local file (streamed
back for remote hosts), tells whether the process is still alive, and stops the whole group, waiting until the
port is free. Readiness, benchmarking and the study never care whether the host is local or remote.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from pathlib import Path

from optimizer.errors import HostError


class ServerHandle(abc.ABC):
    """A server process started by a host."""

    #: URL the server answers on, e.g. ``http://127.0.0.1:30000`` (for SSH: a forwarded local port or the
    #: host's address, whichever the host chose).
    base_url: str
    #: Local file that receives the server's stdout+stderr as it is written.
    log_path: Path
    #: Process group id of the server on its host (remote pgid for SSH).
    pgid: int
    #: The fast stop (the search boot): ``stop`` SIGKILLs the group as soon as the log says the scheduler has
    #: exited, instead of waiting out SGLang's 5 s sleep before crash diagnostics.
    fast_stop: bool = False

    @abc.abstractmethod
    def returncode(self) -> int | None:
        """None while the server process is alive, else its exit status."""

    @abc.abstractmethod
    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the process group, SIGKILL after ``timeout_s``, then wait until the port is free.

        Idempotent; never raises for a server that is already gone."""


class Host(abc.ABC):
    """One machine that runs one server at a time."""

    name: str
    _current: ServerHandle | None = None

    def _checked_argv(self, argv: Sequence[str]) -> list[str]:
        """argv as strings, refused when empty or while this host's previous server still runs."""
        out = [str(a) for a in argv]
        if not out:
            raise ValueError("empty argv")
        cur = self._current
        if cur is not None and cur.returncode() is None:
            raise HostError(
                f"{self.name}: a server is already running (pgid {cur.pgid}); one server per host", host=self.name
            )
        return out

    @abc.abstractmethod
    def start(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, port: int) -> ServerHandle:
        """Start ``argv`` (already including ``--host``/``--port``) with ``env`` added to the host's environment.

        Raises HostError when the host is at fault (unreachable, port taken, command missing)."""

    @abc.abstractmethod
    def pick_port(self) -> int:
        """A port for the next server on this host."""

    @abc.abstractmethod
    def reap_orphans(self) -> list[int]:
        """Stop servers a dead run left on this host, found through their pid files; return their pgids."""

    def close(self) -> None:  # pragma: no cover - nothing to release by default
        """Release connections."""
