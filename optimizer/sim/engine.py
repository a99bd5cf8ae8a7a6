"""The simulated scheduler: continuous batching in real time, driven by the profile's step-time model.

One asyncio task runs the batch: every step it sleeps the model's cycle time for the current batch size (times
the step scale), then draws each running request's accepted tokens and pushes them, as one event per request and
step, to that request's channel. A new request joins at the next step boundary; its first token (the prefill's)
is emitted on admission, like SGLang's first chunk. Output text is a deterministic function of the prompt.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..sglang import adaptive
from .logs import log
from .model import CATEGORIES, Profile, accept_cdf, capture_batch_sizes, draw_accept

# Plain ASCII words (no JSON escaping needed), each one token.
WORDS = [
    " the",
    " model",
    " answer",
    " is",
    " a",
    " simple",
    " way",
    " to",
    " solve",
    " this",
    " problem",
    " and",
    " we",
    " can",
    " see",
    " that",
    " each",
    " step",
    " of",
    " it",
    " works",
    " well",
    " with",
    " data",
    " in",
    " practice",
    " for",
    " many",
    " cases",
    " where",
    " speed",
    " matters",
    " most",
    " so",
    " let",
    " us",
    " look",
    " at",
    " how",
    " one",
    " might",
    " write",
    " code",
    " which",
    " runs",
    " fast",
    " on",
    " modern",
    " hardware",
    " while",
    " keeping",
    " results",
    " correct",
    " here",
    " are",
    " some",
    " more",
    " ideas",
    " about",
    " it",
    " today",
]
N_WORDS = len(WORDS)
JOIN_FRACTION = 0.25  # a request arriving within this fraction of a step joins the step in flight
MAX_DEBT_S = 1.0  # a starved event loop catches up on at most this much lost step time
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

_CODE = (
    "def ",
    "function",
    "python",
    "code",
    "class ",
    "implement",
    "```",
    "program",
    "javascript",
    "compile",
    "bug",
    "sql",
    "algorithm",
    "rust",
    "c++",
)
_MATH = (
    "solve",
    "math",
    "calculate",
    "equation",
    "integral",
    "how many",
    "compute",
    "prove",
    "sum of",
    "probability",
    "derivative",
    "arithmetic",
)
_SUMM = ("summarize", "summarise", "summary", "tl;dr", "tldr", "key points", "condense")


def classify(text: str) -> str:
    """A prompt's category from keywords: code, math, summarization, else chat."""
    t = text.lower()
    if any(w in t for w in _SUMM):
        return "summarization"
    if any(w in t for w in _CODE):
        return "code"
    if any(w in t for w in _MATH) or re.search(r"\d+\s*[-+*/^]\s*\d+", t):
        return "math"
    return "chat"


def count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def text_seed(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "replace"))


def token_text(seed: int, start: int, n: int) -> str:
    return "".join(WORDS[(seed + i * 7919) % N_WORDS] for i in range(start, start + n))


def token_ids(seed: int, start: int, n: int) -> list[int]:
    return [1000 + (seed + i * 7919) % N_WORDS for i in range(start, start + n)]


class Channel:
    """A per-request mailbox: the scheduler puts events, the response drains all pending ones at once."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: list[tuple[int, int, bool]] = []
        self.waiter: asyncio.Future | None = None

    def put(self, item: tuple[int, int, bool]) -> None:
        self.items.append(item)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def get(self) -> list[tuple[int, int, bool]]:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        items, self.items = self.items, []
        return items


@dataclass(eq=False)
class Request:
    rid: str
    category: str
    max_tokens: int
    prompt_tokens: int
    seed: int
    cdf: tuple[float, ...]
    chan: Channel = field(default_factory=Channel)
    produced: int = 0
    verify_ct: int = 0
    hist: list[int] = field(default_factory=list)
    received: float = field(default_factory=time.time)
    first_token_at: float = 0.0
    finished_at: float = 0.0
    cancelled: bool = False
    done: bool = False


class Engine:
    def __init__(
        self,
        profile: Profile,
        flags: dict[str, Any],
        env: dict[str, str],
        *,
        step_scale: float = 1.0,
        seed: int = 0,
        crash_after: int | None = None,
        on_crash: Callable[[], None] | None = None,
        broken_verify: bool = False,
    ) -> None:
        self.profile = profile
        self.flags = flags
        self.env = env
        self.resolved = profile._resolve(flags)
        self.algo = self.resolved["algo"]
        self.triple = self.resolved["triple"]
        self.spec = self.algo is not None and self.triple is not None
        self.max_running = self.resolved["max_running"]
        self.step_scale = step_scale
        self.rng = random.Random(seed)
        self.crash_after = crash_after
        self.on_crash = on_crash
        # A broken verify kernel: speculative decoding accepts tokens the target model would not have chosen.
        self.wrong_tokens = broken_verify and self.spec
        self.depth = max(1, min(self.triple[0], self.triple[2] - 1)) if self.spec else 0
        self.accept = {c: profile.accept_length(self.algo, self.triple, c) for c in CATEGORIES}
        self.cdfs = {c: accept_cdf(round(L, 6), self.depth) if self.spec else (1.0,) for c, L in self.accept.items()}
        self._cycle: dict[tuple[int, int], float] = {}
        # SGLang's adaptive mode: one slot per batch-size bucket moves between its candidate step counts
        self.adaptive_cfg = self.resolved.get("adaptive") if self.spec else None
        self.controller: adaptive.Controller | None = None
        self._cdfs_by_steps: dict[int, dict[str, tuple[float, ...]]] = {}
        if self.adaptive_cfg is not None:
            self.controller = adaptive.Controller(
                self.adaptive_cfg, self.triple[0], capture_batch_sizes(self.resolved["cgbs"]), log=log
            )
            self._cdfs_by_steps[self.triple[0]] = self.cdfs
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.wake = asyncio.Event()
        self.counter = 0
        # statistics
        self.requests_done = 0
        self.gen_tokens = 0
        self.prompt_tokens = 0
        self.verify_calls = 0  # request-level verify steps
        self.spec_tokens = 0  # tokens produced by verify steps (bonus included)
        self.last_gen_throughput = 0.0
        #: batch size -> [model seconds, tokens] of the steps run at it: the profile's throughput on the simulator's
        #: own clock, whatever the machine's load did to the wall-clock pacing (GET /sim/model_clock)
        self.model_clock: dict[int, list[float]] = {}
        self._window_tokens = 0
        self._window_start = time.monotonic()
        self._window_steps = 0
        self.last_step_end = 0.0
        self.ttft_sum = 0.0
        self.e2e_sum = 0.0
        self.crashed = False
        self._in_step = False
        self._step_start = 0.0
        self._step_dt = 0.0

    # ------------------------------------------------------------------ model
    @property
    def current_steps(self) -> int:
        """The step count running now (adaptive mode moves it; else the launch's)."""
        if not self.spec:
            return 0
        return self.controller.running if self.controller is not None else self.triple[0]

    def cycle_s(self, b: int, steps: int | None = None) -> float:
        key = (b, -1 if steps is None else steps)
        c = self._cycle.get(key)
        if c is None:
            r = self.resolved if steps is None else dict(self.resolved, triple=(steps, 1, steps + 1))
            c = self.profile.step_times(b, r, self.env)[0] / 1000.0
            self._cycle[key] = c
        return c * self.step_scale

    def cdfs_for(self, steps: int) -> dict[str, tuple[float, ...]]:
        """Per-category accept CDFs of a topk-1 chain of ``steps`` (adaptive mode)."""
        got = self._cdfs_by_steps.get(steps)
        if got is None:
            got = {}
            for c in CATEGORIES:
                L = self.profile.accept_length(self.algo, (steps, 1, steps + 1), c) if steps > 0 else 1.0
                got[c] = accept_cdf(round(L, 6), steps) if steps > 0 else (1.0,)
            self._cdfs_by_steps[steps] = got
        return got

    def new_request(self, category: str, max_tokens: int, prompt_tokens: int, prompt_text: str) -> Request:
        self.counter += 1
        rid = (
            f"{self.counter:08x}{zlib.crc32(prompt_text.encode('utf-8', 'replace')) & 0xFFFFFFFF:08x}"
            f"{int(time.time() * 1e6) & 0xFFFFFFFFFFFFFFFF:016x}"
        )
        cat = category if category in CATEGORIES else "chat"
        return Request(
            rid=rid,
            category=cat,
            max_tokens=max(0, int(max_tokens)),
            prompt_tokens=prompt_tokens,
            seed=text_seed(prompt_text) + (1 if self.wrong_tokens else 0),  # every token shifts to another word
            cdf=self.cdfs[cat],
        )

    def submit(self, req: Request) -> None:
        self.prompt_tokens += req.prompt_tokens
        if req.max_tokens == 0:
            req.done = True
            req.finished_at = time.time()
            req.chan.put((0, 0, True))
            self._complete(req)
            return
        # Continuous batching: a request arriving early in a step rides along with it (its prefill is mixed into
        # the step); later arrivals join at the next step boundary.
        if (
            self._in_step
            and not self.waiting
            and len(self.running) < self.max_running
            and asyncio.get_running_loop().time() - self._step_start <= JOIN_FRACTION * self._step_dt
        ):
            self.waiting.append(req)
            self._admit(time.time())
            return
        self.waiting.append(req)
        self.wake.set()

    def cancel(self, req: Request) -> None:
        req.cancelled = True

    @property
    def avg_accept_length(self) -> float:
        return self.spec_tokens / self.verify_calls if self.verify_calls else 0.0

    def gen_throughput_now(self) -> float:
        if not self.running or time.monotonic() - self.last_step_end > 1.0:
            return 0.0
        return self.last_gen_throughput

    # ------------------------------------------------------------------ loop
    def _admit(self, now_wall: float) -> None:
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting.popleft()
            if req.cancelled:
                continue
            req.produced = 1
            req.first_token_at = now_wall
            self.gen_tokens += 1
            self._window_tokens += 1
            self.ttft_sum += now_wall - req.received
            if req.max_tokens <= 1:
                req.done = True
                req.chan.put((0, 1, True))
                self._complete(req)
                continue
            req.chan.put((0, 1, False))
            self.running.append(req)

    def _complete(self, req: Request) -> None:
        req.finished_at = time.time()
        self.e2e_sum += req.finished_at - req.received
        self.requests_done += 1
        if self.crash_after is not None and self.requests_done >= self.crash_after and not self.crashed:
            self.crashed = True
            if self.on_crash is not None:
                asyncio.get_running_loop().call_soon(self.on_crash)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_t: float | None = None
        spec = self.spec
        # Draws come from a golden-ratio sequence with a seeded start: uniform like random draws, but with a far
        # smaller error of the mean, so a short benchmark sees the model's accept length (and tok/s) closely.
        u = self.rng.random()
        golden = 0.6180339887498949
        # with --sim-step-scale 0 (client ceiling) several steps run per event-loop turn and coalesce into a send
        steps_per_turn = 4 if self.step_scale == 0 else 1
        turn = 0
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
                next_t = None
            self._admit(time.time())
            if not self.running:
                continue
            b = len(self.running)
            ctl = self.controller
            if ctl is not None:
                k = ctl.before_batch(b)  # the batch's slot decides the step count (a switch line when it moves)
                dt = self.cycle_s(b, k)
                cdfs = self.cdfs_for(k)
                accepted: list[int] = []
            else:
                dt = self.cycle_s(b)
            now = loop.time()
            if next_t is None or next_t < now - MAX_DEBT_S:
                next_t = now
            next_t += dt
            delay = next_t - now
            turn += 1
            self._in_step, self._step_start, self._step_dt = True, now, dt
            if delay > 0:
                await asyncio.sleep(delay)
            elif turn % steps_per_turn == 0:
                await asyncio.sleep(0)
            self._in_step = False
            still: list[Request] = []
            produced = 0
            for req in self.running:
                if req.cancelled:
                    continue
                if spec:
                    u += golden
                    if u >= 1.0:
                        u -= 1.0
                    n = draw_accept(cdfs[req.category] if ctl is not None else req.cdf, u)
                    if ctl is not None:
                        accepted.append(n - 1)
                else:
                    n = 1
                remaining = req.max_tokens - req.produced
                if n > remaining:
                    n = remaining
                start = req.produced
                req.produced += n
                produced += n
                if spec:
                    req.verify_ct += 1
                    self.verify_calls += 1
                    self.spec_tokens += n
                    req.hist.append(n)
                fin = req.produced >= req.max_tokens
                req.chan.put((start, n, fin))
                if fin:
                    req.done = True
                    self._complete(req)
                else:
                    still.append(req)
            self.running = still
            if ctl is not None:
                ctl.after_verify(accepted, b)  # the slot's EMA; a new step count after warm-up and each interval
            self.gen_tokens += produced
            clock = self.model_clock.setdefault(b, [0.0, 0.0])
            clock[0] += dt
            clock[1] += produced
            self._window_tokens += produced
            self._window_steps += 1
            mono = time.monotonic()
            self.last_step_end = mono
            if self._window_steps >= 40 or mono - self._window_start >= 1.0:
                span = mono - self._window_start
                if span > 0:
                    self.last_gen_throughput = self._window_tokens / span
                self._window_tokens = 0
                self._window_steps = 0
                self._window_start = mono
            if not self.running and not self.waiting:
                # Going idle: the partial window is the last throughput the server saw (short bursts included).
                span = mono - self._window_start
                if self._window_tokens and span > 0:
                    self.last_gen_throughput = self._window_tokens / span
                self._window_start = time.monotonic()
                self._window_tokens = 0
                self._window_steps = 0
