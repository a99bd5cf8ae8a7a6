"""Which host runs what: hosts busy, free or quarantined, trials waiting for a host, and the re-queue rule after
a host fault. No Optuna calls here: recording a trial is ``recording``'s job."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import optuna

from ..candidate import Candidate
from ..hosts.config import HostConfig
from ..trial import TrialSpec

MAX_HOST_FAULTS = 3  # consecutive faults before a host is quarantined
MAX_REQUEUES = 1  # a trial hit by a host fault (dead actor, lost host) is re-queued once, then failed


@dataclass
class Active:
    """A trial the driver has asked for and not yet told: waiting for a host or running on one."""

    trial: optuna.Trial
    candidate: Candidate
    key: str
    spec: TrialSpec
    host: str | None = None
    requeues: int = 0
    tried_hosts: set[str] = field(default_factory=set)
    #: Chunks already reported. A trial re-run after a host fault keeps its first attempt's values (Optuna
    #: takes one value per step); the retry's chunks still drive pruning through them.
    reported: set[int] = field(default_factory=set)


class HostPool:
    """The hosts and what each is doing. ``phase`` (host -> (phase, trial, since)) is read by the live display from
    its own thread; it is only ever replaced entry by entry."""

    def __init__(self, hosts: list[HostConfig]) -> None:
        self.hosts = hosts
        self.busy: dict[str, int] = {}  # host -> trial number
        self.faults: dict[str, int] = {h.name: 0 for h in hosts}
        self.quarantined: set[str] = set()
        self.phase: dict[str, tuple[str, int | None, float]] = {}
        self.pending: list[Active] = []  # asked (or re-queued) trials waiting for a host

    def free(self) -> list[str]:
        return [h.name for h in self.hosts if h.name not in self.busy and h.name not in self.quarantined]

    def usable(self) -> int:
        return max(1, len(self.hosts) - len(self.quarantined))

    def take_pending(self) -> Active | None:
        """The first waiting trial that may run on a free host: preferably one it has not failed on yet."""
        free = self.free()
        for i, a in enumerate(self.pending):
            if any(h not in a.tried_hosts for h in free) or len(self.hosts) == 1 or a.tried_hosts >= set(free):
                return self.pending.pop(i)
        return None

    def assign(self, a: Active) -> str:
        """Put a trial on a free host, one it has not tried if there is one."""
        free = self.free()
        host = ([h for h in free if h not in a.tried_hosts] or free)[0]
        a.host = host
        a.tried_hosts.add(host)
        self.busy[host] = a.trial.number
        self.phase[host] = ("starting", a.trial.number, time.time())
        return host

    def release(self, host: str, trial: int) -> None:
        if self.busy.get(host) == trial:
            del self.busy[host]
        self.phase[host] = ("idle", None, time.time())

    def fault(self, host: str) -> bool:
        """Count a host fault; True when the host is (now) quarantined."""
        self.faults[host] = self.faults.get(host, 0) + 1
        if self.faults[host] >= MAX_HOST_FAULTS:
            self.quarantined.add(host)
            return True
        return False

    def healthy(self, host: str) -> None:
        self.faults[host] = 0

    def requeue(self, a: Active) -> bool:
        """Re-queue a trial a host fault interrupted, unless it has used its re-queues."""
        if a.requeues >= MAX_REQUEUES:
            return False
        a.requeues += 1
        self.pending.append(a)
        return True
