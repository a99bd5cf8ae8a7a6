"""What the driver tells the person watching a study. ``Progress`` prints plain log lines (the choice when output is
not a terminal); ``RichProgress`` draws the same events as a live table (rich): what each host is doing and for how
long, the best configuration so far and its gain over the baseline, trials done and left, and an ETA from the
measured boot and benchmark times.

Threading: rich refreshes the display from its own thread (at most 4 times a second). That thread never touches the
study's storage: everything read from storage is read in the driver's thread (in ``start``/``event``/``finished``/
``note``) into a snapshot; the refresh thread only reads that snapshot, ``driver.host_phase`` and the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .alarms import alarms_of, greedy_note_of
from .events import ChunkEvent, PhaseEvent, TrialResult
from .study import records as R
from .study.records import baseline_trial, feasible, search_answer

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from .hosts.config import HostConfig
    from .settings import StudyConfig


class Driver(Protocol):
    """What a display reads of the driver (``optimizer.study.driver.Driver``), named here so that this module
    imports nothing of the study package's driver: the driver imports the display, never the other way round."""

    cfg: StudyConfig
    study: optuna.Study
    hosts: list[HostConfig]

    @property
    def host_phase(self) -> dict[str, Any]: ...

    def budget_left(self) -> int: ...
    def launched(self) -> int: ...
    def eta_s(self) -> float | None: ...


MAX_REFRESH_PER_SECOND = 4.0

PHASE_LABELS = {
    "idle": "idle",
    "stopping": "stopping",
    "starting": "starting",
    "booting": "booting",
    "warming_up": "warming up",
    "benchmarking": "benchmarking",
    "stopping_server": "stopping",
    "done": "done",
}
PHASE_STYLES = {
    "idle": "dim",
    "stopping": "yellow",
    "stopping_server": "yellow",
    "starting": "cyan",
    "booting": "cyan",
    "warming_up": "magenta",
    "benchmarking": "bold green",
    "done": "dim",
}
OUTCOME_STYLES = {
    "complete": "green",
    "pruned": "yellow",
    "infeasible": "red",
    "failed": "magenta",
    "duplicate": "dim",
    "interrupted": "yellow",
}


class Progress:
    """Plain log lines, one per event worth a line."""

    def __init__(self, printer: Callable[[str], None] = print) -> None:
        self.print = printer

    def start(self, driver: Driver) -> None:
        if getattr(driver, "confirming", False):
            self.print(f"study {driver.cfg.study}: confirmation on {len(driver.hosts)} host(s)")
            return
        self.print(
            f"study {driver.cfg.study}: {driver.budget_left()} launches left on "
            f"{len(driver.hosts)} host(s); storage {driver.cfg.storage_url}"
        )

    def event(self, driver: Driver, ev: Any) -> None:
        if isinstance(ev, PhaseEvent) and ev.phase in ("starting", "warming_up", "benchmarking"):
            self.print(f"[{ev.host}] trial {ev.trial}: {ev.phase} {ev.detail}".rstrip())
        elif isinstance(ev, ChunkEvent):
            at = f" at concurrency {ev.level}" if driver.cfg.workload.multi_level else ""
            self.print(f"[{ev.host}] trial {ev.trial}: chunk {ev.index}{at} {ev.tok_per_s:.1f} tok/s")

    def finished(self, driver: Driver, frozen: FrozenTrial) -> None:
        ua = frozen.user_attrs
        value = f"{frozen.value:.1f} tok/s" if frozen.value is not None and feasible(frozen) else ""
        self.print(
            f"trial {frozen.number} {ua.get(R.OUTCOME, frozen.state.name.lower())}: {ua.get(R.CONFIG, '')} "
            f"{value} {ua.get(R.FAILURE_REASON, '')}".rstrip()
        )
        for a in alarms_of(driver.study, frozen):
            self.print(f"  ALARM trial {frozen.number} {a.kind}: {a.text()}")
        if unchecked := greedy_note_of(driver.study, frozen):
            self.print(f"  note trial {frozen.number}: {unchecked}")

    def note(self, driver: Driver, text: str) -> None:
        self.print(text)

    def stop(self, driver: Driver) -> None:
        pass


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0.0, float(s))
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


@dataclass
class Snapshot:
    """What the display shows that comes from storage; written only in the driver's thread."""

    study: str = ""
    launched: int = 0
    left: int = 0
    budget: int = 0
    eta_s: float | None = None
    eta_at: float = field(default_factory=time.time)
    best: str = ""
    best_value: float | None = None
    best_number: int | None = None
    baseline: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    configs: dict[int, str] = field(default_factory=dict)  # trial number -> short config
    chunks: dict[str, tuple[int, float]] = field(default_factory=dict)  # host -> (chunk index, tok/s)
    details: dict[str, str] = field(default_factory=dict)  # host -> last phase detail
    quarantined: frozenset[str] = frozenset()
    hosts: tuple[str, ...] = ()
    stopping: bool = False
    confirming: bool = False  # the table runs on through the confirmation (optimizer.confirm.Confirmer)


class RichProgress(Progress):
    """A live table of hosts plus a summary line, redrawn at most 4 times a second."""

    def __init__(self, console: Console | None = None, *, refresh_per_second: float = MAX_REFRESH_PER_SECOND) -> None:
        self.console = console or Console()
        super().__init__(printer=self.console.print)
        self.refresh_per_second = min(float(refresh_per_second), MAX_REFRESH_PER_SECOND)
        self.snap = Snapshot()
        self.driver: Any = None
        self.live: Live | None = None
        self.t0 = time.time()

    # ------------------------------------------------------------------ Progress interface (driver thread)
    def start(self, driver: Any) -> None:
        self.driver = driver
        self.t0 = getattr(driver, "t0", time.time())
        self._update(driver)
        head = "confirmation" if self.snap.confirming else f"{self.snap.left} launch(es) left"
        self.console.print(
            f"study [bold]{driver.cfg.study}[/]: {head} on {len(driver.hosts)} host(s); storage {driver.cfg.storage_url}",
            highlight=False,
        )
        self.live = Live(
            console=self.console,
            get_renderable=self.render,
            refresh_per_second=self.refresh_per_second,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.live.start()

    def event(self, driver: Any, ev: Any) -> None:
        self.driver = driver
        if isinstance(ev, PhaseEvent):
            self._remember_config(driver, ev.trial)
            if ev.detail:
                self.snap.details[ev.host] = ev.detail
            if ev.phase in ("starting", "booting"):
                self.snap.chunks.pop(ev.host, None)
            if ev.phase in ("starting", "done"):
                self._update(driver)
        elif isinstance(ev, ChunkEvent):
            self.snap.chunks[ev.host] = (ev.index, ev.tok_per_s)
        elif isinstance(ev, TrialResult):
            self.snap.chunks.pop(ev.host, None)
            self.snap.details.pop(ev.host, None)
            self._update(driver)

    def finished(self, driver: Any, frozen: Any) -> None:
        self.driver = driver
        self._update(driver)
        ua = frozen.user_attrs
        oc = ua.get(R.OUTCOME, frozen.state.name.lower())
        line = Text(f"trial {frozen.number} ")
        line.append(oc, style=OUTCOME_STYLES.get(oc, ""))
        line.append(f": {ua.get(R.CONFIG, '')}")
        if frozen.value is not None and feasible(frozen):
            line.append(f"  {frozen.value:.1f} tok/s", style="bold")
            if self.snap.baseline and not ua.get(R.BASELINE):
                line.append(f" ({frozen.value / self.snap.baseline - 1:+.1%})")
        if ua.get(R.FAILURE_REASON):
            line.append(f"  {str(ua[R.FAILURE_REASON])[:160]}", style="dim")
        if ua.get(R.HOST):
            line.append(f"  [{ua[R.HOST]}]", style="dim")
        self.console.print(line)
        for a in alarms_of(driver.study, frozen):
            self.console.print(Text(f"  ALARM trial {frozen.number} {a.kind}: {a.text()}", style="bold red"))
        if unchecked := greedy_note_of(driver.study, frozen):
            self.console.print(Text(f"  note trial {frozen.number}: {unchecked}", style="yellow"))

    def note(self, driver: Any, text: str) -> None:
        self.console.print(Text(text, style="yellow"))

    def stop(self, driver: Any) -> None:
        self._update(driver)
        if self.live is not None:
            self.live.refresh()
            self.live.stop()
            self.live = None

    # ------------------------------------------------------------------ snapshot (driver thread)
    def _remember_config(self, driver: Any, number: int | None) -> None:
        if number is None or number in self.snap.configs:
            return
        active = getattr(driver, "active", {}).get(number)
        if active is not None:
            try:
                self.snap.configs[number] = active.candidate.short()
            except Exception:  # noqa: BLE001 - a label is not worth a crash
                pass

    def _update(self, driver: Any) -> None:
        s = self.snap
        study = driver.study
        s.study = driver.cfg.study
        s.hosts = tuple(h.name for h in driver.hosts)
        s.quarantined = frozenset(getattr(driver, "quarantined", ()))
        s.stopping = bool(getattr(driver, "stopping", False))
        s.confirming = bool(getattr(driver, "confirming", False))
        s.launched = driver.launched()
        s.left = driver.budget_left()
        s.budget = s.launched + s.left if s.confirming else int(driver.cfg.budget.trials)
        s.eta_s, s.eta_at = driver.eta_s(), time.time()
        for number in list(getattr(driver, "active", {})):
            self._remember_config(driver, number)
        best = search_answer(study)
        if best is not None:
            s.best, s.best_value, s.best_number = best.user_attrs.get(R.CONFIG, ""), best.value, best.number
        base = study.user_attrs.get(R.BASELINE_TOK_PER_S)
        if not base:
            b = baseline_trial(study)
            base = b.value if b is not None else None
        s.baseline = float(base) if base else None
        counts: dict[str, int] = {}
        for t in study.get_trials(deepcopy=False):
            if t.state.is_finished():
                oc = t.user_attrs.get(R.OUTCOME, t.state.name.lower())
                counts[oc] = counts.get(oc, 0) + 1
        s.counts = counts

    # ------------------------------------------------------------------ display (any thread)
    def render(self) -> Group:
        now = time.time()
        s = self.snap
        driver = self.driver
        try:
            phases = dict(driver.host_phase) if driver is not None else {}
        except RuntimeError:  # changed size while copied: the next refresh gets it
            phases = {}
        table = Table(expand=False, box=None, pad_edge=False, header_style="bold")
        for col, kw in (
            ("host", {"no_wrap": True}),
            ("phase", {"no_wrap": True}),
            ("trial", {"justify": "right", "no_wrap": True}),
            ("configuration", {"overflow": "fold"}),
            ("in phase", {"justify": "right", "no_wrap": True}),
            ("last chunk", {"justify": "right", "no_wrap": True}),
        ):
            table.add_column(col, **kw)
        for host in s.hosts or tuple(phases):
            phase, number, since = phases.get(host, ("idle", None, now))
            label = PHASE_LABELS.get(phase, phase)
            style = PHASE_STYLES.get(phase, "")
            if host in s.quarantined:
                label, style = "quarantined", "bold red"
            chunk = s.chunks.get(host) if phase == "benchmarking" else None
            detail = s.details.get(host, "") if phase in ("booting", "warming_up") else ""
            detail = detail if len(detail) <= 24 else detail[:23] + "…"
            table.add_row(
                host,
                Text(label + (f" ({detail})" if detail else ""), style=style),
                "" if number is None else str(number),
                s.configs.get(number, "") if number is not None else "",
                fmt_duration(now - since) if since else "",
                f"#{chunk[0]} {chunk[1]:.1f} tok/s" if chunk else "",
            )
        summary = Text()
        if s.best_value is not None:
            summary.append("best ", style="bold")
            summary.append(f"{s.best} ", style="bold cyan")
            summary.append(f"{s.best_value:.1f} tok/s (trial {s.best_number})")
            if s.baseline:
                gain = s.best_value / s.baseline - 1
                summary.append(f"  {gain:+.1%} over baseline", style="bold green" if gain >= 0 else "bold red")
        else:
            summary.append("best: no feasible trial yet", style="dim")
        if s.baseline:
            summary.append(f"  (baseline {s.baseline:.1f} tok/s)", style="dim")
        counts = "  ".join(f"{n} {k}" for k, n in sorted(s.counts.items()))
        eta = None if s.eta_s is None else max(0.0, s.eta_s - (now - s.eta_at))
        status = Text()
        what = "confirmation relaunches" if s.confirming else "trials"
        status.append(f"{what}: {s.launched} launched, {s.left} left of {s.budget}")
        if counts:
            status.append(f"  ({counts})", style="dim")
        status.append(f"   elapsed {fmt_duration(now - self.t0)}")
        status.append(f"   ETA {fmt_duration(eta) if eta is not None else 'after the first boot'}")
        if s.stopping:
            status.append("   stopping (Ctrl-C again to force)", style="bold yellow")
        title = Text(f"study {s.study}", style="bold")
        return Group(title, table, summary, status)
