"""Contract tests: the simulator's replies compared field by field with the real SGLang 0.5.17 recordings.

The simulator is launched with the recorded command lines (smollm2-135m-h200 profile); replies must carry the
same keys (in the same order where SGLang's order is stable), the same value types, the same SSE framing, the
same error envelopes and the same metric families.
"""

from __future__ import annotations

import json

import httpx
import pytest
from test_sim_support import Sim, load_recording, sse_events

REC_A = load_recording("launch_A_baseline.json")
REC_B = load_recording("launch_B_eagle3_topk1.json")


def recorded_args(rec: dict) -> list[str]:
    cmd = rec["cmd"]
    args = cmd[cmd.index("sglang.launch_server") + 1 :]
    out, skip = [], False
    for _i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("--host", "--port"):
            skip = True
            continue
        out.append(a)
    return out


def endpoint(rec: dict, method: str, path: str, nth: int = 0) -> dict:
    hits = [e for e in rec["endpoints"] if e["method"] == method and e["path"] == path]
    return hits[nth]


def types_of(d: dict) -> dict:
    return {k: type(v).__name__ for k, v in d.items()}


@pytest.fixture(scope="module")
def sim_a():
    with Sim(*recorded_args(REC_A), "--sim-step-scale", "0.1", profile="smollm2-135m-h200") as sim:
        yield sim.wait_ready()


@pytest.fixture(scope="module")
def sim_b():
    with Sim(*recorded_args(REC_B), "--sim-step-scale", "0.1", profile="smollm2-135m-h200") as sim:
        yield sim.wait_ready()


def test_recorded_flags_are_accepted(sim_b) -> None:
    info = httpx.get(sim_b.base + "/server_info").json()
    assert info["speculative_draft_load_format"] == "dummy" and info["sampling_backend"] == "pytorch"
    assert info["grammar_backend"] == "none" and info["load_format"] == "dummy"


def test_model_info_matches(sim_a) -> None:
    rec = json.loads(endpoint(REC_A, "GET", "/get_model_info")["body"])
    got = httpx.get(sim_a.base + "/get_model_info").json()
    assert list(got) == list(rec)
    assert types_of(got) == types_of(rec)
    for key in ("model_path", "tokenizer_path", "is_generation", "model_type", "architectures", "embedding"):
        assert got[key] == rec[key], key
    assert httpx.get(sim_a.base + "/model_info").json() == got


@pytest.mark.parametrize("which", ["A", "B"])
def test_server_info_matches(which, sim_a, sim_b) -> None:
    rec_launch, sim = (REC_A, sim_a) if which == "A" else (REC_B, sim_b)
    rec = json.loads(endpoint(rec_launch, "GET", "/get_server_info")["body"])
    rec_after = rec_launch["server_info_after_bench"]
    rec_after = json.loads(rec_after["body"]) if isinstance(rec_after, dict) and "body" in rec_after else rec_after
    # after some traffic, as the recording after its benchmark
    httpx.post(sim.base + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 16}}, timeout=30)
    got = httpx.get(sim.base + "/get_server_info").json()
    assert set(got) == set(rec)
    assert list(got)[-7:] == list(rec)[-7:]  # status ... kv_events at the end, in order
    for key in (
        "model_path",
        "load_format",
        "attention_backend",
        "sampling_backend",
        "mem_fraction_static",
        "cuda_graph_max_bs_decode",
        "enable_metrics",
        "speculative_algorithm",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "max_running_requests",
        "tp_size",
        "version",
        "status",
    ):
        assert got[key] == rec[key], key
    assert set(got["startup_time"]) == set(rec["startup_time"])
    assert set(got["startup_time"]["cuda_graph"]) == set(rec["startup_time"]["cuda_graph"])
    rec_ist, got_ist = rec_after["internal_states"][0], got["internal_states"][0]
    assert set(rec_ist) - {"avg_spec_accept_length"} <= set(got_ist)
    assert ("avg_spec_accept_length" in got_ist) == ("avg_spec_accept_length" in rec_ist) == (which == "B")
    assert isinstance(got_ist["last_gen_throughput"], float)
    assert set(got_ist["memory_usage"]) == set(rec_ist["memory_usage"])
    assert got_ist["effective_max_running_requests_per_dp"] == rec_ist["effective_max_running_requests_per_dp"]
    common = set(rec) & set(got) - {"internal_states", "port", "startup_time"}
    mismatched = [k for k in common if rec[k] is not None and got[k] is not None and type(rec[k]) is not type(got[k])]
    assert not mismatched


def test_load_and_flush_cache_match(sim_a) -> None:
    rec = json.loads(endpoint(REC_A, "GET", "/get_load")["body"])
    got = httpx.get(sim_a.base + "/get_load").json()
    assert list(got[0]) == list(rec[0])
    for method in ("GET", "POST"):
        rec_e = endpoint(REC_A, method, "/flush_cache")
        r = httpx.request(method, sim_a.base + "/flush_cache")
        assert r.status_code == rec_e["status"] and r.text == rec_e["body"]
        assert ("content-type" in r.headers) == any(h[0].lower() == "content-type" for h in rec_e["headers"])


def test_v1_models_matches(sim_a) -> None:
    rec = REC_A["v1_models"]
    rec = json.loads(rec["body"] if isinstance(rec, dict) else rec)
    got = httpx.get(sim_a.base + "/v1/models").json()
    assert list(got) == list(rec) and list(got["data"][0]) == list(rec["data"][0])
    assert got["data"][0]["id"] == rec["data"][0]["id"]


def _chunks(raw: str) -> list:
    return [json.loads(e) for e in sse_events(raw) if e != "[DONE]"]


@pytest.mark.parametrize("which", ["A", "B"])
def test_chat_stream_matches(which, sim_a, sim_b) -> None:
    rec_launch, sim = (REC_A, sim_a) if which == "A" else (REC_B, sim_b)
    rec_e = endpoint(rec_launch, "POST", "/v1/chat/completions", 0)
    r = httpx.post(
        sim.base + "/v1/chat/completions",
        content=rec_e["request_body"],
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200
    rec_headers = {h[0].lower(): h[1] for h in rec_e["headers"]}
    assert r.headers["content-type"] == rec_headers["content-type"]
    assert r.headers["server"] == rec_headers["server"] and r.headers["vary"] == rec_headers["vary"]
    assert r.headers.get("transfer-encoding") == "chunked"
    assert sse_events(r.text)[-1] == "[DONE]" == sse_events(rec_e["raw_body"])[-1]
    rec, got = _chunks(rec_e["raw_body"]), _chunks(r.text)
    # first chunk, content chunks, finish chunk, usage chunk: same keys in the same order
    for a, b in ((rec[0], got[0]), (rec[1], got[1]), (rec[-2], got[-2]), (rec[-1], got[-1])):
        assert list(a) == list(b)
        if a["choices"]:
            assert list(a["choices"][0]) == list(b["choices"][0])
            assert list(a["choices"][0]["delta"]) == list(b["choices"][0]["delta"])
            assert a["choices"][0]["finish_reason"] == b["choices"][0]["finish_reason"]
    assert list(rec[-1]["usage"]) == list(got[-1]["usage"])
    assert got[-1]["usage"]["completion_tokens"] == rec[-1]["usage"]["completion_tokens"] == 16
    assert got[-1]["usage"]["prompt_tokens"] == rec[-1]["usage"]["prompt_tokens"]  # chat template: 36
    assert got[0]["model"] == rec[0]["model"]


def test_chat_non_stream_matches(sim_b) -> None:
    rec_e = endpoint(REC_B, "POST", "/v1/chat/completions", 1)
    rec = json.loads(rec_e["body"])
    got = httpx.post(sim_b.base + "/v1/chat/completions", content=rec_e["request_body"], timeout=30).json()
    assert list(got) == list(rec)
    assert list(got["choices"][0]) == list(rec["choices"][0])
    assert list(got["choices"][0]["message"]) == list(rec["choices"][0]["message"])
    assert got["usage"] == rec["usage"]


def test_completions_stream_matches(sim_b) -> None:
    rec_e = endpoint(REC_B, "POST", "/v1/completions")
    r = httpx.post(sim_b.base + "/v1/completions", content=rec_e["request_body"], timeout=30)
    rec, got = _chunks(rec_e["raw_body"]), _chunks(r.text)
    for a, b in ((rec[0], got[0]), (rec[-2], got[-2]), (rec[-1], got[-1])):
        assert list(a) == list(b)
        if a["choices"]:
            assert list(a["choices"][0]) == list(b["choices"][0])
    assert rec[-2]["choices"][0]["finish_reason"] == got[-2]["choices"][0]["finish_reason"] == "length"
    assert list(rec[-1]["usage"]) == list(got[-1]["usage"]) and got[-1]["usage"] == rec[-1]["usage"]


def test_generate_matches(sim_b) -> None:
    rec_e = endpoint(REC_B, "POST", "/generate", 0)
    rec = json.loads(rec_e["body"])
    got = httpx.post(sim_b.base + "/generate", content=rec_e["request_body"], timeout=30).json()
    assert list(got) == list(rec)
    assert set(rec["meta_info"]) <= set(got["meta_info"])
    assert types_of({k: got["meta_info"][k] for k in rec["meta_info"]}) == types_of(rec["meta_info"])
    assert (
        got["meta_info"]["completion_tokens"] == 64
        and got["meta_info"]["finish_reason"] == rec["meta_info"]["finish_reason"]
    )
    # streamed: cumulative text/output_ids, meta_info on every event
    rec_s = endpoint(REC_B, "POST", "/generate", 1)
    rec_chunks = _chunks(rec_s["raw_body"])
    got_chunks = _chunks(httpx.post(sim_b.base + "/generate", content=rec_s["request_body"], timeout=30).text)
    assert list(got_chunks[0]) == list(rec_chunks[0]) == ["text", "output_ids", "meta_info"]
    assert set(rec_chunks[-1]["meta_info"]) <= set(got_chunks[-1]["meta_info"])
    assert got_chunks[-1]["meta_info"]["completion_tokens"] == 8


def test_generate_baseline_has_no_spec_fields(sim_a) -> None:
    rec_e = endpoint(REC_A, "POST", "/generate", 0)
    rec = json.loads(rec_e["body"])
    got = httpx.post(sim_a.base + "/generate", content=rec_e["request_body"], timeout=30).json()
    assert set(got["meta_info"]) == set(rec["meta_info"])


@pytest.mark.parametrize("nth", [2, 3, 4])
def test_error_envelopes_match(nth, sim_a) -> None:
    rec_e = endpoint(REC_A, "POST", "/v1/chat/completions", nth)
    rec = json.loads(rec_e["body"])
    r = httpx.post(
        sim_a.base + "/v1/chat/completions", content=rec_e["request_body"], headers={"content-type": "application/json"}
    )
    assert r.status_code == rec_e["status"] == 400
    got = r.json()
    assert list(got) == list(rec)
    assert got["type"] == rec["type"] and got["code"] == rec["code"]
    head = rec["message"].split("\n\n")[0]
    kind = head.split("'type': '")[1].split("'")[0] if "'type': '" in head else None
    if kind:
        assert f"'type': '{kind}'" in got["message"] and got["message"].startswith("1 validation error:")
    else:
        assert got["message"] == rec["message"]


def test_unknown_path_matches(sim_a) -> None:
    rec_e = endpoint(REC_A, "GET", "/definitely_not_an_endpoint")
    r = httpx.get(sim_a.base + "/definitely_not_an_endpoint")
    assert r.status_code == rec_e["status"] == 404 and r.text == rec_e["body"]


@pytest.mark.parametrize("which", ["A", "B"])
def test_metric_families_match(which, sim_a, sim_b) -> None:
    rec_launch, sim = (REC_A, sim_a) if which == "A" else (REC_B, sim_b)
    rec_text = rec_launch["metrics_after_bench"]  # after traffic, as ours (families appear with traffic)
    rec_text = rec_text if isinstance(rec_text, str) else rec_text["body"]

    def fams(text: str) -> dict:
        return {ln.split()[2]: ln.split()[3] for ln in text.splitlines() if ln.startswith("# TYPE ")}

    r = httpx.get(sim.base + "/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    got, rec = fams(r.text), fams(rec_text)
    assert got == rec
    for line in r.text.splitlines():
        if line.startswith("sglang:"):
            assert 'engine_type="unified"' in line and 'model_name="/tmp/models/smollm2-135m"' in line


def test_eagle_chunking_one_chunk_per_verify_step(sim_b) -> None:
    body = {
        "model": "x",
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 256,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got = _chunks(httpx.post(sim_b.base + "/v1/chat/completions", json=body, timeout=30).text)
    content = [c for c in got if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert got[-1]["usage"]["completion_tokens"] == 256
    assert 60 <= len(content) <= 130  # recorded: 86 chunks at accept length 3
