"""Where launches fail, learned from the failures seen so far (host faults never count).

Failures are explained by hypotheses with prior weights; launches that served rule hypotheses out, and a
candidate's chance of failing is the posterior weight of the hypotheses that cover it.
- Out of memory: one boundary on the draft tree's size (steps x topk + draft tokens), anywhere between the
  smallest tree and the smallest tree that ran out of memory, and above every tree that served. One failure at a
  huge tree therefore also warns, less strongly, about large trees below it.
- Any other failure (graph capture, crash while serving, NCCL hang), per failed launch: a region of trees at least
  as wide (topk) and as full (draft tokens) as some threshold at or below the failed tree's; or one of the failed
  launch's non-default settings alone (``NCCL_ALGO=Tree``) or two of them together (``LL128`` with ``Tree``); or
  the configuration itself. A crash while serving is not ruled out by launches of the same trees that served (they
  may have stopped short of the request that crashes).
The chance a candidate boots and serves is the product over these explanations, so near neighbours of a failure
are not launched blindly, while a setting or region that served once is never blamed again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .candidates import CandidateTable

NO_BOUNDARY = 0.3  # prior chance that no tree of the space runs out of memory
BLAME = 0.97  # how sure a hypothesis that covers a candidate makes us that it fails
#: prior weight of each family of explanations of a failure other than out-of-memory
TREE_FAMILY, SETTING_FAMILY, EXACT_FAMILY = 0.45, 0.45, 0.10


@dataclass
class Failure:
    i: int
    j: int
    kind: str


def feasible_probability(table: CandidateTable, failures: list[Failure], served: list[tuple[int, int]]) -> np.ndarray:
    """(n_tree, n_other) probability that each candidate boots and serves."""
    n_tree, n_other = table.valid.shape
    p = np.ones((n_tree, n_other))
    spec = table.spec
    steps, topk, draft = table.trees[:, 0], table.trees[:, 1], table.trees[:, 2]
    size = steps * topk + draft
    served_trees = np.array([i for i, _ in served], dtype=int)
    served_sets = np.array([j for _, j in served], dtype=int)
    ooms = [f for f in failures if f.kind == "oom" and spec[f.i]]
    p *= (1.0 - BLAME * _oom_fail_probability(size, spec, ooms, served_trees))[:, None]
    settings = np.array(table.other_values, dtype=object).reshape(n_other, -1)
    for f in failures:
        if f.kind == "oom" and spec[f.i]:
            continue
        share = np.zeros((n_tree, n_other))
        weight = 0.0
        if spec[f.i]:
            regions = []
            for t in np.unique(topk[spec & (topk <= topk[f.i])]):
                for d in np.unique(draft[spec & (draft <= draft[f.i])]):
                    region = spec & (topk >= t) & (draft >= d)
                    # a launch that served a few dozen requests does not prove its tree never crashes mid-serving
                    if f.kind == "crash_serving" or not region[served_trees].any():
                        regions.append(region)
            if regions:
                share += TREE_FAMILY * np.mean(regions, axis=0)[:, None]
                weight += TREE_FAMILY
        # one non-default setting alone, or two together (LL128 with Tree), unless a launch with it served
        singles = [
            settings[:, k] == settings[f.j, k]
            for k, default in enumerate(table.default_other)
            if settings[f.j, k] != default
        ]
        combos = singles + [a & b for n, a in enumerate(singles) for b in singles[n + 1 :]]
        blamed = [mask for mask in combos if not mask[served_sets].any()]
        if blamed:
            share += SETTING_FAMILY * np.mean(blamed, axis=0)[None, :]
            weight += SETTING_FAMILY
        share[f.i, f.j] += EXACT_FAMILY
        weight += EXACT_FAMILY
        p *= 1.0 - BLAME * share / weight
    return p


def _oom_fail_probability(
    size: np.ndarray, spec: np.ndarray, ooms: list[Failure], served_trees: np.ndarray
) -> np.ndarray:
    """P(size >= boundary) per tree. Prior on the boundary: over the tree sizes the space holds, in proportion to
    the size (memory runs out at large trees more often than at small ones), with NO_BOUNDARY left for a machine
    where every tree fits. Before any evidence this already discounts the largest trees a little."""
    levels = np.unique(size[spec])
    if levels.size == 0:
        return np.zeros(len(size))
    post = (1.0 - NO_BOUNDARY) * levels / levels.sum()
    beyond = NO_BOUNDARY
    if ooms:
        post[levels > min(size[f.i] for f in ooms)] = 0.0
        beyond = 0.0
    served_spec = served_trees[spec[served_trees]] if served_trees.size else served_trees
    if served_spec.size:
        post[levels <= size[served_spec].max()] = 0.0
    total = post.sum() + beyond
    if total == 0:  # inconsistent (a tree served above one that ran out): blame only the failed sizes
        return np.isin(size, [size[f.i] for f in ooms]).astype(float) * spec
    cdf = np.cumsum(post) / total
    idx = np.searchsorted(levels, size, side="right") - 1
    return np.where(spec & (idx >= 0), cdf[np.clip(idx, 0, None)], 0.0)
