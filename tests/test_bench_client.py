"""The benchmark client against a real loopback HTTP server that replays recorded SGLang 0.5.17 streams
(byte for byte, with their recorded arrival times) and misbehaves on purpose.

The server is a real uvicorn + starlette app in a thread. The first path segment picks the scenario, so one
server serves every case: base_url = http://127.0.0.1:PORT/<scenario>.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from optimizer.loadgen import Workload, run_benchmark
from optimizer.loadgen.client import BenchResult

REC = Path(__file__).resolve().parent / "data" / "sglang-0.5.17-h200"


def _load(name: str) -> dict:
    return json.loads((REC / name).read_text())


def _endpoint(rec: dict, method: str, path: str, pred=lambda e: True) -> dict:
    return next(e for e in rec["endpoints"] if e["method"] == method and e["path"] == path and pred(e))


A = _load("launch_A_baseline.json")
B = _load("launch_B_eagle3_topk1.json")


def _lines_schedule(entry: dict) -> list[tuple[float, bytes]]:
    """The recorded stream as (seconds after the request, bytes), lines with the same arrival time merged."""
    out: list[tuple[float, bytes]] = []
    for t, line in entry["lines_with_arrival_s"]:
        b = line.encode()
        if out and abs(out[-1][0] - t) < 1e-9:
            out[-1] = (t, out[-1][1] + b)
        else:
            out.append((t, b))
    return out


def _eagle256_schedule() -> list[tuple[float, bytes]]:
    """A 256-token EAGLE3 stream: B's recorded chunk framing at the arrival times of B's first benchmark request.

    The recording keeps raw bytes only for the short stream; for the 256-token benchmark requests it keeps every
    content chunk's arrival time and the usage. This rebuilds those streams from the real chunk layout.
    """
    req = B["bench"][0]["requests"][0]
    arrivals = req["chunk_arrival_s"]
    assert len(arrivals) == 86 and req["usage"]["completion_tokens"] == 256
    raw = _endpoint(B, "POST", "/v1/chat/completions", lambda e: "raw_body" in e)["raw_body"]
    events = [e for e in raw.split("\n\n") if e]
    role, first, more, finish, usage, done = (events[0], events[1], events[2], events[-3], events[-2], events[-1])
    usage = usage.replace(
        '"prompt_tokens":36,"total_tokens":52,"completion_tokens":16',
        '"prompt_tokens":46,"total_tokens":302,"completion_tokens":256',
    )
    assert '"completion_tokens":256' in usage
    sched = [(arrivals[0], (role + "\n\n" + first + "\n\n").encode())]
    sched += [(t, (more + "\n\n").encode()) for t in arrivals[1:]]
    sched.append((arrivals[-1] + 0.0002, (finish + "\n\n" + usage + "\n\n" + done + "\n\n").encode()))
    return sched


CHAT_B = _endpoint(B, "POST", "/v1/chat/completions", lambda e: "raw_body" in e)
CHAT_A = _endpoint(A, "POST", "/v1/chat/completions", lambda e: "raw_body" in e)
COMPL_B = _endpoint(B, "POST", "/v1/completions")
ERR_400 = _endpoint(
    A,
    "POST",
    "/v1/chat/completions",
    lambda e: e.get("status") == 400 and 'max_tokens": -5' in e.get("request_body", ""),
)
SCHEDULES = {
    "eagle16": _lines_schedule(CHAT_B),
    "base16": _lines_schedule(CHAT_A),
    "compl": _lines_schedule(COMPL_B),
    "eagle256": _eagle256_schedule(),
    # a server that ignores stream_options.include_usage: no usage chunk before [DONE]
    "nousage": [
        (t, b"".join(e + b"\n\n" for e in data.split(b"\n\n") if e and b'"usage":{' not in e))
        for t, data in _lines_schedule(CHAT_B)
    ],
}
FIRST_EVENT = CHAT_B["raw_body"].split("\n\n")[0] + "\n\n"
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


def _json(body: str, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")


async def _replay(sched):
    t0 = time.perf_counter()
    for t, data in sched:
        delay = t - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        yield data


async def _hostile(kind: str):
    yield FIRST_EVENT.encode()
    more = SCHEDULES["eagle16"][2][1]
    yield more
    if kind == "nonjson":
        yield b"data: this is not json\n\n"
    elif kind == "truncated":
        return  # clean end of the chunked body, but no usage and no [DONE]
    elif kind == "broken":
        raise RuntimeError("server dies mid-stream")  # uvicorn drops the connection
    elif kind == "stall":
        await asyncio.sleep(30)
    elif kind == "errevent":
        yield b'data: {"error":{"object":"error","message":"scheduler ran out of KV cache","type":"Internal","code":500}}\n\n'
        yield b"data: [DONE]\n\n"


async def handle(request: Request) -> Response:
    scen = request.path_params["scenario"]
    path = "/" + request.path_params["rest"]
    request.app.state.seen.append((scen, path, await request.body() if request.method == "POST" else b""))
    if scen == "hang":  # accepts the connection, never answers
        await asyncio.sleep(30)
    if request.method == "GET":
        if path == "/v1/models":
            return _json(B["v1_models"]["body"])
        if path in ("/server_info", "/get_server_info"):
            if scen == "base16":
                return _json(_endpoint(A, "GET", path)["body"])
            if scen.startswith("eagle"):
                return _json(B["server_info_after_bench"]["body"])
            return _json('{"detail":"Not Found"}', 404)  # an old server without either endpoint
        return _json('{"detail":"Not Found"}', 404)
    if scen in SCHEDULES:
        return StreamingResponse(_replay(SCHEDULES[scen]), headers=SSE_HEADERS)
    if scen == "http500":
        return Response("Internal Server Error", status_code=500, media_type="text/plain")
    if scen == "http400":
        return _json(ERR_400["body"], 400)
    if scen == "notsse":  # the recorded non-streamed reply, as if the server ignored "stream": true
        return _json(_endpoint(B, "POST", "/v1/chat/completions", lambda e: "body" in e and e["status"] == 200)["body"])
    return StreamingResponse(_hostile(scen), headers=SSE_HEADERS)


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # runs in a thread
        pass


@pytest.fixture(scope="module")
def server():
    app = Starlette(routes=[Route("/{scenario}/{rest:path}", handle, methods=["GET", "POST"])])
    app.state.seen = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = _Server(uvicorn.Config(app, log_level="critical", lifespan="off", timeout_graceful_shutdown=1))
    th = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    deadline = time.time() + 10
    while not srv.started and time.time() < deadline:
        time.sleep(0.01)
    assert srv.started
    yield f"http://127.0.0.1:{port}", app
    srv.should_exit = True
    th.join(5)
    sock.close()


def _wl(**kw) -> Workload:
    base = dict(concurrency=2, warmup_requests=1, chunks=2, requests_per_chunk=2, max_tokens=16)
    base.update(kw)
    return Workload(**base)


def test_eagle_recording_counts_tokens_from_usage_and_itl_per_token(server):
    url, _ = server
    chunks_seen = []
    res = run_benchmark(
        f"{url}/eagle256",
        _wl(max_tokens=256, concurrency=1, chunks=1, requests_per_chunk=2, warmup_requests=0),
        on_chunk=chunks_seen.append,
    )
    assert res.completed == 2 and res.failed == 0
    for r in res.chunks[0].records:
        assert r.completion_tokens == 256 and r.prompt_tokens == 46
        assert r.content_chunks == 86
        assert len(r.itl_ms) == 255  # one value per token after the first, not one per chunk
        # the values add up to the time between the first and the last content chunk (0.2872 s recorded)
        assert sum(r.itl_ms) == pytest.approx(r.e2e_ms - r.ttft_ms, abs=15)
        assert 15 < r.ttft_ms < 250  # recorded first chunk at 22.9 ms (loose: the test machine is shared)
    assert res.tokens_per_chunk == pytest.approx(256 / 86)
    assert res.accept_length == 3.0  # internal_states[0].avg_spec_accept_length after the recorded benchmark
    # recorded chunk gaps are ~3.3 ms per verify step of 3 tokens: ~1.1 ms per token
    assert 0.7 < res.itl_ms["p50"] < 3.0
    assert res.model == "/tmp/models/smollm2-135m"
    assert len(chunks_seen) == 1 and chunks_seen[0].tok_per_s == pytest.approx(res.tok_per_s)
    assert 200 < res.tok_per_s < 1000  # recorded: 855 tok/s at concurrency 1
    m = res.to_metrics()
    assert m["chunks_run"] == 1 and m["completed"] == 2 and m["accept_length"] == 3.0
    for k in (
        "tok_per_s",
        "requests_per_s",
        "ttft_ms_mean",
        "ttft_ms_p50",
        "ttft_ms_p99",
        "itl_ms_mean",
        "itl_ms_p50",
        "itl_ms_p99",
        "e2e_ms_mean",
        "e2e_ms_p50",
        "e2e_ms_p99",
        "tokens_per_chunk",
        "failed",
    ):
        assert k in m


def test_short_recordings_chat_and_completions(server):
    url, app = server
    eagle = run_benchmark(f"{url}/eagle16", _wl())
    base = run_benchmark(f"{url}/base16", _wl())
    compl = run_benchmark(f"{url}/compl", _wl(endpoint="completions"))
    for res in (eagle, base, compl):
        assert res.failed == 0 and res.completed == 4 and len(res.chunks) == 2
        assert all(r.completion_tokens == 16 for c in res.chunks for r in c.records)
    assert eagle.tokens_per_chunk == pytest.approx(16 / 6)  # " arrangement" then five "ttt" chunks
    assert base.tokens_per_chunk == pytest.approx(1.0)
    assert base.accept_length is None  # no speculation: the key is absent
    assert compl.accept_length is None  # this server has no server_info at all
    assert all(len(r.itl_ms) == 15 for c in eagle.chunks for r in c.records)
    sent = [json.loads(b) for s, p, b in app.state.seen if s == "compl" and p == "/v1/completions"]
    assert sent and all(
        b["stream"]
        and b["stream_options"] == {"include_usage": True}
        and b["ignore_eos"]
        and b["max_tokens"] == 16
        and isinstance(b["prompt"], str)
        and b["category"]
        for b in sent
    )
    chat = [json.loads(b) for s, p, b in app.state.seen if s == "eagle16" and p == "/v1/chat/completions"]
    assert len(chat) == 5 and all(b["messages"][0]["role"] == "user" for b in chat)  # 1 warmup + 2 x 2


@pytest.mark.parametrize(
    "scenario, reason",
    [
        ("nonjson", "non_json"),
        ("truncated", "truncated"),
        ("broken", "truncated"),
        ("http500", "http_500"),
        ("http400", "http_400"),
        ("stall", "stalled"),
        ("errevent", "server_error"),
        ("notsse", "not_sse"),
    ],
)
def test_hostile_replies_become_failed_requests(server, scenario, reason):
    url, _ = server
    t0 = time.perf_counter()
    res = run_benchmark(f"{url}/{scenario}", _wl(stall_timeout_s=0.4, warmup_requests=0), model="m")
    assert time.perf_counter() - t0 < 5
    assert isinstance(res, BenchResult)
    assert res.completed == 0 and res.failed == 4 and len(res.chunks) == 2
    assert res.failure_reasons == {reason: 4}
    assert res.tok_per_s == 0 and res.ttft_ms["mean"] is None
    err = res.chunks[0].records[0].error
    if scenario == "http400":
        assert "max_new_tokens must be at least 0" in err  # the message from the recorded envelope
    if scenario == "http500":
        assert "Internal Server Error" in err


def test_connection_refused_is_a_failed_request():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run_benchmark(f"http://127.0.0.1:{port}", _wl(warmup_requests=1))
    assert res.failed == 4 and set(res.failure_reasons) == {"connect"} and res.model == "default"


def test_on_chunk_false_stops_and_cancel_aborts_quickly(server):
    url, _ = server
    seen = []
    res = run_benchmark(f"{url}/eagle16", _wl(chunks=4), on_chunk=lambda c: seen.append(c.index) or False)
    assert seen == [0] and res.stopped_early and len(res.chunks) == 1

    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.perf_counter()
    res = run_benchmark(f"{url}/stall", _wl(stall_timeout_s=20, warmup_requests=0), cancel=cancel)
    assert time.perf_counter() - t0 < 1.5
    assert res.cancelled and res.chunks == []


def test_runs_from_a_worker_thread(server):
    url, _ = server
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", run_benchmark(f"{url}/eagle16", _wl())))
    th.start()
    th.join(10)
    assert out["r"].completed == 4


def test_server_without_usage_counts_one_token_per_chunk(server):
    url, _ = server
    res = run_benchmark(f"{url}/nousage", _wl())
    assert res.failed == 0 and all(r.completion_tokens == 6 for c in res.chunks for r in c.records)


def test_cancel_during_model_discovery_on_a_hung_server(server):
    url, _ = server
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.perf_counter()
    res = run_benchmark(f"{url}/hang", _wl(), cancel=cancel)  # every GET hangs: /v1/models never answers
    assert time.perf_counter() - t0 < 1.5 and res.cancelled and res.chunks == []
