"""Command-line parsing for the simulator: SGLang's own launch flags plus the simulator's ``--sim-*`` options.

SGLang flags the simulator models are typed; other ``--foo value`` / ``--foo`` flags are accepted and reported in
``server_args``. ``--config FILE`` reads SGLang's flat YAML format (CLI flags override it). A malformed argv (a
positional word, a missing or mistyped value of a known flag) exits 2 like argparse.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

PROG = "python -m optimizer.sim"

# SGLang flags with a value, and their types (names without dashes).
TYPED: dict[str, Callable[[str], Any]] = {
    "model-path": str,
    "tokenizer-path": str,
    "host": str,
    "port": int,
    "tp-size": int,
    "dp-size": int,
    "speculative-algorithm": str,
    "speculative-draft-model-path": str,
    "speculative-num-steps": int,
    "speculative-eagle-topk": int,
    "speculative-num-draft-tokens": int,
    "attention-backend": str,
    "max-running-requests": int,
    "cuda-graph-max-bs": int,
    "mem-fraction-static": float,
    "page-size": int,
    "config": str,
    "served-model-name": str,
    "log-level": str,
}
ALIASES = {"tensor-parallel-size": "tp-size", "tp": "tp-size", "model": "model-path"}
STORE_TRUE = {
    "disable-custom-all-reduce",
    "enable-metrics",
    "skip-server-warmup",
    "trust-remote-code",
    "disable-cuda-graph",
    "enable-torch-compile",
    "disable-radix-cache",
    "disable-overlap-schedule",
    "enable-dp-attention",
    "speculative-adaptive",
}
# The simulator's own options: clearly separate from SGLang's.
SIM_OPTIONS: dict[str, Callable[[str], Any]] = {
    "sim-profile": str,
    "sim-time-scale": float,
    "sim-step-scale": float,
    "sim-seed": int,
}
NOT_FLAGS = {"host", "port", "config"}  # launch plumbing, not part of a configuration


@dataclass
class Options:
    flags: dict[str, Any]  # SGLang flags as launched (names without dashes), config file merged
    host: str = "127.0.0.1"
    port: int = 30000
    profile: str = ""
    time_scale: float = 1.0
    step_scale: float = 1.0
    seed: int = 0
    unknown: list[str] = field(default_factory=list)  # flags accepted without being modelled


def usage_error(message: str) -> NoReturn:
    sys.stderr.write(
        f"usage: {PROG} [-h] [--sim-profile NAME] [--sim-time-scale X] [--sim-step-scale X] "
        f"[--sim-seed N] [SGLang launch flags ...]\n{PROG}: error: {message}\n"
    )
    sys.stderr.flush()
    raise SystemExit(2)


def _norm(name: str) -> str:
    name = name.strip().lstrip("-").replace("_", "-")
    return ALIASES.get(name, name)


def _convert(name: str, conv: Callable[[str], Any], raw: Any) -> Any:
    if conv is str:
        return str(raw)
    try:
        return conv(raw)
    except (TypeError, ValueError):
        tname = {int: "int", float: "float"}.get(conv, "value")
        usage_error(f"argument --{name}: invalid {tname} value: {raw!r}")


def parse(argv: list[str], default_profile: str) -> Options:
    cli: dict[str, Any] = {}
    sim: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in ("-h", "--help"):
            sys.stdout.write(__doc__ or "")
            raise SystemExit(0)
        if not tok.startswith("--") or tok == "--":
            usage_error(f"unrecognized arguments: {' '.join(argv[i:])}")
        body = tok[2:]
        value: Any = None
        has_inline = "=" in body
        if has_inline:
            body, value = body.split("=", 1)
        name = _norm(body)
        if not name:
            usage_error(f"unrecognized arguments: {tok}")
        conv = SIM_OPTIONS.get(name) or TYPED.get(name)
        if conv is not None:
            if not has_inline:
                if i + 1 >= len(argv) or (argv[i + 1].startswith("--") and conv is str):
                    usage_error(f"argument --{name}: expected one argument")
                value = argv[i + 1]
                i += 1
            target = sim if name in SIM_OPTIONS else cli
            target[name] = _convert(name, conv, value)
        elif name in STORE_TRUE:
            if has_inline:
                usage_error(f"argument --{name}: ignored explicit argument {value!r}")
            cli[name] = True
        else:
            # A flag the simulator does not model: accept it, with a value when one follows.
            if not has_inline:
                if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    value = argv[i + 1]
                    i += 1
                else:
                    value = True
            cli[name] = value
        i += 1

    flags: dict[str, Any] = {}
    if "config" in cli:
        flags.update(load_config(cli["config"]))
    flags.update(cli)
    unknown = [k for k in flags if k not in TYPED and k not in STORE_TRUE]
    host = str(flags.pop("host", "127.0.0.1"))
    port = int(flags.pop("port", 30000))
    flags.pop("config", None)
    flags = {k: v for k, v in flags.items() if v is not None and v is not False}
    return Options(
        flags=flags,
        host=host,
        port=port,
        profile=str(sim.get("sim-profile") or default_profile),
        time_scale=float(sim.get("sim-time-scale", 1.0)),
        step_scale=float(sim.get("sim-step-scale", 1.0)),
        seed=int(sim.get("sim-seed", 0)),
        unknown=unknown,
    )


def load_config(path: str) -> dict[str, Any]:
    """SGLang's ``--config``: a flat YAML mapping of flag names (dashes or underscores) to values."""
    p = Path(path)
    if not p.is_file():
        usage_error(f"argument --config: config file not found: {path}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        usage_error(f"argument --config: invalid YAML in {path}: {exc}")
    if not isinstance(data, dict):
        usage_error(f"argument --config: {path} must hold a flat mapping of flag names")
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = _norm(str(key))
        if isinstance(value, (dict, list)):
            usage_error(f"argument --config: {key} must be a scalar")
        conv = TYPED.get(name)
        if conv is not None and value is not None and not isinstance(value, bool):
            value = _convert(name, conv, value)
        out[name] = value
    return out
