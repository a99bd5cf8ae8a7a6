"""Where a server runs: ``LocalHost`` (a subprocess) or ``SSHHost`` (over SSH with paramiko), and the hosts file."""

from optimizer.hosts.base import Host, ServerHandle
from optimizer.hosts.config import HostConfig, load_hosts, local_host, parse_hosts
from optimizer.hosts.factory import make_host
from optimizer.hosts.local import LocalHost, LocalServerHandle

__all__ = [
    "Host",
    "HostConfig",
    "LocalHost",
    "LocalServerHandle",
    "ServerHandle",
    "SSHHost",
    "load_hosts",
    "local_host",
    "make_host",
    "parse_hosts",
]


def __getattr__(name: str):  # SSHHost imports paramiko: only when asked for
    if name == "SSHHost":
        from optimizer.hosts.ssh import SSHHost

        return SSHHost
    raise AttributeError(name)
