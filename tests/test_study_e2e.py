"""The product's spine end to end: a real Optuna study (journal file) driven through real Ray actors that start
real simulator processes, with pruning, an infeasible configuration, a duplicate, and the export."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import yaml
from conftest import sim_command
from optuna.trial import TrialState

from optimizer.executors import RayExecutor
from optimizer.export import export_study
from optimizer.hosts.config import local_host
from optimizer.settings import parse_study
from optimizer.space import parse_space
from optimizer.study import Driver, Progress
from optimizer.study.storage import load_or_create

SPACE = {
    "name": "e2e",
    "fixed": {
        "model-path": "m",
        "speculative-draft-model-path": "d",
        "tp-size": 8,
        "attention-backend": "flashinfer",
        "max-running-requests": 8,
        "cuda-graph-max-bs": 8,
    },
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [2, 3, 5]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1, 4]},
        "speculative-num-draft-tokens": {"type": "categorical", "choices": [16], "when": "topk > 1"},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL"]},
        "NCCL_ALGO": {"type": "categorical", "choices": ["unset", "Ring"]},
    },
}
GOOD = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 2,
    "speculative-eagle-topk": 1,
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
}
BAD = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 5,
    "speculative-eagle-topk": 1,
    "NCCL_PROTO": "unset",
    "NCCL_ALGO": "unset",
}
OOM = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 4,
    "speculative-num-draft-tokens": 16,
    "NCCL_PROTO": "unset",
    "NCCL_ALGO": "unset",
}


class PruneLongChain(optuna.pruners.BasePruner):
    """Prunes the untuned 5-step chain after its second chunk, whatever the figures. The model puts it 28 % behind
    the baseline, but on a loaded machine per-request delays of processes starved of CPU swamp any gap between
    short answers (at load 20 it once measured level with the others and nothing was pruned); the ratio pruner's
    own decisions are tested on the model's clock (tests/test_pruning.py, tests/test_per_level.py). Here the
    driver, the executor and the server must act on a decision."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return trial.params.get("speculative-num-steps") == 5 and len(trial.intermediate_values) >= 2


def make_cfg(tmp_path: Path, **over):
    data = {
        "study": "e2e",
        "studies_dir": str(tmp_path / "studies"),
        "server": {"command": sim_command(), "boot_timeout_s": 30},
        "workload": {"max_tokens": 48, "chunks": 4, "requests_per_chunk": 2, "warmup_requests": 1},
        "budget": {"trials": 5},
        "sampler": {"seed": 3},
        "initial": [GOOD, BAD, OOM, GOOD],
    }
    data.update(over)
    return parse_study(data, "test")


def test_study_through_ray_against_simulator_processes(tmp_path, ray_runtime):
    cfg = make_cfg(tmp_path)
    space = parse_space(SPACE, "e2e.yaml")
    hosts = [local_host("local")]
    executor = RayExecutor(hosts, cfg.study_dir.absolute())
    lines: list[str] = []
    try:
        study = load_or_create(cfg, pruner=PruneLongChain(), space=space)
        study = Driver(cfg, space, hosts, executor, progress=Progress(lines.append), study=study).run()
    finally:
        executor.shutdown()

    # Storage is a real journal file; reload it as a user would.
    study = optuna.load_study(
        study_name="e2e",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(cfg.study_dir / "journal.log"))
        ),
    )
    trials = study.get_trials()
    by_outcome: dict[str, list] = {}
    for t in trials:
        by_outcome.setdefault(t.user_attrs.get("outcome"), []).append(t)

    # The baseline came first, without speculation, and completed.
    base = trials[0]
    assert base.user_attrs["baseline"] is True and base.state == TrialState.COMPLETE
    assert "speculative-algorithm" not in base.user_attrs["flags"]
    assert study.user_attrs["baseline_tok_per_s"] == base.value

    # Five launches, as budgeted; the duplicate launched nothing.
    assert sum(1 for t in trials if t.user_attrs.get("launched")) == 5
    (dup,) = by_outcome["duplicate"]
    good = trials[dup.user_attrs["duplicate_of"]]
    assert good.params["speculative-num-steps"] == 2 and dup.value == good.value
    assert not dup.user_attrs.get("launched")

    # Every launched trial reported its chunks as intermediate values.
    for t in trials:
        if t.user_attrs.get("launched") and t.user_attrs.get("outcome") in ("complete", "pruned"):
            assert t.intermediate_values and all(v > 0 for v in t.intermediate_values.values())

    # The untuned 5-step chain was pruned before its last chunk.
    pruned = by_outcome["pruned"]
    assert any(t.params.get("speculative-num-steps") == 5 for t in pruned)
    assert all(len(t.intermediate_values) < 4 for t in pruned)

    # The big tree ran out of memory at boot: a constraint violation with SGLang's reason and the log tail.
    (oom,) = [t for t in by_outcome["infeasible"] if t.params.get("speculative-num-steps") == 3]
    assert oom.state == TrialState.COMPLETE and oom.constraints["server"] > 0
    assert oom.user_attrs["constraint:server"] > 0
    assert "Not enough memory" in oom.user_attrs["failure_reason"]
    assert "Not enough memory" in oom.user_attrs["log_tail"]
    assert Path(oom.user_attrs["log_path"]).exists()

    # The export holds the best feasible launched trial as SGLang's flat --config mapping plus the env exports.
    summary = export_study(study, cfg.study_dir)
    feasible = [t for t in trials if t.user_attrs.get("outcome") == "complete"]
    best_t = max(feasible, key=lambda t: t.value)
    assert summary["best"]["trial"] == best_t.number
    assert summary["baseline"]["tok_per_s"] == base.value
    best = yaml.safe_load((cfg.study_dir / "best.yaml").read_text())
    assert {k: v for k, v in best.items()} == {k: v for k, v in best_t.user_attrs["flags"].items()}
    assert all(isinstance(v, (str, int, float, bool)) for v in best.values())
    env = (cfg.study_dir / "best.env").read_text()
    for k, v in best_t.user_attrs["env"].items():
        assert f"export {k}={v}" in env
    saved = json.loads((cfg.study_dir / "summary.json").read_text())
    assert saved["best"]["tok_per_s"] == best_t.value and saved["optimizer_version"]
    good_yaml = good.user_attrs["flags"]
    assert good_yaml["speculative-num-draft-tokens"] == 3  # topk 1: SGLang's steps + 1, written explicitly
    assert any("pruned" in line for line in lines)
