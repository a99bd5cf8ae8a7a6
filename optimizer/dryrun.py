"""``optimize --dry-run``: what a study would spend, before any GPU hour is spent. Nothing starts.

It prints the space's size, how many configurations SGLang's start-up rules, its runtime tree limit or the space's
own constraints reject (and why), the launches the budget buys with an estimated wall-clock (from boot and
benchmark times given on the command line, else measured by the study so far), and the first launches the
driver would make (the same sampler, seed and pre-checks, run on an in-memory copy of the study).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from .boot import study_cycle_estimate
from .settings import StudyConfig
from .sglang import adaptive
from .sglang import flags as sgl
from .sglang.logs import SHUTDOWN_S
from .space import SearchSpace
from .study import records as R

#: Where benchmarks/answer.py's studies stopped themselves: the median launches of the search and the median
#: confirmation relaunches on the Kimi profile at 3 % launch noise, one new host, the default stop rule (2 %) and
#: confirm {rounds: 3, top: 2} (docs/answer.md, seeds 0-59, 2026-12-06): what the dry run and the ETA expect before
#: a study has measured anything of its own.
EXPECTED_STOP_LAUNCHES = 19
EXPECTED_CONFIRM_RELAUNCHES = 5

CHECK_NAMES = {
    "sglang_startup": "SGLang's start-up rules",
    "sglang_tree_limit": "SGLang's runtime tree limit",
    "user": "the space's constraints",
}


@dataclass
class DryRun:
    candidates: int = 0
    rejected: Counter = field(default_factory=Counter)  # check name -> count
    reasons: Counter = field(default_factory=Counter)  # (check name, reason shape) -> count
    launchable: int = 0
    launches: int = 0
    hosts: int = 1
    boot_s: float | None = None
    bench_s: float | None = None
    stop_s: float = SHUTDOWN_S  # measured (optimizer/boot.py) once the study has stopped a server
    times_from: str = ""
    first: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    objective: str = ""
    limits: list[str] = field(default_factory=list)
    stop_pct: float | None = None  # the stop rule's threshold (per cent); None: the search spends its budget
    stop_note: str = ""
    expected_launches: int = 0  # where the search is expected to stop (the budget without a stop rule)
    confirm_max: int = 0  # confirmation relaunches at most (rounds x configurations)
    confirm_expected: int = 0
    confirm_text: str = ""
    warnings: list[str] = field(default_factory=list)  # what is known to fail on real hardware

    def _time(self, launches: int, relaunches: int) -> float | None:
        if self.boot_s is None or self.bench_s is None:
            return None
        per = self.boot_s + self.bench_s + self.stop_s
        return (-(-launches // max(1, self.hosts)) + -(-relaunches // max(1, self.hosts))) * per

    @property
    def wall_s(self) -> float | None:
        """At most: the whole budget, then every confirmation round."""
        return self._time(self.launches, self.confirm_max)

    @property
    def expected_wall_s(self) -> float | None:
        return self._time(self.expected_launches, self.confirm_expected)

    def lines(self) -> list[str]:
        out = [
            f"space: {self.candidates:,} distinct configurations after SGLang's normalisation (baseline included)",
        ]
        rej = sum(self.rejected.values())
        out.append(f"rejected without a launch: {rej:,}; launchable: {self.launchable:,}")
        for (name, shape), n in self.reasons.most_common(8):
            out.append(f"  {n:>8,}  {CHECK_NAMES.get(name, name)}: {shape}")
        if len(self.reasons) > 8:
            out.append(f"  ... and {len(self.reasons) - 8} other reasons")
        if self.levels:
            out.append(f"load levels per boot: {self.levels}; objective: {self.objective}")
        for text in self.limits:
            out.append(f"latency limit {text}")
        out.append(f"budget: {self.launches} launches on {self.hosts} host(s)" + self.stop_note)
        if self.confirm_text:
            out.append(self.confirm_text)
        if self.wall_s is None:
            out.append(
                "estimated wall-clock: unknown (no boot/benchmark time measured yet; give --boot-s and --bench-s)"
            )
        else:
            out.append(
                f"estimated wall-clock: {_duration(self.wall_s)} at most ({self.launches} launches + "
                f"{self.confirm_max} confirmation relaunches; boot {self.boot_s:.0f} s + benchmark "
                f"{self.bench_s:.0f} s + stop {self.stop_s:.1f} s each, {self.times_from})"
            )
            if (self.expected_launches, self.confirm_expected) != (self.launches, self.confirm_max):
                out.append(
                    f"expected: {_duration(self.expected_wall_s)} ({self.expected_launches} launches until the search "
                    f"stops itself + about {self.confirm_expected} confirmation relaunches; docs/answer.md)"
                )
        out.extend(f"warning: {w}" for w in self.warnings)
        if self.first:
            out.append(f"first {len(self.first)} launches:")
            out.extend(f"  {i + 1:>2}. {c}" for i, c in enumerate(self.first))
        out.append("nothing was started (dry run)")
        return out


def _duration(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def _shape(name: str, reason: str) -> str:
    """One line per rule, so that a rule's rejections are counted together."""
    if name == "sglang_tree_limit":
        return "num_draft_tokens - 1 > topk + (steps - 1) * topk^2 (the tree SGLang fails on at run time)"
    return reason.split("; ")[0][:160]


def census(space: SearchSpace, gpu_sm: int) -> DryRun:
    d = DryRun()
    deeper: Counter = Counter()  # the deepest candidate of each adaptive launch that would build a deeper state
    for cand in space.grid():
        d.candidates += 1
        bad = [c for c in space.checks(cand, gpu_sm=gpu_sm) if c.value > 0]
        if not bad:
            d.launchable += 1
            deepest = _deeper_state_under_triton(cand.flags)
            if deepest is not None:
                deeper[deepest] += 1
            continue
        d.rejected[bad[0].name] += 1  # counted once, under the first rule it breaks (the order SGLang checks)
        d.reasons[(bad[0].name, _shape(bad[0].name, bad[0].reason))] += 1
    if deeper:
        steps = "/".join(str(k) for k in sorted(deeper))
        d.warnings.append(adaptive.DEEPER_STATE_WARNING.format(n=sum(deeper.values()), steps=steps))
    return d


def _deeper_state_under_triton(flags: Any) -> int | None:
    """For an adaptive launch under Triton attention that builds a state deeper than its own: its deepest step
    count (the launch that booted on the H200); else None."""
    cfg = sgl.adaptive_config(flags)
    if cfg is None or adaptive.deeper_state(cfg, sgl.resolved_triple(flags)[0], flags.get("attention-backend")) is None:
        return None
    return max(cfg.candidate_steps)


def measured_times(study: optuna.Study | None) -> tuple[float | None, float | None]:
    """Median boot and benchmark seconds of the study's launched trials so far."""
    if study is None:
        return None, None
    boots, benches = [], []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        if not ua.get(R.LAUNCHED) or ua.get(R.BOOT_S) is None:
            continue
        boots.append(float(ua[R.BOOT_S]))
        if ua.get(R.T_END) and ua.get(R.T_START) and ua.get(R.OUTCOME) == "complete":
            benches.append(max(0.0, float(ua[R.T_END]) - float(ua[R.T_START]) - float(ua[R.BOOT_S]) - SHUTDOWN_S))
    return (statistics.median(boots) if boots else None, statistics.median(benches) if benches else None)


def dry_run(
    cfg: StudyConfig,
    space: SearchSpace,
    *,
    hosts: int,
    existing: optuna.Study | None,
    boot_s: float | None = None,
    bench_s: float | None = None,
    first_launches: Callable[[int], list[str]] | None = None,
    show_first: int = 8,
) -> DryRun:
    d = census(space, cfg.gpu_sm)
    d.hosts = hosts
    done = sum(1 for t in existing.get_trials(deepcopy=False) if t.user_attrs.get(R.LAUNCHED)) if existing else 0
    d.launches = max(0, min(cfg.budget.trials - done, d.launchable))
    m_boot, m_bench = measured_times(existing)
    cycle = study_cycle_estimate(existing, cfg.server.search_boot)  # the sum of the phases' medians, the stop
    if cycle is not None:
        m_boot, d.stop_s = cycle
    given = [x is not None for x in (boot_s, bench_s)]
    d.boot_s = boot_s if boot_s is not None else m_boot
    d.bench_s = bench_s if bench_s is not None else m_bench
    if all(given):
        d.times_from = "as given"
    elif any(given) or m_boot is not None:
        d.times_from = "given and measured so far" if any(given) else "median of the launches measured so far"
    plan = cfg.plan()
    if plan.multi_level or plan.limits:
        d.levels, d.objective, d.limits = plan.levels, plan.describe(), plan.limit_text()
    _stop_and_confirm(d, cfg, space, done)
    if first_launches is not None:
        d.first = first_launches(min(show_first, d.launches))
    return d


def _stop_and_confirm(d: DryRun, cfg: StudyConfig, space: SearchSpace, done: int) -> None:
    """Where the search is expected to stop, and what the confirmation adds (at most and expected)."""
    from .samplers import stop_below_gain

    structured = cfg.sampler.name == "structured" and not cfg.plan().pareto
    stop = stop_below_gain(cfg) if structured else None
    d.expected_launches = d.launches
    if stop is None:
        d.stop_note = (
            f" (sampler {cfg.sampler.name} has no stop rule: the search spends its budget)"
            if not structured
            else " (budget.stop_below_gain_pct is null: the search spends its budget)"
        )
    else:
        d.stop_pct = stop * 100
        d.expected_launches = min(d.launches, max(0, EXPECTED_STOP_LAUNCHES - done))
        d.stop_note = (
            f", a ceiling: the search stops itself once another launch is expected to gain less than {stop:.1%}"
        )
    c = cfg.confirm
    if c.rounds <= 0:
        d.confirm_text = "confirmation: off (confirm.rounds 0)"
        return
    arms = c.top + (1 if space.model.baseline else 0)
    # a sequential round may fill every host (hosts it would leave idle relaunch the configurations in question again
    # where that can save a round), so it holds at most as many relaunches as hosts or configurations; on four hosts
    # the rule added about half a relaunch a study on Kimi (docs/answer.md), so the expected count stays one host's
    # unless a single round on every host holds more
    d.confirm_max = c.rounds * (max(arms, d.hosts) if c.sequential else arms)
    if c.sequential:
        d.confirm_expected = min(d.confirm_max, max(EXPECTED_CONFIRM_RELAUNCHES, d.hosts))
        d.confirm_text = (
            f"confirmation: up to {c.rounds} rounds of the baseline and the best {c.top}, at most {d.confirm_max} "
            "relaunches; each round relaunches only the configurations still in question"
            + (" (idle hosts relaunch them again where that can save a round)" if d.hosts > 1 else "")
            + " and the rounds stop once the verdict is decided at 95 %"
        )
    else:
        d.confirm_expected = d.confirm_max
        d.confirm_text = (
            f"confirmation: {c.rounds} rounds of the baseline and the best {c.top}: {d.confirm_max} relaunches"
        )


def describe(d: DryRun, printer: Callable[[str], Any] = print) -> None:
    for line in d.lines():
        printer(line)


class _NoExecutor:
    """Stands in for the hosts in a dry run: nothing is started, nothing is stopped."""

    events = None

    def reap_orphans(self) -> dict[str, list[int]]:
        return {}


def first_launches(cfg: StudyConfig, space: SearchSpace, existing: optuna.Study | None, scratch: str) -> Callable:
    """The driver's own asks (baseline, warm starts, the sampler with its seed, pre-checks and dedup) on an
    in-memory copy of the study; a launch is recorded as running, never told a made-up value. After the
    sampler's start-up trials its choices depend on measurements, which a dry run does not have."""

    def preview(n: int) -> list[str]:
        from .progress import Progress
        from .study import Driver
        from .study.storage import load_or_create

        mem = cfg.model_copy(update={"storage": "sqlite:///:memory:", "studies_dir": scratch})
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line for the scratch copy
        try:
            study = load_or_create(mem, space=space)
        finally:
            optuna.logging.set_verbosity(verbosity)
        if existing is not None:
            for t in existing.get_trials(deepcopy=False):
                if t.state.is_finished():
                    study.add_trial(t)
        driver = Driver(mem, space, [], _NoExecutor(), progress=Progress(lambda _s: None), study=study)
        driver.prepare()
        out: list[str] = []
        asks = 0
        while len(out) < n and asks < 400:
            asks += 1
            a = driver._ask()
            if a is None:
                continue
            driver.active[a.trial.number] = a  # running: later asks see it (dedup, constant liar)
            ua = a.trial.user_attrs
            why = (
                "baseline"
                if ua.get(R.BASELINE)
                else ua.get(R.WARM_START)
                or ("re-queued" if ua.get(R.REQUEUED_FROM) is not None else f"sampler ({cfg.sampler.name})")
            )
            out.append(f"{ua.get(R.CONFIG, '')}  [{why}]")
        return out

    return preview
