"""Search spaces: load and validate a YAML file, suggest candidates from an Optuna trial, apply SGLang's rules.

A space file::

    name: eagle3
    fixed:                          # flags every trial gets (model, draft model, tp size, attention backend)
      model-path: /models/llama-3.1-8b
      speculative-draft-model-path: /models/eagle3-llama-3.1-8b
      attention-backend: fa3
    parameters:                     # SGLang flag names, or environment variables (upper case)
      speculative-algorithm: {type: categorical, choices: [EAGLE3]}
      speculative-num-steps: {type: int, low: 1, high: 8}
      speculative-eagle-topk: {type: categorical, choices: [1, 2, 4, 8]}
      speculative-num-draft-tokens: {type: int, low: 2, high: 64, when: "topk > 1"}
      NCCL_PROTO: {type: categorical, choices: [unset, LL, LL128, Simple]}
    constraints:                    # user constraints on top of SGLang's own rules
      - "draft <= 32"

The baseline (no speculation, every other parameter at its default) is measured first (``baseline: false`` turns
that off); to let the sampler also search launches without speculation, list ``none`` among the algorithm's
choices. Every ``speculative-*`` parameter is conditional on speculation being on.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import expr
from .candidate import UNSET, Candidate
from .errors import ConfigError
from .sglang import flags as sgl

NONE_ALGO = "none"
FLAG_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
Scalar = bool | int | float | str | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntParam(_Strict):
    type: Literal["int"]
    low: int
    high: int
    step: int = 1
    log: bool = False
    when: str | None = None
    default: int | None = None

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        if self.step < 1:
            raise ValueError("step must be >= 1")
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("log scale needs low >= 1 and step 1")
        return self

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


class FloatParam(_Strict):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = None
    log: bool = False
    when: str | None = None
    default: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite numbers")
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        if self.step is not None and (not math.isfinite(self.step) or self.step <= 0):
            raise ValueError("step must be a positive number")
        if self.log and (self.low <= 0 or self.step is not None):
            raise ValueError("log scale needs low > 0 and no step")
        return self

    def values(self) -> list[float]:
        if self.step is None:
            return [self.low, (self.low + self.high) / 2, self.high]
        n = int(math.floor((self.high - self.low) / self.step + 1e-9))
        return [round(self.low + i * self.step, 10) for i in range(n + 1)]


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)
    when: str | None = None
    default: Scalar = None

    @field_validator("choices")
    @classmethod
    def _unique(cls, v: list[Scalar]) -> list[Scalar]:
        if len(set(map(repr, v))) != len(v):
            raise ValueError("choices must be unique")
        return v

    def values(self) -> list[Scalar]:
        return list(self.choices)


Param = IntParam | FloatParam | CategoricalParam


class SpaceModel(_Strict):
    name: str = Field(default="space", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str = ""
    fixed: dict[str, Scalar] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    parameters: dict[str, Param] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)
    baseline: bool = True
    architecture: str | None = None


@dataclass(frozen=True)
class Check:
    """One constraint evaluated on a candidate: violated when ``value > 0`` (Optuna's convention)."""

    name: str
    value: float
    reason: str = ""


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("IntParam", "FloatParam", "CategoricalParam") or str(part).startswith(
            ("int", "float", "categorical", "function-")
        ):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


class SearchSpace:
    """A validated search space."""

    def __init__(self, model: SpaceModel, source: str = "<space>") -> None:
        self.model = model
        self.source = source
        self.params: dict[str, Param] = dict(model.parameters)
        if self._has_spec_params() and sgl.ALGO not in self.params and sgl.ALGO not in model.fixed:
            self.params = {sgl.ALGO: CategoricalParam(type="categorical", choices=["EAGLE3"]), **self.params}
        elif sgl.ALGO in self.params:
            # The algorithm goes first: every speculative parameter depends on it.
            self.params = {
                sgl.ALGO: self.params[sgl.ALGO],
                **{k: v for k, v in self.params.items() if k != sgl.ALGO},
            }
        self._when = {}
        self._constraints = []
        self.warnings: list[str] = []  # names not in SGLang's flag table and not near one (see sglang.server_flags)
        self._validate()
        self._check_sglang_names()

    def _has_spec_params(self) -> bool:
        return any(k.startswith("speculative-") for k in self.params)

    # ----------------------------------------------------------------- validation
    def _err(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, file=self.source, key=key)

    def _validate(self) -> None:
        known: set[str] = set()
        for name in self.model.fixed:
            if not FLAG_NAME.match(name):
                raise self._err(
                    f"fixed.{name}",
                    "must be an SGLang flag name without dashes in front, "
                    "like 'model-path' (lower case words joined by '-')",
                )
        for name in self.model.env:
            if not ENV_NAME.match(name):
                raise self._err(f"env.{name}", "must be an environment variable name (upper case, digits, '_')")
        all_names = {expr.ident(n) for n in self.params} | {expr.ident(n) for n in self.model.fixed}
        for name, p in self.params.items():
            key = f"parameters.{name}"
            if not (FLAG_NAME.match(name) or ENV_NAME.match(name)):
                raise self._err(
                    key,
                    "must be an SGLang flag name ('speculative-num-steps') or an environment "
                    "variable name ('NCCL_PROTO')",
                )
            if name in self.model.fixed:
                raise self._err(key, "is also in 'fixed': a flag is either fixed or searched, not both")
            if name == sgl.ALGO and isinstance(p, CategoricalParam):
                for c in p.choices:
                    if str(c).lower() != NONE_ALGO and sgl.algorithm({sgl.ALGO: c}) not in sgl.KNOWN_ALGORITHMS:
                        raise self._err(
                            f"{key}.choices",
                            f"{c!r} is not an SGLang speculative algorithm; "
                            f"allowed: {', '.join(sgl.KNOWN_ALGORITHMS)} (or 'none')",
                        )
            if name in sgl.SPEC_TRIPLE and not isinstance(p, (IntParam, CategoricalParam)):
                raise self._err(key, "must be of type 'int' or 'categorical' (SGLang takes an integer)")
            if name in sgl.SPEC_TRIPLE:
                lowest = 2 if name == sgl.DRAFT else 1
                vals = p.values()
                bad = [v for v in vals if not isinstance(v, int) or isinstance(v, bool) or v < lowest]
                if bad:
                    raise self._err(key, f"values must be integers >= {lowest}; got {bad[0]!r}")
            if p.default is not None:
                if isinstance(p, CategoricalParam) and p.default not in p.choices:
                    raise self._err(f"{key}.default", f"must be one of the choices {p.choices}")
                if isinstance(p, (IntParam, FloatParam)) and not (p.low <= p.default <= p.high):
                    raise self._err(f"{key}.default", f"must be between low ({p.low}) and high ({p.high})")
            if p.when is not None:
                try:
                    tree = expr.compile_expr(p.when)
                except expr.ExprError as exc:
                    raise self._err(f"{key}.when", str(exc)) from None
                earlier = {expr.ident(n) for n in itertools.takewhile(lambda n: n != name, self.params)}
                earlier |= {expr.ident(n) for n in self.model.fixed}
                for ref in expr.names(tree):
                    if ref not in earlier:
                        raise self._err(
                            f"{key}.when",
                            f"refers to {ref!r}, which is not a parameter listed "
                            f"before {name!r} or a fixed flag; allowed: {', '.join(sorted(earlier)) or 'none'}",
                        )
                self._when[name] = tree
            known.add(name)
        for i, text in enumerate(self.model.constraints):
            try:
                tree = expr.compile_expr(text)
            except expr.ExprError as exc:
                raise self._err(f"constraints[{i}]", str(exc)) from None
            unknown = expr.names(tree) - all_names
            if unknown:
                raise self._err(
                    f"constraints[{i}]",
                    f"refers to unknown name {sorted(unknown)[0]!r}; allowed: "
                    f"{', '.join(sorted(all_names))} (and steps, topk, draft, algorithm)",
                )
            self._constraints.append((text, tree))

    def _check_sglang_names(self) -> None:
        """Every flag name against SGLang's flag table, every value against its allowed set (NCCL's included)."""
        from .sglang import server_flags

        named = [(f"fixed.{k}", k) for k in self.model.fixed]
        named += [(f"parameters.{k}", k) for k in self.params if FLAG_NAME.match(k)]
        for key, name in named:
            error, warning = server_flags.check_flag_name(name)
            if error:
                raise self._err(key, error)
            if warning:
                self.warnings.append(f"{self.source}: {key}: {warning}")
        values = [(f"fixed.{k}", k, v) for k, v in self.model.fixed.items()]
        values += [(f"env.{k}", k, v) for k, v in self.model.env.items()]
        for name, p in self.params.items():
            for i, v in enumerate(p.values() if isinstance(p, CategoricalParam) else []):
                values.append((f"parameters.{name}.choices[{i}]", name, v))
        for key, name, value in values:
            error = server_flags.check_value(name, value)
            if error:
                raise self._err(key, error)

    # ----------------------------------------------------------------- sampling
    def _active(self, name: str, values: Mapping[str, Any]) -> bool:
        if name != sgl.ALGO and name.startswith("speculative-"):
            if sgl.algorithm({sgl.ALGO: values.get(sgl.ALGO)}) is None:
                return False
        tree = self._when.get(name)
        if tree is None:
            return True
        scope = {expr.ident(k): v for k, v in {**self.model.fixed, **values}.items()}
        try:
            return bool(expr.evaluate(tree, scope))
        except expr.ExprError:
            return False  # refers to a parameter that is itself inactive

    def suggest(self, trial: Any) -> Candidate:
        """Ask an Optuna trial for values and build the candidate."""
        values: dict[str, Any] = {}
        for name, p in self.params.items():
            if not self._active(name, values):
                continue
            if isinstance(p, IntParam):
                values[name] = trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
            elif isinstance(p, FloatParam):
                values[name] = trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)
            else:
                values[name] = trial.suggest_categorical(name, p.choices)
        return self.candidate(values)

    def candidate(self, values: Mapping[str, Any]) -> Candidate:
        """The candidate for a mapping of parameter values (inactive parameters are ignored)."""
        flags: dict[str, Any] = dict(self.model.fixed)
        env: dict[str, str] = dict(self.model.env)
        active: dict[str, Any] = {}
        for name in self.params:
            if name in values and self._active(name, active):
                active[name] = values[name]
        for name, value in active.items():
            if ENV_NAME.match(name):
                env[name] = UNSET if value is None else str(value)
            elif name == sgl.ALGO and sgl.algorithm({sgl.ALGO: value}) is None:
                continue
            else:
                flags[name] = value
        if sgl.algorithm(flags) is None:
            flags = {k: v for k, v in flags.items() if not k.startswith("speculative-")}
        elif flags.get(sgl.STEPS) is not None and flags.get(sgl.DRAFT) is None and flags.get(sgl.TOPK) == 1:
            # SGLang wants all three or none; with topk 1 the draft-token count is steps + 1 anyway.
            flags[sgl.DRAFT] = int(flags[sgl.STEPS]) + 1
        return Candidate(flags=flags, env={k: v for k, v in env.items() if v != UNSET})

    def default_value(self, name: str) -> Any:
        """A parameter's default: its ``default`` key, else for a categorical 'unset'/false if offered, else its
        first choice; numeric parameters without a default have none (None)."""
        p = self.params[name]
        if p.default is not None:
            return p.default
        if isinstance(p, CategoricalParam):
            for neutral in (UNSET, False, None):
                if any(type(c) is type(neutral) and c == neutral for c in p.choices):
                    return neutral
            return p.choices[0]
        return None

    def baseline(self) -> Candidate:
        return self.candidate(self.baseline_params())

    def is_baseline(self, cand: Candidate) -> bool:
        """The baseline is no speculation with every other setting at its default: a launch without speculation
        but with other settings (NCCL, custom all-reduce) is a configuration like any other, scored against it."""
        arch = self.model.architecture
        return cand.is_baseline and cand.key(architecture=arch) == self.baseline().key(architecture=arch)

    def baseline_params(self) -> dict[str, Any]:
        """Parameter values of the baseline trial: no speculation, every other parameter at its default (NCCL
        unset, custom all-reduce on), so the gain over the baseline is the gain over an untuned launch."""
        out: dict[str, Any] = {sgl.ALGO: NONE_ALGO}
        for name in self.params:
            if name == sgl.ALGO or name.startswith("speculative-"):
                continue
            value = self.default_value(name)
            if value is not None or isinstance(self.params[name], CategoricalParam):
                out[name] = value
        return out

    def describe(self, cand: Candidate) -> str:
        """A short line: the speculative triple, env and every searched flag that is not speculative."""
        extra = [
            f"{k}={cand.flags[k]}"
            for k in self.params
            if not k.startswith("speculative-")
            and not ENV_NAME.match(k)
            and k in cand.flags
            and k != "disable-custom-all-reduce"
        ]
        return " ".join([cand.short(), *extra])

    def grid(self) -> Iterator[Candidate]:
        """Every distinct candidate of the space (inactive parameters collapse), in a stable order."""
        seen: set[str] = set()
        if self.model.baseline:
            base = self.baseline()
            seen.add(base.key(architecture=self.model.architecture))
            yield base

        def walk(i: int, names: list[str], values: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if i == len(names):
                yield dict(values)
                return
            name = names[i]
            if not self._active(name, values):
                yield from walk(i + 1, names, values)
                return
            for v in self.params[name].values():
                values[name] = v
                yield from walk(i + 1, names, values)
                del values[name]

        for values in walk(0, list(self.params), {}):
            cand = self.candidate(values)
            key = cand.key(architecture=self.model.architecture)
            if key not in seen:
                seen.add(key)
                yield cand

    # ----------------------------------------------------------------- rules
    def checks(self, cand: Candidate, *, gpu_sm: int = 90) -> list[Check]:
        """SGLang's start-up rules, its runtime tree limit, and the user's constraints, as Optuna constraints."""
        out: list[Check] = []
        violations = sgl.startup_violations(cand.flags, architecture=self.model.architecture, gpu_sm=gpu_sm)
        out.append(
            Check(
                "sglang_startup",
                float(len(violations)),
                "; ".join(f"{v.exc}: {v.message}".rstrip(": ") for v in violations),
            )
        )
        limit = 0.0
        reason = ""
        if not cand.is_baseline and sgl.algorithm(cand.flags) in sgl.EAGLE_FAMILY and not violations:
            steps, topk, draft = sgl.resolved_triple(cand.flags, architecture=self.model.architecture)
            excess = (draft - 1) - sgl.tree_limit(steps, topk)
            if excess > 0:
                limit = float(excess)
                reason = (
                    f"num_draft_tokens - 1 = {draft - 1} exceeds topk + (steps - 1) * topk^2 = "
                    f"{sgl.tree_limit(steps, topk)}: SGLang would fail at run time"
                )
        out.append(Check("sglang_tree_limit", limit, reason))
        if self._constraints:
            flags, _ = sgl.normalize(cand.flags, architecture=self.model.architecture)
            scope: dict[str, Any] = {expr.ident(k): v for k, v in flags.items()}
            scope.update({k: v for k, v in cand.env.items()})
            # a flag SGLang's normalisation dropped (e.g. --speculative-adaptive with a tree: SGLang falls back to
            # the static tree) is still what the space asked for, so the space's constraints can rule it out
            for k, v in cand.flags.items():
                scope.setdefault(expr.ident(k), v)
            for name in self.params:
                scope.setdefault(expr.ident(name), UNSET if ENV_NAME.match(name) else None)
            scope[expr.ident(sgl.ALGO)] = sgl.algorithm(cand.flags) or NONE_ALGO
            failed = []
            for text, tree in self._constraints:
                try:
                    ok = bool(expr.evaluate(tree, scope))
                except expr.ExprError:
                    ok = True  # refers to a parameter the candidate does not use: not applicable
                if not ok:
                    failed.append(text)
            out.append(Check("user", float(len(failed)), "; ".join(f"violates {t!r}" for t in failed)))
        return out


def parse_space(data: Any, source: str = "<space>") -> SearchSpace:
    if data is None or data == {}:
        raise ConfigError(
            "is empty: a space needs its parameters (and usually fixed flags)", file=source, key="parameters"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            "must be a YAML mapping with keys name, fixed, env, parameters, constraints, baseline", file=source
        )
    try:
        model = SpaceModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = "unknown key; allowed: " + ", ".join(_allowed_keys(first["loc"]))
        elif first["type"] == "union_tag_invalid" or "type" in str(first.get("loc", ())[-1:]):
            msg = f"{msg} (allowed types: int, float, categorical)"
        raise ConfigError(msg, file=source, key=_loc(first["loc"])) from None
    return SearchSpace(model, source)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    if len(loc) <= 1:
        return list(SpaceModel.model_fields)
    for cls in (IntParam, FloatParam, CategoricalParam):
        if cls.__name__ in map(str, loc) or str(loc[-2]).startswith(cls.__name__.replace("Param", "").lower()):
            return list(cls.model_fields)
    return sorted(set(IntParam.model_fields) | set(FloatParam.model_fields) | set(CategoricalParam.model_fields))


#: The project's own spaces, found from any working directory (``search_spaces/demo.yaml`` is the default).
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def resolve_space_path(path: str | Path) -> Path:
    """A relative path that is not there is looked up in the project (``search_spaces/demo.yaml`` from another
    directory) and then among the project's spaces by file name."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    for candidate in (PROJECT_ROOT / p, PROJECT_ROOT / "search_spaces" / p.name):
        if candidate.exists():
            return candidate
    return p


def load_space(path: str | Path) -> SearchSpace:
    """Load a search-space YAML file; every problem is a ConfigError naming the file and key."""
    p = resolve_space_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot be read ({exc})", file=str(p)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"is not valid YAML{where}", file=str(p)) from None
    return parse_space(data, str(p))
