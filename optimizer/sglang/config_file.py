"""SGLang's ``--config FILE``: which keys it accepts, how it turns them into flags, and its exact errors.

Read from sglang 0.5.17 (``sglang/srt/server_args_config_parser.py``, ``ConfigArgumentMerger``, called by
``prepare_server_args`` in ``sglang/srt/server_args.py`` when ``--config`` is in argv):

- The file must end in ``.yaml``/``.yml`` and exist, hold a mapping at its root (an empty file is ``{}``), and
  ``--config`` may appear once. Each violation is a ``ValueError`` (messages in :data:`MESSAGES`).
- Every key becomes ``--<key>`` exactly as written: dashes and underscores are not normalised for the flag
  (``cuda_graph_max_bs`` gives ``--cuda_graph_max_bs``, which argparse rejects with "unrecognized arguments").
- A key is **refused** when ``key.replace("-", "_")`` is the argparse destination of an option whose action is
  neither a plain store nor store-true (``unsupported_actions``, a dict keyed by destination: the last such
  option registered for a destination names the action). Deprecated aliases share their destination with the
  new flag, so the *new* flag's key is refused: ``cuda-graph-backend-prefill`` (aliases
  ``--enable-breakable-cuda-graph``, ``--disable-piecewise-cuda-graph``, ``--enforce-piecewise-cuda-graph``) and
  ``cuda-graph-max-bs-decode`` (alias ``--cuda-graph-max-bs``), while the deprecated ``cuda-graph-max-bs`` key
  itself passes (its destination is ``cuda_graph_max_bs_decode``, not ``cuda_graph_max_bs``). The first refused
  key in file order raises ``ValueError: Unsupported config option '<dest>' with action '<ActionClass>'``,
  uncaught, before argparse runs: a traceback on stderr and exit status 1.
- A boolean value of a store-true destination gives ``--key`` when true and nothing when false; any other
  boolean gives ``--key true``/``--key false``. A list gives ``--key v1 v2 ...`` (nothing when empty), a mapping
  ``--key <its JSON>``, anything else ``--key str(value)`` (``None`` becomes the string ``None``).
- The file's flags go *before* the command line's, so a flag given on the command line wins (argparse keeps the
  last value).

``tools/gpu_run/sglang_config_facts.py`` prints the same table from a real SGLang install, to check
:data:`REFUSED` against another version.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

SGLANG_VERSION = "0.5.17"

#: Destinations whose keys ``--config`` refuses in sglang 0.5.17, with the action class it names.
REFUSED: dict[str, str] = {
    # dataclass fields declared with a custom action
    "dcp_replicate_q_proj": "BooleanOptionalAction",
    "lora_paths": "LoRAPathAction",
    "experts_shared_outer_loras": "BooleanOptionalAction",
    "lora_strict_loading": "BooleanOptionalAction",
    "dllm_fdfo": "BooleanOptionalAction",
    # deprecated flags, and the new flags whose destination a deprecated alias shares
    "incremental_streaming_output": "DeprecatedStoreTrueAction",  # --stream-output
    "prefill_round_robin_balance": "DeprecatedAction",
    "collect_tokens_histogram": "DeprecatedAction",
    "dsa_prefill_backend": "DeprecatedAliasStoreAction",  # --nsa-prefill-backend
    "dsa_decode_backend": "DeprecatedAliasStoreAction",  # --nsa-decode-backend
    "speculative_draft_window_size": "DeprecatedAliasStoreAction",  # --speculative-dflash-draft-window-size
    "mamba_radix_cache_strategy": "DeprecatedAliasStoreAction",  # --mamba-scheduler-strategy
    "cuda_graph_max_bs_decode": "DeprecatedAliasStoreAction",  # --cuda-graph-max-bs
    "cuda_graph_bs_decode": "DeprecatedAliasStoreAction",  # --cuda-graph-bs
    "disable_cuda_graph": "DeprecatedStoreTrueAction",  # --disable-cuda-graph itself
    "cuda_graph_backend_prefill": "DeprecatedStoreConstAction",  # --{enable-breakable,disable-piecewise,...}
    "cuda_graph_bs_prefill": "DeprecatedAliasStoreAction",  # --piecewise-cuda-graph-tokens
    "cuda_graph_tc_compiler": "DeprecatedAliasStoreAction",  # --piecewise-cuda-graph-compiler
    "cuda_graph_max_bs_prefill": "DeprecatedAliasStoreAction",  # --piecewise-cuda-graph-max-tokens
    "enable_dsa_prefill_context_parallel": "DeprecatedStoreTrueAction",
    "enable_linear_replayssm_spec": "DeprecatedStoreTrueAction",  # --enable-gdn-replayssm-spec
    "enable_prefill_context_parallel": "DeprecatedStoreTrueAction",
    "dsa_prefill_cp_mode": "DeprecatedAliasStoreAction",  # --dsa-prefill-cp-mode, --nsa-prefill-cp-mode
    "prefill_cp_mode": "DeprecatedAliasStoreAction",
}

MESSAGES = {
    "suffix": "Config file must be YAML format, got: {suffix}",
    "missing": "Config file not found: {path}",
    "root": "Config file must contain a dictionary at root level",
    "multiple": "Multiple config files specified! Only one allowed.",
    "no_path": "No config file specified after --config flag!",
    "refused": "Unsupported config option '{dest}' with action '{action}'",
}


class ConfigFileError(ValueError):
    """What SGLang raises for a ``--config`` it cannot use (a ``ValueError``, message word for word)."""


def dest(key: str) -> str:
    """The argparse destination SGLang looks a key up by."""
    return str(key).replace("-", "_")


def refusal(key: str) -> str | None:
    """SGLang's error message for a key its ``--config`` refuses, or None when the key is accepted."""
    d = dest(key)
    action = REFUSED.get(d)
    return None if action is None else MESSAGES["refused"].format(dest=d, action=action)


def split(flags: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Flags (names without dashes) -> (what a ``--config`` file may hold, what must go on the command line)."""
    accepted: dict[str, Any] = {}
    refused: dict[str, Any] = {}
    for name, value in flags.items():
        if value is None or value is False:
            continue
        (refused if refusal(name) else accepted)[name] = value
    return accepted, refused


def to_args(config: Mapping[str, Any], store_true: Iterable[str]) -> list[str]:
    """SGLang's ``_convert_config_to_args``: a parsed file -> argv. ``store_true`` holds destinations."""
    store_true = {dest(s) for s in store_true}
    args: list[str] = []
    for key, value in config.items():
        message = refusal(key)
        if message:
            raise ConfigFileError(message)
        if isinstance(value, bool):
            if dest(key) in store_true:
                if value:
                    args.append(f"--{key}")
            else:
                args.extend([f"--{key}", str(value).lower()])
        elif isinstance(value, list):
            if value:
                args.append(f"--{key}")
                args.extend(str(item) for item in value)
        elif isinstance(value, dict):
            args.extend([f"--{key}", json.dumps(value)])
        else:
            args.extend([f"--{key}", str(value)])
    return args


def read(path: str) -> dict[str, Any]:
    """SGLang's ``_parse_yaml_config``: the suffix, existence and root checks, in its order."""
    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigFileError(MESSAGES["suffix"].format(suffix=p.suffix))
    if not p.exists():
        raise ConfigFileError(MESSAGES["missing"].format(path=path))
    with open(p) as fh:
        data = yaml.safe_load(fh)  # a YAML syntax error propagates, as in SGLang
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(MESSAGES["root"])
    return data


def merge(argv: list[str], store_true: Iterable[str]) -> list[str]:
    """SGLang's ``merge_config_with_args``: the file's flags first, then the command line without ``--config``."""
    where = [i for i, a in enumerate(argv) if a == "--config"]
    if not where:
        return list(argv)
    if len(where) > 1:
        raise ConfigFileError(MESSAGES["multiple"])
    i = where[0]
    if i == len(argv) - 1:
        raise ConfigFileError(MESSAGES["no_path"])
    return to_args(read(argv[i + 1]), store_true) + argv[:i] + argv[i + 2 :]
