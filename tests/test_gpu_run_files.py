"""The real-GPU study files in tools/gpu_run load, and their exports would need best.sh for the refused key."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.settings import load_study
from optimizer.sglang import config_file
from optimizer.space import load_space

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "study", ["tools/gpu_run/study.yaml", "tools/gpu_run/study_tp2.yaml", "tools/gpu_run/study_adaptive.yaml"]
)
def test_gpu_run_study_files_load(study: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = load_study(study)
    space = load_space(cfg.space)
    assert cfg.server.command[:2] == ["bash", "tools/gpu_run/launch_sglang.sh"]
    _, on_cli = config_file.split(space.model.fixed)
    assert on_cli == {"cuda-graph-backend-prefill": "disabled"}
    for params in cfg.initial:
        assert set(params) <= set(space.params), params


STUDIES = ["tools/gpu_run/study.yaml", "tools/gpu_run/study_tp2.yaml"]
LAUNCH = ROOT / "tools" / "gpu_run" / "launch_sglang.sh"


@pytest.mark.parametrize("study", STUDIES)
def test_gpu_run_studies_confirm_their_best_and_say_which_sampler_they_use(study: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = load_study(study)
    assert cfg.confirm.rounds >= 2 and cfg.confirm.top >= 1  # the exported best is a confirmed one
    text = (ROOT / study).read_text()
    assert cfg.sampler.name == "structured"
    assert "TPE" not in text  # the comments name the sampler it has
    assert "structured sampler" in text


@pytest.mark.parametrize("study", STUDIES)
def test_the_accept_length_override_is_in_server_env_where_the_alarms_see_it(study: str, monkeypatch) -> None:
    from optimizer import alarms
    from optimizer.study import records as R

    monkeypatch.chdir(ROOT)
    cfg = load_study(study)
    curve = cfg.server.env[alarms.SIMULATED_ACCEPT_ENV].split(",")
    assert [float(x) for x in curve[:5]] == [1.76, 2.285, 2.655, 2.89, 3.035]  # docs/calibration.md's chat curve
    base = {R.BASELINE: True, R.FLAGS: {}, R.GREEDY_DIGESTS: {"a": "1", "b": "2"}}
    spec = {
        R.FLAGS: {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3},
        R.GREEDY_DIGESTS: {"a": "x", "b": "y"},  # fixed tokens: every output differs from the baseline's
    }
    kinds = [a.kind for a in alarms.trial_alarms(spec, 300.0, base, 200.0, server_env=cfg.server.env)]
    assert "greedy_mismatch" not in kinds
    assert "not meaningful" in (alarms.greedy_unchecked(spec, cfg.server.env) or "")
    # without the study's server.env the same outputs would raise it: the override must travel there
    assert "greedy_mismatch" in [a.kind for a in alarms.trial_alarms(spec, 300.0, base, 200.0)]


def _wrapper(tmp_path: Path, args: list[str], env: dict[str, str]) -> str:
    """Run launch_sglang.sh with a stand-in for SGLang that prints the accept length it was given."""
    import os
    import subprocess
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "python3"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1 $2" = "-m sglang.launch_server" ]; then echo "SGLANG got ${SGLANG_SIMULATE_ACC_LEN-unset}"; '
        f'exit 0; fi\nexec "{sys.executable}" "$@"\n'
    )
    fake.chmod(0o755)
    full = {k: v for k, v in os.environ.items() if k != "SGLANG_SIMULATE_ACC_LEN"}
    full.update(env, PATH=f"{bindir}:{os.environ['PATH']}")
    r = subprocess.run(["bash", str(LAUNCH), *args], env=full, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if line.startswith("SGLANG got")][-1].split()[-1]


def test_the_wrapper_hands_sglang_the_trials_accept_length_from_server_env_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    env = dict(load_study("tools/gpu_run/study.yaml").server.env)
    assert _wrapper(tmp_path, ["--speculative-num-steps", "3", "--port", "1"], env) == "2.655"
    assert _wrapper(tmp_path, ["--speculative-num-steps", "1"], env) == "1.76"
    cfg = tmp_path / "best.yaml"
    cfg.write_text("speculative-algorithm: EAGLE3\nspeculative-num-steps: 5\n")
    assert _wrapper(tmp_path, ["--config", str(cfg)], env) == "3.035"  # the exported file's round trip
    # an adaptive server without a step count (an exported schedule): one accept length, the step-3 entry
    assert _wrapper(tmp_path, ["--speculative-adaptive", "--speculative-adaptive-config", "s.json"], env) == "2.655"
    tuned = tmp_path / "best-adaptive.json"
    tuned.write_text('{"16": {"candidate_steps": [2]}, "1": {"candidate_steps": [4, 5]}}')
    assert _wrapper(tmp_path, ["--speculative-adaptive", "--speculative-adaptive-config", str(tuned)], env) == "2.89"
    sched = tmp_path / "best-adaptive.yaml"
    sched.write_text("speculative-algorithm: EAGLE3\nspeculative-adaptive: true\n")
    assert _wrapper(tmp_path, ["--config", str(sched)], env) == "2.655"
    assert _wrapper(tmp_path, ["--port", "1"], env) == "unset"  # the baseline: no speculation, no override
    assert _wrapper(tmp_path, ["--speculative-num-steps", "2"], {"SGLANG_SIMULATE_ACC_LEN": "3.0"}) == "3.0"
    # nothing set in server.env: the wrapper sets nothing behind the optimizer's back
    assert _wrapper(tmp_path, ["--speculative-num-steps", "3"], {}) == "unset"
