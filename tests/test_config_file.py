"""SGLang's --config: what it refuses and how it reads keys; the simulator follows it; the export always boots.

The end-to-end test runs a real study (journal file, simulator processes) over a space whose fixed flags hold
``cuda-graph-backend-prefill`` (a key SGLang 0.5.17's --config refuses), then boots the exported ``best.sh`` on
the simulator and shows that the old export (everything in ``best.yaml``) fails with SGLang's own message.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import optuna
import pytest
import yaml
from conftest import sim_command

from optimizer.executors import ThreadExecutor
from optimizer.export import export_study
from optimizer.hosts.config import local_host
from optimizer.settings import parse_study
from optimizer.sglang import config_file
from optimizer.space import parse_space
from optimizer.study import Driver, Progress

ROOT = Path(__file__).resolve().parents[1]
REFUSED_PREFILL = "Unsupported config option 'cuda_graph_backend_prefill' with action 'DeprecatedStoreConstAction'"


def test_refused_keys_and_messages() -> None:
    assert config_file.refusal("cuda-graph-backend-prefill") == REFUSED_PREFILL
    assert config_file.refusal("cuda_graph_backend_prefill") == REFUSED_PREFILL  # looked up by destination
    assert config_file.refusal("cuda-graph-max-bs-decode") == (
        "Unsupported config option 'cuda_graph_max_bs_decode' with action 'DeprecatedAliasStoreAction'"
    )
    assert config_file.refusal("disable-cuda-graph") == (
        "Unsupported config option 'disable_cuda_graph' with action 'DeprecatedStoreTrueAction'"
    )
    # the deprecated alias itself passes: its destination is cuda_graph_max_bs_decode, not cuda_graph_max_bs
    for ok in ("cuda-graph-max-bs", "speculative-num-steps", "disable-custom-all-reduce", "tp-size"):
        assert config_file.refusal(ok) is None
    accepted, refused = config_file.split(
        {"model-path": "m", "cuda-graph-backend-prefill": "disabled", "enable-metrics": True, "x": False}
    )
    assert accepted == {"model-path": "m", "enable-metrics": True} and refused == {
        "cuda-graph-backend-prefill": "disabled"
    }


def test_conversion_follows_sglang(tmp_path) -> None:
    args = config_file.to_args(
        {
            "enable-metrics": True,
            "skip-server-warmup": False,
            "some-bool": False,
            "bs": [1, 2],
            "none": [],
            "d": {"a": 1},
        },
        store_true=["enable_metrics", "skip-server-warmup"],
    )
    assert args == ["--enable-metrics", "--some-bool", "false", "--bs", "1", "2", "--d", '{"a": 1}']
    with pytest.raises(ValueError, match="^" + REFUSED_PREFILL + "$"):
        config_file.to_args({"port": 1, "cuda-graph-backend-prefill": "disabled"}, store_true=[])
    good = tmp_path / "c.yaml"
    good.write_text("tp-size: 2\n")
    # the file's flags come first, so the command line wins
    assert config_file.merge(["--port", "1", "--config", str(good), "--tp-size", "4"], []) == [
        "--tp-size",
        "2",
        "--port",
        "1",
        "--tp-size",
        "4",
    ]
    bad = tmp_path / "c.txt"
    bad.write_text("a: 1\n")
    (tmp_path / "list.yaml").write_text("- a\n")
    for argv, msg in [
        (["--config", str(bad)], "Config file must be YAML format, got: .txt"),
        (["--config", str(tmp_path / "nope.yaml")], f"Config file not found: {tmp_path / 'nope.yaml'}"),
        (["--config", str(tmp_path / "list.yaml")], "Config file must contain a dictionary at root level"),
        (["--config", str(good), "--config", str(good)], "Multiple config files specified! Only one allowed."),
        (["--config"], "No config file specified after --config flag!"),
    ]:
        with pytest.raises(ValueError) as exc:
            config_file.merge(argv, [])
        assert str(exc.value) == msg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "optimizer.sim", "--sim-time-scale", "0.001", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_simulator_refuses_what_sglang_refuses(tmp_path) -> None:
    cfg = tmp_path / "best.yaml"
    cfg.write_text("model-path: m\ncuda-graph-max-bs: 8\ncuda-graph-backend-prefill: disabled\n")
    res = _sim("--config", str(cfg), "--port", str(_free_port()))
    assert res.returncode == 1, res.stderr
    assert res.stderr.rstrip().splitlines()[-1] == "ValueError: " + REFUSED_PREFILL
    assert 'server_args_config_parser.py", line 150, in _convert_config_to_args' in res.stderr
    # an underscore key becomes --speculative_num_steps, which argparse does not know
    cfg.write_text("model-path: m\nspeculative_num_steps: 3\n")
    res = _sim("--config", str(cfg), "--port", str(_free_port()))
    assert res.returncode == 2 and "unrecognized arguments: --speculative_num_steps 3" in res.stderr
    cfg2 = tmp_path / "best.yml.txt"
    cfg2.write_text("model-path: m\n")
    res = _sim("--config", str(cfg2))
    assert res.returncode == 1 and res.stderr.rstrip().endswith(
        "ValueError: Config file must be YAML format, got: .txt"
    )


SPACE = {
    "name": "refused-flag",
    "fixed": {
        "model-path": "m",
        "speculative-draft-model-path": "d",
        "attention-backend": "triton",
        "cuda-graph-max-bs": 16,
        "cuda-graph-backend-prefill": "disabled",
        "enable-metrics": True,
    },
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [3, 5]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "Simple"]},
    },
}


def _wait_health(base: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the exported configuration never became healthy")


def test_export_with_a_refused_flag_boots_through_best_sh(tmp_path) -> None:
    cfg = parse_study(
        {
            "study": "refused",
            "studies_dir": str(tmp_path / "studies"),
            "server": {
                "command": sim_command("llama-8b-dims-2x-h200", 0.002, 0.05),
                "boot_timeout_s": 30,
                # every trial runs with it, so best.env must carry it (a secret is masked, left for the user)
                "env": {"NCCL_DEBUG": "WARN", "HF_TOKEN": "hf_" + "x" * 30},
            },
            "workload": {"max_tokens": 32, "chunks": 2, "requests_per_chunk": 2, "warmup_requests": 1},
            "budget": {"trials": 3},
            "initial": [
                {
                    "speculative-algorithm": "EAGLE3",
                    "speculative-num-steps": 5,
                    "speculative-eagle-topk": 1,
                    "NCCL_PROTO": "Simple",
                },
            ],
        },
        "test",
    )
    hosts = [local_host("local")]
    executor = ThreadExecutor(hosts, cfg.study_dir.absolute())
    try:
        study = Driver(
            cfg, parse_space(SPACE, "refused.yaml"), hosts, executor, progress=Progress(lambda s: None)
        ).run()
    finally:
        executor.shutdown()
    summary = export_study(study, cfg.study_dir)
    out = cfg.study_dir
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert "cuda-graph-backend-prefill" not in best and best["cuda-graph-max-bs"] == 16
    assert summary["best"]["config_file_refused"] == ["cuda-graph-backend-prefill"]
    script = (out / "best.sh").read_text()
    assert "--cuda-graph-backend-prefill disabled" in script and "--config" in script
    assert os.access(out / "best.sh", os.X_OK)

    # best.env: the study's server environment in its own block, then the trial's own settings (which win)
    env_file = (out / "best.env").read_text()
    assert "# The study's server environment (server.env)" in env_file and "export NCCL_DEBUG=WARN\n" in env_file
    assert "hf_" not in env_file and "# export HF_TOKEN=...  (a secret" in env_file
    assert env_file.index("NCCL_DEBUG") < env_file.index("environment settings of the best trial")
    assert study.user_attrs["server_env"] == {"NCCL_DEBUG": "WARN", "HF_TOKEN": "***"}
    shell = subprocess.run(
        ["bash", "-c", f"source {out / 'best.env'}; echo $NCCL_DEBUG"], capture_output=True, text=True, check=True
    )
    assert shell.stdout.strip() == "WARN"

    # best.sh boots as is (with the environment of best.env), on the study's own server command
    port = _free_port()
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.Popen(
        ["bash", str(out / "best.sh"), "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_health(f"http://127.0.0.1:{port}", proc)
        info = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=5).json()
        # whichever trial is the answer (on a loaded machine it may be the baseline: every launch is CPU-bound there)
        assert info["speculative_num_steps"] == summary["best"]["flags"].get("speculative-num-steps")
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    # a study written before the server environment was recorded still exports, with the trial's settings only
    older = optuna.create_study(direction="maximize")
    for attr in ("server_command", "space", "workload"):
        older.set_user_attr(attr, study.user_attrs[attr])
    for t in study.trials:
        older.add_trial(t)
    export_study(older, tmp_path / "older")
    older_env = (tmp_path / "older" / "best.env").read_text()
    assert "server.env" not in older_env and "NCCL_DEBUG" not in older_env
    assert older_env.startswith("# NCCL and other environment settings of the best trial")

    # the old export (every flag in best.yaml) fails at once, with SGLang's message and exit status
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(dict(summary["best"]["flags"]), sort_keys=False))
    res = _sim("--sim-profile", "llama-8b-dims-2x-h200", "--config", str(old), "--port", str(_free_port()))
    assert res.returncode == 1 and res.stderr.rstrip().splitlines()[-1] == "ValueError: " + REFUSED_PREFILL
