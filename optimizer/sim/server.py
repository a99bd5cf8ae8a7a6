"""The simulator's HTTP server: SGLang 0.5.17's endpoints and reply shapes, served by uvicorn (starlette app)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..sglang import endpoints
from . import recorded
from .engine import Engine, Request, classify, count_tokens, token_ids, token_text
from .logs import log
from .model import Profile

FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
    "requests, the operation will not be performed.)\n"
)
SSE_MEDIA = "text/event-stream; charset=utf-8"
CHAT_TEMPLATE_TOKENS = 30  # ChatML with the default system prompt, as recorded (36 tokens for a 6-token message)


class State:
    def __init__(
        self,
        profile: Profile,
        flags: dict[str, Any],
        env: dict[str, str],
        engine: Engine,
        *,
        host: str,
        port: int,
        time_scale: float,
        boot_phases: list[tuple[str, float]],
        unknown: list[str],
        skip_warmup: bool,
    ) -> None:
        self.profile = profile
        self.flags = flags
        self.env = env
        self.engine = engine
        self.host = host
        self.port = port
        self.time_scale = time_scale
        self.boot_phases = dict(boot_phases)
        self.unknown = unknown
        self.ready = False
        self.skip_warmup = skip_warmup
        self.model_path = str(flags.get("model-path") or profile.model_path)
        self.created = int(time.time())
        self.http_requests = 0


def _error(message: str, status: int = 400, etype: str = "BadRequestError") -> JSONResponse:
    return JSONResponse(
        {"object": "error", "message": message, "type": etype, "param": None, "code": status}, status_code=status
    )


def _validation_error(kind: str, loc: tuple, msg: str, inp: Any, ctx: dict | None = None) -> JSONResponse:
    detail: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": inp}
    if ctx:
        detail["ctx"] = ctx
    message = (
        f"1 validation error:\n  {detail!r}\n\n"
        '  File "/sglang/srt/entrypoints/http_server.py", line 1702, in openai_v1_chat_completions\n'
        "    POST /v1/chat/completions"
    )
    return _error(message, 400, "Bad Request")


async def _json_body(request: HTTPRequest) -> tuple[Any, JSONResponse | None]:
    raw = await request.body()
    try:
        return json.loads(raw or b"{}"), None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        pos = getattr(exc, "pos", 0)
        return None, _validation_error(
            "json_invalid", ("body", pos), "JSON decode error", {}, {"error": getattr(exc, "msg", str(exc))}
        )


def _max_tokens(body: dict, *keys: str, default: int = 256) -> tuple[int | None, JSONResponse | None]:
    value = None
    for key in keys:
        if body.get(key) is not None:
            value = body[key]
            break
    if value is None:
        return default, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        return None, _validation_error("int_type", ("body", keys[0]), "Input should be a valid integer", value)
    if value < 0:
        return None, _error(f"max_new_tokens must be at least 0, got {int(value)}.")
    return int(value), None


def _messages_text(messages: list) -> tuple[str, int]:
    parts, tokens = [], CHAT_TEMPLATE_TOKENS
    for i, m in enumerate(messages):
        content = m.get("content", "") if isinstance(m, dict) else ""
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        content = str(content or "")
        parts.append(content)
        tokens += count_tokens(content) + (5 if i else 0)
    return "\n".join(parts), tokens


def build_app(st: State) -> Starlette:
    eng = st.engine
    model_json = json.dumps(st.model_path)

    # ------------------------------------------------------------------ health and info
    async def health(request: HTTPRequest) -> Response:
        if not st.ready:
            return Response(status_code=503)
        # /health runs a 1-token generation (about 1 s on the real server)
        await asyncio.sleep(1.0 * st.time_scale)
        return Response(status_code=200)

    def model_info() -> dict:
        p = st.profile
        return {
            "model_path": st.model_path,
            "tokenizer_path": st.flags.get("tokenizer-path") or st.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": p.model_type,
            "architectures": [p.architecture],
            "embedding": recorded.MODEL_INFO_EMBEDDING,
        }

    async def get_model_info(request: HTTPRequest) -> Response:
        if request.url.path == endpoints.GET_MODEL_INFO:
            log(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                "Please use '/model_info' instead."
            )
        return JSONResponse(model_info())

    def server_args() -> dict:
        args = dict(recorded.SERVER_ARGS)
        renamed = {"cuda_graph_max_bs": "cuda_graph_max_bs_decode"}  # 0.5.17 reports the new name
        for key, value in st.flags.items():
            k = key.replace("-", "_")
            args[renamed.get(k, k)] = value
        r = eng.resolved
        args.update(
            model_path=st.model_path,
            tokenizer_path=st.flags.get("tokenizer-path") or st.model_path,
            host=st.host,
            port=st.port,
            tp_size=st.profile.tp_size if "tp-size" not in st.flags else int(st.flags["tp-size"]),
            attention_backend=r["attn"],
            mem_fraction_static=r["mfs"],
            cuda_graph_max_bs_decode=r["cgbs"],
            max_running_requests=r["max_running"] if (eng.spec or "max-running-requests" in st.flags) else None,
            disable_custom_all_reduce=bool(r["car_disabled"]),
            enable_metrics=bool(st.flags.get("enable-metrics")),
            skip_server_warmup=bool(st.flags.get("skip-server-warmup")),
            load_format=st.flags.get("load-format", "auto"),
        )
        if eng.spec:
            steps, topk, draft = eng.triple
            args.update(
                speculative_algorithm=eng.algo,
                speculative_draft_model_path=st.flags.get("speculative-draft-model-path")
                or st.profile.draft_model_path,
                speculative_num_steps=steps,
                speculative_eagle_topk=topk,
                speculative_num_draft_tokens=draft,
                speculative_adaptive=eng.adaptive_cfg is not None,
            )
        else:
            for k in (
                "speculative_algorithm",
                "speculative_draft_model_path",
                "speculative_num_steps",
                "speculative_eagle_topk",
                "speculative_num_draft_tokens",
            ):
                args[k] = None
        return args

    def server_info() -> dict:
        args = server_args()
        ph = st.boot_phases
        cuda_graph = {
            "prefill": ph.get("capture_prefill", 0.0),
            "decode": ph.get("capture_decode", 0.0),
            "target_verify": ph.get("capture_target_verify", 0.0),
            "draft_prefill": ph.get("capture_draft_prefill", 0.0),
            "draft_decode": ph.get("capture_draft_decode", 0.0),
            "draft_extend": ph.get("capture_draft_extend", 0.0),
        }
        startup_time = {
            "load_weight": ph.get("load_weights", 0.0),
            "kv_cache_allocation": ph.get("memory_pool", 0.0),
            "scheduler_e2e": sum(v for k, v in ph.items() if k not in ("imports", "server_args", "warmup")),
            "cuda_graph": cuda_graph,
            "tokenizer_e2e": sum(v for k, v in ph.items() if k != "warmup"),
        }
        internal = dict(args)
        internal.update(
            startup_time=startup_time,
            _declarations_materialized=True,
            _resolved_overrides=[],
            max_speculative_num_draft_tokens=(
                eng.adaptive_cfg.max_draft_tokens() if eng.adaptive_cfg is not None else eng.triple[2]
            )
            if eng.spec
            else None,
            effective_max_running_requests_per_dp=eng.max_running,
            _cuda_graph_config_locked=[["decode", "max_bs"]],
            grpc_worker_threads=4,
            last_gen_throughput=eng.last_gen_throughput,
            memory_usage={
                "weight": round(st.profile.gpu_mem_gb * 0.6, 3),
                "kvcache": round(st.profile.gpu_mem_gb * 0.25, 3),
                "startup_available": round(st.profile.gpu_mem_gb * 0.1, 3),
                "token_capacity": st.profile.max_total_num_tokens,
                "token_capacity_swa": None,
                "graph": {k: 0.1 for k in cuda_graph},
            },
            _mx_config_cache={},
            _quantization_explicitly_unset=False,
        )
        if eng.spec and eng.verify_calls:  # as recorded: present once a verify step has run
            internal["avg_spec_accept_length"] = eng.avg_accept_length
        info = dict(args)
        info.update(
            status="ready" if st.ready else "starting",
            max_total_num_tokens=st.profile.max_total_num_tokens,
            max_req_input_len=st.profile.context_len - 6,
            startup_time=startup_time,
            internal_states=[internal],
            version="0.5.17",
            kv_events=None,
        )
        return info

    async def get_server_info(request: HTTPRequest) -> Response:
        if request.url.path == endpoints.GET_SERVER_INFO:
            log(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                "Please use '/server_info' instead."
            )
        return JSONResponse(server_info())

    async def get_load(request: HTTPRequest) -> Response:
        return JSONResponse(
            [
                {
                    "dp_rank": 0,
                    "num_reqs": len(eng.running) + len(eng.waiting),
                    "num_waiting_reqs": len(eng.waiting),
                    "num_tokens": sum(r.prompt_tokens + r.produced for r in eng.running),
                    "num_pending_tokens": 0,
                    "ts_tic": time.monotonic(),
                }
            ]
        )

    async def flush_cache(request: HTTPRequest) -> Response:
        if eng.running or eng.waiting:
            return Response(FLUSH_TEXT, status_code=400, media_type=None)
        log("Cache flushed successfully!")
        return Response(FLUSH_TEXT, status_code=200, media_type=None)

    async def v1_models(request: HTTPRequest) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": st.model_path,
                        "object": "model",
                        "created": st.created,
                        "owned_by": "sglang",
                        "root": st.model_path,
                        "parent": None,
                        "max_model_len": st.profile.context_len,
                    }
                ],
            }
        )

    async def metrics(request: HTTPRequest) -> Response:
        if not st.flags.get("enable-metrics"):
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return Response(render_metrics(st), media_type="text/plain; version=0.0.4; charset=utf-8")

    # ------------------------------------------------------------------ generation
    def not_ready() -> Response | None:
        if eng.crashed:
            return _error("The server is not healthy.", 503, "ServiceUnavailable")
        return None

    async def chat_completions(request: HTTPRequest) -> Response:
        return await _openai(request, chat=True)

    async def completions(request: HTTPRequest) -> Response:
        return await _openai(request, chat=False)

    async def _openai(request: HTTPRequest, chat: bool) -> Response:
        body, err = await _json_body(request)
        if err is not None:
            return err
        if not isinstance(body, dict):
            return _validation_error("model_attributes_type", ("body",), "Input should be a valid dictionary", body)
        if chat:
            messages = body.get("messages")
            if messages is None:
                inp = dict(body)
                inp.setdefault("tool_choice", "none")
                return _validation_error("missing", ("body", "messages"), "Field required", inp)
            if not isinstance(messages, list):
                return _validation_error("list_type", ("body", "messages"), "Input should be a valid list", messages)
            text, prompt_tokens = _messages_text(messages)
        else:
            prompt = body.get("prompt")
            if prompt is None:
                return _validation_error("missing", ("body", "prompt"), "Field required", body)
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            prompt_tokens = max(1, count_tokens(text))
        max_tokens, err = _max_tokens(body, "max_tokens", "max_completion_tokens")
        if err is not None:
            return err
        bad = not_ready()
        if bad is not None:
            return bad
        req = _submit(body, text, max_tokens, prompt_tokens)
        stream = bool(body.get("stream"))
        usage_opt = body.get("stream_options") or {}
        include_usage = bool(usage_opt.get("include_usage")) if isinstance(usage_opt, dict) else False
        created = int(time.time())
        if stream:
            gen = _chat_stream(req, created, include_usage) if chat else _completion_stream(req, created, include_usage)
            return StreamingResponse(_guard(gen, req), media_type=SSE_MEDIA)
        await _wait_done(req)
        content = token_text(req.seed, 0, req.produced)
        usage = {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.produced,
            "completion_tokens": req.produced,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }
        if chat:
            return JSONResponse(
                {
                    "id": req.rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": st.model_path,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": content,
                                "reasoning_content": None,
                                "tool_calls": None,
                            },
                            "logprobs": None,
                            "finish_reason": "length",
                            "matched_stop": None,
                        }
                    ],
                    "usage": usage,
                    "metadata": {"weight_version": "default"},
                }
            )
        return JSONResponse(
            {
                "id": req.rid,
                "object": "text_completion",
                "created": created,
                "model": st.model_path,
                "choices": [
                    {"index": 0, "text": content, "logprobs": None, "finish_reason": "length", "matched_stop": None}
                ],
                "usage": usage,
                "metadata": {"weight_version": "default"},
            }
        )

    async def _wait_done(req: Request) -> None:
        try:
            while True:
                events = await req.chan.get()
                if events[-1][2]:
                    return
        except asyncio.CancelledError:
            eng.cancel(req)
            raise

    async def _guard(gen: AsyncIterator[bytes], req: Request) -> AsyncIterator[bytes]:
        try:
            async for chunk in gen:
                yield chunk
        finally:
            if not req.done:
                eng.cancel(req)

    def _submit(body: dict, text: str, max_tokens: int, prompt_tokens: int) -> Request:
        """Queue a request; its category (which sets acceptance) comes from the body or from the prompt's text."""
        category = body.get("category")
        if category not in ("chat", "code", "math", "summarization"):
            category = classify(text)
        req = eng.new_request(category, max_tokens, prompt_tokens, text)
        eng.submit(req)
        return req

    def _stream_end(head: bytes, req: Request, include_usage: bool, *, details: bool) -> list[bytes]:
        """The usage chunk (``choices: []``; chat adds ``prompt_tokens_details`` as recorded) and ``[DONE]``."""
        out = []
        if include_usage:
            usage: dict[str, Any] = {
                "prompt_tokens": req.prompt_tokens,
                "total_tokens": req.prompt_tokens + req.produced,
                "completion_tokens": req.produced,
            }
            if details:
                usage["prompt_tokens_details"] = None
            usage["reasoning_tokens"] = 0
            out.append(
                head[: -len(b'"choices":[')]
                + b'"choices":[],"usage":'
                + json.dumps(usage, separators=(",", ":")).encode()
                + b"}\n\n"
            )
        out.append(b"data: [DONE]\n\n")
        return out

    async def _chat_stream(req: Request, created: int, include_usage: bool) -> AsyncIterator[bytes]:
        head = (
            f'data: {{"id":"{req.rid}","object":"chat.completion.chunk","created":{created},'
            f'"model":{model_json},"choices":['
        ).encode()
        content_open = b'{"index":0,"delta":{"reasoning_content":null,"content":"'
        content_close = b'"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
        yield head + (
            b'{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
        )
        seed = req.seed
        while True:
            events = await req.chan.get()
            out = []
            finished = False
            for start, n, fin in events:
                if n:
                    out.append(head + content_open + token_text(seed, start, n).encode() + content_close)
                finished = finished or fin
            if finished:
                out.append(
                    head + b'{"index":0,"delta":{"reasoning_content":null},"logprobs":null,'
                    b'"finish_reason":"length","matched_stop":null}]}\n\n'
                )
                out.extend(_stream_end(head, req, include_usage, details=True))
                yield b"".join(out)
                return
            if out:
                yield b"".join(out)

    async def _completion_stream(req: Request, created: int, include_usage: bool) -> AsyncIterator[bytes]:
        head = (
            f'data: {{"id":"{req.rid}","object":"text_completion","created":{created},"model":{model_json},"choices":['
        ).encode()
        seed = req.seed
        while True:
            events = await req.chan.get()
            out = []
            finished = False
            for start, n, fin in events:
                reason = b'"length"' if fin else b"null"
                if n or fin:
                    out.append(
                        head
                        + b'{"index":0,"text":"'
                        + token_text(seed, start, n).encode()
                        + b'","logprobs":null,"finish_reason":'
                        + reason
                        + b',"matched_stop":null}],"usage":null}\n\n'
                    )
                finished = finished or fin
            if finished:
                out.extend(_stream_end(head, req, include_usage, details=False))
                yield b"".join(out)
                return
            if out:
                yield b"".join(out)

    def _meta(req: Request, final: bool) -> dict:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": req.max_tokens} if final else None,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "forward_entry_time": req.received,
            "prefill_finished_time": req.first_token_at or req.received,
            "queue_time": max(0.0, (req.first_token_at or req.received) - req.received),
            "reasoning_tokens": 0,
            "completion_tokens": req.produced,
            "cached_tokens": 0,
            "cached_tokens_details": {"device": 0, "host": 0},
            "dp_rank": None,
        }
        if final:
            now = time.time()
            meta["e2e_latency"] = now - req.received
            if eng.spec:
                steps, topk, draft = eng.triple
                ct = req.verify_ct
                acc = (req.produced / ct) if ct else 0.0
                correct = sum(n - 1 for n in req.hist)
                proposed = ct * (draft - 1)
                hist = [0] * (eng.depth + 1)
                for n in req.hist:
                    hist[min(n - 1, eng.depth)] += 1
                meta.update(
                    spec_accept_rate=(correct / proposed) if proposed else 0.0,
                    spec_accept_length=acc,
                    spec_num_correct_drafts=correct,
                    spec_num_proposed_drafts=proposed,
                    spec_verify_ct=ct,
                    spec_accepted_drafts=correct,
                    spec_proposed_drafts=proposed,
                    spec_correct_drafts_histogram=hist,
                    spec_accept_histogram=hist,
                )
            meta.update(
                request_received_ts=req.received,
                api_server_dispatch_finish_ts=req.received,
                request_finished_ts=req.finished_at or now,
                decode_throughput=(req.produced / max(1e-9, (req.finished_at or now) - req.first_token_at))
                if req.first_token_at
                else 0.0,
                response_sent_to_client_ts=now,
            )
        return meta

    async def generate(request: HTTPRequest) -> Response:
        body, err = await _json_body(request)
        if err is not None:
            return err
        if not isinstance(body, dict) or (body.get("text") is None and body.get("input_ids") is None):
            return _error("Either text or input_ids should be provided.", 400)
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            return _error("sampling_params must be a dict.", 400)
        max_tokens, err = _max_tokens(sp, "max_new_tokens", default=128)
        if err is not None:
            return err
        bad = not_ready()
        if bad is not None:
            return bad
        text = body.get("text")
        if text is None:
            ids = body.get("input_ids") or []
            text = " ".join(map(str, ids))
            prompt_tokens = len(ids)
        else:
            text = text if isinstance(text, str) else " ".join(map(str, text))
            prompt_tokens = max(1, count_tokens(text))
        req = _submit(body, text, max_tokens, prompt_tokens)
        if body.get("stream"):

            async def gen() -> AsyncIterator[bytes]:
                while True:
                    events = await req.chan.get()
                    fin = events[-1][2]
                    payload = {
                        "text": token_text(req.seed, 0, req.produced),
                        "output_ids": token_ids(req.seed, 0, req.produced),
                        "meta_info": _meta(req, fin),
                    }
                    chunk = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
                    if fin:
                        yield chunk + b"data: [DONE]\n\n"
                        return
                    yield chunk

            return StreamingResponse(_guard(gen(), req), media_type=SSE_MEDIA)
        await _wait_done(req)
        return JSONResponse(
            {
                "text": token_text(req.seed, 0, req.produced),
                "output_ids": token_ids(req.seed, 0, req.produced),
                "meta_info": _meta(req, True),
            }
        )

    async def model_clock(request: HTTPRequest) -> Response:
        """Simulator only (SGLang has no such route): per batch size, the model seconds and tokens of the steps run
        at it, and their ratio, the profile's tok/s on the simulator's own clock."""
        eng = st.engine
        out = {
            str(b): {"model_s": round(sec, 6), "tokens": int(tok), "tok_per_s": tok / sec if sec > 0 else None}
            for b, (sec, tok) in sorted(eng.model_clock.items())
        }
        return JSONResponse(out)

    async def not_found(request: HTTPRequest, exc: Exception) -> Response:
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def not_allowed(request: HTTPRequest, exc: Exception) -> Response:
        return JSONResponse({"detail": "Method Not Allowed"}, status_code=405)

    routes = [
        Route(endpoints.HEALTH, health, methods=["GET", "POST"]),
        Route(endpoints.HEALTH_GENERATE, health, methods=["GET", "POST"]),
        Route(endpoints.GET_MODEL_INFO, get_model_info, methods=["GET"]),
        Route(endpoints.MODEL_INFO, get_model_info, methods=["GET"]),
        Route(endpoints.GET_SERVER_INFO, get_server_info, methods=["GET"]),
        Route(endpoints.SERVER_INFO, get_server_info, methods=["GET"]),
        Route(endpoints.LOAD, get_load, methods=["GET"]),
        Route(endpoints.LOADS, get_load, methods=["GET"]),
        Route(endpoints.FLUSH_CACHE, flush_cache, methods=["GET", "POST"]),
        Route(endpoints.METRICS, metrics, methods=["GET"]),
        Route(endpoints.MODELS, v1_models, methods=["GET"]),
        Route(endpoints.CHAT_COMPLETIONS, chat_completions, methods=["POST"]),
        Route(endpoints.COMPLETIONS, completions, methods=["POST"]),
        Route(endpoints.GENERATE, generate, methods=["POST"]),
        Route("/sim/model_clock", model_clock, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    return VaryOrigin(app)


class VaryOrigin:
    """Adds ``vary: Origin`` like SGLang's CORS middleware."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_vary(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [(b"vary", b"Origin")]
            await send(message)

        await self.app(scope, receive, send_vary)


def render_metrics(st: State) -> str:
    eng = st.engine
    labels = f'engine_type="unified",model_name={json.dumps(st.model_path)},moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    acc = eng.avg_accept_length if eng.spec else 0.0
    draft = eng.current_steps + 1 if eng.controller is not None else (eng.triple[2] if eng.spec else 0)
    values = {
        "sglang:gen_throughput": eng.gen_throughput_now(),
        "sglang:num_running_reqs": float(len(eng.running)),
        "sglang:num_queue_reqs": float(len(eng.waiting)),
        "sglang:token_usage": 0.0,
        "sglang:spec_accept_length": acc,
        "sglang:spec_accept_rate": ((acc - 1) / (draft - 1)) if eng.spec and draft > 1 and acc else 0.0,
        "sglang:spec_num_draft_tokens": float(draft),
        "sglang:spec_num_steps": float(eng.current_steps),
        "sglang:max_total_num_tokens": float(st.profile.max_total_num_tokens),
        "sglang:context_len": float(st.profile.context_len),
        "sglang:page_size": float(st.flags.get("page-size") or 1),
        "sglang:generation_tokens_total": float(eng.gen_tokens),
        "sglang:prompt_tokens_total": float(eng.prompt_tokens),
        "sglang:num_requests_total": float(eng.requests_done),
        "sglang:spec_verify_calls_total": float(eng.verify_calls),
        "sglang:is_cuda_graph": 1.0,
        "sglang:startup_time_seconds": float(sum(st.boot_phases.values())),
    }
    hist = {
        "sglang:time_to_first_token_seconds": (eng.ttft_sum, eng.requests_done),
        "sglang:e2e_request_latency_seconds": (eng.e2e_sum, eng.requests_done),
    }
    out: list[str] = []
    for name, mtype, help_text in recorded.METRIC_FAMILIES:
        if name == "sglang:spec_verify_calls_total" and not eng.spec:
            continue
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {mtype}")
        if mtype == "histogram":
            s, c = hist.get(name, (0.0, 0))
            out.append(f"{name}_sum{{{labels}}} {float(s)}")
            out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(c)}')
            out.append(f"{name}_count{{{labels}}} {float(c)}")
        else:
            out.append(f"{name}{{{labels}}} {values.get(name, 0.0)}")
    return "\n".join(out) + "\n"
