"""Where launches fail, learned from the failures seen so far (host faults never count).

Failures are explained by hypotheses with prior weights; launches that served rule hypotheses out, and a
candidate's chance of failing is the posterior weight of the hypotheses that cover it.
- Out of memory: one boundary on the draft tree's size (steps x topk + draft tokens), anywhere between the
  smallest tree and the smallest tree that ran out of memory, and above every tree that served. One failure at a
  huge tree therefore also warns, less strongly, about large trees below it. Where a tree served above the size
  of one that ran out, the boundary is sought on the draft tokens alone, then on steps x topk (``OOM_SIZES``).
  Whatever the boundary, a tree at least as large in steps, topk and draft tokens as one that ran out fails:
  memory grows with each of them.
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
#: the sizes a memory boundary may lie on, in turn: the draft tree's nodes and tokens, then the draft tokens alone
#: (the verify pass's memory), then steps x topk (the drafter's)
OOM_SIZES = (
    lambda trees: trees[:, 0] * trees[:, 1] + trees[:, 2],
    lambda trees: trees[:, 2],
    lambda trees: trees[:, 0] * trees[:, 1],
)
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
    topk, draft = table.trees[:, 1], table.trees[:, 2]
    served_trees = np.array([i for i, _ in served], dtype=int)
    served_sets = np.array([j for _, j in served], dtype=int)
    ooms = [f for f in failures if f.kind == "oom" and spec[f.i]]
    p *= (1.0 - BLAME * _oom_fail_probability(table.trees, spec, ooms, served_trees))[:, None]
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
    trees: np.ndarray, spec: np.ndarray, ooms: list[Failure], served_trees: np.ndarray
) -> np.ndarray:
    """P(size >= boundary) per tree, for the first of ``OOM_SIZES`` the launches do not contradict (module doc),
    and 1 for a tree at least as large in steps, topk and draft tokens as one that ran out (memory grows with each
    of them, whatever the boundary's form)."""
    dominates = np.any([np.all(trees >= trees[f.i], axis=1) for f in ooms], axis=0) if ooms else np.zeros(len(trees))
    for measure in OOM_SIZES:
        p = _boundary_probability(measure(trees), spec, ooms, served_trees)
        if p is not None:
            return np.maximum(p, dominates * spec)
    return dominates.astype(float) * spec


def _boundary_probability(
    size: np.ndarray, spec: np.ndarray, ooms: list[Failure], served_trees: np.ndarray
) -> np.ndarray | None:
    """P(size >= boundary) per tree, or None where a tree served above the size of one that ran out. Prior on the
    boundary: over the sizes the space holds, in proportion to the size (memory runs out at large trees more often
    than at small ones), with NO_BOUNDARY left for a machine where every tree fits. Before any evidence this
    already discounts the largest trees a little."""
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
    if total == 0:
        return None
    cdf = np.cumsum(post) / total
    idx = np.searchsorted(levels, size, side="right") - 1
    return np.where(spec & (idx >= 0), cdf[np.clip(idx, 0, None)], 0.0)
