"""The study definition: one YAML file and/or CLI flags, validated at the edge.

::

    study: llama-eagle3
    space: search_spaces/eagle3.yaml
    server:
      command: [python3, -m, sglang.launch_server]      # default: the bundled simulator
      boot_timeout_s: 1800
      dist_init_timeout_s: 300                           # a NCCL init hang ends here, not at the boot timeout
    hosts: hosts.yaml                                    # default: one local host
    workload: {concurrency: 1, max_tokens: 256, chunks: 4, requests_per_chunk: 8}
    budget: {trials: 30, time_s: 28800, stop_below_gain_pct: 2.0}
    sampler: {name: tpe, seed: 0}
    pruner: {name: wilcoxon}
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError
from .loadgen.workload import Workload
from .objective import Limit, Objective, Plan

SIM_PROFILE_DEFAULT = "llama-3.1-8b-h100"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchBootConfig(_Strict):
    """The cheaper boot used during the search only (``optimizer/boot.py``, docs/boot.md). The confirmation and the
    exported files use the production flags. ``server.search_boot: false`` turns it off; ``true`` is the default."""

    enabled: bool = True
    #: Decode CUDA-graph batch sizes: ``reachable`` captures SGLang's own sizes up to the benchmark's highest
    #: concurrency (every batch the benchmark makes pads to the size production pads it to); ``levels`` captures
    #: only the size each load level pads to (the issue's ``--cuda-graph-bs-decode 1 16``: cheaper, and a batch in a
    #: chunk's tail pads further than in production); ``off`` leaves SGLang's list.
    graph_batch_sizes: Literal["reachable", "levels", "off"] = "reachable"
    #: ``--skip-server-warmup``: the benchmark sends its own unmeasured warm-up requests anyway.
    skip_warmup: bool = True
    #: SIGKILL the group once the scheduler has exited, instead of waiting out SGLang's 5 s crash-diagnostics sleep.
    fast_stop: bool = True
    #: One JIT cache directory per host shared by every launch (Triton, TorchInductor, DeepGEMM, FlashInfer, CUDA's
    #: PTX cache); ``~`` is the host's home. Null: leave the caches where the host's environment puts them.
    jit_cache_dir: str | None = "~/.cache/sglang-spec-optimizer/jit"


class ServerConfig(_Strict):
    #: The server command before the candidate's flags. ``{python}`` is the host's Python. Default: the simulator.
    command: list[str] = Field(
        default_factory=lambda: [
            "{python}",
            "-m",
            "optimizer.sim",
            "--sim-profile",
            SIM_PROFILE_DEFAULT,
            "--sim-time-scale",
            "0.003",
        ],
        min_length=1,
    )
    #: Extra flags for every trial (e.g. --enable-metrics); the space's ``fixed`` flags come on top.
    extra_args: list[str] = Field(default_factory=list)
    boot_timeout_s: float = Field(default=1800.0, gt=0)
    #: A boot that began the distributed init this long ago and never ended it is a hang (NCCL init logs nothing
    #: more): it is stopped then rather than at ``boot_timeout_s``. Null: only ``boot_timeout_s``.
    dist_init_timeout_s: float | None = Field(default=300.0, gt=0)
    poll_s: float = Field(default=0.25, gt=0, le=10)
    stop_timeout_s: float = Field(default=30.0, gt=0)
    #: Repeat the baseline at the end to measure drift? Off by default (each restart is expensive).
    env: dict[str, str] = Field(default_factory=dict)
    #: The cheaper search boot (``true``/``false`` or its settings): during the search only.
    search_boot: SearchBootConfig = Field(default_factory=SearchBootConfig)

    @field_validator("search_boot", mode="before")
    @classmethod
    def _search_boot_switch(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return {"enabled": v}
        return v

    @property
    def is_simulator(self) -> bool:
        return "optimizer.sim" in self.command


#: The search stops by itself once another launch is expected to gain less than this (per cent of the best).
STOP_BELOW_GAIN_PCT = 2.0


class BudgetConfig(_Strict):
    """``trials`` and ``time_s`` are ceilings; with the structured sampler the search stops before them once the
    model expects less than ``stop_below_gain_pct`` per cent from the best configuration left (null: never)."""

    trials: int = Field(default=12, ge=1, le=100000)
    time_s: float | None = Field(default=None, gt=0)
    stop_below_gain_pct: float | None = STOP_BELOW_GAIN_PCT

    @field_validator("stop_below_gain_pct", mode="before")
    @classmethod
    def _a_per_cent(cls, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 100:
            raise ValueError(
                f"must be a per cent above 0 and below 100 (2.0 means: stop once another launch is expected to gain "
                f"less than 2 %), or null to spend the whole budget; got {v!r}"
            )
        return float(v)


class SamplerConfig(_Strict):
    name: Literal["structured", "tpe", "random", "tpe-plain"] = "structured"
    seed: int = 0
    n_startup_trials: int = Field(default=4, ge=0)
    #: structured sampler only, as a fraction (0.02 = 2 %): overrides ``budget.stop_below_gain_pct``, the study
    #: file's place for it (stop once the best expected gain of any configuration left has been below it for
    #: CONFIDENT_ASKS asks in a row); None = take ``budget.stop_below_gain_pct``
    stop_below_gain: float | None = Field(default=None, gt=0, lt=1)
    #: structured sampler only: learn how much the communication settings matter instead of assuming they matter a
    #: little (see optimizer/samplers/throughput_model.py). "auto": while a launch's log has shown that SGLang found
    #: more than two GPUs without NVLink (PCIe-only: NCCL carries every all-reduce, and its protocol can change the
    #: verify pass by a third) and speculation at the default settings measured slower than no speculation;
    #: true / false: always / never (where the settings matter little it costs restarts).
    adaptive_settings: bool | Literal["auto"] = "auto"

    @field_validator("adaptive_settings", mode="before")
    @classmethod
    def _true_false_or_auto(cls, v: Any) -> Any:
        if v is True or v is False or v == "auto":
            return v
        raise ValueError(f"must be true, false or auto, not {v!r}")


class PrunerConfig(_Strict):
    name: Literal["ratio", "wilcoxon", "median", "none"] = "ratio"
    p_threshold: float = Field(default=0.1, gt=0, lt=1)
    n_startup_steps: int = Field(default=1, ge=0)
    n_startup_trials: int = Field(default=2, ge=0)
    #: Only prune a trial that is worse than the best by at least this fraction (guards against noise).
    min_gap: float = Field(default=0.02, ge=0, lt=1)
    #: One sigma of the noise between launches (relative) the ratio pruner assumes until the study has measured
    #: it from relaunches (a confirmation): 0 = within-launch noise only. Noisy machines: 0.05-0.15.
    launch_noise: float = Field(default=0.0, ge=0, lt=1)


class ConfirmConfig(_Strict):
    """After the study: relaunch the baseline and the ``top`` best configurations ``rounds`` times each,
    interleaved, and export the winner that holds up (0 rounds: off). These launches are not in budget.trials."""

    #: the most rounds (a ceiling when ``sequential``)
    rounds: int = Field(default=0, ge=0, le=100)
    top: int = Field(default=2, ge=1, le=20)
    #: Stop after the round that decides the verdict at 95 % (a significant winner, equivalence within
    #: ``margin_pct``, or no gain worth it), count the search's own launches, relaunch only configurations the data
    #: cannot already separate (``optimizer/confirm.py``); false: every round relaunches every configuration.
    sequential: bool = True
    #: Sequential only: once the search will ask for no more launches while its last ones still run, hosts they
    #: leave idle relaunch the configurations the confirmation will hold (the search's answer, the runners-up, the
    #: baseline; each once), and the confirmation counts those relaunches (``optimizer/study/relaunch.py``).
    start_early: bool = True
    #: configurations within this many per cent are equivalent (the cheaper is exported)
    margin_pct: float = Field(default=2.0, gt=0, lt=50)
    #: Relaunch the baseline this many times right after it completes, so the pruner knows the noise between
    #: launches from early on (each is one more restart, not in budget.trials; 0: only a confirmation measures it).
    baseline_relaunches: int = Field(default=0, ge=0, le=20)


class StudyConfig(_Strict):
    study: str = Field(default="demo", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    storage: str | None = None
    studies_dir: str = "studies"
    space: str = "search_spaces/demo.yaml"
    server: ServerConfig = Field(default_factory=ServerConfig)
    hosts: str | None = None
    workload: Workload = Field(default_factory=Workload)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    pruner: PrunerConfig = Field(default_factory=PrunerConfig)
    confirm: ConfirmConfig = Field(default_factory=ConfirmConfig)
    #: Parameter values to measure right after the baseline (e.g. today's production launch), in order.
    initial: list[dict[str, Any]] = Field(default_factory=list)
    #: Launch a candidate equal (after SGLang's normalisation) to a measured one again? No by default.
    dedup: bool = True
    #: Check SGLang's start-up rules before launching (saves ~21 s of imports per bad candidate on real hosts).
    precheck: bool = True
    #: How a configuration that cannot run is told to Optuna: as a constraint violation (the sampler learns to
    #: avoid it) or as a plain FAIL (what a hand-written loop does; TPE then ignores it and may suggest it again).
    infeasible_as: Literal["constraint", "fail"] = "constraint"
    gpu_sm: int = 90
    #: With several load levels: one level's tok/s or a weighted aggregate (``optimizer/objective.py``).
    objective: Objective = Field(default_factory=Objective)
    #: Latency limits (p99 TTFT / ITL, ms), for every level or per level: a configuration that breaks them runs
    #: but cannot be the best.
    limits: dict[int | Literal["all"], Limit] = Field(default_factory=dict)

    @field_validator("limits", mode="before")
    @classmethod
    def _limits_for_all(cls, v: Any) -> Any:
        # ``limits: {itl_p99_ms: 30}`` is shorthand for every level (and may sit next to per-level entries).
        if isinstance(v, dict):
            shared = {k: x for k, x in v.items() if k in Limit.model_fields}
            if shared:
                v = {k: x for k, x in v.items() if k not in shared}
                v["all"] = {**(v.get("all") or {}), **shared}
            for k in v:
                if isinstance(k, str) and k != "all" and not k.isdigit():
                    raise ValueError(
                        f"unknown key {k!r}; allowed: {', '.join(Limit.model_fields)} (for every level), "
                        "or a level number or 'all' mapping to them"
                    )
        return v

    @field_validator("study")
    @classmethod
    def _one_path_component(cls, v: str) -> str:
        # The name is a directory under studies_dir: '.' or '..' would write the study's files elsewhere.
        if v.strip(".") == "":
            raise ValueError(f"{v!r} is not a study name: use letters, digits, '_', '-' or '.' (not only dots)")
        return v

    def plan(self) -> Plan:
        return Plan(self.workload.levels, self.objective, self.limits, self.workload.chunks)

    @property
    def study_dir(self) -> Path:
        return Path(self.studies_dir) / self.study

    @property
    def storage_url(self) -> str:
        return self.storage or str(self.study_dir / "journal.log")


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")


def _check_levels(cfg: StudyConfig, source: str) -> StudyConfig:
    """The objective and the limits may only name levels the workload measures."""
    levels = cfg.workload.levels
    allowed = f"the workload's levels are {levels}"
    o = cfg.objective
    if o.level is not None and o.level not in levels:
        raise ConfigError(f"{o.level} is not a measured level; {allowed}", file=source, key="objective.level")
    for c in o.weights or {}:
        if c not in levels:
            raise ConfigError(f"{c} is not a measured level; {allowed}", file=source, key=f"objective.weights.{c}")
    for c in cfg.limits:
        if c != "all" and c not in levels:
            raise ConfigError(f"{c} is not a measured level; {allowed} (or use all)", file=source, key=f"limits.{c}")
    if o.pareto and cfg.pruner.name != "none":
        cfg.pruner.name = "none"  # a trade-off study measures every configuration in full (objective.pareto)
    return cfg


def parse_study(data: Any, source: str = "<study>") -> StudyConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("must be a YAML mapping", file=source)
    try:
        return _check_levels(StudyConfig.model_validate(data), source)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            parent: Any = StudyConfig
            for part in first["loc"][:-1]:
                field = getattr(parent, "model_fields", {}).get(part)
                parent = field.annotation if field is not None else parent
            allowed = ", ".join(getattr(parent, "model_fields", {}))
            msg = f"unknown key; allowed: {allowed}"
        raise ConfigError(msg, file=source, key=_loc(first["loc"])) from None


def load_study(path: str | Path | None, overrides: dict[str, Any] | None = None) -> StudyConfig:
    """Load a study file (or defaults), then apply dotted overrides such as ``{"budget.trials": 20}``."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("file not found", file=source) from None
        except yaml.YAMLError:
            raise ConfigError("is not valid YAML", file=source) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot be read ({exc})", file=source) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("must be a YAML mapping", file=source)
        if not loaded:
            raise ConfigError(
                "is empty: a study file names at least its study (study: NAME) and usually its space",
                file=source,
                key="study",
            )
        data = loaded
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return parse_study(data, source)


def python_for_local() -> str:
    return sys.executable
