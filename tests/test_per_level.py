"""Answers per load level, end to end: one boot measures several concurrency levels, the study exports the best
configuration of each level, a latency limit changes the objective's winner, and per-level figures survive a
pruned trial. Real simulator processes (Kimi-K2.5 profile), a real journal file, real Ray actors."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import sim_command

from optimizer.dryrun import dry_run
from optimizer.errors import ConfigError
from optimizer.executors import RayExecutor
from optimizer.export import export_study
from optimizer.hosts.config import local_host
from optimizer.levels import level_answers, pareto_front, study_plan
from optimizer.levels_view import note_lines, terminal_lines
from optimizer.loadgen.workload import Workload
from optimizer.objective import Objective, Plan
from optimizer.report import write_report
from optimizer.settings import parse_study
from optimizer.space import parse_space
from optimizer.study import Driver, Progress
from optimizer.study.storage import load_or_create

KIMI = "kimi-k2.5-8x-rtxpro6000"
# What the profile's model says (python -m optimizer.sim truth): with TP 8 on PCIe the 2-step chain with NCCL
# LL/Ring wins at concurrency 1 (+7.8 % over the next), no speculation with LL wins at 8 (+9 %), and at 64 LL's
# low bandwidth loses: no speculation or a chain without LL wins there.
SPACE = {
    "name": "levels",
    "fixed": {
        "model-path": "m",
        "speculative-draft-model-path": "d",
        "tp-size": 8,
        "attention-backend": "flashinfer",
        "max-running-requests": 64,
    },
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["none", "EAGLE3"]},
        "speculative-num-steps": {"type": "categorical", "choices": [2]},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1]},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL"]},
        "NCCL_ALGO": {"type": "categorical", "choices": ["unset", "Ring"]},
    },
}

#: what a level's note says where no speculation serves it best: no speculative launch beat the baseline, or one did
#: but a launch without speculation (other settings) measured faster still
NO_SPEC_NOTES = ("no speculative configuration beats the baseline", "serve without speculation at this load")


def cand(algo: str, proto: str, algo_nccl: str) -> dict:
    return {
        "speculative-algorithm": algo,
        "speculative-num-steps": 2,
        "speculative-eagle-topk": 1,
        "NCCL_PROTO": proto,
        "NCCL_ALGO": algo_nccl,
    }


SPEC_LL = cand("EAGLE3", "LL", "Ring")
NONE_LL = cand("none", "LL", "unset")
SPEC_PLAIN = cand("EAGLE3", "unset", "Ring")
NONE_RING = cand("none", "unset", "Ring")


def run_study(
    tmp_path: Path, name: str, space: dict = SPACE, study_pruner: optuna.pruners.BasePruner | None = None, **over
) -> tuple[optuna.Study, dict, list[str]]:
    data = {
        "study": name,
        "studies_dir": str(tmp_path / "studies"),
        # step scale 2: decode steps at half speed keep 64 streams light enough for a shared 2-core machine
        "server": {"command": sim_command(KIMI, time_scale=0.002, step_scale=2.0), "boot_timeout_s": 60},
        "workload": {
            "concurrency": [1, 8, 64],
            "max_tokens": 24,
            "chunks": 2,
            "requests_per_chunk": 1,
            "warmup_requests": 1,
        },
        "budget": {"trials": 5},
        "sampler": {"seed": 0},
        "initial": [SPEC_LL, NONE_LL, SPEC_PLAIN, NONE_RING],
        "objective": {"level": 1},
    }
    data.update(over)
    cfg = parse_study(data, "test")
    hosts = [local_host("local")]
    executor = RayExecutor(hosts, cfg.study_dir.absolute())
    lines: list[str] = []
    sp = parse_space(space, "levels.yaml")
    study = load_or_create(cfg, pruner=study_pruner, space=sp) if study_pruner is not None else None
    try:
        study = Driver(cfg, sp, hosts, executor, progress=Progress(lines.append), study=study).run()
    finally:
        executor.shutdown()
    return study, export_study(study, cfg.study_dir), lines


def run_model_study(tmp_path: Path, name: str, space: dict = SPACE, **over) -> tuple[optuna.Study, dict]:
    """The same study, driver and export on the simulator's own clock (``optimizer.simexec.ModelExecutor``): every
    figure is the profile's model (seeded), so which configuration wins at a level is the model's answer and never
    a race between processes on a loaded machine. Longer answers than the process run (no wall time is spent) keep
    the acceptance noise of a chunk small; no launch-to-launch noise (that is the confirmation's business)."""
    from optimizer.simexec import ModelExecutor

    data = {
        "study": name,
        "studies_dir": str(tmp_path / "studies"),
        "workload": {
            "concurrency": [1, 8, 64],
            "max_tokens": 256,
            "chunks": 2,
            "requests_per_chunk": 4,
            "warmup_requests": 1,
        },
        "budget": {"trials": 5},
        "sampler": {"seed": 0},
        "initial": [SPEC_LL, NONE_LL, SPEC_PLAIN, NONE_RING],
        "objective": {"level": 1},
    }
    data.update(over)
    cfg = parse_study(data, "test")
    hosts = [local_host("local")]
    executor = ModelExecutor(KIMI, ["local"], cfg.workload, seed=0, launch_noise=0.0)
    study = Driver(cfg, parse_space(space, "levels.yaml"), hosts, executor, progress=Progress(lambda s: None)).run()
    return study, export_study(study, cfg.study_dir)


def test_three_levels_measured_after_each_boot_by_real_servers(tmp_path, ray_runtime):
    """Real simulator processes: every launch measures all three levels and the study exports one answer per level.
    Which configuration is fastest is not asserted here: on a loaded machine the processes' wall-clock figures
    can swap configurations a few per cent apart (the next test asks the model's clock)."""
    # a limit every configuration keeps even on a loaded machine: judged on every trial, it removes no answer
    study, summary, _ = run_study(tmp_path, "levels", limits={8: {"itl_p99_ms": 5000}})
    trials = study.get_trials()
    launched = [t for t in trials if t.user_attrs.get("launched")]
    assert len(launched) == 5  # one boot per configuration, every level measured after it

    # Every launched trial carries all three levels, each with its own chunks, tok/s, latencies and accept length.
    for t in launched:
        levels = t.user_attrs["levels"]
        assert set(levels) == {"1", "8", "64"}
        for m in levels.values():
            assert m["complete"] and m["chunks_run"] == 2 and m["tok_per_s"] > 0
            assert m["ttft_ms_p99"] > 0 and m["itl_ms_p99"] > 0
        spec = t.user_attrs["flags"].get("speculative-algorithm") == "EAGLE3"
        assert (levels["1"]["accept_length"] is not None) == spec
        if spec:
            assert 1.2 < levels["1"]["accept_length"] < 3.0
        # the objective is concurrency 1: its figures are the trial's value and its flat attributes
        if t.user_attrs["outcome"] == "complete":
            assert t.value == pytest.approx(levels["1"]["tok_per_s"])
            assert t.user_attrs["itl_ms_p99"] == levels["1"]["itl_ms_p99"]
        # the latency limit is judged on every trial's measured c8 p99 ITL
        assert t.constraints["c8_itl_p99_ms"] <= 0
        # intermediate values are the objective level's chunks only: they pair across trials
        assert sorted(t.intermediate_values) == [0, 1]

    # One answer per level, each in its own SGLang config file, whichever configurations the processes favoured.
    rows = {r["concurrency"]: r for r in summary["levels"]}
    assert set(rows) == {1, 8, 64}
    out = tmp_path / "studies/levels"
    for c, row in rows.items():
        assert row["trial"] in {t.number for t in launched}
        assert row["gain_over_baseline"] is not None and row["baseline_tok_per_s"] > 0
        assert isinstance(yaml.safe_load((out / f"best-c{c}.yaml").read_text()), dict)
        assert (out / f"best-c{c}.env").exists()
    assert summary["limits"] == ["c8: itl p99 <= 5000 ms"]

    # A dry run of the same study reads the boot and benchmark times it measured so far.
    d = dry_run(
        parse_study({"study": "levels", "workload": {"concurrency": [1, 8, 64]}, "budget": {"trials": 9}}, "t"),
        parse_space(SPACE, "levels.yaml"),
        hosts=1,
        existing=study,
    )
    assert d.launches == 4 and d.boot_s > 0 and d.bench_s > 0 and d.wall_s > 0
    assert d.times_from == "median of the launches measured so far" and d.candidates == 8  # baseline among them


def test_three_levels_three_answers_and_a_latency_limit_changes_the_winner(tmp_path):
    # On the model's clock: p99 ITL at concurrency 8 (the cycle over the tokens a step yields for the category
    # that accepts least) must stay under 20 ms; only no speculation with NCCL LL (18.4 ms) keeps it.
    study, summary = run_model_study(tmp_path, "levels", limits={8: {"itl_p99_ms": 20}})
    launched = [t for t in study.get_trials() if t.user_attrs.get("launched")]
    assert len(launched) == 5
    for t in launched:
        assert set(t.user_attrs["levels"]) == {"1", "8", "64"}

    # Three levels, three different answers, each in its own SGLang config file.
    rows = {r["concurrency"]: r for r in summary["levels"]}
    assert set(rows) == {1, 8, 64}
    winners = {c: rows[c]["trial"] for c in rows}
    assert len(set(winners.values())) == 3, rows
    out = tmp_path / "studies/levels"
    files = {c: yaml.safe_load((out / f"best-c{c}.yaml").read_text()) for c in rows}
    envs = {c: [x for x in (out / f"best-c{c}.env").read_text().splitlines() if x.startswith("export")] for c in rows}
    assert len({json.dumps([files[c], envs[c]], sort_keys=True) for c in rows}) == 3  # flags + NCCL env differ
    assert files[1]["speculative-algorithm"] == "EAGLE3"  # speculation pays at concurrency 1 ...
    assert "speculative-algorithm" not in files[8]  # ... and not at 8, which the table says plainly
    assert rows[8]["speculation_wins"] is False and any(m in rows[8]["note"] for m in NO_SPEC_NOTES)
    assert (out / "best-c8.env").read_text().count("export NCCL_PROTO=LL") == 1
    assert files[64]["speculative-algorithm"] == "EAGLE3" and not any("NCCL_PROTO" in x for x in envs[64])
    for c in rows:
        assert rows[c]["gain_over_baseline"] is not None and rows[c]["baseline_tok_per_s"] > 0

    # The latency limit: the fastest trial at concurrency 1 (the per-level answer, which only checks limits at
    # that level) breaks the p99 ITL limit at 8, so it cannot be the objective's best; the winner changes.
    top = max((t for t in launched if t.user_attrs["outcome"] == "complete"), key=lambda t: t.value)
    assert winners[1] == top.number and top.user_attrs["flags"]["speculative-algorithm"] == "EAGLE3"
    assert top.constraints["c8_itl_p99_ms"] > 0 and top.user_attrs["constraint:c8_itl_p99_ms"] > 0
    assert summary["best"]["trial"] != top.number
    best = study.trials[summary["best"]["trial"]]
    assert all(v <= 0 for v in best.constraints.values())
    assert summary["limits"] == ["c8: itl p99 <= 20 ms"]
    assert "objective" in summary and "concurrency 1" in summary["objective"]

    # The trade-off at concurrency 1 is real: speculation's longer cycle raises p99 ITL while raising tok/s, so
    # the Pareto front of tok/s against p99 ITL holds more than one configuration.
    front = pareto_front(study, Plan([1, 8, 64], Objective(level=1, pareto=True), {}, chunks=2))
    assert len(front) >= 2, front
    assert front[0]["trial"] == top.number and front[-1]["itl_ms_p99"] < front[0]["itl_ms_p99"]
    assert all(a["tok_per_s"] > b["tok_per_s"] and a["itl_ms_p99"] > b["itl_ms_p99"] for a, b in zip(front, front[1:]))

    # The same answers for people: the report's section, the trial's note, the final terminal summary.
    page = write_report(study, tmp_path / "report.html").read_text()
    assert "Answers per load level" in page and "c8: itl p99 &lt;= 20 ms" in page
    assert any(m in page for m in NO_SPEC_NOTES) and "best-c1.yaml" in page
    assert "Pareto front at concurrency" in page and 'id="fig-pareto"' in page
    note = "\n".join(note_lines(study, top))
    assert "### Per load level" in note and "limit c8 itl p99 <= 20 ms: **broken**" in note
    term = terminal_lines(summary, study)
    assert term[0].startswith("best per load level (objective: tok/s at concurrency 1)")
    assert any(line.strip().startswith("8 ") and "no-spec" in line for line in term), term
    assert any("serve without speculation at this load" in line for line in term)


#: the test space with EAGLE among the algorithms: given the EAGLE-3 drafter it accepts almost nothing
PRUNE_SPACE = dict(
    SPACE,
    parameters=dict(
        SPACE["parameters"],
        **{"speculative-algorithm": {"type": "categorical", "choices": ["none", "EAGLE3", "EAGLE"]}},
    ),
)
PRUNE_STUDY = dict(
    objective={"level": 8},
    workload={"concurrency": [1, 8], "max_tokens": 24, "chunks": 4, "requests_per_chunk": 1, "warmup_requests": 1},
    initial=[NONE_LL, SPEC_LL, cand("EAGLE", "unset", "unset")],
    pruner={"name": "ratio", "n_startup_trials": 1},
    budget={"trials": 4},
)


def _check_pruned_at_the_objective_level(study: optuna.Study, summary: dict) -> None:
    pruned = [t for t in study.get_trials() if t.user_attrs.get("outcome") == "pruned"]
    assert pruned, [(t.number, t.user_attrs.get("outcome"), t.value) for t in study.get_trials()]
    assert any(t.user_attrs["flags"].get("speculative-algorithm") == "EAGLE" for t in pruned)
    for t in pruned:
        assert max(t.intermediate_values) < 3  # stopped before the objective level's last chunk
        assert "1" not in (t.user_attrs.get("levels") or {})  # the other level never ran: no restart was wasted
    assert [r["concurrency"] for r in summary["levels"]] == [1, 8]


class PruneEagle(optuna.pruners.BasePruner):
    """Prunes the EAGLE trial at its first reported chunk, whatever the figures: which trial to prune is the ratio
    pruner's decision (the next test, on the model's clock); here real servers must act on it."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return trial.params.get("speculative-algorithm") == "EAGLE" and bool(trial.intermediate_values)


def test_a_pruned_server_stops_before_the_other_level(tmp_path, ray_runtime):
    """Real simulator processes: objective concurrency 8 runs first and only its chunks are reported, so they pair
    across trials; a trial pruned there is stopped and the other level is never spent on it."""
    study, summary, _ = run_study(tmp_path, "prune", space=PRUNE_SPACE, study_pruner=PruneEagle(), **PRUNE_STUDY)
    _check_pruned_at_the_objective_level(study, summary)
    launched = [t for t in study.get_trials() if t.user_attrs.get("launched")]
    assert all(
        t.user_attrs["outcome"] == "complete" for t in launched if t.params.get("speculative-algorithm") != "EAGLE"
    )


def test_pruning_acts_on_the_objective_level_which_runs_first(tmp_path):
    """On the model's clock, with the ratio pruner: a clearly worse configuration is pruned at the objective level
    (EAGLE given the EAGLE-3 drafter: 198 against 435 tok/s for the best at 8) before the other level runs."""
    study, summary = run_model_study(tmp_path, "prune", space=PRUNE_SPACE, **PRUNE_STUDY)
    _check_pruned_at_the_objective_level(study, summary)


def test_objective_and_limits_are_validated_against_the_levels():
    base = {"workload": {"concurrency": [1, 8, 32]}}
    assert parse_study({**base, "objective": "weighted"}).plan().describe().startswith("weighted tok/s")
    assert parse_study({**base, "objective": {"level": 8}}).plan().order() == [8, 1, 32]
    cfg = parse_study({**base, "limits": {"itl_p99_ms": 30, 32: {"ttft_p99_ms": 900}}})
    assert cfg.plan().limits[8] == [("itl_p99_ms", 30.0)]
    assert cfg.plan().limits[32] == [("itl_p99_ms", 30.0), ("ttft_p99_ms", 900.0)]  # every level + its own
    for bad, key in (
        ({"objective": {"level": 4}}, "objective.level"),
        ({"objective": {"aggregate": "weighted", "weights": {64: 1}}}, "objective.weights.64"),
        ({"limits": {64: {"itl_p99_ms": 3}}}, "limits.64"),
        ({"limits": {"itl_p99": 3}}, "limits"),
        ({"workload": {"concurrency": [8, 8]}}, "workload.concurrency"),
    ):
        with pytest.raises(ConfigError) as e:
            parse_study({**base, **bad}, "study.yaml")
        assert "study.yaml" in str(e.value) and key in str(e.value), str(e.value)
    # a single int stays valid and means one level
    assert Workload(concurrency=8).levels == [8] and not Workload(concurrency=8).multi_level


def test_a_trade_off_study_measures_everything_in_full():
    cfg = parse_study({"workload": {"concurrency": [1, 8]}, "objective": {"level": 1, "pareto": True}})
    plan = cfg.plan()
    assert cfg.pruner.name == "none" and plan.pareto and plan.step(1, 0) is None
    assert plan.describe() == "tok/s at concurrency 1 against p99 ITL (Pareto)"
    with pytest.raises(ConfigError, match="pareto compares tok/s and p99 ITL at one level"):
        parse_study({"workload": {"concurrency": [1, 8]}, "objective": {"aggregate": "gain", "pareto": True}}, "s")


def test_weighted_steps_pair_by_level_and_limits_judge_every_level():
    plan = Plan([1, 8, 32], Objective(aggregate="weighted", weights={1: 1, 32: 3}), {}, chunks=4)
    assert plan.order() == [1, 8, 32] and plan.interleave  # the levels take turns, chunk by chunk
    assert [plan.step(1, 2), plan.step(8, 0), plan.step(32, 3)] == [4, None, 7]  # weight 0: not reported
    assert plan.last_step() == 7 and [plan.level_of_step(s) for s in range(4)] == [1, 32, 1, 32]
    per = {1: {"tok_per_s": 100.0, "complete": True}, 32: {"tok_per_s": 1000.0, "complete": True}}
    assert plan.value(per) == pytest.approx((100 + 3000) / 4)
    assert plan.value({1: per[1]}) is None  # a needed level missing: no value
    assert study_plan(optuna.create_study()) is None


def test_a_pruned_trial_counts_for_the_levels_it_measured_in_full():
    """With an aggregate objective a trial may be pruned at a later level: its complete levels still answer."""
    study = optuna.create_study(direction="maximize")
    plan = Plan([1, 8], Objective(aggregate="weighted"), {}, chunks=2)
    study.set_user_attr("plan", {"levels": [1, 8], "chunks": 2, "objective": {"aggregate": "weighted"}, "limits": {}})

    def add(state, levels, baseline=False, algo="EAGLE3"):
        attrs = {
            "outcome": state.name.lower(),
            "levels": levels,
            "flags": {"speculative-algorithm": algo} if algo else {},
        }
        if baseline:
            attrs["baseline"] = True
        t = optuna.trial.create_trial(
            state=state, value=1.0 if state == optuna.trial.TrialState.COMPLETE else None, user_attrs=attrs
        )
        study.add_trial(t)

    full = {"complete": True}
    add(optuna.trial.TrialState.COMPLETE, {"1": {**full, "tok_per_s": 90}, "8": {**full, "tok_per_s": 400}}, True, None)
    add(optuna.trial.TrialState.PRUNED, {"1": {**full, "tok_per_s": 120}, "8": {"complete": False, "tok_per_s": 300}})
    answers = {a.level: a for a in level_answers(study, study_plan(study) or plan)}
    assert answers[1].best.number == 1 and answers[1].gain == pytest.approx(120 / 90 - 1)
    assert answers[8].best.number == 0 and not answers[8].speculation_wins  # the pruned level does not count


def test_dry_run_plans_without_starting_anything(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "optimizer",
            "optimize",
            "--dry-run",
            "--study",
            "plan",
            "--studies-dir",
            str(tmp_path / "studies"),
            "--space",
            "search_spaces/eagle3.yaml",
            "--concurrency",
            "1,8,64",
            "--trials",
            "30",
            "--boot-s",
            "720",
            "--bench-s",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "space: 145,921 distinct configurations" in out
    assert "rejected without a launch: 96,864; launchable: 49,057" in out
    assert (
        "SGLang's runtime tree limit" in out and "the space's constraints: violates 'draft <= steps * topk + 1'" in out
    )
    assert "load levels per boot: [1, 8, 64]; objective: tok/s at concurrency 64" in out
    # 30 launches on one host at 720 + 120 + 5.5 s each
    assert "budget: 30 launches on 1 host(s)" in out and "estimated wall-clock: 7.0 h" in out
    first = [line for line in out.splitlines() if line.startswith("   ") and ". " in line]
    assert first[0].endswith("baseline  [baseline]") and "[sglang auto default]" in first[1] and len(first) == 8
    assert "nothing was started" in out and not (tmp_path / "studies").exists()


def test_an_aggregate_study_prunes_only_what_no_level_would_choose():
    """Objective gain over three levels: a trial is pruned only when it trails each level's best at that level."""
    from optimizer.pruning import RatioToBestPruner

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("plan", {"levels": [1, 64], "chunks": 4, "objective": {"aggregate": "gain"}, "limits": {}})

    def complete(values_1: list[float], values_64: list[float], number_attrs: dict) -> None:
        inter = {}
        for i, (a, b) in enumerate(zip(values_1, values_64)):
            inter[2 * i], inter[2 * i + 1] = a, b
        levels = {
            "1": {"tok_per_s": sum(values_1) / 4, "complete": True},
            "64": {"tok_per_s": sum(values_64) / 4, "complete": True},
        }
        study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.COMPLETE,
                value=1.0,
                intermediate_values=inter,
                user_attrs={"levels": levels, **number_attrs},
            )
        )

    complete([100, 101, 99, 100], [1000, 1010, 990, 1000], {"baseline": True})
    complete([200, 202, 198, 200], [900, 905, 895, 900], {})  # best at 1, worse at 64
    pruner = RatioToBestPruner(n_startup_trials=1, n_startup_steps=1)

    def running(v1: float, v64: float) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING, intermediate_values={0: v1, 1: v64, 2: v1, 3: v64}
        )

    assert not pruner.prune(study, running(150, 1100))  # the best at 64 so far: an answer, never pruned
    assert not pruner.prune(study, running(210, 700))  # the best at 1
    assert pruner.prune(study, running(120, 700))  # worse than each level's best at that level


def test_the_gain_aggregate_counts_every_level_alike_in_tok_per_s_at_the_baseline_scale():
    plan = Plan([1, 64], Objective(aggregate="gain"), {}, chunks=2)
    base = {1: 100.0, 64: 1000.0}
    per = {1: {"tok_per_s": 120.0, "complete": True}, 64: {"tok_per_s": 900.0, "complete": True}}
    assert plan.value(per, base) == pytest.approx(550.0 * (1.2 + 0.9) / 2)  # +20 % and -10 %: +5 % of 550
    baseline_itself = {c: {"tok_per_s": v, "complete": True} for c, v in base.items()}
    assert plan.value(baseline_itself, base) == pytest.approx(550.0)
    assert plan.describe().startswith("mean gain over the baseline")
