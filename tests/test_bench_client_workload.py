"""Workload validation, prompt files (builtin, JSONL, ShareGPT) and the chunk plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.errors import ConfigError
from optimizer.loadgen.sse import SSEStream
from optimizer.loadgen.stats import distribute_itl, summary
from optimizer.loadgen.workload import Workload, chunk_plan, load_prompts


def test_defaults_and_validation_errors():
    w = Workload()
    assert (w.prompts, w.endpoint, w.concurrency, w.chunks, w.send_category) == ("builtin", "chat", 1, 4, True)
    for bad in (
        {"concurrency": 0},
        {"chunks": 0},
        {"requests_per_chunk": 0},
        {"max_tokens": 0},
        {"endpoint": "generate"},
        {"categories": []},
        {"stall_timeout_s": 0},
    ):
        with pytest.raises(ConfigError) as e:
            Workload.from_dict(bad, file="study.yaml")
        key = next(iter(bad))
        assert "study.yaml" in str(e.value) and key in str(e.value)
    with pytest.raises(ConfigError, match="unknown field; allowed: .*concurrency"):
        Workload.from_dict({"concurency": 4}, file="study.yaml")


def test_builtin_prompts_have_four_categories_of_ten():
    ps = load_prompts(Workload())
    cats = {}
    for p in ps:
        cats[p.category] = cats.get(p.category, 0) + 1
        assert p.messages and p.messages[0]["role"] == "user" and p.messages[0]["content"]
    assert cats == {"chat": 10, "code": 10, "math": 10, "summarization": 10}
    assert len({p.id for p in ps}) == 40
    only = load_prompts(Workload(categories=["math", "summarisation"]))
    assert {p.category for p in only} == {"math", "summarization"} and len(only) == 20
    with pytest.raises(ConfigError, match=r"unknown categories \['poetry'\]"):
        load_prompts(Workload(categories=["poetry"]))


def test_jsonl_prompts_and_bad_lines(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text(
        '{"prompt": "Hello there", "category": "chat"}\n\n'
        '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}\n'
    )
    ps = load_prompts(Workload(prompts="mine.jsonl"), base_dir=tmp_path)
    assert [p.category for p in ps] == ["chat", "user"]
    assert ps[0].as_messages() == [{"role": "user", "content": "Hello there"}]
    assert ps[1].as_text() == "Be brief.\n\nHi"
    for line, msg in (
        ("{not json", "not valid JSON"),
        ('["a"]', "not a JSON object"),
        ('{"text": "x"}', 'neither "prompt" nor "messages"'),
        ('{"messages": [{"role": "user"}]}', '"messages" must be'),
        ('{"prompt": ""}', '"prompt" must be'),
    ):
        f.write_text('{"prompt": "ok"}\n' + line + "\n")
        with pytest.raises(ConfigError) as e:
            load_prompts(Workload(prompts=str(f)))
        assert str(f) in str(e.value) and "line 2" in str(e.value) and msg in str(e.value)


def test_sharegpt_and_missing_or_unknown_files(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(
        json.dumps(
            [
                {
                    "id": "a",
                    "conversations": [{"from": "human", "value": "What is SSE?"}, {"from": "gpt", "value": "..."}],
                },
                {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
                {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "Second"}]},
            ]
        )
    )
    ps = load_prompts(Workload(prompts=str(f)))
    assert [(p.id, p.category, p.messages[0]["content"]) for p in ps] == [
        ("a", "sharegpt", "What is SSE?"),
        ("c", "sharegpt", "Second"),
    ]
    f.write_text(json.dumps({"conversations": []}))
    with pytest.raises(ConfigError, match="ShareGPT list"):
        load_prompts(Workload(prompts=str(f)))
    with pytest.raises(ConfigError, match="not found"):
        load_prompts(Workload(prompts=str(tmp_path / "nope.jsonl")))
    (tmp_path / "p.txt").write_text("hi")
    with pytest.raises(ConfigError, match="unknown prompt file type"):
        load_prompts(Workload(prompts=str(tmp_path / "p.txt")))


def test_chunk_plan_is_deterministic_mixed_and_cycles():
    w = Workload(chunks=6, requests_per_chunk=8, warmup_requests=3, seed=7)
    ps = load_prompts(w)
    warm, chunks = chunk_plan(w, ps)
    assert len(warm) == 3 and [len(c) for c in chunks] == [8] * 6
    assert chunk_plan(w, ps) == (warm, chunks)
    # the warmup count never changes which prompts a chunk gets (pruners pair chunk i across trials)
    assert chunk_plan(w.model_copy(update={"warmup_requests": 0}), ps)[1] == chunks
    assert all(len({p.category for p in c}) == 4 for c in chunks)  # every chunk mixes the categories
    assert chunk_plan(w.model_copy(update={"seed": 8}), ps)[1] != chunks
    flat = [p.id for c in chunks for p in c]
    assert flat[40:48] == flat[:8]  # 48 requests from 40 prompts: the order cycles


def test_itl_is_per_token_and_sums_to_decode_time():
    arr = [0.0, 0.003, 0.006, 0.009]
    assert distribute_itl(arr, 10) == pytest.approx([1.0] * 9)
    itl = distribute_itl(arr, 5)  # 4 tokens over 3 gaps: the last chunk carries two
    assert len(itl) == 4 and sum(itl) == pytest.approx(9.0)
    itl = distribute_itl(arr, 3)  # fewer tokens than chunks: empty gaps carry over
    assert len(itl) == 2 and sum(itl) == pytest.approx(9.0)
    assert distribute_itl([0.0], 5) == [] and distribute_itl(arr, 1) == []
    assert summary([]) == {"mean": None, "p50": None, "p99": None}
    s = summary([float(i) for i in range(1, 101)])
    assert s["mean"] == 50.5 and s["p50"] == 50.5 and s["p99"] == pytest.approx(99.01)


def test_sse_parser_handles_split_bytes_crlf_and_spaced_json():
    body = (
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\r\n\r\n'
        b'data: {"choices": [{"delta": {"content": "Hel"}}]}\r\n\r\n'
        b": a comment\n\n"
        b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    for step in (1, 7, len(body)):
        s = SSEStream("chat")
        for i in range(0, len(body), step):
            s.feed(body[i : i + step], float(i))
        assert s.done and not s.error and len(s.arrivals) == 2 and s.usage["completion_tokens"] == 2
    s = SSEStream("chat")
    s.feed(b'data: {"choices":[{"delta":{"content":"a"}}]\n\n', 0.0)  # cut-off JSON
    assert s.error.startswith("non_json")


_REC_BODY = json.loads(
    (Path(__file__).resolve().parent / "data" / "sglang-0.5.17-h200" / "launch_B_eagle3_topk1.json").read_text()
)["endpoints"][6]["raw_body"].encode()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(_REC_BODY) - 1), max_size=12))
def test_sse_parser_result_does_not_depend_on_how_bytes_are_split(cuts):
    """The recorded EAGLE3 stream, cut anywhere: always 6 content chunks, usage 16 tokens, [DONE]."""
    bounds = [0, *sorted(set(cuts)), len(_REC_BODY)]
    s = SSEStream("chat")
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        s.feed(_REC_BODY[a:b], float(i))
    assert s.done and not s.error
    assert len(s.arrivals) == 6 and s.usage["completion_tokens"] == 16
