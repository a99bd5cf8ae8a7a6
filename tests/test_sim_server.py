"""The simulator as a real process: every endpoint, SSE framing, error replies, config file, determinism."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from test_sim_support import Sim, chat_body, sse_events

EAGLE_ARGS = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/draft",
    "--enable-metrics",
    "--load-format",
    "dummy",
    "--foo-bar",
    "baz",
    "--trust-remote-code",
    "--sim-step-scale",
    "0.05",
    "--sim-seed",
    "3",
]


@pytest.fixture(scope="module")
def eagle():
    with Sim(*EAGLE_ARGS) as sim:
        yield sim.wait_ready()


@pytest.fixture(scope="module")
def baseline():
    with Sim("--sim-step-scale", "0.05", "--model-path", "/models/llama") as sim:
        yield sim.wait_ready()


def test_health_and_health_generate(eagle) -> None:
    for path in ("/health", "/health_generate"):
        r = httpx.get(eagle.base + path)
        assert r.status_code == 200 and r.content == b""
        assert r.headers["server"] == "uvicorn" and r.headers["vary"] == "Origin"


def test_model_info(eagle) -> None:
    a = httpx.get(eagle.base + "/get_model_info").json()
    b = httpx.get(eagle.base + "/model_info").json()
    assert a == b
    assert a["model_path"] == "meta-llama/Llama-3.1-8B-Instruct" and a["architectures"] == ["LlamaForCausalLM"]
    assert a["is_generation"] is True


def test_server_info(eagle, baseline) -> None:
    httpx.post(eagle.base + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 16}}, timeout=30)
    a = httpx.get(eagle.base + "/get_server_info").json()
    b = httpx.get(eagle.base + "/server_info").json()
    assert set(a) == set(b) and a["version"] == "0.5.17" and a["status"] == "ready"
    assert (
        a["speculative_algorithm"],
        a["speculative_num_steps"],
        a["speculative_eagle_topk"],
        a["speculative_num_draft_tokens"],
    ) == ("EAGLE3", 5, 4, 8)
    assert a["max_running_requests"] == 48 and a["port"] == eagle.port
    assert a["load_format"] == "dummy" and a["foo_bar"] == "baz" and a["trust_remote_code"] is True
    ist = a["internal_states"][0]
    assert isinstance(ist["last_gen_throughput"], float) and "avg_spec_accept_length" in ist
    assert ist["effective_max_running_requests_per_dp"] == 48
    base = httpx.get(baseline.base + "/server_info").json()
    assert "avg_spec_accept_length" not in base["internal_states"][0]
    assert base["speculative_algorithm"] is None and base["model_path"] == "/models/llama"


def test_models_load_flush(eagle) -> None:
    m = httpx.get(eagle.base + "/v1/models").json()
    assert m["object"] == "list" and m["data"][0]["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    load = httpx.get(eagle.base + "/get_load").json()
    assert load[0]["dp_rank"] == 0
    for method in ("GET", "POST"):
        r = httpx.request(method, eagle.base + "/flush_cache")
        assert r.status_code == 200 and r.text.startswith("Cache flushed.")
        assert "content-type" not in r.headers


def test_chat_stream_framing(eagle) -> None:
    r = httpx.post(eagle.base + "/v1/chat/completions", json=chat_body(max_tokens=40), timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    msgs = [json.loads(e) for e in events[:-1]]
    first, *content, final, usage = msgs
    assert first["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert all(m["object"] == "chat.completion.chunk" and m["id"] == first["id"] for m in msgs)
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["choices"][0]["delta"] == {"reasoning_content": None}
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 40
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 40
    text = "".join(m["choices"][0]["delta"]["content"] for m in content)
    assert len(text.split(" ")) - 1 == 40  # one word per token
    # EAGLE: one chunk per verify step, fewer chunks than tokens
    assert len(content) < 40


def test_chat_without_usage_and_non_stream(eagle) -> None:
    body = chat_body(max_tokens=8)
    body.pop("stream_options")
    events = sse_events(httpx.post(eagle.base + "/v1/chat/completions", json=body, timeout=30).text)
    assert all('"usage"' not in e for e in events) and events[-1] == "[DONE]"
    r = httpx.post(eagle.base + "/v1/chat/completions", json=chat_body(max_tokens=8, stream=False), timeout=30)
    j = r.json()
    assert j["object"] == "chat.completion" and j["usage"]["completion_tokens"] == 8
    assert j["choices"][0]["message"]["role"] == "assistant" and j["choices"][0]["finish_reason"] == "length"


def test_completions(eagle) -> None:
    body = {
        "model": "x",
        "prompt": "Once upon a time",
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = sse_events(httpx.post(eagle.base + "/v1/completions", json=body, timeout=30).text)
    msgs = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and msgs[-1]["choices"] == [] and msgs[-1]["usage"]["completion_tokens"] == 16
    assert msgs[-1]["usage"]["prompt_tokens"] == 4
    assert all(m["object"] == "text_completion" and m["usage"] is None for m in msgs[:-1])
    assert msgs[-2]["choices"][0]["finish_reason"] == "length"
    body["stream"] = False
    j = httpx.post(eagle.base + "/v1/completions", json=body, timeout=30).json()
    assert j["object"] == "text_completion" and j["usage"]["completion_tokens"] == 16


def test_generate_native(eagle) -> None:
    body = {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": True}}
    j = httpx.post(eagle.base + "/generate", json=body, timeout=30).json()
    meta = j["meta_info"]
    assert meta["completion_tokens"] == 64 and len(j["output_ids"]) == 64
    assert meta["spec_verify_ct"] >= 1
    assert abs(meta["spec_accept_length"] - 64 / meta["spec_verify_ct"]) < 1e-9
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    body["stream"] = True
    body["sampling_params"]["max_new_tokens"] = 8
    events = sse_events(httpx.post(eagle.base + "/generate", json=body, timeout=30).text)
    msgs = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and msgs[-1]["meta_info"]["completion_tokens"] == 8
    assert msgs[-1]["text"] == j["text"][: len(msgs[-1]["text"])]  # cumulative text, same prompt, same output
    counts = [m["meta_info"]["completion_tokens"] for m in msgs]
    assert counts == sorted(counts) and counts[0] == 1


def test_output_text_is_identical_across_configurations(eagle, baseline) -> None:
    body = chat_body("Write a python function that adds two numbers.", max_tokens=24, stream=False)
    a = httpx.post(eagle.base + "/v1/chat/completions", json=body, timeout=30).json()
    b = httpx.post(baseline.base + "/v1/chat/completions", json=body, timeout=30).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    c = httpx.post(baseline.base + "/v1/chat/completions", json=chat_body("Other prompt", 24, False), timeout=30)
    assert c.json()["choices"][0]["message"]["content"] != a["choices"][0]["message"]["content"]


def test_error_replies(eagle) -> None:
    url = eagle.base + "/v1/chat/completions"
    r = httpx.post(url, content=b'{"model": "x", "messages": [', headers={"content-type": "application/json"})
    assert r.status_code == 400
    j = r.json()
    assert set(j) == {"object", "message", "type", "param", "code"} and j["code"] == 400
    assert "json_invalid" in j["message"]
    r = httpx.post(url, json={"model": "x", "max_tokens": 8})
    assert r.status_code == 400 and "'type': 'missing'" in r.json()["message"]
    r = httpx.post(url, json={"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -5})
    assert r.status_code == 400
    assert r.json() == {
        "object": "error",
        "message": "max_new_tokens must be at least 0, got -5.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    r = httpx.get(eagle.base + "/definitely_not_an_endpoint")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    r = httpx.post(eagle.base + "/generate", json={"sampling_params": {}})
    assert r.status_code == 400 and r.json()["object"] == "error"
    r = httpx.get(eagle.base + "/v1/chat/completions")
    assert r.status_code == 405


def test_metrics(eagle, baseline) -> None:
    httpx.post(eagle.base + "/v1/chat/completions", json=chat_body(max_tokens=32), timeout=30)
    r = httpx.get(eagle.base + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    for fam in (
        "sglang:gen_throughput",
        "sglang:spec_accept_length",
        "sglang:spec_accept_rate",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:generation_tokens_total",
        "sglang:prompt_tokens_total",
        "sglang:time_to_first_token_seconds",
        "sglang:spec_verify_calls_total",
    ):
        assert f"# TYPE {fam} " in text, fam
    acc = [line for line in text.splitlines() if line.startswith("sglang:spec_accept_length{")]
    assert float(acc[0].split()[-1]) > 1.5
    r = httpx.get(baseline.base + "/metrics")  # without --enable-metrics
    assert r.status_code == 404


def test_concurrent_streams_share_steps(eagle) -> None:
    results = []

    def one(i: int) -> None:
        r = httpx.post(eagle.base + "/v1/chat/completions", json=chat_body(f"prompt {i}", max_tokens=64), timeout=60)
        results.append(json.loads(sse_events(r.text)[-2])["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [64] * 12
    ist = httpx.get(eagle.base + "/server_info").json()["internal_states"][0]
    assert ist["last_gen_throughput"] > 0 and 1.5 < ist["avg_spec_accept_length"] < 5


def test_config_file_and_cli_override(tmp_path) -> None:
    cfg = tmp_path / "best.yaml"
    cfg.write_text(
        "speculative-algorithm: EAGLE3\nspeculative-draft-model-path: /d\nspeculative-num-steps: 2\n"
        "speculative-eagle-topk: 1\nspeculative-num-draft-tokens: 3\nenable-metrics: true\n"
        "max-running-requests: 16\n"
    )
    with Sim("--config", str(cfg), "--max-running-requests", "32", profile="glm-4.7-flash-h200") as sim:
        sim.wait_ready()
        info = httpx.get(sim.base + "/server_info").json()
        assert info["speculative_num_steps"] == 2 and info["speculative_num_draft_tokens"] == 3
        assert info["max_running_requests"] == 32 and info["enable_metrics"] is True
        assert info["architectures"] if "architectures" in info else True
        assert httpx.get(sim.base + "/metrics").status_code == 200


def test_prompt_category_sets_acceptance(eagle) -> None:
    def accept(category: str | None, text: str) -> float:
        body = {"text": text, "sampling_params": {"max_new_tokens": 600, "ignore_eos": True}}
        if category:
            body["category"] = category
        return httpx.post(eagle.base + "/generate", json=body, timeout=60).json()["meta_info"]["spec_accept_length"]

    math_field = accept("math", "Tell me something.")
    summ_field = accept("summarization", "Tell me something.")
    assert math_field > summ_field + 0.3
    # without the field, keywords decide
    assert accept(None, "Summarize this article in three sentences.") < accept(None, "Solve 12 * 7 + 3.") - 0.3
