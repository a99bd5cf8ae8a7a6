"""The fault-injection suite's figures, printed at the end of the run (also without ``-s``) and written to
studies/faults/results.json. pytest orders test files by name: this one runs after every tests/test_faults_*.py
and tests/test_fuzz_*.py (run the suite alone with ``pytest tests/test_faults_*.py tests/test_fuzz_*.py``)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from faults.figures import DETAIL, FIGURES, study_servers

ROOT = Path(__file__).resolve().parents[1]


def test_fault_injection_figures(request):
    # a last sweep: no server of any fault-suite study may be alive now
    stray = [pid for pid in study_servers() if _study_of(pid).startswith("faults")]
    figures = {
        "kills": FIGURES["kills"],
        "kills_survived": FIGURES["kills_survived"],
        "completed_trials_lost": FIGURES["completed_lost"],
        "orphan_servers": FIGURES["orphans"] + len(stray),
        "fuzz_cases": FIGURES["fuzz_cases"],
        "injections_tried": FIGURES["injections_tried"],
        "injections_executed": FIGURES["injections_executed"],
        "secrets_leaked": FIGURES["secrets_leaked"],
        "hostile_replies": FIGURES["hostile_replies"],
        "servers_reaped_after_driver_kills": FIGURES["servers_reaped"],
    }
    out = ROOT / "studies" / "faults" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "figures": figures,
                "by_test": {k: dict(v) for k, v in DETAIL.items()},
                "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            indent=2,
        )
        + "\n"
    )
    line = (
        "fault injection: kills survived {kills_survived}/{kills}, completed trials lost {completed_trials_lost}, "
        "orphan servers {orphan_servers}, fuzz cases {fuzz_cases}, injections executed "
        "{injections_executed}/{injections_tried}, secrets leaked {secrets_leaked}, hostile replies "
        "{hostile_replies}"
    ).format(**figures)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None:
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            tr.write_line("")
            tr.write_line(line)
            tr.write_line(f"  by test: { {k: dict(v) for k, v in DETAIL.items()} }")
            tr.write_line(f"  written to {out}")
    print(line)
    assert figures["completed_trials_lost"] == 0
    assert figures["orphan_servers"] == 0, stray
    assert figures["injections_executed"] == 0
    assert figures["secrets_leaked"] == 0
    assert figures["kills_survived"] == figures["kills"]


def _study_of(pid: int) -> str:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return ""
    for item in env.split(b"\0"):
        if item.startswith(b"SGLANG_OPTIMIZER_TRIAL="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return ""
