"""The structured sampler where its picture of speculative decoding is wrong: it learns the accept length of pruned
launches, stops launching near-identical configurations the data rejected, hands launches to a model-free explorer
in proportion to how wrong it has been, keeps NCCL settings uncertain where custom all-reduce hid them, and still
reaches the optimum of a landscape whose wide trees look good in its prior and never pay."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from optimizer.hosts.config import local_host
from optimizer.samplers import calibration as C
from optimizer.samplers import make_sampler
from optimizer.samplers.candidates import build_table
from optimizer.samplers.structured import StructuredSampler, _accept_length, revealed_gain
from optimizer.samplers.throughput_model import Observation, ThroughputModel
from optimizer.settings import parse_study
from optimizer.sim.profiles import load_profile
from optimizer.simexec import ModelExecutor
from optimizer.space import parse_space
from optimizer.study import Driver, Progress
from optimizer.study import records as R

TREES = {
    "name": "trees",
    "fixed": {"model-path": "m", "speculative-draft-model-path": "d", "tp-size": 2, "attention-backend": "fa3"},
    "parameters": {
        "speculative-algorithm": {"type": "categorical", "choices": ["EAGLE3"]},
        "speculative-num-steps": {"type": "int", "low": 1, "high": 6},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1, 2, 4, 8]},
        "speculative-num-draft-tokens": {"type": "int", "low": 2, "high": 32, "when": "topk > 1"},
        "disable-custom-all-reduce": {"type": "categorical", "choices": [False, True]},
        "NCCL_PROTO": {"type": "categorical", "choices": ["unset", "LL", "Simple"]},
    },
    "constraints": ["draft <= steps * topk + 1"],
}
CHAIN = {"speculative-algorithm": "EAGLE3", "speculative-eagle-topk": 1, "disable-custom-all-reduce": False}


def _journal(tmp_path, sampler):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    return optuna.create_study(direction="maximize", sampler=sampler, storage=storage)


def _record(study, space, params, value, *, state=TrialState.COMPLETE, attrs=None):
    """One launch recorded as the driver records it (pruned ones with the chunks measured before the prune)."""
    study.enqueue_trial(params)
    trial = study.ask()
    space.suggest(trial)
    trial.set_user_attr(R.FLAGS, dict(space.candidate(params).flags))
    trial.set_user_attr(R.LAUNCHED, True)
    for k, v in (attrs or {}).items():
        trial.set_user_attr(k, v)
    if state == TrialState.PRUNED:
        for step, v in enumerate(value):
            trial.report(v, step)
        trial.set_user_attr(R.OUTCOME, R.PRUNED)
        study.tell(trial, state=TrialState.PRUNED)
    else:
        trial.set_user_attr(R.OUTCOME, R.COMPLETE)
        study.tell(trial, value)
    return trial


def test_a_pruned_launch_teaches_the_accept_length_seen_in_the_stream():
    # a server that returns no accept length: the stream's tokens per content chunk stand in, pooled over levels
    assert _accept_length({R.ACCEPT_LENGTH: None, "tokens_per_chunk": 2.8}) == 2.8
    assert _accept_length({R.LEVELS: {"1": {"tokens_per_chunk": 3.0}, "16": {"tokens_per_chunk": 2.6}}}) == 2.8
    assert _accept_length({R.ACCEPT_LENGTH: 3.1, "tokens_per_chunk": 2.8}) == 3.1
    assert _accept_length({}) is None


def test_pruned_launch_with_only_a_stream_accept_length_moves_the_accept_model(tmp_path):
    space = parse_space(TREES, "trees.yaml")
    table = build_table(space)
    sampler = StructuredSampler(space, concurrency=1, seed=0)
    study = _journal(tmp_path, sampler)
    wide = {**CHAIN, "speculative-num-steps": 3, "speculative-eagle-topk": 8, "speculative-num-draft-tokens": 16}
    wide.update({"NCCL_PROTO": "unset"})
    t = _record(study, space, wide, [60.0, 61.0], state=TrialState.PRUNED, attrs={"tokens_per_chunk": 1.3})
    from optimizer.samplers.structured import _collect

    obs = _collect(table, study.get_trials(), exclude=-1)[0]
    assert len(obs) == 1 and obs[0].pruned and obs[0].accept_length == 1.3, obs
    model = ThroughputModel(table, 1, 2).fit(obs)
    i, _ = table.locate_trial(study.get_trials()[t.number])
    prior = ThroughputModel(table, 1, 2).fit([])
    assert model.accept_length(i) < prior.accept_length(i) - 0.5  # the prior expected far more of a wide tree


def test_one_chain_launch_with_its_histogram_teaches_every_shorter_chain(tmp_path):
    # a drafter whose acceptance falls off after the first position, unlike the prior's published curve: the
    # 6-step chain's histogram says so for chains of 1..5 steps, which were never launched
    space = parse_space(TREES, "trees.yaml")
    table = build_table(space)
    deep = {**CHAIN, "speculative-num-steps": 6, "NCCL_PROTO": "unset"}
    survival = np.array([0.95, 0.2, 0.15, 0.12, 0.1, 0.08])  # share of verify steps accepting >= 1..6 drafts
    exact = -np.diff(np.concatenate([[1.0], survival, [0.0]]))
    hist = [int(round(1000 * p)) for p in exact]
    accept = 1.0 + survival.sum()
    sampler = StructuredSampler(space, concurrency=1, seed=0)
    study = _journal(tmp_path, sampler)
    _record(study, space, deep, [200.0, 201.0], state=TrialState.PRUNED, attrs={R.ACCEPT_LENGTH: accept})
    _record(study, space, deep, [200.0, 201.0], state=TrialState.PRUNED, attrs={R.ACCEPT_HISTOGRAM: hist})
    from optimizer.samplers.structured import _collect

    obs = _collect(table, study.get_trials(), exclude=-1)[0]
    assert obs[0].histogram is None and obs[1].histogram == tuple(hist)
    without = ThroughputModel(table, 1, 2).fit([dataclasses.replace(obs[1], accept_length=accept)])
    learned = ThroughputModel(table, 1, 2, histograms=True).fit([dataclasses.replace(obs[1], accept_length=accept)])
    for m in (1, 2, 3, 4):
        i = table._tree_index[("EAGLE3", m, 1, m + 1)]
        truth = 1.0 + survival[:m].sum()
        error, error_without = abs(learned.accept_length(i) - truth), abs(without.accept_length(i) - truth)
        assert error < 0.1, (m, learned.accept_length(i), truth)
        if m == 1:  # the published curve's shape, scaled to the 6-step chain, is far off here
            assert error_without > 0.2 and error < error_without / 2, (m, error, error_without)


def test_the_simulated_cluster_reports_a_chains_histogram_as_sglang_does():
    prof = load_profile("llama-3.1-8b-h100")
    survival = prof.accept_survival("EAGLE3", (4, 1, 5))
    curve = [prof.mixed_accept_length("EAGLE3", (m, 1, m + 1))[0] for m in range(1, 5)]
    assert len(survival) == 4 and all(a >= b for a, b in zip(survival, survival[1:]))
    assert 1.0 + sum(survival) == pytest.approx(curve[-1], rel=0.03)  # the mix's accept length, pooled by steps
    assert prof.accept_survival("EAGLE3", (4, 4, 8)) is None and prof.accept_survival(None, None) is None


def test_near_identical_configurations_the_data_rejected_are_not_launched_again():
    space = parse_space(TREES, "trees.yaml")
    table = build_table(space)
    default = table.other_values.index(table.default_other)

    def row(steps, topk, draft):
        params = {**CHAIN, "speculative-num-steps": steps, "speculative-eagle-topk": topk}
        if topk > 1:
            params["speculative-num-draft-tokens"] = draft
        return table.locate(dict(space.candidate({**params, "NCCL_PROTO": "unset"}).flags), params)[0]

    pruned = [(row(3, 8, 7), default), (row(3, 8, 8), default)]
    mask = C.rejected_mask(table, pruned, completed=[])
    assert mask[row(3, 8, 9), default] and mask[row(4, 8, 9), default]  # draft +1, steps +1: same answer
    assert not mask[row(3, 8, 16), default]  # twice the draft tokens is another configuration
    assert not mask[row(3, 4, 8), default] and not mask[row(3, 1, 4), default]
    other = next(j for j in range(len(table.other_values)) if j != default)
    assert not mask[row(3, 8, 9), other]  # other settings: two rejections with these are not enough...
    third = pruned + [(row(3, 8, 10), other)]
    assert C.rejected_mask(table, third, completed=[])[row(3, 8, 9), other]  # ...three with any settings are
    # a near-identical launch that completed keeps the region open
    assert not C.rejected_mask(table, pruned, completed=[(row(3, 8, 8), default)])[row(3, 8, 9), default]


def test_a_miscalibrated_model_hands_launches_to_the_explorer(tmp_path):
    space = parse_space(TREES, "trees.yaml")
    base = {**CHAIN, "speculative-num-steps": 2, "NCCL_PROTO": "unset"}

    def study_where_the_model(keeps_promises: bool):
        sampler = StructuredSampler(space, concurrency=1, seed=3)
        study = _journal(tmp_path / str(keeps_promises), sampler)
        _record(study, space, base, 100.0)
        for k, steps in enumerate((3, 4, 5, 6)):
            params = {**base, "speculative-num-steps": steps}
            value = 101.0 + k if keeps_promises else 90.0 - k  # every promise kept, or every one broken
            predicted = value * 1.02 if keeps_promises else 112.0
            promise = {C.CHOOSER: C.MODEL, C.P_IMPROVE: 0.6, C.EXPECTED_GAIN: 0.1, C.PREDICTED: predicted}
            _record(study, space, params, value, attrs={**promise, C.PRED_LOG_SD: 0.02})
        return sampler, study

    for keeps in (True, False):
        (tmp_path / str(keeps)).mkdir()
    sampler, study = study_where_the_model(keeps_promises=True)
    cal = C.assess(study.get_trials())
    assert cal.surprise == 0 and cal.explore_share == 0 and cal.calibrated
    sampler, study = study_where_the_model(keeps_promises=False)
    cal = C.assess(study.get_trials())
    # four broken promises of a 60 % chance (p = 0.4^4 = 2.6 %) and four measurements 10 sigma below the prediction
    assert cal.surprise > 3.5 and cal.misses == 4 and cal.explore_share == C.MAX_EXPLORE and not cal.calibrated
    choosers = []
    for _ in range(8):
        trial = study.ask()
        cand = space.suggest(trial)
        choosers.append(study.get_trials(deepcopy=False)[trial.number].user_attrs.get(C.CHOOSER))
        trial.set_user_attr(R.LAUNCHED, True)
        trial.set_user_attr(R.FLAGS, dict(cand.flags))
        trial.set_user_attr(R.OUTCOME, R.COMPLETE)
        study.tell(trial, 80.0)
    assert C.EXPLORER in choosers and C.MODEL in choosers, choosers


def test_the_surprise_forgets_promises_broken_long_ago(tmp_path):
    """The surprise sums the model's broken promises since its last improvement, but only the last WINDOW of
    them: a model that promised much early and then only small gains is judged on what it promises now, so the
    explorer's share falls back once its recent promises are modest and kept within the noise."""
    space = parse_space(TREES, "trees.yaml")
    sampler = StructuredSampler(space, concurrency=1, seed=3)
    study = _journal(tmp_path, sampler)
    base = {**CHAIN, "speculative-num-steps": 2, "NCCL_PROTO": "unset"}
    _record(study, space, base, 100.0)
    trees = [(steps, proto) for proto in ("LL", "Simple") for steps in range(1, 7)]
    surprises, calibrated = [], []
    for k, (steps, proto) in enumerate(trees):
        bold = k < 4  # four bold promises broken first, then small ones
        promise = {
            C.CHOOSER: C.MODEL,
            C.P_IMPROVE: 0.6 if bold else 0.1,
            C.EXPECTED_GAIN: 0.1 if bold else 0.01,
            C.PREDICTED: 96.0,
            C.PRED_LOG_SD: 0.05,
        }
        _record(study, space, {**base, "speculative-num-steps": steps, "NCCL_PROTO": proto}, 95.0, attrs=promise)
        cal = C.assess(study.get_trials())
        surprises.append(cal.surprise)
        calibrated.append(cal.calibrated)
    assert not any(calibrated[3:7]), surprises  # while the bold promises are among the last WINDOW
    assert surprises[3] > 3.5, surprises  # four broken 60 % promises: a 2.6 % event
    assert surprises[-1] < 1.0 and calibrated[-1], surprises  # they have left the window


def test_a_broken_promise_weighs_what_the_model_promised_not_what_one_noisy_launch_could_reveal(tmp_path):
    """On a machine whose launches scatter by 15 %, one launch can reveal little of any gain, so the expected gain
    the stop rule judges is small. The stake of a broken promise is the gain the model promised (the plain
    expected improvement): six launches in a row, each given a 40 % chance to beat the best and none doing so, is
    a 5 % event, and the model is wrong however noisy the machine."""
    space = parse_space(TREES, "trees.yaml")
    study = _journal(tmp_path, StructuredSampler(space, concurrency=1, seed=3))
    base = {**CHAIN, "speculative-num-steps": 2, "NCCL_PROTO": "unset"}
    _record(study, space, base, 100.0)
    promise = {
        C.CHOOSER: C.MODEL,
        C.P_IMPROVE: 0.4,
        C.PROMISED_GAIN: 0.05,  # what the model promised
        C.EXPECTED_GAIN: 0.004,  # what one launch at 15 % noise could reveal of it
        C.PREDICTED: 98.0,
        C.PRED_LOG_SD: 0.15,
    }
    for steps, proto in ((1, "LL"), (3, "LL"), (4, "LL"), (5, "LL"), (1, "Simple"), (3, "Simple")):
        _record(study, space, {**base, "speculative-num-steps": steps, "NCCL_PROTO": proto}, 92.0, attrs=promise)
    cal = C.assess(study.get_trials())
    assert cal.surprise > 3.0 and not cal.calibrated and cal.explore_share > 0.4, cal.describe()
    # a study stored before the promised gain was kept: the stored expected gain is the stake, as before
    old = C.assess([_without(t, C.PROMISED_GAIN) for t in study.get_trials()])
    assert old.surprise < 0.5 and old.calibrated, old.describe()


def _without(trial, key):
    """A copy of a stored trial without one user attribute (as a study written by an older version has it)."""
    old = copy.deepcopy(trial)
    old.user_attrs = {k: v for k, v in trial.user_attrs.items() if k != key}
    return old


def test_a_launch_promises_only_what_it_can_reveal_through_the_noise():
    """The stop rule judges what one launch can reveal: on a machine whose launches scatter by 3 %, a configuration
    the model already knows within that noise promises almost nothing (relaunching near-equal NCCL variants, each
    "maybe 2 % better", kept the search going), one it is unsure of promises nearly its whole expected gain."""
    gain = np.array([0.03, 0.03, 0.03])
    spread = np.array([0.003, 0.03, 0.15])  # a tenth of the noise, as much, five times as much
    revealed = revealed_gain(gain, spread, 0.03)
    assert revealed[0] < 0.01 * gain[0]
    assert 0.25 * gain[1] < revealed[1] < 0.35 * gain[1]
    assert revealed[2] > 0.8 * gain[2]
    assert np.all(np.diff(revealed) > 0)  # the less the model knows, the more a launch can tell
    assert np.allclose(revealed_gain(gain, spread, 0.0), gain)  # a noiseless launch reveals everything


def _record_broken_promises(study, space, base) -> None:
    """Four model launches of deeper chains, each promised 12 % more than ``base`` measured and measured 10-13 %
    less: a model that keeps being wrong, which hands half the launches to the explorer."""
    broken = {C.CHOOSER: C.MODEL, C.P_IMPROVE: 0.6, C.EXPECTED_GAIN: 0.1, C.PREDICTED: 112.0, C.PRED_LOG_SD: 0.02}
    for k, steps in enumerate((3, 4, 5, 6)):
        _record(study, space, {**base, "speculative-num-steps": steps}, 90.0 - k, attrs=broken)


def _study_of_a_wrong_model(tmp_path):
    """A study on ``TREES`` (structured sampler, seed 5): a 2-step chain at 100 tok/s, then the broken promises."""
    space = parse_space(TREES, "trees.yaml")
    sampler = StructuredSampler(space, concurrency=1, seed=5)
    study = _journal(tmp_path, sampler)
    base = {**CHAIN, "speculative-num-steps": 2, "NCCL_PROTO": "unset"}
    _record(study, space, base, 100.0)
    _record_broken_promises(study, space, base)
    return space, build_table(space), study, base


def test_the_explorers_turns_are_launches_that_teach_something_new(tmp_path):
    """TPE proposes each parameter on its own, so it proposes draft tokens the tree cannot hold (refused before
    launch) and configurations already measured (duplicates). Each such turn went back to the model, and on a
    space with a draft-token constraint the explorer hardly ever launched. Its turns are now the configuration
    nearest its proposal that is valid and not launched yet."""
    space, table, study, base = _study_of_a_wrong_model(tmp_path)
    seen = {table.locate_trial(t) for t in study.get_trials()}
    explored = []
    for _ in range(16):
        trial = study.ask()
        cand = space.suggest(trial)
        trial.set_user_attr(R.FLAGS, dict(cand.flags))
        loc = table.locate(dict(cand.flags), dict(trial.params))
        if study.get_trials(deepcopy=False)[trial.number].user_attrs.get(C.CHOOSER) == C.EXPLORER:
            explored.append((loc, dict(trial.params)))
            assert loc is not None and table.valid[loc], trial.params  # the space's constraint holds
            assert loc not in seen, trial.params  # never a configuration already launched
        seen.add(loc)
        trial.set_user_attr(R.LAUNCHED, True)
        trial.set_user_attr(R.OUTCOME, R.COMPLETE)
        study.tell(trial, 80.0)
    assert len(explored) >= 4, explored
    assert {p["speculative-eagle-topk"] for _, p in explored} - {1}, explored  # trees too, not only chains


def test_the_explorer_does_not_launch_trees_larger_than_one_that_ran_out_of_memory(tmp_path):
    """The explorer doubts the throughput model, not the failures seen: once a tree ran out of memory, a larger
    tree would teach only that failure again (TPE, which learns only from values, kept proposing them)."""
    space, table, study, base = _study_of_a_wrong_model(tmp_path)
    oom = {**base, "speculative-num-steps": 3, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 12}
    study.enqueue_trial(oom)
    trial = study.ask()
    space.suggest(trial)
    failed = {
        R.FLAGS: dict(space.candidate(oom).flags),
        R.LAUNCHED: True,
        R.OUTCOME: R.INFEASIBLE,
        R.FAILURE_KIND: "oom",
    }
    for key, value in failed.items():
        trial.set_user_attr(key, value)
    study.tell(trial, 0.0)
    explored = []
    for _ in range(16):
        trial = study.ask()
        cand = space.suggest(trial)
        trial.set_user_attr(R.FLAGS, dict(cand.flags))
        if study.get_trials(deepcopy=False)[trial.number].user_attrs.get(C.CHOOSER) == C.EXPLORER:
            i, _ = table.locate(dict(cand.flags), dict(trial.params))
            steps, topk, draft = table.trees[i]
            explored.append((int(steps), int(topk), int(draft)))
        trial.set_user_attr(R.LAUNCHED, True)
        trial.set_user_attr(R.OUTCOME, R.COMPLETE)
        study.tell(trial, 80.0)
    assert len(explored) >= 4, explored
    assert all(s * k + d < 3 * 4 + 12 for s, k, d in explored), explored  # every one smaller than the tree that failed


def test_on_one_gpu_the_explorer_leaves_communication_settings_at_their_default(tmp_path):
    """One GPU has no all-reduce: another NCCL protocol or custom all-reduce level is the same server, so the
    explorer, like the model, launches only their defaults; a setting that does change the server stays open."""
    one_gpu = {
        **TREES,
        "fixed": {**TREES["fixed"], "tp-size": 1},
        "parameters": {
            **TREES["parameters"],
            "speculative-adaptive": {"type": "categorical", "choices": [False, True]},
        },
    }
    space = parse_space(one_gpu, "one-gpu.yaml")
    table = build_table(space)
    assert table.idle_settings(1, False) == {"disable-custom-all-reduce": False, "NCCL_PROTO": "unset"}
    assert table.idle_settings(2, True) == {"disable-custom-all-reduce": False}
    assert table.idle_settings(2, False) == {}
    sampler = StructuredSampler(space, concurrency=1, seed=3)
    study = _journal(tmp_path, sampler)
    base = {**CHAIN, "speculative-num-steps": 2, "NCCL_PROTO": "unset", "speculative-adaptive": False}
    _record(study, space, base, 100.0)
    _record_broken_promises(study, space, base)
    assert C.assess(study.get_trials()).explore_share == C.MAX_EXPLORE
    explored = []
    for _ in range(12):
        trial = study.ask()
        cand = space.suggest(trial)
        if study.get_trials(deepcopy=False)[trial.number].user_attrs.get(C.CHOOSER) == C.EXPLORER:
            explored.append(dict(trial.params))
        trial.set_user_attr(R.LAUNCHED, True)
        trial.set_user_attr(R.FLAGS, dict(cand.flags))
        trial.set_user_attr(R.OUTCOME, R.COMPLETE)
        study.tell(trial, 80.0)
    assert len(explored) >= 3, explored
    assert all(p["NCCL_PROTO"] == "unset" and p["disable-custom-all-reduce"] is False for p in explored), explored
    assert {p["speculative-adaptive"] for p in explored} == {False, True}, explored


def test_nccl_settings_learned_with_custom_all_reduce_on_stay_open_with_it_off():
    """Launches with custom all-reduce on say NCCL_PROTO=LL changes nothing; with custom all-reduce off (NCCL then
    carries the decode all-reduces) the model must still be unsure what LL does."""
    space = parse_space(TREES, "trees.yaml")
    table = build_table(space)
    chain = next(i for i in range(len(table.trees)) if table.spec[i] and table.trees[i][1] == 1)
    col = {v: j for j, v in enumerate(table.other_values)}
    k_car, k_proto = table.other_names.index("disable-custom-all-reduce"), table.other_names.index("NCCL_PROTO")

    def j_of(car, proto):
        return next(j for v, j in col.items() if v[k_car] == car and v[k_proto] == proto)

    obs = [Observation(chain, j_of(False, p), 100.0, 2.5) for p in ("unset", "LL", "Simple") for _ in range(3)]
    model = ThroughputModel(table, 1, 2).fit(obs)
    draws = model.draw(400, np.random.default_rng(0))

    def spread(j):
        return float(np.std(draws.settings[j] + draws.settings_spec[j]))

    assert spread(j_of(True, "LL")) > 2.5 * spread(j_of(False, "LL"))


def test_wide_trees_that_look_good_in_the_prior_and_never_pay_do_not_fool_the_search():
    """A landscape against the model's prior: a drafter whose tree branches never accept anything more and whose
    tree kernels cost extra. The best is a chain; every run reaches 98 % of it before the model calls itself
    confident, having spent only a few launches on wide trees."""
    base = load_profile("llama-3.1-8b-h100")
    prof = dataclasses.replace(base, name="trees-never-pay", tree_beta=0.0, tree_ms=base.dense_ms * 0.3)
    space = parse_space({**TREES, "fixed": {**TREES["fixed"], "tp-size": 1}}, "trees.yaml")
    from benchmarks.strategies import truth

    tr = truth(prof, space, 1)
    best_tree = tr["table"].trees[tr["optimum_ij"][0]]
    assert best_tree[1] == 1  # the optimum is a chain
    reached = []
    for seed in range(3):
        cfg = parse_study(
            {
                "study": "robust",
                "budget": {"trials": 16},
                "workload": {"max_tokens": 256, "chunks": 6, "requests_per_chunk": 4},
                "sampler": {"name": "structured", "seed": seed, "stop_below_gain": 0.01},
            },
            "test",
        )
        study = optuna.create_study(direction="maximize", sampler=make_sampler(cfg, space))
        ex = ModelExecutor(prof, ["h0"], cfg.workload, seed=seed)
        Driver(cfg, space, [local_host("h0")], ex, progress=Progress(lambda s: None), study=study).run()
        done = [t for t in study.get_trials() if t.user_attrs.get(R.LAUNCHED)]
        best = max((t for t in done if t.state == TrialState.COMPLETE and t.value), key=lambda t: t.value)
        loc = tr["table"].locate_trial(best)
        reached.append(tr["values"][loc] / tr["optimum"])
        wide = [t for t in done if (t.params.get("speculative-eagle-topk") or 1) >= 4]
        # a few launches learn that trees don't pay here
        assert len(wide) <= 5, [(t.number, t.user_attrs.get(R.CONFIG), t.user_attrs.get(C.CHOOSER)) for t in done]
    assert min(reached) >= 0.98, reached
