"""Search spaces: loading, clear errors, conditionals, SGLang's rules, grid, and suggestion through Optuna."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from optimizer.candidate import Candidate
from optimizer.errors import ConfigError
from optimizer.sglang import flags as sgl
from optimizer.space import load_space, parse_space

ROOT = Path(__file__).resolve().parents[1]


def small_space(**extra):
    data = {
        "fixed": {"model-path": "m", "speculative-draft-model-path": "d"},
        "parameters": {
            "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
            "speculative-num-steps": {"type": "int", "low": 1, "high": 4},
            "speculative-eagle-topk": {"type": "categorical", "choices": [1, 2]},
            "speculative-num-draft-tokens": {"type": "int", "low": 2, "high": 8, "when": "topk > 1"},
            "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL"]},
        },
    }
    data.update(extra)
    return parse_space(data, "s.yaml")


@pytest.mark.parametrize("path", sorted((ROOT / "search_spaces").glob("*.yaml")))
def test_shipped_spaces_load(path):
    space = load_space(path)
    cands = list(space.grid())
    assert any(c.is_baseline for c in cands)
    assert len(cands) > 3


def test_eagle3_space_has_what_the_issue_asks():
    space = load_space(ROOT / "search_spaces" / "eagle3.yaml")
    p = space.params
    assert p["speculative-num-steps"].low == 1 and p["speculative-num-steps"].high == 8
    assert p["speculative-eagle-topk"].choices == [1, 2, 4, 8]
    assert (p["speculative-num-draft-tokens"].low, p["speculative-num-draft-tokens"].high) == (2, 64)
    assert {"NCCL_PROTO", "NCCL_ALGO", "disable-custom-all-reduce"} <= set(p)
    assert "none" not in p["speculative-algorithm"].choices  # the baseline is its own trial, not a choice
    base = space.baseline()
    assert base.is_baseline and not base.env and base.flags.get("disable-custom-all-reduce") is False


def test_grid_collapses_inactive_parameters():
    space = small_space()
    cands = list(space.grid())
    # baseline (NCCL at its default) + topk1: steps(4) x NCCL(2) + topk2: steps(4) x draft(7) x NCCL(2)
    assert len(cands) == 1 + 8 + 56
    assert cands[0].is_baseline and not cands[0].env
    topk1 = [c for c in cands if c.flags.get(sgl.TOPK) == 1]
    assert all(c.flags[sgl.DRAFT] == c.flags[sgl.STEPS] + 1 for c in topk1)
    assert all("speculative-num-steps" not in c.flags for c in cands if c.is_baseline)


def test_checks_apply_sglang_rules_and_user_constraints():
    space = small_space(constraints=["draft <= steps * topk + 1"])
    ok = space.candidate(
        {
            "speculative-algorithm": "EAGLE3",
            "speculative-num-steps": 3,
            "speculative-eagle-topk": 2,
            "speculative-num-draft-tokens": 6,
        }
    )
    assert all(c.value <= 0 for c in space.checks(ok))
    too_wide = space.candidate(
        {
            "speculative-algorithm": "EAGLE3",
            "speculative-num-steps": 1,
            "speculative-eagle-topk": 2,
            "speculative-num-draft-tokens": 8,
        }
    )
    checks = {c.name: c for c in space.checks(too_wide)}
    assert checks["sglang_tree_limit"].value > 0 and "topk" in checks["sglang_tree_limit"].reason
    assert checks["user"].value > 0
    trt = Candidate(flags={**ok.flags, "attention-backend": "trtllm_mha"})
    reason = {c.name: c for c in space.checks(trt)}["sglang_startup"].reason
    assert "Blackwell" in reason


def test_suggest_through_optuna_is_conditional():
    space = small_space()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
    seen_draft_with_topk1 = False
    for _ in range(40):
        trial = study.ask()
        cand = space.suggest(trial)
        if cand.flags.get(sgl.TOPK) == 1:
            seen_draft_with_topk1 |= "speculative-num-draft-tokens" in trial.params
        if cand.is_baseline:
            assert not any(k.startswith("speculative-num") for k in trial.params)
        study.tell(trial, 1.0)
    assert not seen_draft_with_topk1


def test_normalised_keys_dedup_topk1():
    a = Candidate(
        flags={
            "speculative-algorithm": "EAGLE3",
            "speculative-num-steps": 2,
            "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 7,
        }
    )
    b = Candidate(
        flags={
            "speculative-algorithm": "eagle3",
            "speculative-num-steps": 2,
            "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 3,
        }
    )
    assert a.key() == b.key()
    c = Candidate(
        flags={
            "speculative-algorithm": "EAGLE",
            "speculative-num-steps": 2,
            "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 3,
        }
    )
    assert c.key() != b.key()
    assert Candidate(env={"NCCL_PROTO": "unset"}).key() == Candidate().key()


@pytest.mark.parametrize(
    "data, key, words",
    [
        (
            {"parameters": {"speculative-num-steps": {"type": "integer", "low": 1, "high": 2}}},
            "parameters.speculative-num-steps.type",
            "int, float, categorical",
        ),
        (
            {"parameters": {"speculative-num-steps": {"type": "int", "low": 5, "high": 2}}},
            "parameters.speculative-num-steps",
            "high",
        ),
        (
            {"parameters": {"speculative-num-steps": {"type": "int", "low": 0, "high": 2}}},
            "parameters.speculative-num-steps",
            ">= 1",
        ),
        (
            {"parameters": {"speculative-algorithm": {"type": "categorical", "choices": ["EAGLE4"]}}},
            "parameters.speculative-algorithm.choices",
            "EAGLE3",
        ),
        ({"parameters": {"x y": {"type": "int", "low": 1, "high": 2}}}, "parameters.x y", "flag name"),
        (
            {"parameters": {"speculative-num-steps": {"type": "int", "low": 1, "high": 2, "when": "topk > 1"}}},
            "parameters.speculative-num-steps.when",
            "topk",
        ),
        ({"constraints": ["open('x')"]}, "constraints[0]", "not allowed"),
        ({"constraints": ["nosuch > 1"]}, "constraints[0]", "unknown name"),
        ({"paramters": {}}, "paramters", "allowed: name"),
        ({"fixed": {"--model-path": "x"}}, "fixed.--model-path", "without dashes"),
        ([1, 2], None, "mapping"),
    ],
)
def test_bad_spaces_name_file_key_and_allowed(data, key, words):
    with pytest.raises(ConfigError) as err:
        parse_space(data, "bad.yaml")
    text = str(err.value)
    assert text.startswith("bad.yaml: ")
    if key:
        assert f"{key}:" in text
    assert words in text


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_space(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("parameters: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_space(bad)
