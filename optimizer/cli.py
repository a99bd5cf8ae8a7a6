"""Command line: parsing only. ``python -m optimizer --help``."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from .errors import ConfigError, OptimizerError


def _levels(text: str | None) -> int | list[int] | None:
    """``--concurrency 8`` or ``--concurrency 1,8,32``."""
    if text is None:
        return None
    try:
        levels = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"{text!r}: give one level (8) or a comma-separated list (1,8,32)", key="--concurrency"
        ) from None
    return levels[0] if len(levels) == 1 else levels


def _objective(text: str | None) -> Any:
    """``--objective 32`` (one level), ``weighted`` or ``gain`` (aggregates over the levels)."""
    if text is None:
        return None
    return int(text) if text.strip().isdigit() else text.strip()


def _study_overrides(a: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {
        "study": a.study,
        "space": a.space,
        "hosts": a.hosts,
        "storage": a.storage,
        "studies_dir": a.studies_dir,
        "budget.trials": a.trials,
        "budget.time_s": a.time_budget,
        "budget.stop_below_gain_pct": a.stop_below_gain_pct,
        "sampler.name": a.sampler,
        "sampler.seed": a.seed,
        "pruner.name": a.pruner,
        "workload.concurrency": _levels(a.concurrency),
        "objective": _objective(a.objective),
        "workload.max_tokens": a.max_tokens,
        "workload.chunks": a.chunks,
        "workload.requests_per_chunk": a.requests_per_chunk,
        "workload.prompts": a.prompts,
        "server.boot_timeout_s": a.boot_timeout,
        "confirm.rounds": a.confirm_rounds,
        "confirm.top": a.confirm_top,
        "confirm.baseline_relaunches": a.baseline_relaunches,
    }
    if a.server_command:
        o["server.command"] = shlex.split(a.server_command)
    elif a.profile or a.time_scale or a.step_scale:
        from .settings import SIM_PROFILE_DEFAULT

        cmd = [
            "{python}",
            "-m",
            "optimizer.sim",
            "--sim-profile",
            a.profile or SIM_PROFILE_DEFAULT,
            "--sim-time-scale",
            str(a.time_scale or 0.003),
        ]
        if a.step_scale:
            cmd += ["--sim-step-scale", str(a.step_scale)]
        o["server.command"] = cmd
    return o


def _add_study_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="study file (YAML); flags below override it")
    p.add_argument("--study", help="study name (default: demo)")
    p.add_argument("--studies-dir", help="where studies live (default: studies)")
    p.add_argument(
        "--storage",
        help="Optuna storage: a journal file path or an SQLAlchemy URL (default: studies/<study>/journal.log)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m optimizer",
        description="Find the fastest SGLang speculative-decoding launch configuration (Optuna on Ray).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("optimize", help="run (or resume) a study")
    _add_study_args(p)
    _add_run_args(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the space's size, what SGLang's rules reject, the launches the budget buys with an estimated "
        "wall-clock, and the first launches; start nothing",
    )
    p.add_argument("--boot-s", type=float, help="dry run: seconds one boot takes (default: measured so far)")
    p.add_argument("--bench-s", type=float, help="dry run: seconds one benchmark takes (default: measured so far)")
    c = sub.add_parser(
        "confirm",
        help="relaunch a study's best configurations and the baseline, interleaved, and export the confirmed best",
    )
    _add_study_args(c)
    _add_run_args(c)

    for name, text in (
        ("export", "rewrite best.yaml, best.env, best.sh and summary.json from storage"),
        ("status", "print the trial table of a study"),
        ("report", "write studies/<study>/report.html (plotly, offline)"),
    ):
        q = sub.add_parser(name, help=text)
        _add_study_args(q)
    d = sub.add_parser("dashboard", help="serve optuna-dashboard for a study on 127.0.0.1")
    _add_study_args(d)
    d.add_argument("--port", type=int, default=8080)
    d.add_argument("--host", default="127.0.0.1")
    return parser


def _add_run_args(p: argparse.ArgumentParser) -> None:
    """Options of the commands that launch servers (optimize, confirm): give confirm the study's own."""
    p.add_argument("--space", help="search-space YAML (default: search_spaces/demo.yaml)")
    p.add_argument("--hosts", help="hosts YAML (default: one local host)")
    p.add_argument("--trials", type=int, help="server launches at most (a resumed study counts earlier ones)")
    p.add_argument(
        "--stop-below-gain-pct",
        type=float,
        help="stop once another launch is expected to gain less than this per cent (default 2; structured sampler)",
    )
    p.add_argument("--time-budget", type=float, help="seconds after which no new trial starts")
    p.add_argument(
        "--sampler",
        choices=["structured", "tpe", "random", "tpe-plain"],
        help="how the next launch is chosen: structured (default: a model of accept length and step time), tpe "
        "(Optuna's TPE with the warm starts), random, or tpe-plain (TPE without them)",
    )
    p.add_argument(
        "--pruner",
        choices=["ratio", "wilcoxon", "median", "none"],
        help="how a launch clearly worse than the best is stopped after a few chunks: ratio (default), wilcoxon, "
        "median, or none (every launch measured in full)",
    )
    p.add_argument("--seed", type=int, help="the sampler's random seed (default 0): the same seed replays a study")
    p.add_argument(
        "--server-command",
        help="server command before the trial's flags, e.g. "
        "'python3 -m sglang.launch_server' ({python} = the host's Python)",
    )
    p.add_argument("--profile", help="simulator profile (when the server is the bundled simulator)")
    p.add_argument("--time-scale", type=float, help="simulator boot-time scale")
    p.add_argument("--step-scale", type=float, help="simulator decode-step-time scale")
    p.add_argument("--concurrency", help="one load level (8) or several measured after each boot (1,8,32,64)")
    p.add_argument(
        "--objective",
        help="with several levels: the level to maximise (32), 'weighted' (mean tok/s) or 'gain' (mean gain over "
        "the baseline, level by level); default: the last level",
    )
    p.add_argument("--max-tokens", type=int, help="output tokens per benchmark request")
    p.add_argument(
        "--chunks",
        type=int,
        help="benchmark chunks per load level (default 4): each chunk's tok/s is reported, so the pruner can stop "
        "a launch after the first ones",
    )
    p.add_argument("--requests-per-chunk", type=int, help="benchmark requests in each chunk")
    p.add_argument("--prompts", help="'builtin', a JSONL file or a ShareGPT JSON file")
    p.add_argument("--boot-timeout", type=float, help="seconds before a silent boot counts as a hang")
    p.add_argument(
        "--executor",
        choices=["ray", "thread"],
        default="ray",
        help="run trials in Ray actors (default) or in threads of this process",
    )
    p.add_argument(
        "--ray-address",
        help="connect to a running Ray cluster instead of starting one: 'auto' (the cluster of this node, or "
        "RAY_ADDRESS; what a `ray job submit` entrypoint uses) or HOST:PORT; each host needs a 'host:<name>' resource",
    )
    p.add_argument("--plain", action="store_true", help="plain log lines even on a terminal")
    p.add_argument(
        "--confirm-rounds",
        type=int,
        help="relaunch the baseline and the best configurations this many times each, interleaved (0: off; "
        "for 'confirm': default 3)",
    )
    p.add_argument("--confirm-top", type=int, help="how many of the best configurations to confirm (default 2)")
    p.add_argument(
        "--baseline-relaunches",
        type=int,
        help="relaunch the baseline this many times once it completed, to measure the noise between launches for "
        "the pruner (default 0)",
    )


def main(argv: list[str] | None = None) -> int:
    from .signals import sigterm_as_ctrl_c

    with sigterm_as_ctrl_c() as term:  # SIGTERM (kill, timeout, CI, ray job stop) stops as Ctrl-C does; exit 143
        return term.run(_main, argv)


def console() -> None:
    """The process's entry point (``python -m optimizer``, ``sglang-optimizer``): run a command, exit with its code
    (``signals.exit_process``: 130 after Ctrl-C, whenever it came)."""
    from .signals import exit_process

    exit_process(main())


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OptimizerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _load(args: argparse.Namespace) -> Any:
    from .settings import load_study

    overrides = (
        _study_overrides(args)
        if args.command in ("optimize", "confirm")
        else {"study": args.study, "storage": args.storage, "studies_dir": args.studies_dir}
    )
    return load_study(args.config, overrides)


def _run(args: argparse.Namespace) -> int:
    cfg = _load(args)
    if args.command == "optimize" and args.dry_run:
        from .app import dry_run

        return dry_run(cfg, boot_s=args.boot_s, bench_s=args.bench_s)
    if args.command == "optimize":
        from .app import optimize

        return optimize(cfg, executor=args.executor, ray_address=args.ray_address, plain=args.plain)
    if args.command == "confirm":
        from .app import confirm

        if args.confirm_rounds is None:
            cfg.confirm.rounds = 3
        return confirm(cfg, executor=args.executor, ray_address=args.ray_address, plain=args.plain)
    from .app import open_existing

    study = open_existing(cfg)
    if args.command == "export":
        from .export import export_study

        summary = export_study(study, cfg.study_dir)
        best = summary.get("best")
        print(
            f"wrote {cfg.study_dir}/best.yaml, best.env, summary.json"
            + (f" (best: trial {best['trial']}, {best['tok_per_s']:.1f} tok/s)" if best else " (no feasible trial)")
        )
        return 0
    if args.command == "status":
        from .app import print_table

        print_table(study)
        return 0
    if args.command == "report":
        from .report import write_report

        path = write_report(study, cfg.study_dir / "report.html")
        print(f"wrote {path}")
        return 0
    if args.command == "dashboard":
        from .app import serve_dashboard

        return serve_dashboard(cfg, host=args.host, port=args.port)
    raise AssertionError(args.command)  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
