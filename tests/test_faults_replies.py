"""Malformed server replies against the real benchmark client: a real HTTP server on loopback answers every
generation request badly (non-JSON, truncated SSE, 5xx, an HTML page, a stalled stream, a reset connection).
Each becomes failed requests with a reason; the benchmark returns, it never raises or hangs."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from faults.figures import add

from optimizer.loadgen.client import run_benchmark
from optimizer.loadgen.workload import Workload

CHUNK = 'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


class Hostile(http.server.BaseHTTPRequestHandler):
    mode = "5xx"
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # noqa: ANN002
        pass

    def do_GET(self):  # noqa: N802 - discovery endpoints: a plain 404
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _sse(self, body: str, *, length: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if length:
            self.send_header("Content-Length", str(len(body) + 100))  # promises more than it sends
        self.end_headers()
        self.wfile.write(body.encode())
        self.wfile.flush()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = self.mode
        if mode == "5xx":
            body = b'{"error": "internal"}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif mode == "non_json":
            self._sse('data: this is not json\n\ndata: {"choices": [\n\ndata: [DONE]\n\n')
            self.close_connection = True
        elif mode == "html":
            body = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif mode == "truncated":
            self._sse(CHUNK + 'data: {"id":"x","choi', length=True)
            self.close_connection = True
        elif mode == "stall":
            self._sse(CHUNK)
            time.sleep(8)
            self.close_connection = True
        elif mode == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
        elif mode == "bad_json_types":
            self._sse(
                'data: {"choices": "nope", "usage": {"completion_tokens": "many"}}\n\ndata: [1, 2]\n\n'
                "data: null\n\ndata: [DONE]\n\n"
            )
            self.close_connection = True


MODES = ["5xx", "non_json", "html", "truncated", "stall", "reset", "bad_json_types"]


@pytest.fixture(scope="module")
def hostile_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv
    srv.shutdown()


@pytest.mark.parametrize("mode", MODES)
def test_malformed_replies_become_failed_requests(hostile_server, mode):
    Hostile.mode = mode
    wl = Workload(
        max_tokens=8, chunks=1, requests_per_chunk=2, warmup_requests=0, request_timeout_s=4, stall_timeout_s=1
    )
    t0 = time.monotonic()
    res = run_benchmark(f"http://127.0.0.1:{hostile_server.server_address[1]}", wl, model="m")
    took = time.monotonic() - t0
    add("replies", hostile_replies=1)
    assert took < 15, f"{mode}: benchmark took {took:.1f} s"
    assert res.completed == 0, (mode, res.to_metrics())
    assert res.failed >= 1 and res.failure_reasons, (mode, res.failure_reasons)
    assert all(isinstance(k, str) and k for k in res.failure_reasons), res.failure_reasons
    json.dumps(res.to_metrics(), default=str)  # the result is recordable
