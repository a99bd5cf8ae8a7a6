"""A candidate configuration: SGLang server flags plus environment variables.

Flags are keyed by SGLang's flag names without dashes (``speculative-num-steps``); a store-true flag is ``True``
when set and absent otherwise. Environment values of ``"unset"`` mean "leave the variable out".
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from .sglang import adaptive
from .sglang import flags as sgl

UNSET = "unset"


def _clean_env(env: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(env.items()) if v is not None and str(v) != UNSET}


@dataclass(frozen=True)
class Candidate:
    flags: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_baseline(self) -> bool:
        return sgl.algorithm(self.flags) is None

    def normalized(self, *, architecture: str | None = None) -> Candidate:
        flags, _ = sgl.normalize(self.flags, architecture=architecture)
        return Candidate(flags=dict(sorted(flags.items())), env=_clean_env(self.env))

    def key(self, *, architecture: str | None = None) -> str:
        """A stable key of what SGLang will actually run: equal keys need not be launched twice."""
        norm = self.normalized(architecture=architecture)
        blob = json.dumps({"flags": dict(norm.flags), "env": dict(norm.env)}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def argv(self) -> list[str]:
        """The flags as command-line arguments, in a stable order."""
        out: list[str] = []
        for name, value in self.flags.items():
            if value is None or value is False:
                continue
            if value is True:
                out.append(f"--{name}")
            else:
                out.extend([f"--{name}", str(value)])
        return out

    def config_mapping(self) -> dict[str, Any]:
        """SGLang's ``--config`` file: a flat mapping of flag names (store-true flags as ``true``)."""
        return {k: v for k, v in self.flags.items() if v is not None and v is not False}

    def config_yaml(self) -> str:
        return yaml.safe_dump(self.config_mapping(), sort_keys=False)

    def env_exports(self) -> str:
        """``export NAME=value`` lines, shell-quoted, for the variables SGLang's config file cannot hold."""
        import shlex

        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in _clean_env(self.env).items())

    def short(self) -> str:
        """A one-line human description: ``EAGLE3 s2 k1 d3 LL/Ring`` or ``baseline``."""
        env = _clean_env(self.env)
        extras = [f"{k.removeprefix('NCCL_').lower()}={v}" for k, v in env.items()]
        if self.flags.get("disable-custom-all-reduce"):
            extras.append("no-car")
        if self.is_baseline:
            # With other settings it is not the baseline (which runs every setting at its default).
            head = "no-spec" if extras else "baseline"
        else:
            algo = sgl.algorithm(self.flags)
            if adaptive.effective(self.flags, algo):
                # SGLang's adaptive mode: the step count moves per batch size; the file's name tells configs apart
                path = self.flags.get(adaptive.CONFIG_FLAG)
                head = f"{algo} adaptive" + (f" ({os.path.basename(str(path))})" if path else " (SGLang's default)")
            else:
                steps, topk, draft = sgl.resolved_triple(self.flags)
                head = f"{algo} s{steps} k{topk} d{draft}"
        return head + (" " + " ".join(extras) if extras else "")
