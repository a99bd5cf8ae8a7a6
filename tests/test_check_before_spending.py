"""Mistakes that burned launches or exited 0 (issue 26), each through the real command line: refused before a
study is created (misspelt flags and values, unsafe names, empty files, an unreachable host, a missing program or
module, a taken port), a failing baseline that stops the study with its log line, resuming after the fix, and
resuming with another space, workload or server command."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import KIMI
from optuna.trial import TrialState

from optimizer import cli
from optimizer.study import open_storage

SPACE = {
    "name": "tiny",
    "fixed": {"model-path": "m", "speculative-draft-model-path": "d", "tp-size": 8, "attention-backend": "flashinfer"},
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [2, 3]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL"]},
    },
}
SIM = ["--profile", KIMI, "--time-scale", "0.002", "--step-scale", "0.1"]


def _space(tmp_path: Path, name: str = "space.yaml", **changes) -> Path:
    data = json.loads(json.dumps(SPACE))
    for key, value in changes.items():
        section, _, item = key.partition(".")
        data[section][item] = value
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _run(tmp_path: Path, *extra: str, space: Path | None = None, study: str = "s", trials: int = 2) -> int:
    args = ["optimize", "--study", study, "--studies-dir", str(tmp_path / "studies"), "--executor", "thread"]
    args += ["--plain", "--space", str(space or _space(tmp_path)), "--trials", str(trials)]
    args += ["--max-tokens", "16", "--chunks", "2", "--requests-per-chunk", "1", "--boot-timeout", "30"]
    return cli.main([*args, *extra])


@pytest.mark.parametrize(
    ("changes", "key", "words"),
    [
        ({"fixed.tp-sise": 8}, "fixed.tp-sise", "did you mean 'tp-size'"),
        (
            {"parameters.speculative-num-step": {"type": "int", "low": 1, "high": 3}},
            "parameters.speculative-num-step",
            "did you mean 'speculative-num-steps'",
        ),
        (
            {"parameters.NCCL_PROTO": {"type": "categorical", "choices": ["unset", "Simpel"]}},
            "parameters.NCCL_PROTO.choices[1]",
            "did you mean 'Simple'",
        ),
        ({"fixed.attention-backend": "flashinfa"}, "fixed.attention-backend", "not an SGLang attention backend"),
    ],
)
def test_misspelt_flags_and_values_are_refused_before_anything_starts(tmp_path, capsys, changes, key, words):
    assert _run(tmp_path, *SIM, space=_space(tmp_path, **changes)) == 2
    err = capsys.readouterr().err
    assert "space.yaml" in err and key in err and words in err
    assert not (tmp_path / "studies").exists()  # no study, no launch


def test_unsafe_names_and_empty_files_are_refused(tmp_path, capsys):
    for name in ("..", "a/b", "."):
        assert _run(tmp_path, *SIM, study=name) == 2
        assert "study" in capsys.readouterr().err
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert cli.main(["optimize", "--config", str(empty), "--studies-dir", str(tmp_path / "studies")]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "is empty" in err and "study" in err
    assert _run(tmp_path, *SIM, space=empty) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "parameters" in err
    assert _run(tmp_path, *SIM, "--hosts", str(empty)) == 2
    assert str(empty) in capsys.readouterr().err
    assert not (tmp_path / "studies").exists() and not (tmp_path / "journal.log").exists()


def test_hosts_and_server_command_are_tried_before_the_study(tmp_path, capsys):
    # a missing program, and a Python module that is not installed
    assert _run(tmp_path, "--server-command", "no-such-server-program --x") == 1
    assert "program not found: no-such-server-program" in capsys.readouterr().err
    assert _run(tmp_path, "--server-command", "{python} -m no_such_sglang_module.launch_server") == 1
    assert "No module named 'no_such_sglang_module'" in capsys.readouterr().err
    # a fixed port another process holds
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        hosts = tmp_path / "hosts.yaml"
        hosts.write_text(f"hosts:\n  - {{name: box, type: local, server_port: {port}}}\n")
        assert _run(tmp_path, *SIM, "--hosts", str(hosts)) == 1
        assert f"port {port} is taken" in capsys.readouterr().err
    # an SSH host nobody answers on: one clear line, no paramiko traceback, no false "stopped ... server(s)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    hosts.write_text(
        f"hosts:\n  - {{name: gpu-b, type: ssh, address: 127.0.0.1, ssh_port: {dead}, connect_timeout_s: 3}}\n"
    )
    assert _run(tmp_path, *SIM, "--hosts", str(hosts)) == 1
    out, err = capsys.readouterr()
    assert "gpu-b: cannot reach" in err and "Traceback" not in err + out and "left by a previous run" not in out
    assert not (tmp_path / "studies").exists()


def _study(tmp_path: Path, name: str = "s") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(str(tmp_path / "studies" / name / "journal.log")))


def test_a_failing_baseline_stops_the_study_and_a_fixed_command_measures_it_again(tmp_path, capsys):
    broken = ["--server-command", "{python} -c 'import sglang_not_installed'"]
    assert _run(tmp_path, *broken, trials=5) == 1
    out, err = capsys.readouterr()
    assert "No module named 'sglang_not_installed'" in err and "the baseline (trial 0) failed" in err
    study = _study(tmp_path)
    assert sum(1 for t in study.trials if t.user_attrs.get("launched")) == 1  # not the whole budget
    assert not study.get_trials(states=(TrialState.RUNNING,))
    # Fixed: the study goes on, measures the baseline again and exports what really ran.
    assert _run(tmp_path, *SIM, trials=3) == 0
    out = capsys.readouterr().out
    assert "measures the baseline again" in out
    study = _study(tmp_path)
    baselines = [t for t in study.trials if t.user_attrs.get("baseline") and t.user_attrs.get("outcome") == "complete"]
    assert len(baselines) == 1 and "optimizer.sim" in baselines[0].user_attrs["server_command"]
    summary = json.loads((tmp_path / "studies/s/summary.json").read_text())
    assert "optimizer.sim" in summary["server_command"] and summary["baseline"]["trial"] == baselines[0].number
    assert "optimizer.sim" in (tmp_path / "studies/s/best.sh").read_text()


def test_resume_only_what_matches(tmp_path, capsys):
    assert _run(tmp_path, *SIM, trials=1) == 0  # the baseline only
    capsys.readouterr()
    other = _space(tmp_path, "other.yaml", **{"parameters.NCCL_PROTO": {"type": "categorical", "choices": ["LL128"]}})
    assert _run(tmp_path, *SIM, space=other, trials=2) == 2
    err = capsys.readouterr().err
    assert "searched another space" in err and "NCCL_PROTO" in err and "Traceback" not in err
    assert "CategoricalDistribution" not in err
    assert _run(tmp_path, *SIM, "--max-tokens", "24", trials=2) == 2  # after _run's own --max-tokens 16: wins
    err = capsys.readouterr().err
    assert "another workload" in err and "max_tokens" in err
    assert _run(tmp_path, "--profile", KIMI, "--time-scale", "0.003", trials=2) == 2
    assert "another server command" in capsys.readouterr().err
    study = _study(tmp_path)
    assert sum(1 for t in study.trials if t.user_attrs.get("launched")) == 1  # nothing launched by the refusals
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_nothing_measured_exits_non_zero(tmp_path, capsys):
    data = json.loads(json.dumps(SPACE))
    data["baseline"] = False
    data["parameters"]["speculative-num-steps"] = {"type": "categorical", "choices": [2]}
    path = tmp_path / "nobase.yaml"
    path.write_text(yaml.safe_dump(data))
    # every launch crashes (no baseline to stop at): the study ends with nothing measured and says so
    assert _run(tmp_path, "--server-command", "{python} -c 'raise SystemExit(3)'", space=path, trials=2) == 1
    assert "nothing was measured" in capsys.readouterr().err


def test_small_things(tmp_path, monkeypatch):
    from optimizer.notes import tidy_tail
    from optimizer.probes import host_facts
    from optimizer.readiness import clip
    from optimizer.space import load_space

    reason = "oom: RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. " + "x " * 400
    cut = clip(reason, 100)
    assert "--mem-fraction-static." in cut and cut.endswith(" …") and len(cut) <= 102
    assert tidy_tail("\x1b[32mINFO\x1b[0m:     Uvicorn running\n\x1b[1;31mERROR\x1b[0m boom") == (
        "INFO:     Uvicorn running\nERROR boom"
    )
    if len(os.sched_getaffinity(0)) > 1:  # as inside a Ray actor: the affinity narrowed to one core
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(before)})
        try:
            assert host_facts(None, "")["cpus"] == os.cpu_count()
        finally:
            os.sched_setaffinity(0, before)
    else:
        assert host_facts(None, "")["cpus"] == os.cpu_count()
    monkeypatch.chdir(tmp_path)  # the project's spaces are found from another directory
    assert load_space("search_spaces/demo.yaml").model.name == "demo"
    helps = {a.dest: a.help for a in cli.build_parser()._subparsers._group_actions[0].choices["optimize"]._actions}
    for dest in ("sampler", "pruner", "seed", "chunks"):
        assert helps[dest], dest


def test_every_host_quarantined_exits_non_zero(tmp_path, capsys):
    """The host passes the check, then another program takes its port before the first launch (the wrapper
    below does it when the check runs it): every launch is a host fault, the host is quarantined, and the run
    says so and exits 1, not 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pidfile = tmp_path / "holder.pid"
    holder = f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(120)"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ] && [ ! -e {pidfile} ]; then\n'
        f'  {sys.executable} -c "{holder}" >/dev/null 2>&1 &\n'
        f"  echo $! > {pidfile}; sleep 1\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  - {{name: box, type: local, server_port: {port}, python: {wrapper}}}\n")
    try:
        assert _run(tmp_path, *SIM, "--hosts", str(hosts), trials=2) == 1
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), 9)
    out, err = capsys.readouterr()
    assert "every host is quarantined" in out and "every host is quarantined" in err
    assert f"port {port} on 127.0.0.1 is taken" in out


def test_a_host_that_cannot_be_asked_is_not_reported_as_servers_stopped(tmp_path):
    from optimizer.executors import ThreadExecutor
    from optimizer.hosts.config import parse_hosts
    from optimizer.study.resume import reap_orphans

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    hosts = parse_hosts(
        [{"name": "gpu-b", "type": "ssh", "address": "127.0.0.1", "ssh_port": dead, "connect_timeout_s": 3}]
    )
    ex = ThreadExecutor(hosts, tmp_path)
    notes: list[str] = []
    try:
        reap_orphans(ex, notes.append)
    finally:
        ex.shutdown()
    assert len(notes) == 1 and "could not look for servers left by a previous run" in notes[0], notes
    assert "stopped" not in notes[0] and "cannot reach" in notes[0]


def test_a_misspelt_initial_configuration_is_refused(tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text("study: s\ninitial:\n  - {speculative-algorithm: EAGLE3, speculative-num-step: 3}\n")
    assert (
        cli.main(
            [
                "optimize",
                "--config",
                str(study),
                "--studies-dir",
                str(tmp_path / "studies"),
                "--space",
                str(_space(tmp_path)),
                *SIM,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "initial[0].speculative-num-step" in err and "speculative-num-steps" in err
    assert not (tmp_path / "studies").exists()
