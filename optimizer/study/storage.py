"""Where a study lives: its storage (an append-only journal file by default), the claim that one driver runs it,
and loading or creating it with the configured sampler and pruner."""

from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from ..errors import OptimizerError
from ..hosts import _proc
from ..pruning import study_pruner
from ..samplers import make_sampler
from ..settings import StudyConfig
from ..space import SearchSpace


def open_storage(url: str) -> Any:
    """A journal file (``*.log``/``*.jsonl``/plain path) or any SQLAlchemy URL."""
    if "://" in url:
        return url
    path = Path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def claim_study(cfg: StudyConfig) -> list[str]:
    """One driver per study. Refuse to run a study another live driver on this machine runs (it would reap that
    driver's servers); when the previous driver is dead (e.g. SIGKILLed while it wrote to the journal), remove
    the journal lock it may have left, which would otherwise stall every write for Optuna's 30 s grace period.
    Returns notes on what was cleaned up."""
    path = cfg.study_dir / "driver.json"
    me = {
        "pid": os.getpid(),
        "start_time": _proc.start_time(os.getpid()),
        "boot_id": _proc.boot_id(),
        "hostname": socket.gethostname(),
    }
    try:
        prev = json.loads(path.read_text())
        if not isinstance(prev, dict):
            prev = None
    except (OSError, ValueError):
        prev = None
    notes: list[str] = []
    same_machine = prev is not None and prev.get("hostname") == me["hostname"] and prev.get("boot_id") == me["boot_id"]
    if prev is not None and not same_machine:
        return notes  # the study's last driver ran elsewhere: its liveness (and the lock) cannot be judged here
    if prev is not None:
        try:
            pid = int(prev["pid"])
        except (KeyError, TypeError, ValueError):
            pid = -1
        if (
            pid > 0
            and pid != me["pid"]
            and prev.get("start_time") is not None
            and _proc.start_time(pid) == prev.get("start_time")
        ):
            raise OptimizerError(
                f"study {cfg.study!r} is being run by another driver (pid {pid}); stop it first or use another --study"
            )
    if "://" not in cfg.storage_url:
        lock = Path(cfg.storage_url + ".lock")
        if os.path.lexists(lock):
            lock.unlink(missing_ok=True)
            notes.append(f"removed the journal lock {lock} a dead driver left")
    write_json(path, me)
    return notes


def load_or_create(
    cfg: StudyConfig, *, sampler: Any = None, pruner: Any = None, space: SearchSpace | None = None
) -> optuna.Study:
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna.create_study(
        study_name=cfg.study,
        storage=open_storage(cfg.storage_url),
        sampler=sampler or make_sampler(cfg, space),
        pruner=pruner or study_pruner(cfg),
        direction="maximize",
        load_if_exists=True,
    )


def write_json(path: Path, data: Any) -> None:
    """Write whole or not at all (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)
