"""Command-line parsing for the simulator: SGLang's own launch flags plus the simulator's ``--sim-*`` options.

SGLang flags the simulator models are typed; other ``--foo value`` / ``--foo`` flags are accepted and reported in
``server_args``. ``--config FILE`` follows SGLang's own parser (``optimizer.sglang.config_file``): the file's keys
become flags placed before the command line's (so the command line wins), and a key SGLang refuses, a file that is
not ``.yaml``/``.yml``, missing or not a mapping ends the process with SGLang's ``ValueError`` traceback and exit
status 1. ``--speculative-adaptive`` with ``--speculative-adaptive-config FILE.json`` runs SGLang's adaptive mode
(``optimizer.sglang.adaptive``; docs/adaptive.md). A malformed argv (a positional word, a flag with an underscore in its name, a missing or mistyped value
of a known flag) exits 2 like argparse.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml

from ..sglang import config_file

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
    "speculative-adaptive-config": str,
    "attention-backend": str,
    "max-running-requests": int,
    "cuda-graph-max-bs": int,
    "mem-fraction-static": float,
    "page-size": int,
    "config": str,
    "served-model-name": str,
    "log-level": str,
}
# SGLang flags with one or more values (argparse ``nargs="+"``), typed per value.
LISTS: dict[str, Callable[[str], Any]] = {"cuda-graph-bs-decode": int}
ALIASES = {
    "tensor-parallel-size": "tp-size",
    "tp": "tp-size",
    "model": "model-path",
    "cuda-graph-bs": "cuda-graph-bs-decode",  # SGLang 0.5.17's deprecated alias
}
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
    "enable-two-batch-overlap",
    "enable-multi-layer-eagle",
    "enable-pdmux",
}
# The simulator's own options: clearly separate from SGLang's.
SIM_OPTIONS: dict[str, Callable[[str], Any]] = {
    "sim-profile": str,
    "sim-time-scale": float,
    "sim-step-scale": float,
    "sim-seed": int,
    "sim-launch-noise": float,
    "sim-launch-seed": int,
    "sim-override": str,
}
# The simulator's own switches (no value).
SIM_SWITCHES = {"sim-broken-verify"}
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
    #: one sigma of this launch's speed factor (None: the profile's); the factor's seed (None: fresh each boot)
    launch_noise: float | None = None
    launch_seed: int | None = None
    #: speculative decoding emits other tokens than the target's greedy ones (a broken verify kernel)
    broken_verify: bool = False
    #: flag -> value the server runs whatever it was asked, reported only in /server_info (a silent override)
    overrides: dict[str, Any] = field(default_factory=dict)


def usage_error(message: str) -> NoReturn:
    sys.stderr.write(
        f"usage: {PROG} [-h] [--sim-profile NAME] [--sim-time-scale X] [--sim-step-scale X] "
        f"[--sim-seed N] [--sim-launch-noise SIGMA] [--sim-launch-seed N] [--sim-broken-verify] "
        f"[--sim-override FLAG=VALUE] [SGLang launch flags ...]\n{PROG}: error: {message}\n"
    )
    sys.stderr.flush()
    raise SystemExit(2)


def _norm(name: str) -> str:
    name = name.strip().lstrip("-")
    return ALIASES.get(name, name)


def config_error(exc: BaseException) -> NoReturn:
    """SGLang's uncaught exception from its ``--config`` merge: traceback on stderr, exit status 1."""
    where = {
        config_file.MESSAGES["multiple"]: ("_extract_config_file_path", 90),
        config_file.MESSAGES["no_path"]: ("_extract_config_file_path", 97),
        config_file.MESSAGES["root"]: ("_parse_yaml_config", 128),
    }
    msg = str(exc)
    if msg.startswith("Unsupported config option"):
        func, line, call = "_convert_config_to_args", 150, "config_args = self._convert_config_to_args(config_data)"
    else:
        func, line = where.get(msg, ("_validate_yaml_file", 136 if msg.startswith("Config file must be") else 139))
        call = "config_data = self._parse_yaml_config(config_file_path)"
    name = "ValueError" if isinstance(exc, ValueError) else f"{type(exc).__module__}.{type(exc).__name__}"
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        '  File "/sglang/launch_server.py", line 68, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        '  File "/sglang/srt/server_args.py", line 9365, in prepare_server_args\n'
        "    argv = config_merger.merge_config_with_args(argv)\n"
        f'  File "/sglang/srt/server_args_config_parser.py", line {72 if "parse" in call else 73}, '
        "in merge_config_with_args\n"
        f"    {call}\n"
        f'  File "/sglang/srt/server_args_config_parser.py", line {line}, in {func}\n'
        f"    raise ValueError(...)\n{name}: {msg}\n"
    )
    sys.stderr.flush()
    raise SystemExit(1)


def _convert(name: str, conv: Callable[[str], Any], raw: Any) -> Any:
    if conv is str:
        return str(raw)
    try:
        return conv(raw)
    except (TypeError, ValueError):
        tname = {int: "int", float: "float"}.get(conv, "value")
        usage_error(f"argument --{name}: invalid {tname} value: {raw!r}")


def parse(argv: list[str], default_profile: str) -> Options:
    if "--config" in argv:  # SGLang merges the file only for this exact token (``--config=F`` is ignored)
        store_true = [*STORE_TRUE, *(k for k, v in ALIASES.items() if v in STORE_TRUE)]
        try:
            argv = config_file.merge(argv, store_true)
        except (ValueError, OSError, yaml.YAMLError) as exc:
            config_error(exc)
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
        if not name or "_" in name:  # argparse knows SGLang's flags with dashes only
            usage_error(f"unrecognized arguments: {' '.join(argv[i:])}")
        conv = SIM_OPTIONS.get(name) or TYPED.get(name)
        if name in LISTS:
            raw = [value] if has_inline else []
            while not has_inline and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                raw.append(argv[i + 1])
                i += 1
            if not raw:
                usage_error(f"argument --{name}: expected at least one argument")
            cli[name] = [_convert(name, LISTS[name], x) for x in raw]
        elif conv is not None:
            if not has_inline:
                if i + 1 >= len(argv) or (argv[i + 1].startswith("--") and conv is str):
                    usage_error(f"argument --{name}: expected one argument")
                value = argv[i + 1]
                i += 1
            target = sim if name in SIM_OPTIONS else cli
            target[name] = _convert(name, conv, value)
        elif name in SIM_SWITCHES:
            if has_inline:
                usage_error(f"argument --{name}: ignored explicit argument {value!r}")
            sim[name] = True
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

    flags: dict[str, Any] = dict(cli)
    unknown = [k for k in flags if k not in TYPED and k not in STORE_TRUE and k not in LISTS]
    host = str(flags.pop("host", "127.0.0.1"))
    port = int(flags.pop("port", 30000))
    flags.pop("config", None)
    flags = {k: v for k, v in flags.items() if v is not None and v is not False}
    if sim.get("sim-launch-noise") is not None and not 0 <= sim["sim-launch-noise"] < 1:
        usage_error(f"argument --sim-launch-noise: must be in [0, 1), got {sim['sim-launch-noise']}")
    return Options(
        flags=flags,
        host=host,
        port=port,
        profile=str(sim.get("sim-profile") or default_profile),
        time_scale=float(sim.get("sim-time-scale", 1.0)),
        step_scale=float(sim.get("sim-step-scale", 1.0)),
        seed=int(sim.get("sim-seed", 0)),
        unknown=unknown,
        launch_noise=sim.get("sim-launch-noise"),
        launch_seed=sim.get("sim-launch-seed"),
        broken_verify=bool(sim.get("sim-broken-verify")),
        overrides=_overrides(sim.get("sim-override")),
    )


def _overrides(text: str | None) -> dict[str, Any]:
    """``FLAG=VALUE[,FLAG=VALUE]`` with SGLang flag names, typed like the flags themselves."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            usage_error(f"argument --sim-override: expected FLAG=VALUE, got {item!r}")
        name, raw = item.split("=", 1)
        name = _norm(name)
        conv = TYPED.get(name)
        out[name] = _convert(name, conv, raw.strip()) if conv is not None else raw.strip()
    return out
