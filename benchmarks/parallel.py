"""Independent benchmark runs on a pool of worker processes, with results identical for any number of jobs.

A unit of work is one run (one ``run_driver`` / ``run_grid`` call, one per-level or confirmation study) described
by picklable arguments only: profile names or landscape seeds, never a space or a truth table. Each worker
rebuilds what it needs (the search space, the truth of every candidate) and caches it for its later tasks. Every
run is seeded explicitly and nothing in it reads a global random state, so where it runs does not change what it
returns; ``pmap`` hands the results back in submission order, so the figures and the log lines are the same with
``--jobs 1`` and ``--jobs 8``.

``--jobs 1`` runs everything in this process (no pool at all). Workers are started with the ``spawn`` context
(fresh interpreters: no forked numpy, optuna or Ray state), one BLAS thread each, optuna's logging at ERROR and
warnings ignored.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

_jobs = 1
_pool: Executor | None = None

#: the thread pools of numpy's BLAS and OpenMP: one thread per worker, the workers fill the cores
_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def quiet() -> None:
    """What every process running benchmark work sets: no warnings, optuna's logging at ERROR only."""
    import logging

    warnings.filterwarnings("ignore")
    import optuna

    optuna.logging.set_verbosity(logging.ERROR)


def _init_worker() -> None:
    for k in _THREAD_ENV:
        os.environ.setdefault(k, "1")
    quiet()


def set_jobs(n: int | None) -> int:
    """Use ``n`` worker processes from now on (None or 0: one per core). Returns the number chosen."""
    global _jobs
    n = n or os.cpu_count() or 1
    if n != _jobs:
        shutdown()
    _jobs = max(1, int(n))
    return _jobs


def jobs() -> int:
    return _jobs


def _executor() -> Executor:
    global _pool
    if _pool is None:
        import multiprocessing

        saved = {k: os.environ.get(k) for k in _THREAD_ENV}
        for k in _THREAD_ENV:  # spawned interpreters read these before importing numpy
            os.environ.setdefault(k, "1")
        try:
            _pool = ProcessPoolExecutor(
                max_workers=_jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return _pool


def shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
        _pool = None


def pmap(fn: Callable[..., Any], tasks: Iterable[Sequence[Any]]) -> list[Any]:
    """``[fn(*t) for t in tasks]``, on the worker pool when there is one; results in submission order.

    ``fn`` must be a module-level function and every task's arguments picklable."""
    tasks = list(tasks)
    if _jobs <= 1 or len(tasks) <= 1:
        quiet()
        return [fn(*t) for t in tasks]
    pool = _executor()
    futures = [pool.submit(fn, *t) for t in tasks]
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


class LRU(OrderedDict):
    """A small per-process cache (spaces, truth tables) whose size does not grow with the number of landscapes."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_or(self, key: Any, make: Callable[[], Any]) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = self[key] = make()
        while len(self) > self.size:
            self.popitem(last=False)
        return value
