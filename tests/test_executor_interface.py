"""The driver's one view of where trials run: every executor satisfies ``optimizer.executors.Executor``."""

from __future__ import annotations

import inspect
from pathlib import Path

from optimizer.executors import Executor, RayExecutor, ThreadExecutor
from optimizer.hosts import local_host
from optimizer.loadgen.workload import Workload
from optimizer.simexec import ModelExecutor

MEMBERS = sorted(
    [n for n, v in vars(Executor).items() if not n.startswith("_") and callable(v)] + list(Executor.__annotations__)
)


def test_the_interface_is_what_the_driver_calls() -> None:
    assert MEMBERS == sorted(
        ["events", "host_names", "submit", "prune", "cancel_all", "kill_servers", "reap_orphans", "join", "shutdown"]
    )


def test_thread_and_model_executors_satisfy_it(tmp_path: Path) -> None:
    threads = ThreadExecutor([local_host("a"), local_host("b")], tmp_path)
    try:
        assert isinstance(threads, Executor)
        assert threads.host_names() == ["a", "b"]
        assert threads.reap_orphans() == {"a": [], "b": []}
    finally:
        threads.shutdown()
    model = ModelExecutor("glm-4.7-flash-h200", ["h0"], Workload())
    assert isinstance(model, Executor)
    model.kill_servers()  # nothing to kill on a simulated cluster, and no error


def test_the_ray_executor_has_every_member_with_the_same_parameters() -> None:
    for name in MEMBERS:
        if name == "events":
            continue  # an instance attribute (a queue), set in __init__
        ours = inspect.signature(getattr(RayExecutor, name))
        declared = inspect.signature(getattr(Executor, name))
        assert list(ours.parameters) == list(declared.parameters), name
