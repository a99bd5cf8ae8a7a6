"""The alarm rules on recorded values: what raises an alarm and what must not."""

from __future__ import annotations

from optimizer import alarms

EAGLE3 = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3, "speculative-eagle-topk": 1}


def test_slower_at_every_level_only():
    base = {"1": {"tok_per_s": 100.0}, "32": {"tok_per_s": 1000.0}}
    slower_everywhere = {"1": {"tok_per_s": 90.0}, "32": {"tok_per_s": 800.0}}
    faster_at_one = {"1": {"tok_per_s": 150.0}, "32": {"tok_per_s": 800.0}}
    a = alarms.slower_than_baseline(EAGLE3, 95.0, 100.0, levels=slower_everywhere, baseline_levels=base)
    assert a is not None and "c1: -10.0%" in a.seen and "c32: -20.0%" in a.seen
    assert alarms.slower_than_baseline(EAGLE3, 95.0, 100.0, levels=faster_at_one, baseline_levels=base) is None
    assert alarms.slower_than_baseline({}, 50.0, 100.0) is None  # the baseline itself (no speculation)


def test_server_changes_ignore_sglang_own_normalisation():
    # topk 1 forces draft tokens = steps + 1: asking 8 and running 4 is SGLang's rule, not a silent change
    asked = {**EAGLE3, "speculative-num-draft-tokens": 8, "model-path": "/m", "cuda-graph-max-bs": 16}
    running = {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "model_path": "/resolved/m",
        "cuda_graph_max_bs_decode": 16,
        "max_running_requests": 48,
    }
    assert alarms.server_changes(asked, running, concurrency=8) == []
    changed = alarms.server_changes({**asked, "cuda-graph-max-bs": 32}, running, concurrency=64)
    assert [c["flag"] for c in changed] == ["cuda-graph-max-bs", "max-running-requests"]


def test_greedy_mismatch_needs_most_prompts_to_differ():
    base = {"a": "1", "b": "2", "c": "3", "d": "4"}
    assert alarms.greedy_mismatch({**base, "d": "x"}, base) is None  # one late drift is not a broken kernel
    assert alarms.greedy_mismatch({"a": "x", "b": "y", "c": "3", "d": "4"}, base) is not None


def test_low_accept_threshold():
    assert alarms.low_accept(EAGLE3, 1.8) is None
    a = alarms.low_accept(EAGLE3, 1.1)
    assert a is not None and "does not match the target model" in a.cause
    assert alarms.low_accept({}, 1.0) is None
