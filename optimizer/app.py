"""Glue between the CLI and the parts: build the driver, run it, print and export the result."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import optuna

from .errors import ConfigError
from .hosts.config import load_hosts, local_host
from .settings import StudyConfig
from .space import load_space


def open_existing(cfg: StudyConfig) -> optuna.Study:
    from .study import open_storage

    storage_url = cfg.storage_url
    if "://" not in storage_url and not Path(storage_url).exists():
        raise ConfigError(
            f"no study storage at {storage_url} (run 'make optimize STUDY={cfg.study}' first)", key="study"
        )
    try:
        return optuna.load_study(study_name=cfg.study, storage=open_storage(storage_url))
    except KeyError:
        raise ConfigError(f"study {cfg.study!r} not found in {storage_url}", key="study") from None


def read_hosts(path: str | Path) -> list:
    """``load_hosts``, with a file that is not UTF-8 text reported as a ConfigError (not a traceback)."""
    try:
        return load_hosts(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"cannot be read (not UTF-8 text: {exc.reason} at byte {exc.start})", file=str(path)
        ) from None


def make_progress(plain: bool) -> Any:
    from .progress import Progress

    if not plain and sys.stdout.isatty():
        try:
            from .progress import RichProgress

            return RichProgress()
        except ImportError:
            pass
    return Progress()


def optimize(cfg: StudyConfig, *, executor: str = "ray", ray_address: str | None = None, plain: bool = False) -> int:
    from .export import export_study
    from .study import Driver

    space = load_space(cfg.space)
    hosts = read_hosts(cfg.hosts) if cfg.hosts else [local_host()]
    for note in check_before_spending(cfg, space, hosts):
        print(note)
    cfg.study_dir.mkdir(parents=True, exist_ok=True)
    from .study import claim_study

    for note in claim_study(cfg):
        print(note)
    ex = make_executor(executor, hosts, cfg, ray_address)
    progress = make_progress(plain)
    driver = Driver(cfg, space, hosts, ex, progress=progress, confirm_follows=cfg.confirm.rounds > 0)
    t0 = time.time()
    try:
        study = driver.run()
        if cfg.confirm.rounds > 0 and not driver.stopping:
            _confirm(cfg, space, hosts, ex, study, progress, early=driver.relaunch)
    except KeyboardInterrupt:
        print("forced stop: servers killed, running trials recorded as interrupted (re-queued on resume)")
        return 130
    finally:
        ex.shutdown()
    summary = export_study(study, cfg.study_dir)
    print_table(study)
    from .levels_view import terminal_lines

    for line in terminal_lines(summary, study):
        print(line)
    refresh_views(study, cfg)
    if summary.get("best"):
        print(f"wrote {cfg.study_dir}/best.yaml, best.env and best.sh in {time.time() - t0:.0f} s")
    print_summary(summary)
    if driver.halted:
        print(f"error: {driver.halted}", file=sys.stderr)
        return 1
    if driver.stopping:
        return 130
    if summary.get("best") is None:
        print("error: nothing was measured: no launch completed (see the reasons above)", file=sys.stderr)
        return 1
    return 0


def refresh_views(study: optuna.Study, cfg: StudyConfig) -> None:
    """After an export: the study's dashboard note, and a report already written, show the exported answer."""
    from .notes import save_study_note

    save_study_note(study)
    report = cfg.study_dir / "report.html"
    if report.exists():
        from .report import write_report

        write_report(study, report)
        print(f"rewrote {report}")


def check_before_spending(cfg: StudyConfig, space: Any, hosts: list) -> list[str]:
    """Before the study is created or a launch spent: a resumed study must match (space, workload, server
    command), and every host must reach the server command's program on a free port. Returns notes to print."""
    from .preflight import check_hosts
    from .study.matching import check_resume

    for i, params in enumerate(cfg.initial):
        for name, value in params.items():
            p = space.params.get(name)
            if p is None:
                raise ConfigError(
                    f"{name!r} is not a parameter of the space {cfg.space}; its parameters: {', '.join(space.params)}",
                    key=f"initial[{i}].{name}",
                )
            choices = getattr(p, "choices", None)
            if choices is not None and value not in choices:
                raise ConfigError(f"{value!r} is not among the choices {choices}", key=f"initial[{i}].{name}")
    notes = [f"warning: {w}" for w in getattr(space, "warnings", [])]
    notes += check_resume(cfg, space)
    check_hosts(cfg.server.command, hosts, cfg.study_dir)
    return notes


def make_executor(kind: str, hosts: list, cfg: StudyConfig, ray_address: str | None = None) -> Any:
    if kind == "ray":
        from .executors import RayExecutor

        return RayExecutor(hosts, cfg.study_dir.absolute(), address=ray_address)
    from .executors import ThreadExecutor

    return ThreadExecutor(hosts, cfg.study_dir.absolute())


def _confirm(
    cfg: StudyConfig, space: Any, hosts: list, ex: Any, study: optuna.Study, progress: Any, early: Any = None
) -> Any:
    from .confirm import Confirmer

    confirmer = Confirmer(cfg, space, hosts, ex, study, progress=progress, early=early)
    try:
        return confirmer.run(cfg.confirm.rounds, cfg.confirm.top)
    except KeyboardInterrupt:
        kill = getattr(ex, "kill_servers", None)
        if kill is not None:
            kill()
        raise


def confirm(cfg: StudyConfig, *, executor: str = "ray", ray_address: str | None = None, plain: bool = False) -> int:
    """``python -m optimizer confirm``: confirm an existing study's best configurations, then export."""
    from .export import export_study
    from .study import claim_study

    study = open_existing(cfg)
    space = load_space(cfg.space)
    hosts = read_hosts(cfg.hosts) if cfg.hosts else [local_host()]
    from .preflight import check_hosts

    check_hosts(cfg.server.command, hosts, cfg.study_dir)
    for note in claim_study(cfg):
        print(note)
    ex = make_executor(executor, hosts, cfg, ray_address)
    try:
        ex.reap_orphans()
        _confirm(cfg, space, hosts, ex, study, make_progress(plain))
    except KeyboardInterrupt:
        print("stopped: the confirmation runs so far are stored; run the same command to go on")
        return 130
    finally:
        ex.shutdown()
    summary = export_study(study, cfg.study_dir)
    refresh_views(study, cfg)
    print_summary(summary)
    return 0


def print_summary(summary: dict) -> None:
    """The final lines. Alarms come first: those on the answer and its equivalents in full, those on other
    (discarded) trials as one line; the last lines are the answer, its interval and verdict, the equivalent
    alternatives with their own verdicts, and the line that deploys it (``optimizer.answer``)."""
    from .answer import answer_lines

    ans = summary.get("answer")
    shown = set() if not ans else {ans["trial"], *(a["trial"] for a in ans.get("alternatives") or [])}
    print()
    stop = summary.get("search_stop") or {}
    if stop.get("text"):  # why the search stopped and what the model expected of one more launch
        print(stop["text"])
    found = sorted((summary.get("alarms") or {}).items(), key=lambda kv: (int(kv[0]) in shown, int(kv[0])))
    for number, alarms in found:  # trials not exported first: the answer's own alarms stay next to it
        for a in alarms:
            where = "" if int(number) in shown else " (a trial not exported)"
            print(f"ALARM trial {number} {a['kind']}{where}: {a['seen']} Likely cause: {a['cause']} Fix: {a['fix']}")
    if ans is None:
        print("no feasible trial: nothing to deploy")
        return
    lines = answer_lines(ans, "")
    lines[-1] = f"deploy: {ans['deploy']}"
    for line in lines:
        print(line)


def dry_run(cfg: StudyConfig, *, boot_s: float | None = None, bench_s: float | None = None) -> int:
    """``optimize --dry-run``: plan the study and print it; no host is contacted, no server starts."""
    import tempfile

    from .dryrun import describe, first_launches
    from .dryrun import dry_run as plan_study

    space = load_space(cfg.space)
    hosts = read_hosts(cfg.hosts) if cfg.hosts else [local_host()]
    existing = None
    if "://" in cfg.storage_url or Path(cfg.storage_url).exists():
        try:
            existing = open_existing(cfg)
        except ConfigError:
            existing = None
    with tempfile.TemporaryDirectory(prefix="dry-run-") as scratch:
        d = plan_study(
            cfg,
            space,
            hosts=len(hosts),
            existing=existing,
            boot_s=boot_s,
            bench_s=bench_s,
            first_launches=first_launches(cfg, space, existing, scratch),
        )
    print(f"study {cfg.study} (dry run): space {cfg.space}")
    describe(d)
    return 0


def print_table(study: optuna.Study) -> None:
    from .study import summary_rows

    rows = summary_rows(study)
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"study {study.study_name}")
        for col in ("trial", "config", "outcome", "tok/s", "accept", "boot s", "host", "reason"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(
                str(r["trial"]),
                r["config"],
                r["outcome"],
                "" if r["tok_per_s"] is None else f"{r['tok_per_s']:.1f}",
                "" if r["accept_length"] is None else f"{r['accept_length']:.2f}",
                "" if r["boot_s"] is None else f"{r['boot_s']:.1f}",
                r["host"],
                str(r["reason"]),  # folded by the table, never cut (a cut reason loses its flag)
            )
        Console(width=160).print(table)
    except ImportError:  # pragma: no cover
        for r in rows:
            print(r)


def serve_dashboard(cfg: StudyConfig, *, host: str, port: int) -> int:
    import optuna_dashboard

    from .study import open_storage

    storage = open_storage(cfg.storage_url)
    artifact_dir = cfg.study_dir / "artifacts"
    store = None
    if artifact_dir.exists():
        from optuna.artifacts import FileSystemArtifactStore

        store = FileSystemArtifactStore(str(artifact_dir))
    print(f"optuna-dashboard on http://{host}:{port} (Ctrl-C to stop)")
    optuna_dashboard.run_server(storage, host=host, port=port, artifact_store=store)
    return 0
