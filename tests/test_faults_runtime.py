"""Faults while a study runs, through the real driver (in this process), real simulator servers, real Ray actors
and a real OpenSSH server: servers killed at each phase or crashing by themselves, a Ray actor killed mid-trial,
a host that keeps failing, an SSH connection cut mid-trial, hostile values in every input that reaches a shell or
an argv, and secrets that must not reach logs, notes or exports.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import KIMI, sim_command
from faults.figures import add, study_servers
from optuna.trial import TrialState

from optimizer.events import PhaseEvent
from optimizer.executors import RayExecutor, ThreadExecutor
from optimizer.export import export_study
from optimizer.hosts import _proc
from optimizer.hosts.config import HostConfig, local_host
from optimizer.settings import parse_study
from optimizer.space import load_space, parse_space
from optimizer.study import Driver, Progress
from optimizer.study import records as R

try:
    from tests.sshd import Sshd, wait_for
except ImportError:  # pragma: no cover
    from sshd import Sshd, wait_for

FAULTS_DIR = Path(__file__).resolve().parent / "faults"
FIXED = {
    "model-path": "m",
    "speculative-draft-model-path": "d",
    "tp-size": 8,
    "attention-backend": "flashinfer",
    "max-running-requests": 8,
    "cuda-graph-max-bs": 8,
}
SPACE = {
    "name": "faults",
    "fixed": dict(FIXED),
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [1, 2, 3, 5]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1, 2, 4]},
        "speculative-num-draft-tokens": {"type": "categorical", "choices": [4, 8, 16], "when": "topk > 1"},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL", "LL128"]},
        "NCCL_ALGO": {"type": "categorical", "choices": ["unset", "Ring", "Tree"]},
    },
}
P = {"speculative-algorithm": "EAGLE3", "NCCL_PROTO": "unset", "NCCL_ALGO": "unset"}
GOOD = {**P, "speculative-num-steps": 2, "speculative-eagle-topk": 1, "NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}
OOM = {**P, "speculative-num-steps": 3, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 16}
MIDCRASH = {**P, "speculative-num-steps": 2, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 8}
HANG = {**P, "speculative-num-steps": 1, "speculative-eagle-topk": 1, "NCCL_PROTO": "LL128", "NCCL_ALGO": "Tree"}
WORKLOAD = {"max_tokens": 32, "chunks": 3, "requests_per_chunk": 2, "warmup_requests": 1}


def make_cfg(tmp_path: Path, study: str, **over):
    data = {
        "study": study,
        "studies_dir": str(tmp_path / "studies"),
        "server": {"command": sim_command(), "boot_timeout_s": 20},
        "workload": dict(WORKLOAD),
        "budget": {"trials": 2},
        "sampler": {"seed": 1},
        "pruner": {"name": "none"},
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return parse_study(data, "test")


class Recorder(Progress):
    """Plain progress lines kept in a list; ``hook`` sees every event as the driver handles it."""

    def __init__(self, hook=None) -> None:
        self.lines: list[str] = []
        super().__init__(self.lines.append)
        self.hook = hook

    def event(self, driver, ev) -> None:
        super().event(driver, ev)
        if self.hook is not None:
            self.hook(driver, ev)


def reload(cfg) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(cfg.storage_url))
    return optuna.load_study(study_name=cfg.study, storage=storage).get_trials()


def run_study(cfg, space, hosts, executor, progress) -> list[optuna.trial.FrozenTrial]:
    try:
        Driver(cfg, space, hosts, executor, progress=progress).run()
    finally:
        executor.shutdown()
    return reload(cfg)


def pid_records(state_dir: Path) -> list[dict]:
    out = []
    for p in state_dir.glob("*.json"):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            pass
    return out


def wait_gone(study: str, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := study_servers(study)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# ---------------------------------------------------------------------------------------------- server faults


def test_servers_crashing_by_themselves_become_recorded_trials(tmp_path):
    """The simulator's own failure modes (the profile's): OOM at boot, illegal memory access mid-benchmark, NCCL
    hang (boot timeout). Each is a recorded trial with SGLang's reason and the log tail; the study goes on."""
    # the simulator crashes a tree like MIDCRASH after 3 to 42 requests: 45 requests always reach it
    cfg = make_cfg(
        tmp_path,
        "faults-crash",
        initial=[OOM, MIDCRASH, HANG, GOOD],
        budget={"trials": 5},
        server={"command": sim_command(), "boot_timeout_s": 8},
        workload={"chunks": 4, "requests_per_chunk": 11, "max_tokens": 12},
    )
    space = parse_space(SPACE, "faults.yaml")
    hosts = [local_host("local")]
    rec = Recorder()
    trials = run_study(cfg, space, hosts, ThreadExecutor(hosts, cfg.study_dir.absolute()), rec)
    by = {json.dumps(t.params, sort_keys=True): t for t in trials if t.params}
    expect = {
        "oom": (OOM, "Not enough memory"),
        "crash_serving": (MIDCRASH, "illegal memory access"),
        "timeout": (HANG, "not ready after"),
    }
    for kind, (params, needle) in expect.items():
        t = by[json.dumps(params, sort_keys=True)]
        ua = t.user_attrs
        assert ua["outcome"] == "infeasible" and ua["failure_kind"] == kind, ua
        assert needle in ua["failure_reason"]
        assert ua.get("log_tail"), f"{kind}: no log tail"
        assert t.constraints["server"] > 0
    assert by[json.dumps(GOOD, sort_keys=True)].user_attrs["outcome"] == "complete"
    left = wait_gone(cfg.study)
    add("server_crashes", kills=3, kills_survived=3, orphans=len(left))
    assert not left
    assert not list((cfg.study_dir / "hosts").glob("*/run/*.json"))


def test_nccl_init_hang_is_stopped_at_the_dist_init_timeout(tmp_path):
    """A NCCL init hang logs nothing after 'Init torch distributed begin.': the readiness check stops it
    ``dist_init_timeout_s`` later, long before the boot timeout, the trial is recorded as a timeout with that reason
    and the study goes on; a healthy boot with the same short limit is not cut (its distributed init ends)."""
    cfg = make_cfg(
        tmp_path,
        "faults-dist-init",
        initial=[HANG, GOOD],
        budget={"trials": 3},
        server={"command": sim_command(), "boot_timeout_s": 600, "dist_init_timeout_s": 2},
    )
    space = parse_space(SPACE, "faults.yaml")
    hosts = [local_host("local")]
    trials = run_study(cfg, space, hosts, ThreadExecutor(hosts, cfg.study_dir.absolute()), Recorder())
    by = {json.dumps(t.params, sort_keys=True): t for t in trials if t.params}
    hang = by[json.dumps(HANG, sort_keys=True)].user_attrs
    assert hang["outcome"] == "infeasible" and hang["failure_kind"] == "timeout", hang
    assert "no 'Init torch distributed ends' 2 s after the distributed init began" in hang["failure_reason"]
    assert hang["log_tail"].rstrip().endswith("Init torch distributed begin.")
    assert by[json.dumps(GOOD, sort_keys=True)].user_attrs["outcome"] == "complete"
    assert not wait_gone(cfg.study)


def test_server_killed_at_each_phase(tmp_path):
    """SIGKILL the server's process group while it boots, warms up and serves the benchmark (not the baseline's:
    a failed baseline stops the study, tests/test_check_before_spending.py)."""
    plan = {1: "booting", 2: "warming_up", 3: "benchmarking"}
    killed: dict[int, tuple[str, int]] = {}
    cfg = make_cfg(
        tmp_path,
        "faults-phase",
        initial=[GOOD, {**GOOD, "speculative-num-steps": 3}, {**GOOD, "speculative-num-steps": 5}],
        budget={"trials": 5, "stop_below_gain_pct": None},
        workload={"chunks": 4, "requests_per_chunk": 3, "max_tokens": 64},
        server={"command": sim_command(time_scale=0.004), "boot_timeout_s": 30},
    )
    run_dir = cfg.study_dir.absolute() / "hosts" / "local" / "run"

    def hook(driver, ev) -> None:
        if isinstance(ev, PhaseEvent) and plan.get(ev.trial) == ev.phase and ev.trial not in killed:
            if ev.phase == "booting":  # into the boot: past the imports (its log has lines), before the port opens
                log = cfg.study_dir.absolute() / "trials" / str(ev.trial) / "server.log"
                deadline = time.monotonic() + 20.0  # a loaded machine imports slowly
                while time.monotonic() < deadline and not (log.exists() and log.stat().st_size > 0):
                    time.sleep(0.05)
            for r in pid_records(run_dir):
                os.killpg(int(r["pgid"]), signal.SIGKILL)
                killed[ev.trial] = (ev.phase, int(r["pgid"]))

    rec = Recorder(hook)
    space = parse_space(SPACE, "faults.yaml")
    hosts = [local_host("local")]
    trials = run_study(cfg, space, hosts, ThreadExecutor(hosts, cfg.study_dir.absolute()), rec)
    assert set(killed) == set(plan), (killed, rec.lines)
    for n, (phase, _) in killed.items():
        ua = trials[n].user_attrs
        assert ua["outcome"] in ("infeasible", "failed"), (phase, ua)
        assert ua.get("failure_reason"), (phase, ua)
        assert (
            "-9" in ua["failure_reason"] or "status" in ua["failure_reason"] or "no request" in ua["failure_reason"]
        ), (phase, ua["failure_reason"])
        assert ua.get("log_tail") and "wrote nothing" not in ua["log_tail"], (phase, ua)  # the server's own lines
    # the study went on: the last launch completed
    assert trials[-1].user_attrs["outcome"] == "complete", [t.user_attrs.get("outcome") for t in trials]
    left = wait_gone(cfg.study)
    add("server_kills", kills=len(killed), kills_survived=len(killed), orphans=len(left))
    assert not left


# ----------------------------------------------------------------------------------------- actors and hosts


def test_ray_actor_killed_mid_trial_requeued_once(tmp_path, ray_runtime):
    """ray.kill the host's actor while its trial runs: the trial is re-queued once (a second death fails it), the
    server the dead actor left is stopped, and the study goes on with a new actor."""
    kills: list[tuple[int, str]] = []
    plan = {0: ["benchmarking"], 1: ["booting", "booting"]}  # trial number -> the phases at which to kill
    cfg = make_cfg(
        tmp_path,
        "faults-actor",
        budget={"trials": 2},
        initial=[GOOD],
        workload={"chunks": 4, "requests_per_chunk": 3, "max_tokens": 64},
    )
    space = parse_space(SPACE, "faults.yaml")
    hosts = [local_host("h0")]
    executor = RayExecutor(hosts, cfg.study_dir.absolute())
    run_dir = cfg.study_dir.absolute() / "hosts" / "h0" / "run"
    servers: list[int] = []
    alive_after_kill: list[int] = []

    def hook(driver, ev) -> None:
        todo = plan.get(ev.trial) if isinstance(ev, PhaseEvent) else None
        if todo and todo[0] == ev.phase:
            todo.pop(0)
            time.sleep(0.3)
            servers.extend(int(r["pgid"]) for r in pid_records(run_dir))
            ray_runtime.kill(executor.actors["h0"], no_restart=True)
            kills.append((ev.trial, ev.phase))
            # the dead actor's server is gone before the trial is retried (Ray kills a dead worker's children on
            # Linux; the new actor also reaps the pid files, which is what covers a remote server of an SSH host)
            deadline = time.monotonic() + 10
            while any(_proc.group_alive(g) for g in servers) and time.monotonic() < deadline:
                time.sleep(0.05)
            alive_after_kill.extend(g for g in servers if _proc.group_alive(g))

    rec = Recorder(hook)
    trials = run_study(cfg, space, hosts, executor, rec)
    assert len(kills) == 3, (kills, rec.lines)
    base, second = trials[0], trials[1]
    assert base.state == TrialState.COMPLETE and base.user_attrs["outcome"] == "complete"
    assert "died" in base.user_attrs["host_fault_0"]
    assert not alive_after_kill
    assert second.state == TrialState.FAIL and "host fault" in second.user_attrs["failure_reason"]
    assert {"host_fault_0", "host_fault_1"} <= set(second.user_attrs) and "host_fault_2" not in second.user_attrs
    # the study went on after the failed trial: one more launch, on a fresh actor
    assert trials[-1].user_attrs.get("outcome") == "complete" and trials[-1].number > 1
    assert servers
    left = wait_gone(cfg.study)
    add("actor_kills", kills=len(kills), kills_survived=len(kills), orphans=len(left))
    assert not left
    assert not list(run_dir.glob("*.json"))


def test_host_that_keeps_failing_is_quarantined(tmp_path):
    """A host whose Python does not exist fails every start (a host fault, not the configuration's): it is
    quarantined after a few faults and the study finishes on the good host."""
    cfg = make_cfg(tmp_path, "faults-quarantine", budget={"trials": 3})
    space = parse_space(SPACE, "faults.yaml")
    hosts = [HostConfig(name="bad", type="local", python=str(tmp_path / "no-such-python")), local_host("good")]
    rec = Recorder()
    trials = run_study(cfg, space, hosts, ThreadExecutor(hosts, cfg.study_dir.absolute()), rec)
    assert any("[bad] quarantined" in line for line in rec.lines), rec.lines
    launched = [t for t in trials if t.user_attrs.get("launched")]
    assert len(launched) == 3 and all(t.user_attrs["host"] == "good" for t in launched)
    assert all(t.user_attrs.get("outcome") in ("complete", "infeasible", "pruned") for t in launched)
    add("host_faults", kills=3, kills_survived=3, orphans=len(wait_gone(cfg.study)))


# ------------------------------------------------------------------------------------------------------ SSH


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd(tmp_path_factory.mktemp("sshd-faults"))
    yield server
    server.stop()


def ssh_host(sshd: Sshd, tmp_path: Path, **over) -> HostConfig:
    base = dict(
        name="ssh0",
        type="ssh",
        address="127.0.0.1",
        ssh_port=sshd.port,
        user=sshd.user,
        key_file=str(sshd.user_key),
        use_agent=False,
        known_hosts=str(sshd.trust()),
        connect_timeout_s=5,
        keepalive_s=2,
        python=sys.executable,
        workdir=str(tmp_path / "remote"),
        server_port="auto",
    )
    base.update(over)
    return HostConfig(**base)


SSH_CUT: dict = {}


def test_ssh_connection_cut_mid_trial(tmp_path, sshd):
    """Close the SSH transport under a booting and a benchmarking trial: the host reconnects (or the trial fails
    cleanly as a host fault), and no remote server is left running."""
    cuts: list[tuple[int, str]] = []
    plan = {0: "booting", 1: "benchmarking"}
    cfg = make_cfg(
        tmp_path,
        "faults-ssh",
        budget={"trials": 3},
        initial=[GOOD],
        workload={"chunks": 4, "requests_per_chunk": 3, "max_tokens": 64},
    )
    space = parse_space(SPACE, "faults.yaml")
    hosts = [ssh_host(sshd, tmp_path)]
    executor = ThreadExecutor(hosts, cfg.study_dir.absolute())
    host = executor.hosts["ssh0"]

    def hook(driver, ev) -> None:
        if isinstance(ev, PhaseEvent) and plan.get(ev.trial) == ev.phase and ev.trial not in dict(cuts):
            time.sleep(0.3)
            transport = host._client.get_transport() if host._client is not None else None
            if transport is not None:
                transport.close()
                cuts.append((ev.trial, ev.phase))

    rec = Recorder(hook)
    trials = run_study(cfg, space, hosts, executor, rec)
    assert len(cuts) == 2, (cuts, rec.lines)
    SSH_CUT["outcomes"] = {n: (phase, trials[n].user_attrs) for n, phase in cuts}
    for n, phase in cuts:
        assert trials[n].state != TrialState.RUNNING and trials[n].user_attrs.get("outcome"), phase
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert trials[-1].user_attrs.get("outcome") == "complete", rec.lines  # the study went on after the cuts
    left = wait_gone(cfg.study)
    remote_pid_files = list((tmp_path / "remote" / "run").glob("*.json"))
    add("ssh_cuts", kills=len(cuts), kills_survived=len(cuts), orphans=len(left))
    assert not left and not remote_pid_files


def test_ssh_cut_is_not_blamed_on_the_configuration():
    assert "outcomes" in SSH_CUT, "test_ssh_connection_cut_mid_trial must run first (same module, file order)"
    for _n, (phase, ua) in SSH_CUT["outcomes"].items():
        # reconnected and finished, or re-queued after a clean host fault: never a constraint violation
        assert ua.get("outcome") == "complete" or any(k.startswith("host_fault") for k in ua), (phase, ua)


# ------------------------------------------------------------------------------------------- hostile values

HOSTILE = [
    "$(touch {m}/a)",
    "`touch {m}/b`",
    "x; touch {m}/c",
    "x && touch {m}/d",
    "x | touch {m}/e",
    "x\ntouch {m}/f",
    "'; touch {m}/g; '",
    '"; touch {m}/h; "',
    "${{IFS}}touch${{IFS}}{m}/i",
    "x > {m}/j",
    "$((1+1))",
    "*",
]


def _hostile_space(m: Path) -> dict:
    vals = [h.format(m=m) for h in HOSTILE]
    space = json.loads(json.dumps(SPACE))
    space["fixed"].update({"served-model-name": vals[0], "tokenizer-path": vals[1], "log-level": vals[2]})
    space["env"] = {f"HOSTILE_{i}": v for i, v in enumerate(vals)}
    space["parameters"]["HOSTILE_P"] = {"type": "categorical", "choices": vals[3:6]}
    return space


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_hostile_values_reach_the_server_literally(tmp_path, where, request):
    marker = tmp_path / "marker"
    marker.mkdir()
    dump = tmp_path / "dump"
    dump.mkdir()
    vals = [h.format(m=marker) for h in HOSTILE]
    command = [
        "{python}",
        str(FAULTS_DIR / "argv_dump.py"),
        str(dump),
        "-m",
        "optimizer.sim",
        "--sim-profile",
        KIMI,
        "--sim-time-scale",
        "0.002",
        "--sim-step-scale",
        "0.1",
    ]
    study = f"faults-inject-{where}"
    cfg = make_cfg(
        tmp_path,
        study,
        budget={"trials": 2},
        server={"command": command, "boot_timeout_s": 20, "env": {"HOSTILE_S": vals[6]}},
        initial=[{**GOOD, "HOSTILE_P": vals[3]}],
    )
    space_file = tmp_path / "hostile.yaml"  # through a real YAML file, as a user would write it
    space_file.write_text(yaml.safe_dump(_hostile_space(marker), allow_unicode=True))
    space = load_space(space_file)
    if where == "ssh":
        hosts = [
            ssh_host(
                request.getfixturevalue("sshd"), tmp_path, env={"HOSTILE_H": vals[7]}, cuda_visible_devices=vals[8]
            )
        ]
    else:
        hosts = [HostConfig(name="local", type="local", env={"HOSTILE_H": vals[7]}, cuda_visible_devices=vals[8])]
    rec = Recorder()
    trials = run_study(cfg, space, hosts, ThreadExecutor(hosts, cfg.study_dir.absolute()), rec)
    launched = [t for t in trials if t.user_attrs.get("launched")]
    assert len(launched) == 2 and all(t.user_attrs["outcome"] == "complete" for t in launched), rec.lines
    dumps = [json.loads(p.read_text()) for p in dump.glob("*.json")]
    # one server process a launch; a host fault (an SSH session lost on a loaded machine) re-queues a launch, and
    # that launch must carry the values literally too
    faults = sum(1 for t in trials for k in t.user_attrs if k.startswith(R.HOST_FAULT_PREFIX))
    assert len(dumps) == 2 + faults, (len(dumps), faults, rec.lines)
    for d in dumps:
        argv, env = d["argv"], d["env"]
        assert argv[argv.index("--served-model-name") + 1] == vals[0]
        assert argv[argv.index("--tokenizer-path") + 1] == vals[1]
        assert argv[argv.index("--log-level") + 1] == vals[2]
        for i, v in enumerate(vals):
            assert env[f"HOSTILE_{i}"] == v
        assert env["HOSTILE_S"] == vals[6] and env["HOSTILE_H"] == vals[7]
    assert {d["env"].get("HOSTILE_P") for d in dumps} >= {vals[3]}
    executed = sorted(p.name for p in marker.iterdir())
    add("injections", injections_tried=len(vals) * 2, injections_executed=len(executed), orphans=len(wait_gone(study)))
    assert not executed, f"shell metacharacters were executed: {executed}"


# ------------------------------------------------------------------------------------------------- secrets

TOKEN = "hf_" + "Zx9" * 10
PASSWORD = "s3cr3t-Pa55word-value"


def test_secrets_never_reach_logs_notes_or_exports(tmp_path):
    space_data = json.loads(json.dumps(SPACE))
    space_data["env"] = {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD}
    space_data["fixed"]["api-key"] = TOKEN
    cfg = make_cfg(
        tmp_path,
        "faults-secrets",
        budget={"trials": 2},
        initial=[GOOD],
        server={"command": sim_command(), "env": {"MY_AUTH_TOKEN": TOKEN}},
    )
    space = parse_space(space_data, "secret.yaml")
    hosts = [HostConfig(name="local", type="local", env={"HF_TOKEN": TOKEN, "GIT_PASSWORD": PASSWORD})]
    rec = Recorder()
    trials = run_study(cfg, space, hosts, ThreadExecutor(hosts, cfg.study_dir.absolute()), rec)
    assert any(t.user_attrs.get("outcome") == "complete" for t in trials[1:]), rec.lines
    study = optuna.load_study(
        study_name=cfg.study,
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(cfg.storage_url)),
    )
    export_study(study, cfg.study_dir)
    places: dict[str, str] = {"progress": "\n".join(rec.lines)}
    for name in ("best.yaml", "best.env", "summary.json", "journal.log"):
        places[name] = (cfg.study_dir / name).read_text()
    for p in cfg.study_dir.rglob("*"):
        if p.is_file() and p.suffix in (".md", ".txt", ".log", ".sh", ".json") and "server.log" not in p.name:
            places[str(p.relative_to(cfg.study_dir))] = p.read_text(errors="replace")
    for t in study.get_trials():
        places[f"trial {t.number} attrs"] = json.dumps(t.user_attrs) + json.dumps(t.system_attrs)
    places["study attrs"] = json.dumps(study.user_attrs)  # notes live in system attrs: journal.log covers them
    leaks = sorted(k for k, text in places.items() if TOKEN in text or PASSWORD in text)
    add("secrets", secrets_checked=len(places), secrets_leaked=len(leaks))
    assert not leaks, leaks
    # redaction kept what is not a secret
    best = (cfg.study_dir / "best.yaml").read_text()
    assert "model-path: m" in best and "tp-size: 8" in best and "api-key: '***'" in best


def test_ctrl_c_while_a_requeued_trial_waits_for_a_host(tmp_path):
    """Ctrl-C while a trial waits for a host (its host was quarantined, the other one is busy): the driver stops
    once the running trial is stopped, and the waiting trial is recorded (not left RUNNING)."""
    cfg = make_cfg(
        tmp_path,
        "faults-int-pending",
        budget={"trials": 3},
        workload={"chunks": 4, "requests_per_chunk": 3, "max_tokens": 64},
    )
    space = parse_space(SPACE, "faults.yaml")
    hosts = [HostConfig(name="bad", type="local", python=str(tmp_path / "no-such-python")), local_host("good")]
    fired: list[int] = []

    def hook(driver, ev) -> None:
        if (
            isinstance(ev, PhaseEvent)
            and ev.host == "good"
            and ev.phase == "benchmarking"
            and not fired
            and "bad" in driver.quarantined
            and driver.pending
        ):
            fired.append(len(driver.pending))
            driver._on_sigint(signal.SIGINT, None)  # the driver's own Ctrl-C handler, as the signal would run it

    rec = Recorder(hook)
    executor = ThreadExecutor(hosts, cfg.study_dir.absolute())
    driver = Driver(cfg, space, hosts, executor, progress=rec)
    th = threading.Thread(target=driver.run, daemon=True)
    th.start()
    th.join(90)
    stuck = th.is_alive()
    if stuck:  # let the thread end: the test has failed already
        driver.pending.clear()
    executor.shutdown()
    assert fired, rec.lines
    assert not stuck, "the driver kept looping after Ctrl-C with a trial waiting for a host"
    trials = reload(cfg)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    add("ctrl_c", kills=1, kills_survived=1, orphans=len(wait_gone(cfg.study)))


def test_ssh_host_lost_mid_trial_server_stopped_by_next_run(tmp_path):
    """sshd goes away and the connection is cut while a trial benchmarks: the trial ends as a host fault, the
    host is quarantined and the driver stops (no hang). The remote server could not be reached to stop it; once
    sshd is back, the next run finds it through its remote pid file and stops it."""
    import subprocess

    from tests.sshd import SSHD

    sshd = Sshd(tmp_path / "sshd")
    cut: list[int] = []
    cfg = make_cfg(
        tmp_path,
        "faults-ssh-lost",
        budget={"trials": 2},
        initial=[GOOD],
        workload={"chunks": 4, "requests_per_chunk": 3, "max_tokens": 64},
    )
    space = parse_space(SPACE, "faults.yaml")
    hosts = [ssh_host(sshd, tmp_path, connect_timeout_s=2)]
    executor = ThreadExecutor(hosts, cfg.study_dir.absolute())
    host = executor.hosts["ssh0"]

    def hook(driver, ev) -> None:
        if isinstance(ev, PhaseEvent) and ev.phase == "benchmarking" and not cut:
            os.kill(sshd.proc.pid, signal.SIGTERM)  # the listener only: no new connection from now on
            sshd.proc.wait(5)
            host._client.get_transport().close()
            cut.append(ev.trial)

    rec = Recorder(hook)
    restarted = None
    try:
        trials = run_study(cfg, space, hosts, executor, rec)
        assert cut, rec.lines
        assert not [t.number for t in trials if t.state == TrialState.RUNNING]
        assert any("quarantined" in line for line in rec.lines), rec.lines
        t = trials[cut[0]]
        assert any(k.startswith("host_fault") for k in t.user_attrs) or t.user_attrs.get("outcome"), t.user_attrs
        left_behind = study_servers(cfg.study)
        # sshd comes back (same port, same keys); the same study is run again
        restarted = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(sshd.config)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sshd.proc = restarted
        wait_for(sshd._listening, 10, "sshd back")
        cfg2 = make_cfg(
            tmp_path,
            "faults-ssh-lost",
            budget={"trials": 3},
            initial=[GOOD],
            workload={"chunks": 4, "requests_per_chunk": 3, "max_tokens": 64},
        )
        rec2 = Recorder()
        run_study(cfg2, space, hosts, ThreadExecutor(hosts, cfg2.study_dir.absolute()), rec2)
        reaped = [line for line in rec2.lines if "left by a previous run" in line]
        left = wait_gone(cfg.study)
        add("ssh_lost", kills=1, kills_survived=int(not left), orphans=len(left), remote_left_then_reaped=len(reaped))
        print("ssh lost:", left_behind, reaped)
        assert not left, (left, rec2.lines)
        assert not list((tmp_path / "remote" / "run").glob("*.json"))
        if left_behind:
            assert reaped, rec2.lines
    finally:
        sshd.stop()
