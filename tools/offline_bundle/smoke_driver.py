#!/usr/bin/env python3
"""Boot one real `python3 -m sglang.launch_server` (EAGLE3 by default), wait for /health 200, send one
chat request, SIGTERM the process group, and print timings. Stdlib only; called by gpu_smoke.sh.

Writes <out>/server.log (every server line, prefixed with seconds since launch) and
<out>/smoke_summary.json (phases, readiness, request throughput, accept length, shutdown).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

# This script runs on a bare GPU host without the optimizer installed, so it keeps its own copy of these log facts;
# the project's one home for them is optimizer/sglang/logs.py (this list is finer: one phase per CUDA graph).
READY_LINE = "The server is fired up and ready to roll!"
PHASES = [  # first log line containing each pattern (sglang 0.5.17 wording)
    ("first_log_line", None),
    ("server_args", "server_args="),
    ("init_torch_distributed", "Init torch distributed begin"),
    ("load_weight_end", "Load weight end"),
    ("memory_pool_end", "Memory pool end"),
    ("cuda_graph_capture_begin", "CUDA graph begin"),
    ("target_prefill_graph_end", "Capture target prefill CUDA graph end"),
    ("target_decode_graph_end", "Capture target decode CUDA graph end"),
    ("target_verify_graph_end", "Capture target verify CUDA graph end"),
    ("draft_prefill_graph_end", "Capture draft prefill CUDA graph end"),
    ("draft_decode_graph_end", "Capture draft decode CUDA graph end"),
    ("draft_extend_graph_end", "Capture draft extend CUDA graph end"),
    ("uvicorn_running", "Uvicorn running"),
    ("ready_line", READY_LINE),
]
FATAL = (
    "Scheduler hit an exception",
    "Received sigquit from a child process",
    "CUDA out of memory",
    "Not enough memory",
    "address already in use",
)


def server_command(a) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        a.model,
        "--load-format",
        "dummy",
        "--attention-backend",
        "triton",
        "--sampling-backend",
        "pytorch",
        "--grammar-backend",
        "none",
        "--mem-fraction-static",
        str(a.mem_fraction),
        "--cuda-graph-max-bs",
        str(a.cuda_graph_max_bs),
        "--host",
        "127.0.0.1",
        "--port",
        str(a.port),
        "--enable-metrics",
    ]
    if a.eagle:
        steps, topk, ndraft = (int(x) for x in a.eagle.split(","))
        cmd += [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            a.draft,
            "--speculative-draft-load-format",
            "dummy",
            "--speculative-num-steps",
            str(steps),
            "--speculative-eagle-topk",
            str(topk),
            "--speculative-num-draft-tokens",
            str(ndraft),
        ]
    return cmd


def _req(method, port, path, body=None, timeout=30.0, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    hdr = {"Content-Type": "application/json"} if body is not None else {}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdr)
    r = c.getresponse()
    if stream:
        return c, r
    data = r.read()
    c.close()
    return r.status, data


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="/tmp/models/smollm2-135m")
    ap.add_argument("--draft", default="/tmp/models/eagle3-draft")
    ap.add_argument("--eagle", default="3,1,4", help="steps,topk,draft_tokens; '' for the baseline")
    ap.add_argument("--acc-len", default="3.0", help="SGLANG_SIMULATE_ACC_LEN ('' to leave unset)")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--mem-fraction", default="0.3")
    ap.add_argument("--cuda-graph-max-bs", default="16")
    ap.add_argument("--boot-timeout", type=float, default=420.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    if a.eagle and a.acc_len:
        env["SGLANG_SIMULATE_ACC_LEN"] = a.acc_len
    cmd = server_command(a)
    summ: dict = {
        "cmd": cmd,
        "env_added": {
            k: env[k] for k in ("SGLANG_SIMULATE_ACC_LEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if k in env
        },
    }
    log_path = os.path.join(a.out, "server.log")
    logf = open(log_path, "w")
    lines: list[tuple[float, str]] = []
    t0 = time.time()
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd="/tmp"
    )
    print(f"[smoke] launched pid {p.pid}: {' '.join(cmd)}", flush=True)

    def reader():
        for raw in iter(p.stdout.readline, b""):
            t = time.time() - t0
            txt = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append((t, txt))
            logf.write(f"{t:9.3f} {txt}\n")
            logf.flush()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    try:
        return _drive(a, p, t0, lines, logf, summ)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _drive(a, p, t0, lines, logf, summ) -> int:

    first_503 = first_200 = None
    fatal = None
    polls = {"refused": 0, "503": 0, "other": 0}
    deadline = t0 + a.boot_timeout
    while time.time() < deadline:
        if p.poll() is not None:
            fatal = f"server exited rc={p.returncode} before ready"
            break
        for _, txt in lines[-50:]:
            if any(f in txt for f in FATAL):
                fatal = txt[:300]
        if fatal:
            break
        try:
            st, _ = _req("GET", a.port, "/health", timeout=30)
            if st == 200:
                first_200 = time.time() - t0
                break
            if st == 503:
                polls["503"] += 1
                first_503 = first_503 or time.time() - t0
            else:
                polls["other"] += 1
        except (TimeoutError, ConnectionRefusedError, OSError):
            polls["refused"] += 1
        time.sleep(0.5)
    summ["first_503_s"] = round(first_503, 2) if first_503 else None
    summ["first_health_200_s"] = round(first_200, 2) if first_200 else None
    summ["health_polls"] = polls
    summ["fatal"] = fatal

    phases = {}
    for key, pat in PHASES:
        for t, txt in lines:
            if pat is None or pat in txt:
                phases[key] = round(t, 2)
                break
    graph_lines = [txt[txt.find("Capture") :][:160] for _, txt in lines if "CUDA graph end" in txt]
    summ["phases_s"] = phases
    summ["capture_lines"] = graph_lines
    summ["local_patch_lines"] = [txt[:200] for _, txt in lines if "LOCAL PATCH" in txt]

    if first_200:
        # One streamed chat request: 256 tokens, greedy, ignore_eos, with usage.
        body = {
            "model": a.model,
            "messages": [{"role": "user", "content": "Say hello in five words."}],
            "max_tokens": a.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        t_req = time.time()
        ttft = None
        chunks = 0
        usage = None
        text = []
        try:
            c, r = _req("POST", a.port, "/v1/chat/completions", body, timeout=120, stream=True)
            status = r.status
            for raw in iter(r.readline, b""):
                ln = raw.decode("utf-8", "replace").strip()
                if not ln.startswith("data: ") or ln == "data: [DONE]":
                    continue
                ev = json.loads(ln[6:])
                if ev.get("usage"):
                    usage = ev["usage"]
                for ch in ev.get("choices") or []:
                    piece = (ch.get("delta") or {}).get("content")
                    if piece:
                        chunks += 1
                        text.append(piece)
                        ttft = ttft or time.time() - t_req
            c.close()
        except Exception as e:  # noqa: BLE001
            status = f"error {type(e).__name__}: {e}"
        total = time.time() - t_req
        ntok = (usage or {}).get("completion_tokens")
        summ["request"] = {
            "status": status,
            "total_s": round(total, 3),
            "ttft_s": round(ttft, 4) if ttft else None,
            "completion_tokens": ntok,
            "prompt_tokens": (usage or {}).get("prompt_tokens"),
            "content_chunks": chunks,
            "tok_per_s": round(ntok / total, 1) if ntok else None,
            "decode_tok_per_s": round((ntok - 1) / (total - ttft), 1) if ntok and ttft else None,
            "text_head": "".join(text)[:80],
        }
        try:
            st, data = _req("GET", a.port, "/get_server_info", timeout=30)
            info = json.loads(data)
            ist = (info.get("internal_states") or [{}])[0]
            summ["server_info"] = {
                "version": info.get("version"),
                "avg_spec_accept_length": ist.get("avg_spec_accept_length"),
                "last_gen_throughput": ist.get("last_gen_throughput"),
                "startup_time": info.get("startup_time"),
            }
        except Exception as e:  # noqa: BLE001
            summ["server_info"] = f"error {type(e).__name__}: {e}"
        print(f"[smoke] request: {json.dumps(summ['request'])}", flush=True)

    # Shutdown: SIGTERM to the whole process group (what the optimizer's local host does).
    t_kill = time.time()
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        p.wait(timeout=25)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
    main_exit = time.time() - t_kill
    grp_empty = None
    while time.time() - t_kill < 30:
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            grp_empty = time.time() - t_kill
            break
        time.sleep(0.1)
    if grp_empty is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    summ["stop"] = {
        "main_rc": p.returncode,
        "main_exit_s": round(main_exit, 2),
        "group_empty_s": round(grp_empty, 2) if grp_empty else None,
    }
    time.sleep(0.5)
    logf.close()
    summ["ok"] = bool(
        first_200
        and isinstance(summ.get("request", {}).get("status"), int)
        and summ["request"]["status"] == 200
        and summ["request"].get("completion_tokens")
    )
    with open(os.path.join(a.out, "smoke_summary.json"), "w") as f:
        json.dump(summ, f, indent=1)
    print(
        "[smoke] summary: "
        + json.dumps(
            {
                k: summ.get(k)
                for k in (
                    "ok",
                    "first_health_200_s",
                    "phases_s",
                    "request",
                    "server_info",
                    "stop",
                    "fatal",
                    "local_patch_lines",
                )
            }
        ),
        flush=True,
    )
    if not summ["ok"]:
        print("[smoke] last server lines:", flush=True)
        for _, txt in lines[-40:]:
            print("   ", txt[:300], flush=True)
    return 0 if summ["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
