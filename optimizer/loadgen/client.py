"""The streaming benchmark client: warmup, then chunks of requests at a set concurrency, level after level.

A failed request is data, never an exception: refused or reset connections, non-200 replies, non-JSON data
lines, streams that end without `[DONE]`, stalled streams and timeouts all become a `RequestRecord` with
`ok=False` and a reason (`"<kind>: <detail>"`; `failure_reasons` counts the kinds).

One watchdog task per run enforces the stall and total timeouts and the caller's cancel event, so the read
loop itself carries no timers: it only stamps the time of each read.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from optimizer.loadgen.sse import SSEStream
from optimizer.loadgen.stats import distribute_itl, summary
from optimizer.loadgen.workload import Prompt, Workload, chunk_plan, load_prompts
from optimizer.sglang import endpoints

_perf = time.perf_counter


@dataclass
class RequestRecord:
    ok: bool
    error: str  # "" when ok, else "<kind>: <detail>"
    category: str
    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float | None
    itl_ms: list[float]  # one value per output token after the first
    e2e_ms: float
    content_chunks: int
    t_start: float
    t_end: float

    @property
    def kind(self) -> str:
        return self.error.split(":", 1)[0] if self.error else ""


@dataclass
class ChunkResult:
    index: int
    tok_per_s: float  # completion tokens of the chunk / chunk wall time
    requests_per_s: float
    completed: int
    failed: int
    wall_s: float
    records: list[RequestRecord] = field(default_factory=list)
    level: int = 1  # the concurrency this chunk ran at; ``index`` counts chunks within the level


@dataclass
class LevelResult:
    """One load level's figures: what a single-level run reports, for the chunks of this level only."""

    level: int
    tok_per_s: float
    requests_per_s: float
    ttft_ms: dict
    itl_ms: dict
    e2e_ms: dict
    accept_length: float | None
    tokens_per_chunk: float | None
    completed: int
    failed: int
    chunks_run: int
    chunks_planned: int

    @property
    def complete(self) -> bool:
        """Every planned chunk of the level was measured (a pruned trial may have complete levels)."""
        return self.chunks_run >= self.chunks_planned

    def to_metrics(self) -> dict[str, float | int | bool | None]:
        m: dict[str, float | int | bool | None] = {"tok_per_s": self.tok_per_s, "requests_per_s": self.requests_per_s}
        for name in ("ttft_ms", "itl_ms", "e2e_ms"):
            for stat, v in getattr(self, name).items():
                m[f"{name}_{stat}"] = v
        m.update(
            accept_length=self.accept_length,
            tokens_per_chunk=self.tokens_per_chunk,
            completed=self.completed,
            failed=self.failed,
            chunks_run=self.chunks_run,
            chunks_planned=self.chunks_planned,
            complete=self.complete,
        )
        return m


@dataclass
class BenchResult:
    tok_per_s: float
    requests_per_s: float
    ttft_ms: dict
    itl_ms: dict
    e2e_ms: dict
    accept_length: float | None  # the server's lifetime average (includes warmup), None without speculation
    tokens_per_chunk: float | None  # completion tokens / content chunks: the accept length seen in the stream
    completed: int
    failed: int
    failure_reasons: dict[str, int]
    chunks: list[ChunkResult]
    stopped_early: bool
    cancelled: bool = False
    model: str = ""
    warmup_failed: int = 0
    #: per load level, in the order they ran; a multi-level workload's metrics carry them as ``levels``
    levels: list[LevelResult] = field(default_factory=list)
    multi_level: bool = False
    #: verify steps that accepted 0, 1, 2, ... drafts over the warm-up's native requests (``_Runner.histogram``)
    accept_histogram: list[int] | None = None

    def to_metrics(self) -> dict[str, Any]:
        """Flat figures of the run. A multi-level run gives its figures per level under ``levels`` (pooling
        latencies across loads would describe no load), with the counts and the server's accept length on top."""
        m: dict[str, Any] = {}
        if not self.multi_level:
            m.update(tok_per_s=self.tok_per_s, requests_per_s=self.requests_per_s)
            for name in ("ttft_ms", "itl_ms", "e2e_ms"):
                for stat, v in getattr(self, name).items():
                    m[f"{name}_{stat}"] = v
            m["tokens_per_chunk"] = self.tokens_per_chunk
        m.update(
            accept_length=self.accept_length,
            completed=self.completed,
            failed=self.failed,
            chunks_run=len(self.chunks),
        )
        if self.accept_histogram:
            m["accept_histogram"] = self.accept_histogram
        if self.multi_level:
            m["levels"] = {str(lr.level): lr.to_metrics() for lr in self.levels}
        return m


class _InFlight:
    __slots__ = ("t_start", "last", "reason", "task")

    def __init__(self, t: float, task: asyncio.Task | None) -> None:
        self.t_start = t
        self.last = t
        self.reason = ""
        self.task = task


async def _drain(chunks) -> None:
    async for _ in chunks:
        pass


def _failed(p: Prompt, error: str, t0: float, stream: SSEStream | None = None) -> RequestRecord:
    t1 = _perf()
    ttft = (stream.arrivals[0] - t0) * 1e3 if stream is not None and stream.arrivals else None
    return RequestRecord(
        False,
        error,
        p.category,
        0,
        0,
        ttft,
        [],
        (t1 - t0) * 1e3,
        len(stream.arrivals) if stream is not None else 0,
        t0,
        t1,
    )


def _snippet(body: bytes) -> str:
    text = body[:2000].decode("utf-8", "replace")
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            if isinstance(err, dict):
                msg = err.get("message") or err.get("detail")
                if msg:
                    return str(msg)[:200]
    except ValueError:
        pass
    return " ".join(text.split())[:200]


class _Runner:
    def __init__(self, base_url: str, w: Workload, model: str | None, cancel: threading.Event | None) -> None:
        self.base = base_url.rstrip("/")
        self.w = w
        self.model = model
        self.cancel = cancel
        self.cancelled = False
        self.inflight: dict[int, _InFlight] = {}
        self.path = endpoints.CHAT_COMPLETIONS if w.endpoint == "chat" else endpoints.COMPLETIONS
        self.client: httpx.AsyncClient | None = None

    # ---- server facts -------------------------------------------------------------------------------------
    async def _get(self, path: str, timeout_s: float = 10.0) -> httpx.Response | None:
        """A GET that gives up on errors, after timeout_s, and within 0.1 s of a cancel."""
        task = asyncio.ensure_future(self.client.get(self.base + path, timeout=timeout_s))
        deadline = _perf() + timeout_s
        while not task.done():
            await asyncio.wait({task}, timeout=0.1)
            if (self.cancel is not None and self.cancel.is_set()) or _perf() > deadline:
                self.cancelled = self.cancelled or (self.cancel is not None and self.cancel.is_set())
                task.cancel()
                break
        try:
            return await task
        except (asyncio.CancelledError, httpx.HTTPError):
            return None

    async def _get_json(self, path: str):
        r = await self._get(path)
        try:
            return r.json() if r is not None and r.status_code == 200 else None
        except ValueError:
            return None

    async def discover_model(self) -> str:
        obj = await self._get_json(endpoints.MODELS)
        try:
            return str(obj["data"][0]["id"])
        except (TypeError, KeyError, IndexError):
            pass
        for path in (endpoints.MODEL_INFO, endpoints.GET_MODEL_INFO):
            obj = await self._get_json(path)
            if isinstance(obj, dict) and obj.get("model_path"):
                return str(obj["model_path"])
        return "default"

    async def accept_length(self) -> float | None:
        """The server's average accept length; None without speculation or on servers that do not say."""
        for path in (endpoints.SERVER_INFO, endpoints.GET_SERVER_INFO):
            obj = await self._get_json(path)
            if not isinstance(obj, dict):
                continue
            states = obj.get("internal_states")
            cands = [states[0]] if isinstance(states, list) and states and isinstance(states[0], dict) else []
            cands.append(obj)
            for d in cands:
                v = d.get("avg_spec_accept_length")
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return float(v)
            if obj.get("speculative_algorithm") is None and "speculative_algorithm" in obj:
                return None  # speculation is off: the key is absent on purpose
            break
        # Builds that moved the field: the Prometheus gauge (it reads 0 without speculation).
        r = await self._get(endpoints.METRICS)
        if r is None or r.status_code != 200:
            return None
        for line in r.text.splitlines():
            if line.startswith("sglang:spec_accept_length"):
                try:
                    v = float(line.rsplit(" ", 1)[1])
                except (ValueError, IndexError):
                    continue
                return v if v > 0 else None
        return None

    async def histogram(self, prompts: list[Prompt]) -> list[int] | None:
        """Verify steps that accepted 0, 1, 2, ... drafts, summed over SGLang's native ``/generate`` requests of
        these prompts: each reply's ``meta_info`` carries its ``spec_correct_drafts_histogram`` (the OpenAI stream
        carries none). For a chain, it gives the accept length of every shorter chain. None where no reply has one
        (no speculation, another server): the benchmark does not depend on it."""

        async def one(p: Prompt) -> list[int] | None:
            body: dict[str, Any] = {
                "text": p.as_text(),
                "sampling_params": {
                    "max_new_tokens": self.w.max_tokens,
                    "temperature": self.w.temperature,
                    "ignore_eos": self.w.ignore_eos,
                },
            }
            if self.w.send_category:
                body["category"] = p.category
            try:
                r = await asyncio.wait_for(
                    self.client.post(self.base + endpoints.GENERATE, json=body), self.w.request_timeout_s
                )
                meta = r.json().get("meta_info") if r.status_code == 200 else None
            except (TimeoutError, httpx.HTTPError, ValueError, AttributeError):
                return None
            h = meta.get("spec_correct_drafts_histogram") if isinstance(meta, dict) else None
            ok = isinstance(h, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in h)
            return h if ok else None

        seen = [h for h in await asyncio.gather(*(one(p) for p in prompts)) if h]
        if not seen:
            return None
        total = [0] * max(len(h) for h in seen)
        for h in seen:
            for i, v in enumerate(h):
                total[i] += v
        return total if sum(total) > 0 else None

    # ---- requests -----------------------------------------------------------------------------------------
    def body(self, p: Prompt) -> bytes:
        b = {
            "model": self.model,
            "max_tokens": self.w.max_tokens,
            "temperature": self.w.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": self.w.ignore_eos,
        }
        if self.w.endpoint == "chat":
            b["messages"] = p.as_messages()
        else:
            b["prompt"] = p.as_text()
        if self.w.send_category:
            b["category"] = p.category
        return json.dumps(b).encode()

    async def request(self, p: Prompt, body: bytes) -> RequestRecord:
        t0 = _perf()
        st = _InFlight(t0, asyncio.current_task())
        key = id(st)
        self.inflight[key] = st
        stream: SSEStream | None = None
        try:
            async with self.client.stream(
                "POST", self.base + self.path, content=body, headers={"content-type": "application/json"}
            ) as resp:
                st.last = _perf()
                if resp.status_code != 200:
                    raw = await resp.aread()
                    return _failed(p, f"http_{resp.status_code}: {_snippet(raw)}", t0)
                ctype = resp.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    raw = await resp.aread()
                    return _failed(p, f"not_sse: content-type {ctype!r}: {_snippet(raw)}", t0)
                stream = SSEStream(self.w.endpoint)
                feed = stream.feed
                chunks = resp.aiter_raw()
                t1 = 0.0
                async for data in chunks:
                    t1 = _perf()
                    st.last = t1
                    feed(data, t1)
                    if stream.done or stream.error:
                        break
                if stream.done and not stream.error:
                    # Read the body's end (it follows [DONE] at once) so the connection can be reused;
                    # closing a half-read response would cost a new connection per request.
                    try:
                        await asyncio.wait_for(_drain(chunks), 0.5)
                    except (TimeoutError, httpx.HTTPError):
                        pass
        except asyncio.CancelledError:
            if not st.reason:
                raise
            return _failed(p, st.reason, t0, stream)
        except httpx.ConnectError as e:
            return _failed(p, f"connect: {e or type(e).__name__}", t0)
        except httpx.TimeoutException as e:
            return _failed(p, f"timeout: {type(e).__name__}: {e}", t0, stream)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            if stream is None:
                return _failed(p, f"disconnected: no reply ({type(e).__name__}: {e})", t0)
            return _failed(p, f"truncated: connection broke mid-reply ({type(e).__name__}: {e})", t0, stream)
        except httpx.HTTPError as e:
            return _failed(p, f"http_error: {type(e).__name__}: {e}", t0, stream)
        finally:
            self.inflight.pop(key, None)
        if stream.error:
            return _failed(p, stream.error, t0, stream)
        if not stream.done:
            return _failed(p, "truncated: stream ended without [DONE]", t0, stream)
        arr = stream.arrivals
        usage = stream.usage or {}
        ctoks = usage.get("completion_tokens")
        if not isinstance(ctoks, int):
            ctoks = len(arr)  # a server that ignores include_usage: one token per chunk is a lower bound
        ptoks = usage.get("prompt_tokens")
        return RequestRecord(
            True,
            "",
            p.category,
            ptoks if isinstance(ptoks, int) else 0,
            ctoks,
            (arr[0] - t0) * 1e3 if arr else None,
            distribute_itl(arr, ctoks),
            (t1 - t0) * 1e3,
            len(arr),
            t0,
            t1,
        )

    async def watchdog(self) -> None:
        w = self.w
        tick = min(0.1, w.stall_timeout_s / 4)
        while True:
            await asyncio.sleep(tick)
            now = _perf()
            if self.cancel is not None and self.cancel.is_set():
                self.cancelled = True
            for st in list(self.inflight.values()):
                if st.reason:
                    continue
                if self.cancelled:
                    st.reason = "cancelled: the benchmark was cancelled"
                elif now - st.t_start > w.request_timeout_s:
                    st.reason = f"timeout: no complete reply within {w.request_timeout_s:g} s"
                elif now - st.last > w.stall_timeout_s:
                    st.reason = f"stalled: no byte for {w.stall_timeout_s:g} s"
                else:
                    continue
                if st.task is not None:
                    st.task.cancel()

    async def run_batch(self, prompts: list[Prompt]) -> tuple[list[RequestRecord], float]:
        bodies = [self.body(p) for p in prompts]
        records: list[RequestRecord | None] = [None] * len(prompts)
        it = iter(range(len(prompts)))

        async def worker() -> None:
            for i in it:
                if self.cancelled:
                    return
                records[i] = await asyncio.create_task(self.request(prompts[i], bodies[i]))

        t0 = _perf()
        await asyncio.gather(*(worker() for _ in range(min(self.w.concurrency, len(prompts)))))
        return [r for r in records if r is not None], _perf() - t0


def _chunk_result(index: int, records: list[RequestRecord], wall_s: float, level: int = 1) -> ChunkResult:
    ok = [r for r in records if r.ok]
    toks = sum(r.completion_tokens for r in ok)
    wall = max(wall_s, 1e-9)
    return ChunkResult(index, toks / wall, len(ok) / wall, len(ok), len(records) - len(ok), wall_s, records, level)


def _pooled(chunks: list[ChunkResult]) -> dict[str, Any]:
    """The figures of a set of chunks (one level, or the whole run) measured as one."""
    recs = [r for c in chunks for r in c.records]
    ok = [r for r in recs if r.ok]
    wall = sum(c.wall_s for c in chunks)
    toks = sum(r.completion_tokens for r in ok)
    content = sum(r.content_chunks for r in ok)
    return dict(
        tok_per_s=toks / wall if wall > 0 else 0.0,
        requests_per_s=len(ok) / wall if wall > 0 else 0.0,
        ttft_ms=summary([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        itl_ms=summary([v for r in ok for v in r.itl_ms]),
        e2e_ms=summary([r.e2e_ms for r in ok]),
        tokens_per_chunk=toks / content if content else None,
        completed=len(ok),
        failed=len(recs) - len(ok),
    )


def _summarise(
    chunks: list[ChunkResult],
    accept: float | None,
    stopped: bool,
    cancelled: bool,
    model: str,
    warmup_failed: int,
    levels: list[tuple[int, float | None, int]] | None = None,
    multi_level: bool = False,
) -> BenchResult:
    """``levels``: (level, its accept length, chunks planned) for each level that started, in run order."""
    reasons: dict[str, int] = {}
    for r in (r for c in chunks for r in c.records):
        if not r.ok:
            reasons[r.kind] = reasons.get(r.kind, 0) + 1
    per_level = []
    for level, level_accept, planned in levels or []:
        mine = [c for c in chunks if c.level == level]
        per_level.append(
            LevelResult(
                level=level, accept_length=level_accept, chunks_run=len(mine), chunks_planned=planned, **_pooled(mine)
            )
        )
    return BenchResult(
        **_pooled(chunks),
        accept_length=accept,
        failure_reasons=reasons,
        chunks=chunks,
        stopped_early=stopped,
        cancelled=cancelled,
        model=model,
        warmup_failed=warmup_failed,
        levels=per_level,
        multi_level=multi_level,
    )


def _level_accept(tokens: tuple[float, float], server_avg: tuple[float | None, float | None]) -> float | None:
    """One level's accept length from the server's lifetime average read before and after it.

    SGLang reports only a lifetime average (tokens / verify steps, warmup included). With our own token counts
    before and after the level, verify steps = tokens / average, so the level's own figure is the ratio of the
    differences. None when the server does not say, or the figures do not add up (e.g. failed requests' tokens).
    """
    (t0, t1), (a0, a1) = tokens, server_avg
    if a1 is None or a1 <= 0 or t1 <= t0:
        return None
    steps0 = t0 / a0 if a0 and a0 > 0 else (0.0 if t0 == 0 else None)
    if steps0 is None:
        return None
    steps = t1 / a1 - steps0
    value = (t1 - t0) / steps if steps > 0 else None
    return value if value is not None and value >= 1.0 else None


def schedule(order: list[int], chunks: int, interleave: bool) -> list[tuple[int, int]]:
    """(level, chunk index) in the order they run: level after level, or round-robin (chunk 0 of every level,
    then chunk 1, ...) so that every level is seen early."""
    if interleave:
        return [(level, i) for i in range(chunks) for level in order]
    return [(level, i) for level in order for i in range(chunks)]


async def _run(
    base_url: str,
    w: Workload,
    model: str | None,
    on_chunk,
    cancel,
    prompts: list[Prompt],
    order: list[int],
    interleave: bool = False,
) -> BenchResult:
    plans = {level: chunk_plan(w.for_level(level), prompts) for level in order}
    warmup = plans[order[0]][0]  # one warmup after the boot, at the first level's concurrency
    runner = _Runner(base_url, w.for_level(order[0]), model, cancel)
    top = max(order)
    limits = httpx.Limits(max_connections=top, max_keepalive_connections=top)
    # No read timeout in the transport: the watchdog enforces stall and total timeouts without a timer per read.
    timeout = httpx.Timeout(connect=min(10.0, w.request_timeout_s), read=None, write=10.0, pool=None)
    chunks: list[ChunkResult] = []
    stopped = False
    warmup_failed = 0
    accept: float | None = None
    histogram: list[int] | None = None
    # per level: [tokens, verify steps] attributed from the server's lifetime average (``_level_accept``)
    spent: dict[int, list[float]] = {level: [0.0, 0.0] for level in order}
    spent_ok: dict[int, bool] = {level: True for level in order}
    steps = schedule(order, w.chunks, interleave)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        runner.client = client
        dog = asyncio.create_task(runner.watchdog())
        try:
            if runner.model is None:
                runner.model = await runner.discover_model()
            tokens = 0.0
            if warmup and not runner.cancelled:
                # beside the warm-up, the same prompts through the native endpoint: their accept histogram
                probe = asyncio.create_task(runner.histogram(warmup))
                recs, _ = await runner.run_batch(warmup)
                warmup_failed = sum(not r.ok for r in recs)
                tokens = float(sum(r.completion_tokens for r in recs if r.ok))
                histogram = await _within(probe, None if runner.cancelled else w.request_timeout_s)
            server_avg = await runner.accept_length() if w.multi_level and not runner.cancelled else None
            for n, (level, index) in enumerate(steps):
                if runner.cancelled:
                    break
                runner.w = w.for_level(level)
                recs, wall = await runner.run_batch(plans[level][1][index])
                if runner.cancelled:
                    break  # a chunk cut short measures nothing
                res = _chunk_result(index, recs, wall, level)
                chunks.append(res)
                added = float(sum(r.completion_tokens for r in recs if r.ok))
                if w.multi_level:
                    now = await runner.accept_length()
                    got = _level_accept((tokens, tokens + added), (server_avg, now))
                    if got is None or any(not r.ok for r in recs):
                        spent_ok[level] = False
                    else:
                        spent[level][0] += added
                        spent[level][1] += added / got
                    server_avg = now
                tokens += added
                if on_chunk is not None and on_chunk(res) is False and n < len(steps) - 1:
                    stopped = True
                    break
            if not runner.cancelled:
                accept = server_avg if w.multi_level else await runner.accept_length()
        finally:
            dog.cancel()
            try:
                await dog
            except asyncio.CancelledError:
                pass
    levels: list[tuple[int, float | None, int]] = []
    for level in order:
        if not any(c.level == level for c in chunks):
            continue
        if not w.multi_level:
            levels.append((level, accept, w.chunks))
            continue
        toks, verify = spent[level]
        levels.append((level, toks / verify if spent_ok[level] and verify > 0 else None, w.chunks))
    result = _summarise(
        chunks, accept, stopped, runner.cancelled, runner.model or "", warmup_failed, levels, w.multi_level
    )
    result.accept_histogram = histogram
    return result


async def _within(task: asyncio.Task, timeout_s: float | None):
    """The task's result, or None (the task cancelled) after timeout_s; at once with None."""
    if timeout_s is not None:
        await asyncio.wait({task}, timeout=timeout_s)
    if not task.done():
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return None
    return task.result()


def run_benchmark(
    base_url: str,
    workload: Workload,
    *,
    model: str | None = None,
    on_chunk: Callable[[ChunkResult], bool] | None = None,
    cancel: threading.Event | None = None,
    prompts_base_dir: Path | None = None,
    order: list[int] | None = None,
    interleave: bool = False,
) -> BenchResult:
    """Run the workload against an OpenAI-compatible server and return the measured result.

    The workload's levels run on the same server in ``order`` (default: as listed), level after level, or
    chunk round by chunk round with ``interleave``.

    Synchronous: runs its own event loop, so call it from a worker thread, not from inside a running loop.
    After each chunk `on_chunk(result)` is called; returning False stops the run (`stopped_early`).
    Setting `cancel` aborts in-flight requests within about 0.1 s and returns the chunks measured so far.
    Raises only for a bad workload (ConfigError) or a programming error, never for server misbehaviour.
    """
    prompts = load_prompts(workload, prompts_base_dir)
    order = list(order or workload.levels)
    if sorted(order) != sorted(workload.levels):
        raise ValueError(f"order {order} must list the workload's levels {workload.levels}")
    return asyncio.run(_run(base_url, workload, model, on_chunk, cancel, prompts, order, interleave))
