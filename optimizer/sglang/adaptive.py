"""SGLang's adaptive speculative decoding (``--speculative-adaptive``), its contract in one place.

Source: SGLang 0.5.17, ``sglang/srt/speculative/adaptive_spec_params.py`` (the config, ``AdaptiveStepSlot``,
``AdaptiveSpeculativeParams``), ``sglang/srt/arg_groups/speculative_hook.py`` (``_maybe_disable_adaptive``,
``_init_adaptive_speculative_params``), ``sglang/srt/speculative/eagle_worker_v2.py`` (one runtime state, i.e. one
set of CUDA graphs, per candidate step count; the switch line). Messages are SGLang's own text.

What SGLang does, in the order it does it while parsing arguments:

1. ``adaptive_unsupported_reason``: not EAGLE/EAGLE3, topk given and != 1, DP attention, multi-layer EAGLE,
   two-batch overlap or PD multiplexing. SGLang does **not** fail there: it logs
   ``speculative_adaptive disabled: <reason>. Falling back to static speculative params.`` and runs the static
   configuration (so such a launch is the static one: :func:`effective`).
2. The config (the JSON file of ``--speculative-adaptive-config``, else :data:`DEFAULT_CONFIG`) is validated:
   integer-string keys are batch sizes (other keys are knobs shared by every slot), each with a non-empty
   ``candidate_steps`` list of non-negative ints; a ``ValueError`` otherwise.
3. topk becomes 1; no ``--speculative-num-steps`` picks the middle of the union of every slot's candidates
   (``union[len // 2]``); a given step count outside that union is a ``ValueError``; draft tokens are forced to
   steps + 1 (whatever was given).

At runtime each decode batch is routed to a slot (its size padded up to a captured CUDA-graph batch size, then the
largest slot key <= that, else the smallest key); the slot's current step count is activated (one log line when
it differs from the running one). After each verify the slot's EMA of accepted drafts per request is updated and,
after ``warmup_batches`` and then every ``update_interval`` batches, the slot moves between its candidates
(:class:`Slot`): down while the EMA is at or below ``prev - 0.5 + down_hysteresis`` (0.5 for a floor of 0), else
up while it is above ``current - 0.5 + up_hysteresis``; from 0 steps (no drafting, nothing to measure) it probes
the next candidate up. The rule looks at acceptance only, never at the step's cost: it is not a throughput search.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FLAG = "speculative-adaptive"
CONFIG_FLAG = "speculative-adaptive-config"

DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}
#: the knobs' defaults in ``AdaptiveStepSlot.__init__``
KNOB_DEFAULTS: dict[str, float] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
    "ceiling_coeff": 0,
}

DISABLED_WARNING = "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
UPDATED_LINE = "Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"
SWITCH_LINE = "Switch adaptive runtime state: steps {old} -> {new}, draft_tokens {old_d} -> {new_d}"
INIT_LINE = "AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps={candidates}"
BUILT_LINE = "Built adaptive runtime state steps={steps}: elapsed={elapsed:.2f}s, mem={mem:.2f}GB"


class AdaptiveConfigError(ValueError):
    """SGLang's ``ValueError`` while loading the adaptive config or resolving the step count (exit 1 at start-up)."""


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def requested(flags: Mapping[str, Any]) -> bool:
    return _truthy(flags.get(FLAG))


def unsupported_reason(flags: Mapping[str, Any], algorithm: str | None) -> str | None:
    """SGLang's ``adaptive_unsupported_reason`` (``algorithm`` as SGLang resolved it: NEXTN is EAGLE by then)."""
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    topk = flags.get("speculative-eagle-topk")
    if topk is not None and int(topk) != 1:
        return f"speculative_eagle_topk={int(topk)} (only topk=1 is supported)"
    if _truthy(flags.get("enable-dp-attention")):
        return (
            "enable_dp_attention=True is not supported (adaptive tier decisions are not synchronized across DP ranks)"
        )
    if _truthy(flags.get("enable-multi-layer-eagle")):
        return "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not implement adaptive)"
    if _truthy(flags.get("enable-two-batch-overlap")):
        return (
            "enable_two_batch_overlap=True is not supported "
            "(adaptive state swap would discard the TboAttnBackend wrapper)"
        )
    if _truthy(flags.get("enable-pdmux")):
        return "enable_pdmux=True is not supported (adaptive state swap does not update decode_attn_backend_group)"
    return None


@dataclass(frozen=True)
class SlotConfig:
    """One batch-size slot: its candidate step counts (sorted, unique) and knobs."""

    batch_size: int
    candidate_steps: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ceiling_coeff: float = 0


@dataclass(frozen=True)
class AdaptiveConfig:
    """A validated adaptive config: slots by batch size (ascending)."""

    slots: tuple[SlotConfig, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def batch_sizes(self) -> list[int]:
        return [s.batch_size for s in self.slots]

    @property
    def candidate_steps(self) -> list[int]:
        """The union of every slot's candidates: SGLang captures one runtime state per value."""
        return sorted({c for s in self.slots for c in s.candidate_steps})

    def initial_steps(self, given: int | None) -> int:
        """The launch's step count: the given one, or the middle of the union (SGLang's choice)."""
        union = self.candidate_steps
        steps = union[len(union) // 2] if given is None else int(given)
        if steps not in union:
            raise AdaptiveConfigError(
                f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps {union}. "
                "Pass one of those values."
            )
        return steps

    def max_draft_tokens(self) -> int:
        """``ServerArgs.max_speculative_num_draft_tokens`` under adaptive mode: buffers sized for the deepest."""
        return max(self.candidate_steps) + 1

    def slot_index(self, batch_size: int, cuda_graph_bs: Sequence[int] | None = None) -> int:
        """``_route``: pad the batch to a captured graph size (none above the largest), then the closest slot
        key <= it (the smallest slot when none is)."""
        b = int(batch_size)
        if cuda_graph_bs:
            sizes = sorted(cuda_graph_bs)
            i = bisect.bisect_left(sizes, b)
            if i < len(sizes):
                b = sizes[i]
        keys = self.batch_sizes
        return max(0, bisect.bisect_right(keys, b) - 1)

    def slot_for(self, batch_size: int, cuda_graph_bs: Sequence[int] | None = None) -> SlotConfig:
        return self.slots[self.slot_index(batch_size, cuda_graph_bs)]

    def graph_batch_sizes(self, steps: int, cuda_graph_bs: Sequence[int]) -> list[int]:
        """``cuda_graph_bs_for_step``: the captured batch sizes whose slot can run ``steps``."""
        return [v for v in cuda_graph_bs if steps in self.slot_for(v).candidate_steps]

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw)


def parse_config(cfg: Any) -> AdaptiveConfig:
    """``_load_adaptive_config`` on an already-read mapping; SGLang's messages on a bad one."""
    if not isinstance(cfg, Mapping):
        # SGLang calls cfg.items(): a JSON list or number ends in an AttributeError.
        raise AttributeError(f"'{type(cfg).__name__}' object has no attribute 'items'")
    slots: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not str(key).isdigit():
            continue
        if not isinstance(entry, Mapping):
            raise AttributeError(f"'{type(entry).__name__}' object has no attribute 'get'")
        steps = entry.get("candidate_steps")
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
        ):
            raise AdaptiveConfigError(
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {_py_repr(steps)}"
            )
        slots[int(key)] = dict(entry)
    if not slots:
        raise AdaptiveConfigError(
            "speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
            '{"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(cfg.keys())!r}"
        )
    shared = {k: v for k, v in cfg.items() if not str(k).isdigit()}
    out = []
    for bs in sorted(slots):
        merged = {**KNOB_DEFAULTS, **shared, **slots[bs]}
        out.append(
            SlotConfig(
                batch_size=bs,
                candidate_steps=tuple(sorted(set(merged["candidate_steps"]))),
                ema_alpha=float(merged["ema_alpha"]),
                update_interval=int(merged["update_interval"]),
                warmup_batches=int(merged["warmup_batches"]),
                down_hysteresis=float(merged["down_hysteresis"]),
                up_hysteresis=float(merged["up_hysteresis"]),
                ceiling_coeff=float(merged["ceiling_coeff"]),
            )
        )
    return AdaptiveConfig(tuple(out), raw=dict(cfg))


def _py_repr(v: Any) -> str:
    """Python's repr of a JSON value, as SGLang's f-string ``{steps!r}`` prints it."""
    return repr(v)


def load_config(path: str | Path | None) -> AdaptiveConfig:
    """The config of ``--speculative-adaptive-config PATH`` (SGLang's default without one). A missing file or
    bad JSON raises what ``open``/``json.load`` raise, as in SGLang."""
    if path is None:
        return parse_config(DEFAULT_CONFIG)
    st = Path(path).stat()  # FileNotFoundError as SGLang's open() would raise it
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _LOADED:
        if len(_LOADED) > 64:
            _LOADED.clear()
        with open(path) as f:
            _LOADED[key] = parse_config(json.load(f))
    return _LOADED[key]


_LOADED: dict[tuple, AdaptiveConfig] = {}


def config_of(flags: Mapping[str, Any]) -> AdaptiveConfig:
    path = flags.get(CONFIG_FLAG)
    return load_config(None if path in (None, "", True) else str(path))


def effective(flags: Mapping[str, Any], algorithm: str | None) -> bool:
    """Whether SGLang will run adaptive mode for these flags (requested and supported)."""
    return requested(flags) and unsupported_reason(flags, algorithm) is None


def resolve(flags: Mapping[str, Any], config: AdaptiveConfig) -> tuple[int, int, int]:
    """``_init_adaptive_speculative_params``: (steps, topk 1, steps + 1), or SGLang's ValueError."""
    given = flags.get("speculative-num-steps")
    steps = config.initial_steps(None if given is None else int(given))
    return steps, 1, steps + 1


def deeper_state(config: AdaptiveConfig, launch_steps: int, attention_backend: Any) -> int | None:
    """Under Triton attention, the first candidate step count deeper than the launch's (SGLang builds an extra
    runtime state for it); None when the launch is the deepest or the backend is another. Seen, not read in the
    source: on an H200 with Triton attention, SGLang 0.5.17 failed to capture such a state (`CUDA error: an illegal
    memory access was encountered` in the draft-extend capture; three launches of the default config at 3 steps,
    three machines), and booted when launched at the deepest step count (docs/adaptive.md). Other attention
    backends were not measured."""
    if str(attention_backend) != "triton":
        return None
    deeper = [k for k in config.candidate_steps if k > launch_steps]
    return deeper[0] if deeper else None


DEEPER_STATE_WARNING = (
    "{n} launchable configuration(s) run SGLang's adaptive mode under Triton attention with a candidate step count "
    "deeper than the launch's: on an H200, SGLang 0.5.17 failed every such launch in CUDA-graph capture and booted "
    "when launched at the deepest (--speculative-num-steps {steps}; docs/adaptive.md). Expect them to be recorded as "
    "infeasible."
)


# ---------------------------------------------------------------------------------------------------------- runtime
class Slot:
    """``AdaptiveStepSlot``: the EMA of accepted drafts per request and the step rule, as a pure state machine.

    ``update`` returns the new step count when it changed, else None (SGLang logs :data:`UPDATED_LINE` then).
    """

    def __init__(self, cfg: SlotConfig, initial_steps: int) -> None:
        self.cfg = cfg
        self.candidates = list(cfg.candidate_steps)
        self.current = initial_steps if initial_steps in self.candidates else self.candidates[len(self.candidates) // 2]
        self.ema = float(self.current - 1)
        self.batches = 0

    def update(self, accepted_drafts: Sequence[float]) -> int | None:
        if not len(accepted_drafts):
            return None
        c = self.cfg
        if self.current > 0:
            avg = float(sum(accepted_drafts)) / len(accepted_drafts)
            self.ema = (1 - c.ema_alpha) * self.ema + c.ema_alpha * avg
        self.batches += 1
        if self.batches <= c.warmup_batches:
            return None
        if (self.batches - c.warmup_batches) % c.update_interval != 0:
            return None
        return self._recompute()

    def _recompute(self) -> int | None:
        c = self.cfg
        cands = self.candidates
        old = self.current
        idx = cands.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(cands) - 1)
            target = cands[idx]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = cands[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + c.down_hysteresis
            if self.ema <= drop:
                idx -= 1
            else:
                break
        if idx >= old_idx:
            while idx < len(cands) - 1:
                if self.ema > cands[idx] - 0.5 + c.up_hysteresis:
                    idx += 1
                else:
                    break
        target = cands[idx]
        if c.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema * c.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and cands[idx] > ceiling:
                    idx -= 1
                target = cands[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> int | None:
        if target != old:
            self.current = target
            return target
        return None


def steady_shares(
    slot: Slot,
    pmf_of: Callable[[int], np.ndarray],
    batch: int,
    rng: np.random.Generator,
    batches: int,
    skip: int = 50,
) -> dict[int, float]:
    """The share of verify steps the slot runs at each step count at a constant batch: each request's accepted
    drafts drawn from ``pmf_of(k)`` (probabilities of 0..k) at the running step count k (none at 0 steps), the
    slot's rule applied after every verify, the first ``skip`` verify steps left out."""
    counts: dict[int, int] = {}
    for i in range(batches):
        k = slot.current
        drafts = rng.choice(k + 1, size=batch, p=pmf_of(k)) if k > 0 else np.zeros(batch)
        if i >= skip:
            counts[k] = counts.get(k, 0) + 1
        slot.update(drafts)
    n = sum(counts.values())
    return {k: v / n for k, v in sorted(counts.items())}


class Controller:
    """``AdaptiveSpeculativeParams`` + ``AdaptiveController``: slots by batch size and the step that runs.

    ``before_batch(b)`` -> the step count the batch runs (a switch when it differs from the running one);
    ``after_verify(accepted, b)`` -> the new step count when the slot moved. ``log`` receives SGLang's lines.
    """

    def __init__(
        self,
        config: AdaptiveConfig,
        initial_steps: int,
        cuda_graph_bs: Sequence[int] | None = None,
        log: Any = None,
    ) -> None:
        self.config = config
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None
        self.slots = [Slot(s, initial_steps) for s in config.slots]
        self.running = initial_steps
        self.log = log or (lambda _line: None)
        self.switches = 0

    def slot(self, batch_size: int) -> Slot:
        return self.slots[self.config.slot_index(batch_size, self.cuda_graph_bs)]

    def _activate(self, steps: int) -> None:
        if steps != self.running:
            self.log(SWITCH_LINE.format(old=self.running, new=steps, old_d=self.running + 1, new_d=steps + 1))
            self.running = steps
            self.switches += 1

    def before_batch(self, batch_size: int) -> int:
        self._activate(self.slot(batch_size).current)
        return self.running

    def after_verify(self, accepted_drafts: Sequence[float], batch_size: int) -> int | None:
        slot = self.slot(batch_size)
        old = slot.current
        new = slot.update(accepted_drafts)
        if new is not None:
            self.log(UPDATED_LINE.format(old=old, new=new, ema=slot.ema))
            self._activate(new)
        return new


__all__ = [
    "AdaptiveConfig",
    "AdaptiveConfigError",
    "CONFIG_FLAG",
    "Controller",
    "DEFAULT_CONFIG",
    "FLAG",
    "Slot",
    "SlotConfig",
    "config_of",
    "deeper_state",
    "effective",
    "load_config",
    "parse_config",
    "requested",
    "resolve",
    "steady_shares",
    "unsupported_reason",
]
