"""SGLang's adaptive speculation as the search model sees it: a mixture of topk-1 chains, not a setting.

A server launched with ``--speculative-adaptive`` runs, at a given batch, the step counts of that batch's slot and
moves between them by the acceptance it sees (``optimizer.sglang.adaptive``). Its throughput is the mixture of
those chains over its verify steps: ``sum f_k L_k / sum f_k t_k`` (times the batch), with ``f_k`` the share of
verify steps at k steps and ``L_k``, ``t_k`` the accept length and step time the model predicts for the chain of k
steps (0 steps: one token per verify, the verify path's fixed cost still paid).

Which chains run, and how often, follows from acceptance alone (SGLang's rule never looks at a step's cost): the
slot's own rule (:func:`optimizer.sglang.adaptive.steady_shares`) is run on accepted drafts drawn from the model's
accept curve, with ``P(a >= m) = L(m) - L(m - 1)``: a chain of m steps accepts its m-th draft as often as that
draft adds to the shorter chain's accept length. The shares are taken at the posterior mean of the accept curve;
the mixture's draws carry each chain's uncertainty. So one launch of a chain teaches the model what adaptive mode
would do with it, and an adaptive launch, once measured, teaches only what the mixture does not explain (the extra
runtime states' overhead) through the flag's own setting effect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..sglang import adaptive
from ..sglang import flags as rules
from .candidates import CandidateTable

#: verify steps the slot's rule is run for (the first 50 left out), enough for shares to a few per cent
RULE_BATCHES = 600


@dataclass(frozen=True)
class AdaptiveRow:
    """A tree row that runs adaptive mode in the adaptive columns: its slot at the study's batch and the launch's
    step count (where the slot starts when it is one of its candidates)."""

    slot: adaptive.SlotConfig
    initial_steps: int


@dataclass(frozen=True)
class Layout:
    columns: np.ndarray  # (n_other,) 1.0 where the settings turn adaptive mode on
    rows: dict[int, AdaptiveRow]  # tree row -> its slot, for the rows adaptive mode runs with

    @property
    def chains(self) -> list[int]:
        """Every step count some row's slot can run."""
        return sorted({k for r in self.rows.values() for k in r.slot.candidate_steps})

    def is_adaptive(self, i: int, j: int) -> bool:
        return bool(self.columns[j]) and i in self.rows


def layout(table: CandidateTable, concurrency: int) -> Layout:
    """Where adaptive mode runs in the table (columns with the flag on, topk-1 rows SGLang accepts it for) and each
    row's slot at this batch. SGLang's fallback cases (a tree, another algorithm) are static: no row."""
    key = ("adaptive-layout", int(concurrency))
    hit = table.memo.get(key)
    if hit is not None:
        return hit
    n_other = len(table.other_values)
    fixed_on = _truthy(table.space.model.fixed.get(adaptive.FLAG))
    if adaptive.FLAG in table.other_names:
        k = table.other_names.index(adaptive.FLAG)
        columns = np.array([_truthy(v[k]) for v in table.other_values], dtype=float)
    else:
        columns = np.full(n_other, 1.0 if fixed_on else 0.0)
    rows: dict[int, AdaptiveRow] = {}
    if columns.any():
        cols = np.flatnonzero(columns)
        for i in np.flatnonzero(table.spec & (table.trees[:, 1] == 1)):
            j = next((int(c) for c in cols if table.valid[i, c]), None)
            if j is None:
                continue
            flags = table.space.candidate(table.params(int(i), j)).flags
            cfg = rules.adaptive_config(flags)
            if cfg is None:
                continue
            rows[int(i)] = AdaptiveRow(cfg.slot_for(max(1, int(concurrency))), int(table.trees[i, 0]))
    out = Layout(columns, rows)
    table.memo[key] = out
    return out


def shares(row: AdaptiveRow, accept_length: Callable[[int], float], batch: int) -> dict[int, float]:
    """The share of verify steps at each step count once the slot's rule has settled, acceptance drawn from the
    accept curve ``accept_length(k)`` (the chain of k steps)."""
    curve = [1.0] + [max(1.0, accept_length(k)) for k in range(1, max(row.slot.candidate_steps) + 1)]
    survival = np.minimum.accumulate(np.clip(np.diff(curve), 0.0, 1.0))  # P(a >= m), m = 1..max

    def pmf_of(k: int) -> np.ndarray:
        s = np.concatenate([[1.0], survival[:k], [0.0]])
        p = np.maximum(s[:-1] - s[1:], 0.0)
        return p / p.sum()

    slot = adaptive.Slot(row.slot, row.initial_steps)
    seed = hash((row.slot.candidate_steps, row.initial_steps, batch)) % (2**32)
    return adaptive.steady_shares(slot, pmf_of, max(1, batch), np.random.default_rng(seed), RULE_BATCHES)


def _truthy(v: object) -> bool:
    return adaptive.requested({adaptive.FLAG: v})


__all__ = ["AdaptiveRow", "Layout", "layout", "shares"]
