"""Where a restart's time goes and the search boot (optimizer/boot.py, docs/boot.md).

The phases are read from the real SGLang 0.5.17 logs of the recordings; the search boot's flags are checked on a
real study on simulator processes (they reach the search's servers, never the confirmation's or the exported
files); the fast stop on a real simulator process group; the simulator's boot with the search boot's flags."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import sim_command
from test_log_watcher import _section, replay
from test_sim_support import recordings_dir

from optimizer import boot, cli
from optimizer.hosts import _proc
from optimizer.hosts.local import LocalHost
from optimizer.notes import study_note_markdown
from optimizer.report import write_report
from optimizer.settings import parse_study
from optimizer.sglang import logs
from optimizer.sim.profiles import load_profile
from optimizer.study import open_storage

EAGLE3 = {
    "speculative-algorithm": "EAGLE3",
    "speculative-draft-model-path": "d",
    "speculative-num-steps": 5,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 6,
}


def _timed_section(name: str, run: int) -> list[tuple[float, str]]:
    """One launch's recorded lines with the recorder's seconds since launch (continuation lines get the last)."""
    lines = (recordings_dir() / "server_logs.txt").read_text().split("#### RUN ")[run].splitlines()
    start = lines.index(f"===== {name} ") + 1
    out, t = [], 0.0
    for ln in lines[start:]:
        if re.fullmatch(r"===== \S+ ", ln):
            break
        if ln.startswith(("=====", "####")):
            continue
        m = re.match(r"^\s*(\d+\.\d+) ?(.*)$", ln)
        if m:
            t, ln = float(m.group(1)), m.group(2)
        out.append((t, ln))
    return out


def _marks(timed: list[tuple[float, str]]) -> dict[str, float]:
    marker, marks = logs.BootMarker(), {}
    for t, line in timed:
        for name in marker.feed(line):
            marks[name] = t
    return marks


# ------------------------------------------------------------------------------------------ phases, real logs


def test_every_phase_of_a_real_speculative_boot_is_read_from_its_log(tmp_path: Path) -> None:
    lines = _section("B_eagle3_s3_k1_d4", 2)
    w = replay(tmp_path, lines)
    want = {
        "imports",
        "server_args",
        "dist_init",
        "dist_init_end",
        "weights_begin",
        "weights_loaded",
        "draft_weights_loaded",
        "memory_pool",
        "cuda_graph_begin",
        "graph_target_prefill",
        "graph_target_verify",
        "graph_draft_prefill",
        "graph_draft_decode",
        "graph_draft_extend",
        "http_up",
        "ready_line",
    }
    assert want <= set(w.phases), sorted(want - set(w.phases))
    seen = [n for n in logs.BOOT_PHASE_NAMES if n in w.phases]
    assert [w.phases[n] for n in seen] == sorted(w.phases[n] for n in seen)
    assert set(w.phases) <= set(logs.BOOT_PHASE_NAMES) <= set(logs.BOOT_PHASE_LABELS)


def test_the_phases_agree_with_sglangs_own_startup_timings() -> None:
    """Durations from the recorded arrival times against SGLang's 'Engine startup timings' line of the same boot."""
    timed = _timed_section("B_eagle3_s3_k1_d4", 2)
    marks = _marks(timed)
    took = dict(boot.phase_durations(marks))
    line = next(ln for _, ln in timed if "Engine startup timings" in ln)
    graphs = dict((k, float(v)) for k, v in re.findall(r"(\w+)=([\d.]+)", line.split("cuda_graph=")[1]))
    for ours, theirs in [
        ("graph_target_prefill", "prefill"),
        ("graph_target_verify", "target_verify"),
        ("graph_draft_prefill", "draft_prefill"),
        ("graph_draft_decode", "draft_decode"),
        ("graph_draft_extend", "draft_extend"),
    ]:
        assert abs(took[ours] - graphs[theirs]) < 0.1, (ours, took[ours], graphs[theirs])
    # the scheduler's spawn, imports and CUDA init (20-24 s in issue 23) and NCCL's own 0.06 s
    assert 18 < took["dist_init"] < 25 and took["dist_init_end"] < 0.2
    # the draft's model init and its (dummy) weights
    assert took["draft_weights_loaded"] < 2.0 and marks["draft_weights_loaded"] > marks["weights_loaded"]
    assert took["imports"] == pytest.approx(21.505) and took["server_args"] == pytest.approx(29.311 - 21.505)


def test_the_baseline_boot_and_the_stop_of_the_recordings() -> None:
    timed = _timed_section("A_baseline", 1)
    marks = _marks(timed)
    assert "draft_weights_loaded" not in marks and "graph_target_decode" in marks
    assert marks["ready_line"] > marks["http_up"] > marks["graph_target_decode"]
    # after SIGTERM the launcher says the scheduler is gone within a second, then sleeps 5 s
    t_term = next(t for t, ln in timed if "SIGTERM received" in ln)
    t_gone = next(t for t, ln in timed if logs.SCHEDULER_GONE_LINES[0] in ln)
    t_last = next(t for t, ln in reversed(timed) if "kill_process_tree" in ln)
    assert t_gone - t_term < 1.0 and t_last - t_gone == pytest.approx(5.0, abs=0.1)
    assert _proc.SCHEDULER_GONE_LINES == logs.SCHEDULER_GONE_LINES


def test_only_rank_zero_counts_the_draft_weights() -> None:
    m = logs.BootMarker()
    seen = []
    for line in [
        "[2026-12-01 02:06:01 TP0] Load weight begin. avail mem=70 GB",
        "[2026-12-01 02:06:02 TP1] Load weight end. elapsed=1.0 s, type=LlamaForCausalLM",
        "[2026-12-01 02:06:02 TP0] Load weight end. elapsed=1.0 s, type=LlamaForCausalLM",
        "[2026-12-01 02:06:03 TP1] Load weight end. elapsed=0.1 s, type=LlamaForCausalLMEagle3",
        "[2026-12-01 02:06:03 TP0] Load weight end. elapsed=0.1 s, type=LlamaForCausalLMEagle3",
    ]:
        seen.append(m.feed(line))
    assert seen == [["imports", "weights_begin"], [], ["weights_loaded"], [], ["draft_weights_loaded"]]


def test_where_the_restarts_went_and_the_estimate() -> None:
    launches = [
        ({"imports": 16.0, "server_args": 24.0, "dist_init": 45.0, "health": 60.0}, 6.0),
        ({"imports": 18.0, "server_args": 25.0, "dist_init": 47.0, "health": 58.0}, 1.0),
        ({"imports": 17.0}, None),  # a boot that failed early: its phases count where it got
        (None, None),
    ]
    s = boot.boot_summary(launches)
    rows = {r["phase"]: r for r in s["phases"]}
    assert s["launches"] == 3 and list(rows) == ["imports", "server_args", "dist_init", "health", "stop"]
    assert rows["imports"]["total_s"] == 51.0 and rows["imports"]["median_s"] == 17.0
    assert rows["health"]["total_s"] == 26.0 and rows["stop"]["median_s"] == 3.5
    assert s["boot_total_s"] == pytest.approx(16 + 8 + 21 + 15 + 18 + 7 + 22 + 11 + 17)
    boot_s, stop_s = boot.estimate_cycle_s(s)
    assert boot_s == pytest.approx(17.0 + 7.5 + 21.5 + 13.0) and stop_s == 3.5
    assert boot.estimate_cycle_s(boot.boot_summary([])) is None
    assert boot.summary_lines(s)[0].startswith("restarts: 3 launches")


# ------------------------------------------------------------------------------------------ the search boot


def test_graph_sizes_the_benchmark_reaches() -> None:
    g = boot.graph_batch_sizes
    assert g(EAGLE3, [1]) == [1]
    # every batch of 1..16 pads to the size it pads to in production (SGLang's speculative list)
    assert g(EAGLE3, [1, 16]) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert g(EAGLE3, [1, 16], "levels") == [1, 16]  # issue 23's --cuda-graph-bs-decode 1 16
    assert g(EAGLE3, [11]) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]
    assert g({}, [16]) == [1, 2, 4, 8, 12, 16]  # no speculation: SGLang's other list
    assert g({**EAGLE3, "max-running-requests": 4}, [16]) == [1, 2, 3, 4]
    assert g(EAGLE3, [100])[-1] == 48  # SGLang resets --max-running-requests to 48 for speculation
    assert g({**EAGLE3, "cuda-graph-max-bs": 8}, [16]) == list(range(1, 9))  # production never captures above 8
    assert g({**EAGLE3, "cuda-graph-bs": "1 4 32"}, [16]) == [1, 4, 32]
    assert g({**EAGLE3, "disable-cuda-graph": True}, [16]) is None and g(EAGLE3, [16], "off") is None


def test_the_study_switch_is_validated() -> None:
    assert parse_study({}).server.search_boot.enabled
    assert not parse_study({"server": {"search_boot": False}}).server.search_boot.enabled
    cfg = parse_study({"server": {"search_boot": {"graph_batch_sizes": "levels", "jit_cache_dir": None}}})
    assert cfg.server.search_boot.graph_batch_sizes == "levels" and cfg.server.search_boot.jit_cache_dir is None
    for bad in ({"graph_batch_sizes": "all"}, {"fast": True}, "yes"):
        with pytest.raises(Exception, match="search_boot"):
            parse_study({"server": {"search_boot": bad}})
    spec = boot.search_boot_spec(
        cfg.server.search_boot, EAGLE3, ["--enable-metrics", "--skip-server-warmup"], [1, 16], {}
    )
    assert spec == {"boot_flags": {"cuda-graph-bs-decode": [1, 16]}, "boot_env": {}, "fast_stop": True}
    # no warm-up requests of the benchmark's own: SGLang's warm-up stays
    bare = boot.search_boot_spec(cfg.server.search_boot, EAGLE3, [], [1], bench_warmup=0)
    assert bare["boot_flags"] == {"cuda-graph-bs-decode": [1]}
    off = boot.search_boot_spec(parse_study({"server": {"search_boot": False}}).server.search_boot, EAGLE3, [], [1])
    assert off == {"boot_flags": {}, "boot_env": {}, "fast_stop": False}
    env = boot.search_boot_spec(parse_study({}).server.search_boot, EAGLE3, [], [1], {"TRITON_CACHE_DIR": "/mine"})
    assert "TRITON_CACHE_DIR" not in env["boot_env"] and env["boot_env"]["SGLANG_DG_CACHE_DIR"].endswith("deep_gemm")


def test_the_hosts_own_cache_variables_win(tmp_path: Path, monkeypatch) -> None:
    from optimizer.trial import search_boot_env

    env = boot.search_boot_spec(parse_study({}).server.search_boot, EAGLE3, [], [1])["boot_env"]
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("CUDA_CACHE_PATH", "/from/the/shell")
    got = search_boot_env(LocalHost("local", tmp_path, env={"SGLANG_DG_CACHE_DIR": "/from/hosts.yaml"}), env)
    assert got["TRITON_CACHE_DIR"] == str(Path.home() / ".cache/sglang-spec-optimizer/jit/triton")
    assert "SGLANG_DG_CACHE_DIR" not in got and "CUDA_CACHE_PATH" not in got


SPACE = {
    "name": "boot",
    "fixed": {
        "model-path": "m",
        "speculative-draft-model-path": "eagle3-head",
        "attention-backend": "fa3",
        "cuda-graph-max-bs": 8,  # production's; the search boot's graph list overrides it (no server_changed alarm)
    },
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [3]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
    },
}


def test_search_flags_reach_the_search_but_not_the_confirmation_or_the_export(tmp_path: Path, capsys) -> None:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    study = {
        "study": "boot",
        "studies_dir": str(tmp_path / "studies"),
        "space": str(tmp_path / "space.yaml"),
        "server": {
            "command": sim_command("llama-3.1-8b-h100", step_scale=1.0),
            "boot_timeout_s": 30,
            "search_boot": {"jit_cache_dir": str(tmp_path / "jit")},
        },
        "workload": {"concurrency": 1, "max_tokens": 16, "chunks": 1, "requests_per_chunk": 2, "warmup_requests": 1},
        "budget": {"trials": 2},
        "pruner": {"name": "none"},
        "initial": [{"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3, "speculative-eagle-topk": 1}],
        "confirm": {"rounds": 1, "top": 1},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert cli.main(["optimize", "--config", str(path), "--executor", "thread", "--plain"]) == 0
    capsys.readouterr()
    root = tmp_path / "studies" / "boot"
    searched = sorted((root / "trials").glob("*/command.sh"))
    confirmed = sorted((root / "confirm").glob("*/command.sh"))
    assert len(searched) == 2 and len(confirmed) == 2  # baseline + EAGLE3, each relaunched once
    for f in searched:
        text = f.read_text()
        assert "--cuda-graph-bs-decode 1 --skip-server-warmup" in text, text
        assert f"TRITON_CACHE_DIR={tmp_path / 'jit' / 'triton'}" in text
    for f in [*confirmed, root / "best.yaml", root / "best.sh", root / "best.env"]:
        text = f.read_text()
        assert "cuda-graph-bs" not in text and "skip-server-warmup" not in text and "TRITON_CACHE_DIR" not in text
    assert "cuda-graph-max-bs: 8" in (root / "best.yaml").read_text()  # production's own, as configured
    assert "speculative-num-steps: 3" in (root / "best.yaml").read_text()
    st = optuna.load_study(study_name="boot", storage=open_storage(str(root / "journal.log")))
    launched = [t for t in st.trials if t.user_attrs.get("launched")]
    assert len(launched) == 2
    for t in launched:
        ua = t.user_attrs
        assert ua["search_boot"] == {"cuda-graph-bs-decode": [1], "skip-server-warmup": True}
        assert {"imports", "server_args", "dist_init", "memory_pool", "http_up", "health"} <= set(ua["boot_phases"])
        assert "ready_line" in ua["boot_phases"]  # logged at once without the warm-up
        assert 0 <= ua["stop_s"] < 5.0
        assert ua["server_changes"] == [], ua["server_changes"]
    summary = boot.study_boot_summary(launched)
    assert summary["launches"] == 2 and summary["phases"][-1]["phase"] == "stop"
    # summary.json, the report, the study's dashboard note and the dry run show where the restarts went
    exported = json.loads((root / "summary.json").read_text())["restarts"]
    assert [r["phase"] for r in exported["phases"]] == [r["phase"] for r in summary["phases"]]
    write_report(st, root / "report.html")
    assert "Where the restarts went" in (root / "report.html").read_text()
    assert "restarts: 2 launches" in study_note_markdown(st)
    assert cli.main(["optimize", "--config", str(path), "--dry-run", "--trials", "4"]) == 0
    planned = capsys.readouterr().out
    cycle = boot.study_cycle_estimate(st, parse_study(study).server.search_boot)
    assert cycle is not None and cycle[1] < 5.0
    assert f"stop {cycle[1]:.1f} s each" in planned, planned


# ------------------------------------------------------------------------------------------ the fast stop


@pytest.mark.parametrize("fast", [False, True, "helper"])
def test_the_fast_stop_does_not_wait_out_the_diagnostics_sleep(tmp_path: Path, fast: bool | str, capsys) -> None:
    """SGLang's launcher (the simulator's SIGTERM handler, as recorded) logs that it sleeps 5 s once the scheduler
    is gone (1.5 s at this time scale): the fast stop SIGKILLs the group on that line. ``helper``: the same through
    the command the SSH host runs on the remote machine (``_proc.main stop ... <log>``)."""
    host = LocalHost("local", tmp_path / "state")
    argv = [sys.executable, "-m", "optimizer.sim", "--sim-profile", "llama-8b-dims-2x-h200", "--sim-time-scale", "0.3"]
    port = host.pick_port()
    log = tmp_path / "server.log"
    server = host.start([*argv, "--model-path", "m", "--port", str(port)], {}, log, port)
    server.fast_stop = fast
    deadline = time.time() + 60
    while "launch_server" not in (log.read_text() if log.exists() else ""):  # SIGTERM handler installed by then
        assert time.time() < deadline and server.returncode() is None
        time.sleep(0.05)
    t0 = time.monotonic()
    if fast == "helper":
        capsys.readouterr()
        assert _proc.main(["stop", str(server.pgid), "30", "127.0.0.1", str(port), "30", str(log)]) == 0
        assert json.loads(capsys.readouterr().out) == {"gone": True, "port_free": True}
    server.stop(30.0)
    took = time.monotonic() - t0
    text = log.read_text()
    assert logs.SCHEDULER_GONE_LINES[0] in text
    if fast:
        assert took < 1.2, took
        assert "kill_process_tree" not in text  # killed during the sleep
    else:
        assert took >= 1.5, took
        assert "kill_process_tree" in text
    assert not _proc.group_alive(server.pgid)


# ------------------------------------------------------------------------------------------ the simulator


def test_the_simulators_boot_follows_the_search_boot() -> None:
    """Issue 23 on the 8B-sized model: 35 captured sizes -> 2 with --skip-server-warmup took the boot from 65.3 to
    57.0 s (8.3 s); the simulator's 8B-sized profile saves the same within a second."""
    p = load_profile("llama-8b-dims-2x-h200")
    prod = p.boot_seconds({**EAGLE3, "cuda-graph-max-bs": 128})  # 35 speculative sizes
    search = p.boot_seconds({**EAGLE3, "cuda-graph-bs-decode": [1, 16], "skip-server-warmup": True})
    assert prod - search == pytest.approx(8.3, abs=1.0)
    names = [n for n, _ in p.boot_phases({**EAGLE3, "skip-server-warmup": True})]
    assert "warmup" not in names and names[-1] == "health"
    assert p.boot_seconds({**EAGLE3, "cuda-graph-bs-decode": [1]}) < p.boot_seconds(EAGLE3)


def test_the_simulator_takes_the_search_boots_flags(tmp_path: Path) -> None:
    """A real simulator process launched with the search boot's flags reports what SGLang would run."""
    import httpx

    from optimizer.readiness import wait_ready

    host = LocalHost("local", tmp_path / "state")
    port = host.pick_port()
    argv = [
        *[sys.executable if a == "{python}" else a for a in sim_command("llama-3.1-8b-h100")],
        *[f"--{k}" if v is True else f"--{k}={v}" for k, v in EAGLE3.items()],
        *["--model-path", "m", "--cuda-graph-bs-decode", "1", "16", "--skip-server-warmup", "--port", str(port)],
    ]
    server = host.start(argv, {}, tmp_path / "server.log", port)
    try:
        ready = wait_ready(server, boot_timeout_s=30)
        info = httpx.get(server.base_url + "/server_info", timeout=5).json()
        assert info["cuda_graph_max_bs_decode"] == 16 and info["skip_server_warmup"] is True
        assert "Simulator: flag" not in (tmp_path / "server.log").read_text()  # modelled, not merely accepted
        assert "warmup" not in ready.phases and "health" in ready.phases
    finally:
        server.stop(10.0)


def test_the_gpu_ab_script_runs_on_the_simulator(tmp_path: Path) -> None:
    """tools/gpu_run/boot_ab.py (what the lead runs on the H200) end to end, with the simulator as the server."""
    import subprocess

    out = tmp_path / "ab.json"
    cmd = "{python} -m optimizer.sim --sim-profile llama-8b-dims-2x-h200 --sim-time-scale 0.02 --sim-step-scale 0.05"
    subprocess.run(
        [sys.executable, "tools/gpu_run/boot_ab.py", "--command", cmd, "--rounds", "1", "--warm", "0"]
        + ["--work", str(tmp_path / "work"), "--out", str(out), "--chunks", "1"],
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    runs = {r["arm"]: r for r in res["runs"]}
    assert set(runs) == {"production", "search"} and all(r["status"] == "complete" for r in runs.values())
    assert (
        "--cuda-graph-bs-decode" in runs["search"]["argv"]
        and "--cuda-graph-bs-decode" not in runs["production"]["argv"]
    )
    assert res["search_boot_adds"]["boot_flags"]["cuda-graph-bs-decode"] == list(range(1, 9)) + [10, 12, 14, 16]
    assert set(runs["search"]["tok_per_s"]) == {"1", "16"} and 0 < res["cycle_ratio"] < 1.5


def test_a_server_that_dies_before_writing_its_log_says_so(tmp_path: Path) -> None:
    """A server killed or crashed before its first line (a loaded host still importing) leaves an empty log: the
    trial's log tail says that, so a failed trial always shows where its log was and why it is empty."""
    from optimizer.errors import BootError
    from optimizer.readiness import wait_ready

    host = LocalHost("local", tmp_path / "state")
    port = host.pick_port()
    server = host.start([sys.executable, "-c", "import sys; sys.exit(3)"], {}, tmp_path / "server.log", port)
    with pytest.raises(BootError) as err:
        wait_ready(server, boot_timeout_s=30)
    assert err.value.kind == "crash" and "status 3" in str(err.value)
    assert (tmp_path / "server.log").read_text() == ""
    assert err.value.log_tail == f"(the server wrote nothing to {tmp_path / 'server.log'} before it exited)"
