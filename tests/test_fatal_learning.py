"""A setting that is fatal on its own is paid for once: after the first launch with NCCL_ALGO=Tree fails on the
two-H200 profile (NCCL's "no algorithm/protocol available" line, then a CUDA graph capture failure), no candidate
holding NCCL_ALGO=Tree is launched again. Real Ray actors start real simulator processes."""

from __future__ import annotations

from pathlib import Path

from conftest import sim_command

from optimizer.executors import RayExecutor
from optimizer.hosts.config import local_host
from optimizer.settings import parse_study
from optimizer.sglang import fatal_settings
from optimizer.space import parse_space
from optimizer.study import Driver, Progress

LINE = "h:1:1 [0] NCCL WARN Error : no algorithm/protocol available for function AllGather with datatype ncclInt8."


def test_rules_blame_one_setting_only() -> None:
    tree = {"NCCL_ALGO": "Tree"}
    got = fatal_settings.blame([LINE + " NCCL_ALGO was set to Tree."], {}, tree)
    assert got is not None and (got["name"], got["value"]) == ("NCCL_ALGO", "Tree")
    # Tree has no AllGather at all: the algorithm is to blame whatever the protocol
    both = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}
    got = fatal_settings.blame([LINE + " NCCL_ALGO was set to Tree. NCCL_PROTO was set to LL."], {}, both)
    assert got is not None and got["name"] == "NCCL_ALGO"
    # AllReduce exists with Ring: with both set, neither alone is proven fatal
    allreduce = LINE.replace("AllGather", "AllReduce") + " NCCL_ALGO was set to Ring. NCCL_PROTO was set to LL128."
    assert fatal_settings.blame([allreduce], {}, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}) is None
    proto = LINE.replace("AllGather", "AllReduce") + " NCCL_PROTO was set to LL128."
    assert fatal_settings.blame([proto], {}, {"NCCL_PROTO": "LL128"})["name"] == "NCCL_PROTO"
    # the candidate must hold the value the log names
    assert fatal_settings.blame([LINE + " NCCL_ALGO was set to Tree."], {}, {"NCCL_ALGO": "Ring"}) is None
    assert fatal_settings.evidence(["noise", LINE, LINE, "more"]) == [LINE]


SPACE = {
    "name": "tp2",
    "fixed": {
        "model-path": "m",
        "speculative-draft-model-path": "d",
        "attention-backend": "triton",
        "cuda-graph-max-bs": 16,
        "tp-size": 2,
    },
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [3, 5]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL", "Simple"]},
        "NCCL_ALGO": {"type": "categorical", "choices": ["unset", "Ring", "Tree"]},
    },
}


def _eagle(steps: int, proto: str, algo: str) -> dict:
    return {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": steps,
        "speculative-eagle-topk": 1,
        "NCCL_PROTO": proto,
        "NCCL_ALGO": algo,
    }


def test_fatal_setting_is_learned_from_the_first_failure(tmp_path: Path, ray_runtime) -> None:
    cfg = parse_study(
        {
            "study": "learn",
            "studies_dir": str(tmp_path / "studies"),
            "server": {"command": sim_command("llama-8b-dims-2x-h200", 0.002, 0.05), "boot_timeout_s": 30},
            "workload": {"max_tokens": 32, "chunks": 2, "requests_per_chunk": 2, "warmup_requests": 1},
            "budget": {"trials": 4},
            "sampler": {"seed": 1},
            "initial": [
                _eagle(5, "unset", "Tree"),
                _eagle(5, "LL", "Tree"),
                _eagle(3, "Simple", "Tree"),
                _eagle(5, "Simple", "Ring"),
            ],
        },
        "test",
    )
    hosts = [local_host("local")]
    executor = RayExecutor(hosts, cfg.study_dir.absolute())
    notes: list[str] = []
    try:
        study = Driver(cfg, parse_space(SPACE, "tp2.yaml"), hosts, executor, progress=Progress(notes.append)).run()
    finally:
        executor.shutdown()
    trials = study.get_trials()
    tree = [t for t in trials if t.params.get("NCCL_ALGO") == "Tree"]
    launched_tree = [t for t in tree if t.user_attrs.get("launched")]
    assert len(launched_tree) == 1, [(t.number, t.user_attrs.get("outcome")) for t in tree]
    first = launched_tree[0]
    assert first.user_attrs["outcome"] == "infeasible" and first.constraints["server"] > 0
    setting = first.user_attrs["fatal_setting"]
    assert (setting["name"], setting["value"]) == ("NCCL_ALGO", "Tree")
    assert "no algorithm/protocol available for function AllGather" in setting["line"]
    assert "Capture cuda graph failed" in first.user_attrs["failure_reason"]
    skipped = [t for t in tree if not t.user_attrs.get("launched")]
    assert len(skipped) >= 2  # the two other Tree candidates of `initial`, at least
    for t in skipped:
        assert t.user_attrs["failure_kind"] == "learned_fatal" and t.constraints["learned_fatal"] > 0
        reason = t.user_attrs["failure_reason"]
        assert f"NCCL_ALGO=Tree was fatal in trial {first.number}" in reason and "NCCL WARN" in reason
    assert any("NCCL_ALGO=Tree is fatal on its own" in n for n in notes)
    # the budget went to configurations that can run: every other launch completed or was pruned
    others = [t for t in trials if t.user_attrs.get("launched") and t not in launched_tree]
    assert len(others) == cfg.budget.trials - 1
    assert all(t.user_attrs["outcome"] in ("complete", "pruned") for t in others)
