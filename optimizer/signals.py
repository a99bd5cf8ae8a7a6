"""SIGTERM handled as Ctrl-C, with either executor.

``kill``, ``timeout``, CI runners, Kubernetes and ``ray job stop`` end a process with SIGTERM. Python's default for
it is to die at once, which would leave the trial's server running (it lives in its own process group) and the
trial RUNNING in storage until the next run cleans up. So while a command runs, SIGTERM is handed to whatever
handles SIGINT at that moment: the driver's own handler during the study (the first signal stops the servers and
records the running trials, a second forces the stop), ``KeyboardInterrupt`` before and after it (the commands'
Ctrl-C paths). A run that SIGTERM stopped exits with 143 (128 + SIGTERM, what a shell reports for a process
SIGTERM killed), not Ctrl-C's 130, so a caller can tell who stopped it.

Ray's ``ray.init`` replaces the handler in the driver: in Python with ``sys.exit(15)`` and, in its C++ core
worker, with a failure handler that prints a stack dump (``*** SIGTERM received at time=...``). Python's
``signal.signal`` replaces both, so the executor calls :func:`reclaim` right after ``ray.init``. A SIGTERM during
``ray.init`` itself (a few seconds, before any server starts) still meets Ray's handler.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

EXIT_SIGTERM = 128 + signal.SIGTERM  # 143
EXIT_CTRL_C = 130  # what the commands return after Ctrl-C

_active: SigtermAsCtrlC | None = None


def _say(text: str) -> None:
    # os.write, not print: a handler may run while the main thread is inside print() on the same stream
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


class SigtermAsCtrlC:
    """``with SigtermAsCtrlC() as term: return term.run(main, argv)``. Installs the handler in the main thread
    only (signals are delivered there) and puts the previous one back on exit."""

    def __init__(self) -> None:
        self.received = 0
        self.previous: Any = None
        self.installed = False

    def __enter__(self) -> SigtermAsCtrlC:
        global _active
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self.handle)
            self.installed = True
            _active = self
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        global _active
        if self.installed:
            signal.signal(signal.SIGTERM, self.previous if self.previous is not None else signal.SIG_DFL)
            self.installed = False
        if _active is self:
            _active = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.received == 1:
            _say(
                "SIGTERM: stopping as on Ctrl-C (servers stopped, running trials recorded; "
                "a second SIGTERM or Ctrl-C forces; exit code 143)"
            )
        else:
            _say("SIGTERM again: forcing the stop")
        sigint = signal.getsignal(signal.SIGINT)
        if callable(sigint):
            sigint(signal.SIGINT, frame)  # the driver's handler, or Python's default (KeyboardInterrupt)
        else:  # SIGINT ignored (a background job of a script) or default: stop anyway
            raise KeyboardInterrupt

    def run(self, command: Callable[..., int], *args: Any) -> int:
        """Run a command; its exit code, with a stop before the command's own Ctrl-C handler is in place (imports,
        storage, resume, Ray's start) ending as one after it does."""
        try:
            rc = command(*args)
        except KeyboardInterrupt:
            _say("interrupted")
            rc = EXIT_CTRL_C
        return self.exit_code(rc)

    def exit_code(self, rc: int) -> int:
        """Ctrl-C's exit code becomes 143 when SIGTERM stopped the run; any other code stays."""
        return EXIT_SIGTERM if self.received and rc == EXIT_CTRL_C else rc


def exit_process(rc: int) -> None:
    """End the process with ``rc``, also after a Ctrl-C that arrived as ``KeyboardInterrupt`` and was handled.

    CPython remembers a ``KeyboardInterrupt`` that passed through code it ran with ``PyRun_*`` (some modules' imports
    do) and then ends the process by SIGINT at exit, whatever ``sys.exit`` was given: a Ctrl-C during start-up, on a
    loaded machine, exited by signal instead of with 130 (a caller's ``returncode`` -2). So what the interpreter's
    own exit does is done here (wait for the threads that are not daemons, run the exit handlers, flush the
    streams), and ``os._exit`` ends the process with the code the command chose."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


def sigterm_as_ctrl_c() -> SigtermAsCtrlC:
    return SigtermAsCtrlC()


def reclaim() -> None:
    """Put the handler back after a library replaced it (``ray.init`` does); a no-op when none is installed (the
    optimizer used as a library, e.g. by the tests) or off the main thread."""
    term = _active
    if term is not None and term.installed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, term.handle)
