"""What the study maximises when one boot measures several load levels, and the latency limits it must respect.

::

    workload: {concurrency: [1, 8, 32]}
    objective: {level: 32}                          # tok/s at concurrency 32 (default: the last level listed)
    objective: weighted                             # the mean tok/s over the levels, equal weights
    objective: {aggregate: weighted, weights: {1: 2, 32: 1}}
    objective: gain                                 # the mean of tok/s / the baseline's tok/s, level by level
    objective: {level: 32, pareto: true}            # the trade-off at 32: tok/s against p99 ITL (Pareto front)
    limits: {itl_p99_ms: 30}                        # at every level
    limits: {32: {ttft_p99_ms: 2000, itl_p99_ms: 40}, 1: {itl_p99_ms: 8}}   # per level

Pure functions of per-level metrics (``{level: {"tok_per_s": ..., "itl_ms_p99": ...}}``): no Optuna, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: a latency limit's key -> the per-level metric it bounds
LIMIT_METRICS = {"ttft_p99_ms": "ttft_ms_p99", "itl_p99_ms": "itl_ms_p99"}
#: the second objective of a Pareto study (minimised)
PARETO_METRIC = "itl_ms_p99"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Limit(_Strict):
    """Upper bounds on one level's latency percentiles, in milliseconds."""

    ttft_p99_ms: float | None = Field(default=None, gt=0)
    itl_p99_ms: float | None = Field(default=None, gt=0)

    def items(self) -> list[tuple[str, float]]:
        return [(k, float(v)) for k, v in self.model_dump().items() if v is not None]


class Objective(_Strict):
    level: int | None = Field(default=None, ge=1)
    #: ``weighted``: sum(w * tok/s) / sum(w), dominated by the busiest level unless the weights say otherwise;
    #: ``gain``: the mean gain over the baseline, sum(w * tok/s / baseline tok/s) / sum(w), so every level counts
    #: alike whatever its scale; stated in tok/s at the baseline's scale (times the baseline's weighted tok/s).
    #: Needs the baseline, measured first; until then and without one it is the weighted tok/s.
    aggregate: Literal["weighted", "gain"] | None = None
    #: level -> weight for an aggregate (default: equal)
    weights: dict[int, float] | None = None
    #: the trade-off at ``level``: tok/s (higher) against p99 ITL (lower). Every trial is measured in full (no
    #: pruning: a slower but steadier configuration may sit on the front) and the Pareto front is exported and
    #: plotted. The sampler still maximises tok/s: the front is read from what was measured.
    pareto: bool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if data in ("weighted", "gain"):
            return {"aggregate": data}
        if data == "pareto":
            return {"pareto": True}
        if isinstance(data, int) and not isinstance(data, bool):
            return {"level": data}
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> Objective:
        if self.level is not None and self.aggregate is not None:
            raise ValueError("give either level (one load level) or aggregate: weighted or gain, not both")
        if self.weights is not None and self.aggregate is None:
            raise ValueError("weights need aggregate: weighted or gain")
        if self.weights is not None and (not self.weights or any(w < 0 for w in self.weights.values())):
            raise ValueError("weights must be a non-empty mapping of level -> weight >= 0")
        if self.weights is not None and sum(self.weights.values()) <= 0:
            raise ValueError("weights must not all be 0")
        if self.pareto and self.aggregate is not None:
            raise ValueError("pareto compares tok/s and p99 ITL at one level: give level, not aggregate")
        return self


class Plan:
    """An objective and limits resolved against the workload's levels."""

    def __init__(self, levels: list[int], objective: Objective, limits: Mapping[Any, Limit], chunks: int) -> None:
        self.levels = list(levels)
        self.objective = objective
        self.chunks = chunks
        if objective.aggregate is not None:
            w = objective.weights or {c: 1.0 for c in self.levels}
            self.weights = {c: float(w.get(c, 0.0)) for c in self.levels}
        else:
            self.weights = {}
        self.level = None if self.weights else (objective.level or self.levels[-1])
        self.limits: dict[int, list[tuple[str, float]]] = {}
        for c in self.levels:
            merged = dict(limits["all"].items()) if "all" in limits else {}
            if c in limits:
                merged.update(limits[c].items())
            if merged:
                self.limits[c] = sorted(merged.items())

    # ------------------------------------------------------------------ description
    @property
    def multi_level(self) -> bool:
        return len(self.levels) > 1

    @property
    def pareto(self) -> bool:
        return self.objective.pareto

    def describe(self) -> str:
        if self.weights:
            parts = ", ".join(f"c{c} x{w:g}" for c, w in self.weights.items() if w > 0)
            what = "mean gain over the baseline, in tok/s" if self.objective.aggregate == "gain" else "weighted tok/s"
            return f"{what} ({parts})"
        text = f"tok/s at concurrency {self.level}"
        return text + " against p99 ITL (Pareto)" if self.pareto else text

    def objective_levels(self) -> list[int]:
        """Levels the objective reads: their limits decide whether a trial may be the best."""
        return [c for c, w in self.weights.items() if w > 0] if self.weights else [self.level]  # type: ignore[list-item]

    # ------------------------------------------------------------------ benchmark order and pruning steps
    def order(self) -> list[int]:
        """The order one boot measures the levels in.

        With one objective level it runs first, all its chunks: pruning acts on them, so a clearly worse
        configuration is stopped before the other levels are spent on it (its other levels are then not
        measured: the price of an objective level). With an aggregate the levels take turns chunk by chunk
        (``interleave``), the same order in every trial, so that pruning sees every level from the first round.
        """
        if self.level is None:
            return list(self.levels)
        return [self.level, *(c for c in self.levels if c != self.level)]

    @property
    def interleave(self) -> bool:
        return self.level is None and self.multi_level

    def _active(self) -> list[int]:
        return [c for c in self.levels if self.weights.get(c, 0.0) > 0]

    def step(self, level: int, index: int) -> int | None:
        """The intermediate-value step of chunk ``index`` at ``level``; None when it is not reported.

        Pruning compares step i of a trial with step i of another, so a step must mean the same chunk in every
        trial. One objective level: only its chunks are reported, step = chunk index. An aggregate: the chunks
        of every weighted level, step = index * levels + the level's place, the order they run in.
        """
        if self.pareto:
            return None  # nothing is pruned: the front needs every configuration measured in full
        if self.level is not None:
            return index if level == self.level else None
        active = self._active()
        if level not in active:
            return None
        return index * len(active) + active.index(level)

    def level_of_step(self, step: int) -> int:
        if self.level is not None:
            return self.level
        active = self._active()
        return active[step % len(active)]

    def last_step(self) -> int:
        if self.level is not None:
            return self.chunks - 1
        return self.chunks * len(self._active()) - 1

    # ------------------------------------------------------------------ values
    def value(
        self, per_level: Mapping[int, Mapping[str, Any]], baseline: Mapping[int, float] | None = None
    ) -> float | None:
        """The objective from complete levels' metrics; None when a level it needs is missing. ``baseline``:
        the baseline's tok/s per level, for ``aggregate: gain``."""
        if self.weights:
            total = sum(w for w in self.weights.values() if w > 0)
            relative = (
                self.objective.aggregate == "gain"
                and baseline
                and all(baseline.get(c) for c, w in self.weights.items() if w > 0)
            )
            acc = 0.0
            for c, w in self.weights.items():
                if w <= 0:
                    continue
                m = per_level.get(c)
                if not m or not m.get("complete", True) or m.get("tok_per_s") is None:
                    return None
                acc += w * float(m["tok_per_s"]) / (float(baseline[c]) if relative else 1.0)  # type: ignore[index]
            if relative:
                # The mean gain, in tok/s at the baseline's scale (its weighted tok/s times the mean gain), so the
                # value keeps its unit: the baseline scores its own weighted tok/s, +10 % on every level 1.1 x it.
                scale = sum(w * float(baseline[c]) for c, w in self.weights.items() if w > 0) / total  # type: ignore[index]
                return scale * acc / total
            return acc / total
        m = per_level.get(self.level)  # type: ignore[arg-type]
        if not m or not m.get("complete", True) or m.get("tok_per_s") is None:
            return None
        return float(m["tok_per_s"])

    def pareto_values(self, per_level: Mapping[int, Mapping[str, Any]]) -> list[float] | None:
        m = per_level.get(self.level)  # type: ignore[arg-type]
        if not m or m.get("tok_per_s") is None or m.get(PARETO_METRIC) is None:
            return None
        return [float(m["tok_per_s"]), float(m[PARETO_METRIC])]

    def violations(self, level: int, metrics: Mapping[str, Any]) -> dict[str, float]:
        """Constraint values of one level's limits: measured / limit - 1 (> 0 breaks the limit).

        A missing measurement (no request completed) counts as broken: nothing shows the limit is met.
        """
        out: dict[str, float] = {}
        for key, bound in self.limits.get(level, []):
            got = metrics.get(LIMIT_METRICS[key])
            out[f"c{level}_{key}"] = 1.0 if got is None else round(float(got) / bound - 1.0, 6)
        return out

    def limit_text(self) -> list[str]:
        return [
            f"c{c}: " + ", ".join(f"{k.replace('_ms', '').replace('_', ' ')} <= {v:g} ms" for k, v in items)
            for c, items in self.limits.items()
        ]


def parse_levels(raw: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """Per-level metrics as stored on a trial (JSON keys are strings) -> {level: metrics}."""
    out: dict[int, dict[str, Any]] = {}
    for k, v in (raw or {}).items():
        try:
            out[int(k)] = dict(v)
        except (TypeError, ValueError):
            continue
    return out
