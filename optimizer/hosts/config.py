"""The hosts file: where servers run.

.. code-block:: yaml

    hosts:
      - name: local                 # [A-Za-z0-9_.-]+, unique
        type: local
        cuda_visible_devices: "0"
        env: {HF_HOME: /data/hf}
      - name: gpu-box-1
        type: ssh
        address: 10.0.0.12
        ssh_port: 22
        user: ubuntu
        key_file: ~/.ssh/id_ed25519  # or leave it out and use the SSH agent (use_agent: true, the default)
        known_hosts: ~/.ssh/known_hosts
        accept_new_host_keys: false  # true = OpenSSH's StrictHostKeyChecking=accept-new
        python: /opt/venv/bin/python # command prefix that runs Python with SGLang on that host
        workdir: ~/.sglang-optimizer # remote directory for logs and pid files
        cuda_visible_devices: "0,1"
        server_port: 30000           # or "auto": a free port per trial
        server_host: 127.0.0.1       # reached through an SSH port forward (no open firewall needed)
        env: {HF_HOME: /data/hf, NCCL_DEBUG: WARN}

A bare list of hosts (without the ``hosts:`` key) is accepted too. One server runs per host at a time.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from optimizer.errors import ConfigError

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class HostConfig(BaseModel):
    """One host of the hosts file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: Literal["local", "ssh"] = "local"
    # -- SSH only
    address: str | None = None
    ssh_port: int = Field(22, ge=1, le=65535)
    user: str | None = None  # default: the local user name, as ssh does
    key_file: str | None = None
    use_agent: bool = True
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_keys: bool = False
    connect_timeout_s: float = Field(10.0, gt=0)
    keepalive_s: float = Field(15.0, ge=0)  # 0 = no keepalive
    #: True (default): the optimizer reaches the server through an SSH local port forward to
    #: ``server_host:port`` on the remote; False: directly at ``address:port`` (needs server_host 0.0.0.0 or the
    #: host's address, and an open firewall).
    forward_port: bool = True
    # -- every host
    cuda_visible_devices: str | None = None
    python: str | None = None  # default: sys.executable (local), "python3" (ssh)
    workdir: str | None = None  # default: studies/<study>/hosts/<name> (local), ~/.sglang-optimizer (ssh)
    env: dict[str, str] = Field(default_factory=dict)
    server_port: int | Literal["auto"] | None = None  # default: "auto" (local), 30000 (ssh)
    server_host: str = "127.0.0.1"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must match [A-Za-z0-9_.-]+")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if v is None:
            return {}
        if isinstance(v, dict):
            out = {}
            for k, val in v.items():
                if not isinstance(k, str) or not ENV_NAME_RE.match(k):
                    raise ValueError(f"variable names must match [A-Za-z_][A-Za-z0-9_]*, got {k!r}")
                if isinstance(val, (dict, list)) or val is None:
                    raise ValueError(f"{k}: value must be a string or number, got {val!r}")
                out[k] = str(val).lower() if isinstance(val, bool) else str(val)
            return out
        return v

    @field_validator("cuda_visible_devices", mode="before")
    @classmethod
    def _cvd(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, list):
            return ",".join(str(x) for x in v)
        return v

    @field_validator("server_port")
    @classmethod
    def _port(cls, v: Any) -> Any:
        if isinstance(v, int) and not 1 <= v <= 65535:
            raise ValueError("must be a port number 1-65535 or 'auto'")
        return v

    @model_validator(mode="after")
    def _defaults(self) -> HostConfig:
        set_ = object.__setattr__  # the model is frozen; fill in type-dependent defaults once
        if self.type == "ssh":
            if not self.address:
                raise ValueError("address: required for an ssh host")
            if self.user is None:
                set_(self, "user", getpass.getuser())
            if not self.key_file and not self.use_agent:
                raise ValueError("key_file: required when use_agent is false")
            if self.python is None:
                set_(self, "python", "python3")
            if self.workdir is None:
                set_(self, "workdir", "~/.sglang-optimizer")
            if self.server_port is None:
                set_(self, "server_port", 30000)
            if not self.forward_port and self.server_host in LOOPBACK:
                raise ValueError(
                    "server_host: must not be a loopback address when forward_port is false "
                    "(the optimizer connects to address:port directly)"
                )
        else:
            if self.python is None:
                set_(self, "python", sys.executable)
            if self.server_port is None:
                set_(self, "server_port", "auto")
        return self

    # -- helpers

    def key_path(self) -> str | None:
        return os.path.expanduser(self.key_file) if self.key_file else None

    def known_hosts_path(self) -> str:
        return os.path.expanduser(self.known_hosts)


def local_host(name: str = "local", **overrides: Any) -> HostConfig:
    """The default host: this machine, a free port per trial, the driver's Python."""
    return HostConfig(name=name, type="local", **overrides)


def _describe(err: dict) -> str:
    kind = err.get("type", "")
    given = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "literal_error":
        return f"must be {ctx.get('expected', '?')}, got {given!r}"
    if kind == "extra_forbidden":
        allowed = ", ".join(HostConfig.model_fields)
        return f"unknown key (allowed: {allowed})"
    if kind == "missing":
        return "required"
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    if kind.startswith(("int_", "float_", "bool_", "string_", "dict_", "greater", "less")):
        return f"{msg}, got {given!r}"
    return msg


def _key(prefix: str, loc: tuple) -> str:
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        elif part in ("int", "str", "float", "literal['auto']", "function-after[_port(), int]"):
            continue  # union-branch names pydantic puts into locations
        elif str(part).startswith(("literal[", "function-")):
            continue
        else:
            key += f".{part}"
    return key


def parse_hosts(data: Any, file: str = "hosts.yaml") -> list[HostConfig]:
    """Validate already-loaded YAML data (a mapping with ``hosts:`` or a bare list)."""
    prefix = "hosts"
    if isinstance(data, dict):
        unknown = set(data) - {"hosts"}
        if unknown:
            raise ConfigError("unknown key (allowed: hosts)", file=file, key=sorted(map(str, unknown))[0])
        data = data.get("hosts")
    if not isinstance(data, list) or not data:
        raise ConfigError("must be a non-empty list of hosts", file=file, key=prefix)
    out: list[HostConfig] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(data):
        where = f"{prefix}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"must be a mapping with name and type, got {item!r}", file=file, key=where)
        try:
            cfg = HostConfig.model_validate(item)
        except ValidationError as e:
            errs = e.errors()
            first = errs[0]
            loc = tuple(first.get("loc", ()))
            msg = _describe(first)
            if loc and loc[0] == "server_port":
                msg = f"must be a port number 1-65535 or 'auto', got {first.get('input')!r}"
                errs = [x for x in errs if tuple(x.get("loc", ()))[:1] != ("server_port",)] + [first]
            if not loc and msg.startswith(tuple(f"{f}: " for f in HostConfig.model_fields)):
                field, msg = msg.split(": ", 1)
                loc = (field,)
            if len(errs) > 1:
                msg += f" (and {len(errs) - 1} more error{'s' if len(errs) > 2 else ''})"
            raise ConfigError(msg, file=file, key=_key(where, loc)) from None
        if cfg.name in seen:
            raise ConfigError(
                f"duplicate host name {cfg.name!r} (also hosts[{seen[cfg.name]}])", file=file, key=f"{where}.name"
            )
        seen[cfg.name] = i
        out.append(cfg)
    return out


def load_hosts(path: str | Path) -> list[HostConfig]:
    """Read and validate a hosts file; ConfigError names the file, the key and what is allowed."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", file=file) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"is not UTF-8 text (byte {e.start})", file=file) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {e}", file=file) from None
    return parse_hosts(data, file=file)


#: An example hosts file, shipped with the package.
EXAMPLE = Path(__file__).with_name("hosts.example.yaml")


def state_dir_for(study_dir: Path | str, cfg: HostConfig) -> Path:
    """The local state directory of a host in a study: ``<study dir>/hosts/<name>``."""
    return Path(study_dir) / "hosts" / cfg.name
