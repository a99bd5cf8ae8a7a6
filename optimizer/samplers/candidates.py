"""Every configuration of a search space as a table the search can score at once.

A configuration is a draft tree (algorithm, steps, topk, draft tokens as SGLang will run them) times a setting of
the other parameters (custom all-reduce, NCCL variables, anything else the space searches). The two parts are
enumerated separately, so a space of 50,000 configurations is ~500 trees x ~100 settings, and the search scores
them as two small arrays. A configuration SGLang would reject (its start-up rules, the tree limit, the space's own
constraints) is left out; a constraint that mentions a non-tree parameter is checked per configuration.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial

from .. import expr
from ..sglang import flags as rules
from ..space import UNSET, SearchSpace
from ..study import records as R

TREE_PARAMS = (rules.ALGO, rules.STEPS, rules.TOPK, rules.DRAFT)
#: SGLang's custom all-reduce switch; with it and the NCCL variables, the settings that act only on communication
CAR = "disable-custom-all-reduce"


def acts_on_communication(name: str) -> bool:
    """Custom all-reduce and the NCCL variables change only how the GPUs talk to each other."""
    return name == CAR or name.startswith("NCCL_")


@dataclass
class CandidateTable:
    space: SearchSpace
    tree_values: list[dict[str, Any]]  # the tree parameters' values as Optuna suggests them (active ones only)
    algos: list[str | None]  # the algorithm SGLang runs, None = no speculation
    trees: np.ndarray  # (n_tree, 3) resolved steps, topk, draft tokens (0, 1, 1 without speculation)
    other_names: list[str]
    other_values: list[tuple[Any, ...]]  # one tuple per setting, in other_names order
    valid: np.ndarray  # (n_tree, n_other) bool: passes SGLang's rules and the space's constraints
    default_other: tuple[Any, ...] = field(default_factory=tuple)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)  # what is derived from it once

    def idle_settings(self, tp: int, pcie_only: bool) -> dict[str, Any]:
        """The settings whose other levels run the same server here, each with its default: on one GPU every
        communication setting (there is no all-reduce); on a PCIe-only box custom all-reduce (SGLang has disabled
        it itself). Launching their other levels repeats a server already measured."""
        defaults = dict(zip(self.other_names, self.default_other))
        if tp <= 1:
            return {n: v for n, v in defaults.items() if acts_on_communication(n)}
        if pcie_only and CAR in defaults:
            return {CAR: defaults[CAR]}
        return {}

    def params(self, i: int, j: int) -> dict[str, Any]:
        out = dict(self.tree_values[i])
        out.update(zip(self.other_names, self.other_values[j]))
        return out

    def tree_key(self, flags: dict[str, Any]) -> tuple:
        algo = rules.algorithm(flags)
        if algo is None:
            return (None, 0, 1, 1)
        return (algo, *rules.resolved_triple(flags, architecture=self.space.model.architecture))

    def locate_trial(self, trial: FrozenTrial) -> tuple[int, int] | None:
        """Row and column of a trial the driver recorded (its flags; the baseline's parameter values), or None."""
        ua = trial.user_attrs
        if ua.get(R.FLAGS) is None:
            return None
        params = ua.get(R.BASELINE_PARAMS) if ua.get(R.BASELINE) else trial.params
        return self.locate(dict(ua[R.FLAGS]), dict(params or {}))

    def locate(self, flags: dict[str, Any], params: dict[str, Any]) -> tuple[int, int] | None:
        """Row and column of a launched configuration (from its flags and parameter values), or None."""
        key = self.tree_key(flags)
        i = self._tree_index.get(key)
        other = tuple(_norm(params.get(n, self.space.default_value(n))) for n in self.other_names)
        j = self._other_index.get(other)
        if i is None or j is None:
            return None
        return i, j

    def __post_init__(self) -> None:
        self.spec = np.array([a is not None for a in self.algos])  # (n_tree,) True where speculation is on
        self._tree_index = {}
        for i, (a, t) in enumerate(zip(self.algos, self.trees)):
            self._tree_index.setdefault((a, *map(int, t)) if a else (None, 0, 1, 1), i)
        self._other_index = {tuple(_norm(v) for v in vals): j for j, vals in enumerate(self.other_values)}


def _norm(v: Any) -> Any:
    if v is None:
        return UNSET
    return v


#: (id of the space, gpu_sm) -> (the space, its table): holding the space keeps its id from being reused by another
#: space while its table is cached (a freed space's id can come back on a new one in the same process)
_CACHE: dict[tuple, tuple[SearchSpace, CandidateTable]] = {}


def build_table(space: SearchSpace, *, gpu_sm: int = 90) -> CandidateTable:
    key = (id(space), gpu_sm)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not space:
        _CACHE.clear()  # one space per process at a time; keep memory flat in long benchmark runs
        hit = _CACHE[key] = (space, _build(space, gpu_sm))
    return hit[1]


def _walk(space: SearchSpace, names: list[str], values: dict[str, Any], i: int = 0):
    if i == len(names):
        yield dict(values)
        return
    name = names[i]
    if not space._active(name, values):
        yield from _walk(space, names, values, i + 1)
        return
    for v in space.params[name].values():
        values[name] = v
        yield from _walk(space, names, values, i + 1)
        del values[name]


def _build(space: SearchSpace, gpu_sm: int) -> CandidateTable:
    tree_names = [n for n in space.params if n in TREE_PARAMS]
    other_names = [n for n in space.params if n not in TREE_PARAMS]
    default_other = {n: space.default_value(n) for n in other_names}
    for n in other_names:
        if default_other[n] is None:
            p = space.params[n]
            default_other[n] = p.values()[0]
    # constraints that mention a non-tree parameter must be checked per configuration
    other_idents = {expr.ident(n) for n in other_names}
    per_config = any(expr.names(tree) & other_idents for _, tree in space._constraints) or any(
        n in space._when for n in other_names
    )
    arch = space.model.architecture
    tree_values, algos, trees, seen = [], [], [], set()
    if space.model.baseline:
        base = {k: v for k, v in space.baseline_params().items() if k in TREE_PARAMS}
        tree_values.append(base)
        algos.append(None)
        trees.append((0, 1, 1))
        seen.add((None, 0, 1, 1))
    for vals in _walk(space, tree_names, {}):
        cand = space.candidate({**vals, **default_other})
        algo = rules.algorithm(cand.flags)
        tkey = (None, 0, 1, 1) if algo is None else (algo, *rules.resolved_triple(cand.flags, architecture=arch))
        if tkey in seen:
            continue
        if not per_config and any(c.value > 0 for c in space.checks(cand, gpu_sm=gpu_sm)):
            continue
        seen.add(tkey)
        tree_values.append({k: v for k, v in vals.items() if k in TREE_PARAMS})
        algos.append(algo)
        trees.append(tkey[1:] if algo else (0, 1, 1))
    other_lists = [space.params[n].values() for n in other_names]
    other_values = [tuple(_norm(v) for v in combo) for combo in itertools.product(*other_lists)]
    valid = np.ones((len(tree_values), len(other_values)), dtype=bool)
    default_j = other_values.index(tuple(_norm(default_other[n]) for n in other_names))
    for i, algo in enumerate(algos):
        if algo is None:  # the baseline is measured with every other parameter at its default, nothing else
            valid[i] = False
            valid[i, default_j] = True
    if per_config:
        for i, tv in enumerate(tree_values):
            for j, ov in enumerate(other_values):
                if not valid[i, j]:
                    continue
                cand = space.candidate({**tv, **dict(zip(other_names, ov))})
                valid[i, j] = not any(c.value > 0 for c in space.checks(cand, gpu_sm=gpu_sm))
    return CandidateTable(
        space=space,
        tree_values=tree_values,
        algos=algos,
        trees=np.array(trees, dtype=float).reshape(-1, 3),
        other_names=other_names,
        other_values=other_values,
        valid=valid,
        default_other=tuple(_norm(default_other[n]) for n in other_names),
    )


__all__ = ["CandidateTable", "build_table", "TREE_PARAMS"]
