"""optuna-dashboard for a real study: served by the project's own command on a free loopback port, read through its
HTTP API (trials, notes, user attributes, artifacts) and opened in a real headless Chromium."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_report_study import SECRET, build_study, distinct_colours, open_page

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("dash")
    build_study(root)
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "optimizer",
            "dashboard",
            "--study",
            "ui",
            "--studies-dir",
            str(root),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/meta", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, f"dashboard exited: {proc.stdout.read().decode()[-2000:]}"  # type: ignore
            assert time.time() < deadline, "dashboard did not answer within 60 s"
            time.sleep(0.3)
        yield url, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _study(url: str) -> tuple[int, dict[str, Any]]:
    studies = httpx.get(f"{url}/api/studies", timeout=10).json()["study_summaries"]
    (sid,) = [s["study_id"] for s in studies if s["study_name"] == "ui"]
    return sid, httpx.get(f"{url}/api/studies/{sid}", timeout=30).json()


def test_api_serves_trials_notes_attributes_and_artifacts(dashboard: tuple[str, Path]) -> None:
    url, _ = dashboard
    sid, detail = _study(url)
    trials = {t["number"]: t for t in detail["trials"]}
    assert len(trials) == 14
    attrs = {n: {a["key"]: a["value"] for a in t["user_attrs"]} for n, t in trials.items()}

    # every metric is a user attribute (the dashboard shows them as columns), constraints mirrored
    for key in (
        "tok_per_s",
        "accept_length",
        "ttft_ms_p50",
        "ttft_ms_p99",
        "itl_ms_p50",
        "itl_ms_p99",
        "e2e_ms_p50",
        "boot_s",
        "constraint:server",
        "outcome",
        "config",
    ):
        assert key in attrs[1], key
    assert float(attrs[2]["constraint:server"]) == 1.0 and attrs[2]["outcome"] == "infeasible"
    assert "accept_length" in {a["key"] for a in detail["union_user_attrs"]}

    # notes: configuration, metrics, boot phases; for a failure its reason and the redacted log tail
    ok = trials[3]["note"]["body"]
    assert "EAGLE3 s2 k1 d3 algo=Ring proto=LL" in ok and "+86.6% against the baseline" in ok
    assert "### Configuration" in ok and "| `NCCL_ALGO` | env | Ring |" in ok
    assert "| accept length | 2.600 | tokens/step |" in ok and "### Boot time by phase" in ok
    assert "| weights_loaded |" in ok
    bad = trials[2]["note"]["body"]
    assert "### Why it failed" in bad and "CUDA graph capture failed" in bad and "Server log (tail):" in bad
    assert "```text" in bad and "token=***" in bad
    assert "Pruned after chunk 1" in trials[4]["note"]["body"]
    assert "Duplicate of trial 1" in trials[5]["note"]["body"]
    assert "tree of 4^5 nodes" in trials[6]["note"]["body"]
    for t in trials.values():
        assert SECRET not in t["note"]["body"]
    assert "**Answer: trial 3 " in detail["note"]["body"]  # the study's note: the exported answer

    # artifacts: server log (redacted) and benchmark records, downloadable from the dashboard
    names = {a["filename"]: a for a in trials[1]["artifacts"]}
    assert set(names) == {"trial-1-server.log", "trial-1-bench.json"}
    tid = trials[1]["trial_id"]
    log = httpx.get(f"{url}/artifacts/{sid}/{tid}/{names['trial-1-server.log']['artifact_id']}", timeout=10)
    assert log.status_code == 200 and "boot line 39" in log.text
    assert SECRET not in log.text and "api_key='***'" in log.text
    rec = httpx.get(f"{url}/artifacts/{sid}/{tid}/{names['trial-1-bench.json']['artifact_id']}", timeout=10)
    assert rec.status_code == 200 and len(rec.json()["records"]) == 8
    assert [a["filename"] for a in trials[2]["artifacts"]] == ["trial-2-server.log"]  # boot failed: no records
    assert trials[6]["artifacts"] == []  # rejected before launch: nothing to upload


def test_dashboard_renders_in_chromium(dashboard: tuple[str, Path]) -> None:
    url, _ = dashboard
    sid, detail = _study(url)
    page = f"{url}/dashboard/studies/{sid}"
    dom, png = open_page(page, "dashboard.png", budget_ms=15000)
    assert dom.count('class="main-svg"') >= 2, "the dashboard's plots did not render"
    assert distinct_colours(png) > 200, f"{png} looks blank"

    number = 2
    trial_page = f"{url}/dashboard/studies/{sid}/trials?numbers={number}"
    dom, png = open_page(trial_page, "dashboard-trial.png", budget_ms=15000)
    assert "Why it failed" in dom and "CUDA graph capture failed" in dom, "the trial's note did not render"
    assert distinct_colours(png) > 100, f"{png} looks blank"
