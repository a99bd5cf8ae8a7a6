"""The study and its driver: ``driver`` (the loop), ``scheduling`` (hosts and re-queues), ``recording`` (what is
told and written on each trial), ``resume`` (a dead run's leftovers and warm starts), ``records`` (user-attribute
names and the helpers that read them) and ``storage`` (where the study lives).

The names below are imported from here by the app, the benchmarks and the tests. They are loaded on first use, so
that a module the driver itself imports (the notes, the pruner, the progress display) can import
``optimizer.study.records`` without importing the driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOME = {
    "Active": "scheduling",
    "Driver": "driver",
    "baseline_trial": "records",
    "best_trial": "records",
    "feasible": "records",
    "search_answer": "records",
    "summary_rows": "records",
    "claim_study": "storage",
    "load_or_create": "storage",
    "open_storage": "storage",
    "write_json": "storage",
}
_ELSEWHERE = {"Progress": "optimizer.progress", "make_sampler": "optimizer.samplers"}

__all__ = [
    "Active",
    "Driver",
    "Progress",
    "baseline_trial",
    "best_trial",
    "claim_study",
    "feasible",
    "load_or_create",
    "make_sampler",
    "open_storage",
    "search_answer",
    "summary_rows",
    "write_json",
]

if TYPE_CHECKING:
    from optimizer.progress import Progress
    from optimizer.samplers import make_sampler

    from .driver import Driver
    from .records import baseline_trial, best_trial, feasible, search_answer, summary_rows
    from .scheduling import Active
    from .storage import claim_study, load_or_create, open_storage, write_json


def __getattr__(name: str) -> Any:
    if name in _HOME:
        module = importlib.import_module(f"{__name__}.{_HOME[name]}")
    elif name in _ELSEWHERE:
        module = importlib.import_module(_ELSEWHERE[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
