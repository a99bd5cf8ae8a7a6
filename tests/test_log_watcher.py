"""The log watcher of the readiness check on a real file that another thread appends to, in pieces that cut lines
anywhere: start-up phases and fatal lines are found once, in order, and the most specific fatal line wins. The
real SGLang 0.5.17 logs of the recordings are replayed the same way."""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

from test_sim_support import recordings_dir

from optimizer.readiness import LogWatcher
from optimizer.sglang.logs import BOOT_PHASE_NAMES, NOT_ENOUGH_MEMORY, READY_LINE


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_a_line_counts_only_once_it_is_complete(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    w = LogWatcher(log, time.time())
    w.poll()  # the server has not created its log yet: nothing, no error
    assert w.phases == {} and w.fatal is None
    append(log, "[2026-11-30 06:50:02] server_args=ServerArgs(model_path='m', ")
    w.poll()
    assert w.phases == {}  # half a line: not yet
    append(log, "port=30000)\n[2026-11-30 06:50:31] Init torch distri")
    w.poll()
    assert list(w.phases) == ["server_args"]
    append(log, "buted begin.\n")
    w.poll()
    assert list(w.phases) == ["server_args", "dist_init"]
    assert w.offset == log.stat().st_size


def test_a_phase_keeps_the_time_it_was_first_seen(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    w = LogWatcher(log, time.time() - 10.0)
    append(log, "Load weight end. elapsed=0.10 s\n")
    w.poll()
    first = w.phases["weights_loaded"]
    assert 10.0 <= first < 12.0
    time.sleep(0.2)
    append(log, "Load weight end. elapsed=0.12 s (the draft model)\n")
    w.poll()
    assert w.phases["weights_loaded"] == first


def test_the_most_specific_fatal_line_wins(tmp_path: Path) -> None:
    """SGLang logs the cause inside the traceback that follows 'Scheduler hit an exception'."""
    log = tmp_path / "server.log"
    w = LogWatcher(log, time.time())
    append(log, "[t] Scheduler hit an exception: Traceback (most recent call last):\n")
    w.poll()
    assert w.fatal is not None and w.fatal[0] == "scheduler"
    append(log, f"RuntimeError: {NOT_ENOUGH_MEMORY}\n")
    w.poll()
    assert w.fatal == ("oom", f"RuntimeError: {NOT_ENOUGH_MEMORY}")
    append(log, "[t] Received sigquit from a child process. It usually means the child failed.\n")
    w.poll()
    assert w.fatal[0] == "oom"  # a later, vaguer line does not replace the cause


def test_a_traceback_alone_is_not_fatal_but_a_refused_flag_is(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    w = LogWatcher(log, time.time())
    append(log, "Traceback (most recent call last):\n    raise ValueError(msg)\nKeyError: 'x'\n")
    w.poll()
    assert w.fatal is None
    append(log, "ValueError: speculative_draft_model_path is required for EAGLE/EAGLE3 speculative decoding.\n")
    w.poll()
    assert w.fatal is not None and w.fatal[0] == "invalid"


def _section(name: str, run: int) -> list[str]:
    """One launch's server log lines from the recordings, without the recorder's seconds-since-launch column."""
    lines = (recordings_dir() / "server_logs.txt").read_text().split("#### RUN ")[run].splitlines()
    start = lines.index(f"===== {name} ") + 1
    out = []
    for ln in lines[start:]:
        if re.fullmatch(r"===== \S+ ", ln):  # the next launch
            break
        if not ln.startswith(("=====", "####")):
            out.append(re.sub(r"^\s*\d+\.\d+ ?", "", ln))
    return out


def replay(tmp_path: Path, lines: list[str]) -> LogWatcher:
    """Append the lines in random pieces from another thread while the watcher polls, as a server's log grows."""
    log = tmp_path / "server.log"
    text = "\n".join(lines) + "\n"
    rng = random.Random(0)
    done = threading.Event()

    def writer() -> None:
        i = 0
        while i < len(text):
            n = rng.randint(1, 4000)
            append(log, text[i : i + n])
            i += n
            time.sleep(0.001)
        done.set()

    w = LogWatcher(log, time.time())
    th = threading.Thread(target=writer)
    th.start()
    polls = 0
    while not done.is_set():
        w.poll()
        polls += 1
    th.join()
    w.poll()
    assert polls > 1 and w.offset == len(text.encode())
    return w


def test_the_recorded_real_boot_is_read_in_order(tmp_path: Path) -> None:
    lines = _section("A_baseline", 1)
    assert any(READY_LINE in ln for ln in lines)
    w = replay(tmp_path, lines)
    assert w.fatal is None
    assert {"server_args", "dist_init", "weights_loaded", "memory_pool", "http_up", "ready_line"} <= set(w.phases)
    seen = [name for name in BOOT_PHASE_NAMES if name in w.phases]
    times = [w.phases[name] for name in seen]
    assert times == sorted(times), dict(zip(seen, times))


def test_the_recorded_real_failed_boot_is_a_scheduler_crash(tmp_path: Path) -> None:
    w = replay(tmp_path, _section("B_eagle3_s3_k1_d4", 1))
    assert w.fatal is not None
    kind, line = w.fatal
    assert kind == "scheduler" and "Scheduler hit an exception" in line
    assert "ready_line" not in w.phases
