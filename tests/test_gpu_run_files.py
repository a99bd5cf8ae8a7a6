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
