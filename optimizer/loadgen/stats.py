"""Small statistics helpers for the benchmark: per-token ITL and mean/p50/p99 summaries."""

from __future__ import annotations

import math


def distribute_itl(arrivals: list[float], completion_tokens: int) -> list[float]:
    """Per-token inter-token latencies in ms from chunk arrival times.

    With speculation one SSE chunk carries all tokens of a verify step, and the stream does not say how many.
    The first chunk carries the first token (it sets TTFT); the remaining `completion_tokens - 1` tokens are
    spread evenly over the later chunks, and a chunk carrying n tokens after a gap g gives n values g / n.
    A gap whose chunk gets no token is carried into the next one, so the values always sum to the decode time.
    """
    k = len(arrivals) - 1
    rest = completion_tokens - 1
    if k <= 0 or rest <= 0:
        return []
    q, r = divmod(rest, k)
    out: list[float] = []
    carry = 0.0
    prev = arrivals[0]
    for j in range(k):
        t = arrivals[j + 1]
        gap = (t - prev) * 1e3 + carry
        prev = t
        # Give the r extra tokens to the last r chunks: the last verify step is the one most often short.
        n = q + (1 if j >= k - r else 0)
        if n == 0:
            carry = gap
            continue
        carry = 0.0
        v = gap / n
        out.extend([v] * n)
    return out


def percentile(sorted_vals: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of an already sorted list."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    x = (len(sorted_vals) - 1) * p / 100.0
    lo = math.floor(x)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (x - lo)


def summary(vals: list[float]) -> dict[str, float | None]:
    if not vals:
        return {"mean": None, "p50": None, "p99": None}
    s = sorted(vals)
    return {"mean": sum(s) / len(s), "p50": percentile(s, 50), "p99": percentile(s, 99)}
