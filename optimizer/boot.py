"""Where a restart's time goes, and the cheaper boot the search uses (docs/boot.md).

A restart cycle is the boot (launch to the first ``/health`` 200) plus the stop (SIGTERM until the process group
is gone). The readiness check stamps each boot mark as its log line arrives (``optimizer.sglang.logs``); the phase
a mark ends lasts from the previous mark to it. ``boot_summary`` adds the phases of every launch of a study
(total and median per phase, and the stop), for the report, ``summary.json``, the dashboard note and the dry run.

The **search boot** (``server.search_boot``, on by default) changes how a search launch boots, never what it
measures, and never the answer: the confirmation and the export use the production flags.

- Decode CUDA graphs only for the batch sizes the benchmark can reach: SGLang 0.5.17's
  ``--cuda-graph-bs-decode`` (an explicit list; ``--cuda-graph-bs`` is its deprecated alias) sets the list and
  SGLang then takes ``max_bs = max(list)``, so a ``--cuda-graph-max-bs`` among the production flags is overridden.
  ``reachable`` keeps SGLang's own list below the highest concurrency and the size that concurrency pads to, so
  every batch the benchmark makes pads to the same captured size as in production (the list is speculative-aware:
  1-8, then steps of 2, 4, 8, 16 with speculation; 1, 2, 4, 8, 12, 16, then steps of 8, 16, 32 without). A
  speculative server never runs more than ``--max-running-requests`` (48 when unset), so nothing above is needed.
- ``--skip-server-warmup``: SGLang's warm-up (a 1 s sleep, then an 8-token generate) goes; the benchmark sends its
  own unmeasured warm-up requests before the first measured chunk.
- A fast stop: SGLang's launcher sleeps 5 s "before crash diagnostics" once its scheduler has exited after SIGTERM;
  the host SIGKILLs the group as soon as that line shows (``optimizer.sglang.logs.SCHEDULER_GONE_LINES``).
- One JIT cache directory per host for every launch (``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``,
  ``SGLANG_DG_CACHE_DIR`` for DeepGEMM, ``FLASHINFER_WORKSPACE_BASE``, ``CUDA_CACHE_PATH``), unless the study's
  ``server.env`` or the host's environment already sets one (``optimizer.trial.search_boot_env``).
- Multithreaded weight loading is SGLang 0.5.17's default for safetensors (``enable_multithread_load`` defaults to
  true with 8 threads in ``DefaultModelLoader``), so nothing is added: ``--model-loader-extra-config`` is refused
  by other load formats (``dummy``), and would only restate the default.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .sglang import flags as sgl
from .sglang.logs import BOOT_PHASE_LABELS, BOOT_PHASE_NAMES, FAST_SHUTDOWN_S, SHUTDOWN_S

#: SGLang 0.5.17's decode CUDA-graph batch sizes (``ServerArgs._generate_decode_cuda_graph_batch_sizes``).
SPEC_GRAPH_BS: tuple[int, ...] = (
    *range(1, 9),
    *range(10, 33, 2),
    *range(40, 65, 4),
    *range(72, 257, 8),
    *range(272, 4097, 16),
)
PLAIN_GRAPH_BS: tuple[int, ...] = (1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, 4097, 32))
#: ``--max-running-requests`` SGLang sets for speculative decoding when the flag is unset.
SPEC_MAX_RUNNING = 48
#: The flag the search boot sets, and its deprecated alias (either may come with the production flags).
GRAPH_BS_FLAG = "cuda-graph-bs-decode"
_GRAPH_BS_FLAGS = (GRAPH_BS_FLAG, "cuda-graph-bs")
_GRAPH_MAX_FLAGS = ("cuda-graph-max-bs-decode", "cuda-graph-max-bs")
SKIP_WARMUP_FLAG = "skip-server-warmup"
#: Environment variables of the JIT caches (sub-directory of ``jit_cache_dir`` each).
JIT_CACHE_ENV: dict[str, str] = {
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "SGLANG_DG_CACHE_DIR": "deep_gemm",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "CUDA_CACHE_PATH": "nv",
}
STOP_PHASE = "stop"


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("1", "true", "yes", "on")


def flags_from_args(args: Sequence[str]) -> dict[str, Any]:
    """``--name value`` / ``--name`` / ``--name=value`` words as flags (a list for several values)."""
    out: dict[str, Any] = {}
    i = 0
    args = [str(a) for a in args]
    while i < len(args):
        tok = args[i]
        if not tok.startswith("--"):
            i += 1
            continue
        name, eq, inline = tok[2:].partition("=")
        if eq:
            out[name] = inline
            i += 1
            continue
        vals = []
        while i + 1 < len(args) and not args[i + 1].startswith("--"):
            vals.append(args[i + 1])
            i += 1
        out[name] = True if not vals else vals[0] if len(vals) == 1 else vals
        i += 1
    return out


def _int_list(v: Any) -> list[int]:
    items = v if isinstance(v, (list, tuple)) else str(v).replace(",", " ").split()
    return sorted({int(x) for x in items})


def graph_batch_sizes(flags: Mapping[str, Any], levels: Sequence[int], mode: str = "reachable") -> list[int] | None:
    """The decode CUDA-graph batch sizes a search launch captures; None: leave SGLang's list (graphs off, or
    ``mode`` off).

    Production pads a batch of b to the smallest captured size >= b; the list keeps, for every b the benchmark can
    make (1 up to its highest concurrency, never above the running-request limit), that same size."""
    if mode == "off" or not levels:
        return None
    if _truthy(flags.get("disable-cuda-graph")) or str(flags.get("cuda-graph-backend-decode", "")) == "disabled":
        return None
    spec = sgl.algorithm(flags) is not None
    reach = max(int(c) for c in levels)
    mrr = flags.get("max-running-requests")
    if mrr not in (None, "", False):
        reach = min(reach, int(mrr))
    elif spec:
        reach = min(reach, SPEC_MAX_RUNNING)
    reach = max(1, reach)
    user = next((flags[k] for k in _GRAPH_BS_FLAGS if flags.get(k) not in (None, False, True)), None)
    if user is not None:
        base = _int_list(user)
    else:
        if _truthy(flags.get("disable-cuda-graph-padding")):
            base = list(range(1, 4097))
        else:
            base = list(SPEC_GRAPH_BS if spec else PLAIN_GRAPH_BS)
        cap = next((flags[k] for k in _GRAPH_MAX_FLAGS if flags.get(k) not in (None, False, True)), None)
        if cap is not None:
            cap = int(cap)
            base = sorted({b for b in base if b <= cap} | {cap})

    def pads_to(b: int) -> int | None:
        return next((s for s in base if s >= b), None)

    if mode == "levels":
        wanted = {pads_to(min(int(c), reach)) for c in levels}
    else:
        wanted = {s for s in base if s < reach} | {pads_to(reach)}
    wanted.discard(None)
    if not wanted:  # production captures nothing the benchmark reaches: its batches run eagerly there too
        return None
    return sorted(int(s) for s in wanted)  # type: ignore[arg-type]


def search_boot_spec(
    search_boot: Any,
    flags: Mapping[str, Any],
    extra_args: Sequence[str],
    levels: Sequence[int],
    server_env: Mapping[str, str] | None = None,
    bench_warmup: int = 1,
) -> dict[str, Any]:
    """What a search launch adds to the production launch: ``boot_flags``, ``boot_env``, ``fast_stop`` (the
    TrialSpec fields). ``search_boot`` is the study's ``server.search_boot`` (None or disabled: nothing).
    SGLang's warm-up is skipped only when the benchmark sends warm-up requests of its own (``bench_warmup``)."""
    if search_boot is None or not getattr(search_boot, "enabled", False):
        return {"boot_flags": {}, "boot_env": {}, "fast_stop": False}
    prod = {**flags_from_args(extra_args), **dict(flags)}
    boot_flags: dict[str, Any] = {}
    sizes = graph_batch_sizes(prod, levels, search_boot.graph_batch_sizes)
    if sizes is not None:
        boot_flags[GRAPH_BS_FLAG] = sizes
    if search_boot.skip_warmup and bench_warmup > 0 and not _truthy(prod.get(SKIP_WARMUP_FLAG)):
        boot_flags[SKIP_WARMUP_FLAG] = True
    boot_env: dict[str, str] = {}
    if search_boot.jit_cache_dir:
        root = str(search_boot.jit_cache_dir).rstrip("/")
        taken = set(server_env or {})
        boot_env = {k: f"{root}/{sub}" for k, sub in JIT_CACHE_ENV.items() if k not in taken}
    return {"boot_flags": boot_flags, "boot_env": boot_env, "fast_stop": bool(search_boot.fast_stop)}


def asked_with_search_boot(asked: Mapping[str, Any], boot_flags: Mapping[str, Any]) -> dict[str, Any]:
    """What a search launch asked the server for (the ``server_changed`` alarm compares ``/server_info`` with it):
    the production flags, the search boot's, and SGLang's rule that an explicit graph list sets
    ``max_bs = max(list)`` over a production ``--cuda-graph-max-bs``."""
    out = {**dict(asked), **{k: v for k, v in boot_flags.items() if not isinstance(v, (list, tuple))}}
    sizes = boot_flags.get(GRAPH_BS_FLAG)
    if sizes:
        for k in _GRAPH_MAX_FLAGS:
            if k in out:
                out[k] = max(int(b) for b in sizes)
    return out


def flag_argv(flags: Mapping[str, Any]) -> list[str]:
    """Flags as words: ``True`` a bare switch, a list its values one word each."""
    out: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            out.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            out.extend([f"--{name}", *(str(v) for v in value)])
        else:
            out.extend([f"--{name}", str(value)])
    return out


# ------------------------------------------------------------------------------------------ where the time went


def phase_durations(marks: Mapping[str, Any] | None) -> list[tuple[str, float]]:
    """(phase, seconds) from one boot's marks: each mark's phase lasts from the previous mark (launch = 0)."""
    order = {n: i for i, n in enumerate(BOOT_PHASE_NAMES)}
    items = sorted(
        ((str(k), float(v)) for k, v in (marks or {}).items() if isinstance(v, (int, float))),
        key=lambda kv: (kv[1], order.get(kv[0], len(order))),
    )
    out, prev = [], 0.0
    for name, at in items:
        out.append((name, round(max(0.0, at - prev), 3)))
        prev = max(prev, at)
    return out


def boot_summary(launches: Iterable[tuple[Mapping[str, Any] | None, float | None]]) -> dict[str, Any]:
    """Where a study's restarts went: per phase (boot order, then the stop) the launches that reached it, the total
    and the median seconds; the boot and stop totals. ``launches``: (boot marks, stop seconds) per launch."""
    per: dict[str, list[float]] = {}
    stops: list[float] = []
    n = 0
    for marks, stop_s in launches:
        durations = phase_durations(marks)
        if not durations and not isinstance(stop_s, (int, float)):
            continue
        n += 1
        for name, sec in durations:
            per.setdefault(name, []).append(sec)
        if isinstance(stop_s, (int, float)):
            stops.append(float(stop_s))
    order = {name: i for i, name in enumerate(BOOT_PHASE_NAMES)}
    rows = [
        {
            "phase": name,
            "label": BOOT_PHASE_LABELS.get(name, name),
            "launches": len(v),
            "total_s": round(sum(v), 2),
            "median_s": round(statistics.median(v), 2),
        }
        for name, v in sorted(per.items(), key=lambda kv: order.get(kv[0], len(order)))
    ]
    if stops:
        rows.append(
            {
                "phase": STOP_PHASE,
                "label": "stop (SIGTERM until the group is gone)",
                "launches": len(stops),
                "total_s": round(sum(stops), 2),
                "median_s": round(statistics.median(stops), 2),
            }
        )
    boot_total = sum(r["total_s"] for r in rows if r["phase"] != STOP_PHASE)
    return {
        "launches": n,
        "boot_total_s": round(boot_total, 2),
        "stop_total_s": round(sum(stops), 2),
        "phases": rows,
    }


def study_boot_summary(trials: Iterable[Any]) -> dict[str, Any]:
    """``boot_summary`` of a study's trials (frozen trials: user attributes ``boot_phases`` and ``stop_s``)."""
    from .study import records as R

    return boot_summary(
        (t.user_attrs.get(R.BOOT_PHASES) or None, t.user_attrs.get(R.STOP_S))
        for t in trials
        if t.user_attrs.get(R.BOOT_PHASES) or isinstance(t.user_attrs.get(R.STOP_S), (int, float))
    )


def estimate_cycle_s(summary: Mapping[str, Any], *, fast_stop: bool | None = None) -> tuple[float, float] | None:
    """(boot seconds, stop seconds) of one restart from measured phases: the sum of the per-phase medians of the
    phases every completed boot passes (a phase a failed boot never reached does not lower it), and the median stop
    (else SGLang's 5.5 s, or 1 s with the fast stop). None before any boot was measured."""
    rows = [r for r in summary.get("phases", []) if r["phase"] != STOP_PHASE]
    if not rows:
        return None
    boot = sum(r["median_s"] for r in rows)
    stop = next((r["median_s"] for r in summary["phases"] if r["phase"] == STOP_PHASE), None)
    if stop is None:
        stop = FAST_SHUTDOWN_S if fast_stop else SHUTDOWN_S
    return round(boot, 2), round(float(stop), 2)


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """A few lines for people (terminal, notes): the phases that took most, with their medians."""
    rows = summary.get("phases") or []
    if not rows:
        return []
    total = summary["boot_total_s"] + summary["stop_total_s"]
    out = [
        f"restarts: {summary['launches']} launches, {total:.0f} s (boot {summary['boot_total_s']:.0f} s, stop "
        f"{summary['stop_total_s']:.0f} s)"
    ]
    for r in sorted(rows, key=lambda r: -r["total_s"])[:6]:
        share = 100 * r["total_s"] / total if total else 0.0
        out.append(f"  {r['label']}: {r['total_s']:.1f} s ({share:.0f} %), median {r['median_s']:.2f} s per launch")
    return out


def study_cycle_estimate(study: Any, search_boot: Any = None) -> tuple[float, float] | None:
    """The dry run's restart estimate from a study's measured phases (None before any launch): ``estimate_cycle_s``
    of its launched trials; with no stop measured, the stop the study's search boot would use."""
    if study is None:
        return None
    summary = study_boot_summary(study.get_trials(deepcopy=False))
    fast = bool(getattr(search_boot, "enabled", False) and getattr(search_boot, "fast_stop", False))
    return estimate_cycle_s(summary, fast_stop=fast)


def summary_html(summary: Mapping[str, Any]) -> str:
    """The report's section: where the study's restarts went, phase by phase."""
    import html

    rows = summary.get("phases") or []
    if not rows:
        return ""
    total = (summary["boot_total_s"] + summary["stop_total_s"]) or 1.0
    body = "".join(
        f"<tr><td>{html.escape(r['label'])}</td><td>{r['launches']}</td><td>{r['total_s']:.1f}</td>"
        f"<td>{100 * r['total_s'] / total:.0f} %</td><td>{r['median_s']:.2f}</td></tr>"
        for r in rows
    )
    return (
        f"<h2>Where the restarts went</h2><p>{summary['launches']} launches: boot {summary['boot_total_s']:.0f} s, "
        f"stop {summary['stop_total_s']:.0f} s (each phase from the previous boot mark of the server's log).</p>"
        "<table><thead><tr><th>phase</th><th>launches</th><th>total s</th><th>share</th><th>median s</th></tr>"
        f"</thead><tbody>{body}</tbody></table>"
    )
