"""``run_trial`` on its own (no Optuna, no Ray, no driver): a real local host starts a real simulator process on a
free loopback port, and every way a trial can end comes back as a TrialResult, with the server always stopped."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

from conftest import sim_command
from faults.figures import study_servers

from optimizer.candidate import Candidate
from optimizer.events import ChunkEvent, PhaseEvent, TrialResult
from optimizer.hosts import _proc, local_host, make_host
from optimizer.loadgen.workload import Workload
from optimizer.sglang.logs import BOOT_PHASE_NAMES
from optimizer.trial import Controls, TrialSpec, run_trial

FIXED = {
    "model-path": "m",
    "speculative-draft-model-path": "d",
    "tp-size": 8,
    "attention-backend": "flashinfer",
    "max-running-requests": 8,
    "cuda-graph-max-bs": 8,
}
EAGLE3 = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 2, "speculative-eagle-topk": 1}
SECRET = "hf_" + "S" * 30


def spec(tmp_path: Path, flags: dict, *, chunks: int = 3, requests: int = 2, **over) -> TrialSpec:
    data = dict(
        number=7,
        candidate=Candidate(flags={**FIXED, **flags}, env={"NCCL_PROTO": "LL"}),
        command=sim_command(),
        workload=Workload(max_tokens=32, chunks=chunks, requests_per_chunk=requests, warmup_requests=1),
        trial_dir=str(tmp_path / "trials" / "7"),
        server_env={"HF_TOKEN": SECRET},
        boot_timeout_s=30,
        poll_s=0.05,
        stop_timeout_s=10,
        study=f"unit-{tmp_path.name}",
    )
    data.update(over)
    return TrialSpec(**data)


def run(tmp_path: Path, s: TrialSpec, on_event=None, controls: Controls | None = None):
    host = make_host(local_host("unit"), tmp_path / "host")
    events: list = []

    def emit(ev) -> None:
        events.append(ev)
        if on_event is not None:
            on_event(ev)

    try:
        result = run_trial(host, s, emit, controls)
    finally:
        host.close()
    return result, events


def port_of(s: TrialSpec) -> int:
    return int(re.search(r"--port (\d+)", (Path(s.trial_dir) / "command.sh").read_text()).group(1))


def assert_stopped(s: TrialSpec) -> None:
    """No process of the trial's server is left, and its port is free again."""
    assert study_servers(s.study) == []
    port = port_of(s)
    assert _proc.wait_port_free("127.0.0.1", port, 10.0), f"port {port} still taken"


def phases(events: list) -> list[str]:
    return [e.phase for e in events if isinstance(e, PhaseEvent)]


def test_a_trial_that_completes(tmp_path: Path) -> None:
    s = spec(tmp_path, EAGLE3)
    result, events = run(tmp_path, s)
    assert isinstance(result, TrialResult)
    assert result.status == "complete", (result.reason, result.log_tail)
    assert result.trial == 7 and result.host == "unit"
    assert result.metrics["tok_per_s"] > 0 and result.metrics["accept_length"] > 1
    assert result.boot_s is not None and result.boot_s > 0
    assert set(result.boot_phases) <= set(BOOT_PHASE_NAMES) and "ready_line" in result.boot_phases
    assert result.t_start <= result.t_end
    assert phases(events)[:3] == ["starting", "booting", "warming_up"]
    assert phases(events)[-2:] == ["stopping_server", "done"]
    chunks = [e for e in events if isinstance(e, ChunkEvent)]
    assert [c.index for c in chunks] == [0, 1, 2] and all(c.tok_per_s > 0 for c in chunks)
    assert Path(result.records_path).is_file() and Path(result.log_path).is_file()
    command = (Path(s.trial_dir) / "command.sh").read_text()
    assert "--speculative-num-steps 2" in command and "export NCCL_PROTO=LL" in command
    assert SECRET not in command and "HF_TOKEN=" in command  # a record for humans: the secret is masked
    assert_stopped(s)


def test_a_configuration_sglang_refuses_is_infeasible(tmp_path: Path) -> None:
    flags = {k: v for k, v in {**FIXED, **EAGLE3}.items() if k != "speculative-draft-model-path"}
    s = spec(tmp_path, {})
    s.candidate = Candidate(flags=flags)
    result, events = run(tmp_path, s)
    assert result.status == "infeasible" and result.kind == "invalid", (result.kind, result.reason)
    assert "speculative_draft_model_path is required" in result.reason
    assert "ValueError" in result.log_tail
    assert result.boot_s is None and not [e for e in events if isinstance(e, ChunkEvent)]
    assert_stopped(s)


def test_a_boot_that_runs_out_of_memory_is_infeasible(tmp_path: Path) -> None:
    oom = {**EAGLE3, "speculative-num-steps": 3, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 16}
    s = spec(tmp_path, oom)
    result, _ = run(tmp_path, s)
    assert result.status == "infeasible" and result.kind == "oom", (result.kind, result.reason)
    assert "Not enough memory" in result.reason
    assert_stopped(s)


def test_a_server_that_crashes_while_serving_is_infeasible_not_complete(tmp_path: Path) -> None:
    """The profile crashes this tree after 16 requests: partial throughput must never count as a result."""
    crash = {**EAGLE3, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 8}
    s = spec(tmp_path, crash, chunks=4, requests=8)
    result, events = run(tmp_path, s)
    assert result.status == "infeasible" and result.kind == "crash_serving", (result.kind, result.reason)
    assert "illegal memory access" in result.reason
    assert [e for e in events if isinstance(e, ChunkEvent)], "the crash came after some chunks"
    assert_stopped(s)


def test_a_pruned_trial_stops_its_benchmark_and_its_server(tmp_path: Path) -> None:
    controls = Controls()

    def prune_after_first_chunk(ev) -> None:
        if isinstance(ev, ChunkEvent) and ev.index == 0:
            controls.prune.set()

    s = spec(tmp_path, EAGLE3, chunks=6)
    result, events = run(tmp_path, s, prune_after_first_chunk, controls)
    assert result.status == "pruned", (result.status, result.reason)
    assert len([e for e in events if isinstance(e, ChunkEvent)]) < 6
    assert_stopped(s)


def test_a_trial_cancelled_while_booting(tmp_path: Path) -> None:
    controls = Controls()

    def cancel_on_boot(ev) -> None:
        if isinstance(ev, PhaseEvent) and ev.phase == "booting":
            controls.cancel.set()

    s = spec(tmp_path, EAGLE3)
    result, _ = run(tmp_path, s, cancel_on_boot, controls)
    assert result.status == "cancelled" and result.kind == "cancelled"
    assert result.boot_s is None
    assert_stopped(s)


def test_a_taken_port_is_the_hosts_fault(tmp_path: Path) -> None:
    """A host whose fixed server port someone else holds: re-queue elsewhere, never blame the configuration."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    host = make_host(local_host("busy", server_port=port), tmp_path / "host")
    try:
        result = run_trial(host, spec(tmp_path, EAGLE3), lambda ev: None)
    finally:
        host.close()
        holder.close()
    assert result.status == "host_fault" and result.kind == "host"
    assert f"port {port}" in result.reason and "taken" in result.reason


def test_a_missing_server_command_is_the_hosts_fault(tmp_path: Path) -> None:
    s = spec(tmp_path, EAGLE3, command=["no-such-sglang-launcher-here", "--x"])
    result, events = run(tmp_path, s)
    assert result.status == "host_fault" and "command not found" in result.reason
    assert phases(events) == ["starting"]


def test_run_trial_is_safe_to_call_from_several_threads(tmp_path: Path) -> None:
    """Two trials at once on two hosts of one machine (what the thread executor does): both complete."""
    results: dict[int, TrialResult] = {}

    def one(n: int) -> None:
        s = spec(tmp_path / str(n), EAGLE3, number=n, trial_dir=str(tmp_path / str(n) / "trial"))
        results[n], _ = run(tmp_path / str(n), s)

    threads = [threading.Thread(target=one, args=(n,)) for n in (1, 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert {n: r.status for n, r in results.items()} == {1: "complete", 2: "complete"}
