"""SGLang-looking log lines (``[2026-11-30 07:00:44] message``), flushed one by one, and the fatal exits."""

from __future__ import annotations

import os
import signal
import sys
import time

from ..sglang.logs import CHILD_SIGQUIT, SCHEDULER_EXCEPTION

FMT = "%Y-%m-%d %H:%M:%S"


def stamp() -> str:
    return time.strftime(FMT, time.localtime())


def log(message: str, stream=None) -> None:
    stream = stream or sys.stdout
    stream.write(f"[{stamp()}] {message}\n")
    stream.flush()


def raw(text: str, stream=None) -> None:
    stream = stream or sys.stdout
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def kill_self() -> None:
    """The real launcher ends in kill_process_tree, i.e. SIGKILL: exit status -9."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1)
    os._exit(137)


def scheduler_crash(traceback_lines: list[str], final: str) -> None:
    """A scheduler exception: traceback, ``Scheduler hit an exception``, sigquit, kill_process_tree, SIGKILL."""
    pid = os.getpid()
    body = "\n".join(["Traceback (most recent call last):", *traceback_lines, final])
    log(f"{SCHEDULER_EXCEPTION}: {body}\n")
    log(f"{CHILD_SIGQUIT}. It usually means the child failed.")
    log(f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}")
    kill_self()


def invalid_args(exc: str, message: str, *, adaptive: bool = False) -> None:
    """Argument parsing failed: SGLang prints a traceback on stderr and exits 1 (nothing bound)."""
    err = sys.stderr
    lines = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        '  File "/sglang/launch_server.py", line 68, in <module>',
        "    server_args = prepare_server_args(sys.argv[1:])",
        '  File "/sglang/srt/server_args.py", line 9380, in prepare_server_args',
        "    return ServerArgs.from_cli_args(raw_args)",
        '  File "/sglang/srt/server_args.py", line 8470, in from_cli_args',
        "    return cls(**{attr: getattr(args, attr) for attr in attrs})",
        '  File "<string>", line 461, in __init__',
    ]
    if adaptive:  # the adaptive config or the step count in it (speculative_hook.py, before the EAGLE handler)
        lines += [
            '  File "/sglang/srt/server_args.py", line 3592, in __post_init__',
            "    handle_speculative_decoding(self)",
            '  File "/sglang/srt/arg_groups/speculative_hook.py", line 141, in handle_speculative_decoding',
            "    _init_adaptive_speculative_params(server_args)",
            '  File "/sglang/srt/arg_groups/speculative_hook.py", line 776, in _init_adaptive_speculative_params',
            "    candidate_steps = resolve_candidate_steps_from_config(",
            f"{exc}: {message}",
        ]
    elif exc == "AssertionError":
        lines += [
            '  File "/sglang/srt/server_args.py", line 3592, in __post_init__',
            "    handle_speculative_decoding(self)",
            '  File "/sglang/srt/arg_groups/speculative_hook.py", line 593, in _handle_eagle_family',
            "    server_args.speculative_eagle_topk is None",
            "AssertionError" + (f": {message}" if message else ""),
        ]
    else:
        lines += [
            '  File "/sglang/srt/server_args.py", line 3537, in __post_init__',
            "    self._handle_other_validations()",
            f"{exc}: {message}",
        ]
    err.write("\n".join(lines) + "\n")
    err.flush()
