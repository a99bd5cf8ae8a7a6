"""Build the Host a hosts-file entry describes."""

from __future__ import annotations

import os
from pathlib import Path

from optimizer.hosts.base import Host
from optimizer.hosts.config import HostConfig
from optimizer.hosts.local import LocalHost


def make_host(cfg: HostConfig, state_dir: Path | str) -> Host:
    """Build the Host for ``cfg``.

    ``state_dir`` is this host's local state directory (normally ``studies/<study>/hosts/<name>``). A local host
    keeps its pid files there (or in ``cfg.workdir`` when set); an SSH host keeps them in its remote ``workdir``
    and uses ``state_dir`` for nothing but local bookkeeping."""
    if cfg.type == "local":
        return LocalHost(
            cfg.name,
            Path(os.path.expanduser(cfg.workdir)) if cfg.workdir else Path(state_dir),
            python=cfg.python,
            env=cfg.env,
            cuda_visible_devices=cfg.cuda_visible_devices,
            server_port=cfg.server_port if cfg.server_port is not None else "auto",
            server_host=cfg.server_host,
        )
    from optimizer.hosts.ssh import SSHHost  # paramiko is imported only for SSH hosts

    return SSHHost(cfg, Path(state_dir))
