"""The statistics of a confirmation: intervals, gains over the baseline, equivalence, and the launch noise.

Confirmation relaunches each configuration (and the baseline) ``n`` times, interleaved in rounds
(A B C, A B C, ...). Speed is multiplicative, so everything is done on log tok/s:

- each configuration's tok/s is the geometric mean of its launches, with a Student-t interval;
- its gain over the baseline is the mean of the per-round log ratios (round r of A against round r of the
  baseline: any drift over the rounds cancels), with a t-interval, reported as ``exp(.) - 1``;
- two configurations are *equivalent* when their tok/s intervals overlap; the fastest and every configuration
  equivalent to it form the top group, and the cheapest of that group (fewer steps, then fewer draft tokens, then
  smaller topk) is the confirmed winner;
- the launch-to-launch noise is the pooled within-configuration spread of log tok/s over all relaunches.

A sequential confirmation (``optimizer.confirm``) also counts the search's own launches (``Arm.evidence``: the
baseline's, and those of configurations that were not the study's best; the best, the search's answer, was selected
partly on its single launch, which is left out, so its estimate is not biased upwards), pools the noise with a prior (the
host's stored noise, or a stated prior where nothing is known: ``NOISE_PRIOR``), compares configurations unpaired
(``diff``), and stops as soon as every comparison is *settled* at the stated confidence (one-sided):

- the winner W against each other configuration C: C is not better than W by ``margin`` or more
  (upper bound of log C - log W below log(1 + margin)): W is the significant winner, or equivalent within it;
- the winner against the baseline: a significant gain (lower bound above 0) or no gain worth having (upper bound
  below log(1 + margin)).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scipy import stats as _st

CONFIDENCE = 0.95
#: What a confirmation assumes of the launch-to-launch noise where the host's is not known: one sigma of log tok/s
#: and the degrees of freedom it weighs as (a few launches' worth: measured data soon outweighs it). Steady
#: machines show 1-3 %, others 15-30 % (issue 15): 5 % is on the cautious side of a steady one.
NOISE_PRIOR = (0.05, 2)
#: Among equivalent configurations, the cheapest one whose mean is within this fraction of the fastest's wins.
PREFER_CHEAPER_WITHIN = 0.02


@dataclass
class Interval:
    mean: float  # on the log scale
    lo: float | None
    hi: float | None
    n: int

    @property
    def known(self) -> bool:
        return self.lo is not None and self.hi is not None

    def includes_zero(self) -> bool:
        return not self.known or (self.lo <= 0.0 <= self.hi)  # type: ignore[operator]

    def overlaps(self, other: Interval) -> bool:
        if not (self.known and other.known):
            return False
        return self.lo <= other.hi and other.lo <= self.hi  # type: ignore[operator]


def t_interval(logs: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    n = len(logs)
    if n == 0:
        return Interval(float("nan"), None, None, 0)
    mean = statistics.fmean(logs)
    if n < 2:
        return Interval(mean, None, None, n)
    half = float(_st.t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(logs) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


@dataclass
class Arm:
    """One configuration under confirmation: what it is and what each round measured (round -> tok/s)."""

    label: str
    trial: int | None
    config: str
    cost: tuple[int, int, int]  # (steps, draft tokens, topk): smaller is cheaper; the baseline is (0, 0, 0)
    baseline: bool = False
    runs: dict[int, float] = field(default_factory=dict)
    study_tok_per_s: float | None = None  # what the study measured in its single launch
    #: the search's own launches counted as evidence (not the selected best's: see the module docstring)
    evidence: list[float] = field(default_factory=list)
    #: relaunches beyond the one of each round: hosts a round would leave idle relaunch the configurations still
    #: in question again, and hosts the search's last launches left idle relaunched them early
    #: (``confirm.start_early``); sequential, unpaired confirmations only: they have no round to be paired by
    extra: list[float] = field(default_factory=list)

    #: the launch noise pooled over every arm of the confirmation (sigma, df), set by ``decide``: with a few
    #: launches per arm, one arm's own spread is a poor estimate (t(2) = 4.3), the pooled one a far better one
    pooled: tuple[float, int] | None = None

    @property
    def values(self) -> list[float]:
        """Every launch counted: the search's (``evidence``) and the confirmation's, in round order, then the extra
        relaunches on the rounds' idle hosts."""
        return [*self.evidence, *self.relaunches]

    @property
    def relaunches(self) -> list[float]:
        """The confirmation's launches alone: one a round, then the extra ones."""
        return [*(self.runs[r] for r in sorted(self.runs)), *self.extra]

    @property
    def tok_per_s(self) -> Interval:
        return self.interval(CONFIDENCE)

    def interval(self, level: float) -> Interval:
        """Two-sided interval at ``level`` of its mean log tok/s (the pooled noise where known)."""
        logs = [math.log(v) for v in self.values if v > 0]
        if self.pooled is None or not logs or self.pooled[1] < 2:
            return t_interval(logs, level)
        sigma, df = self.pooled
        mean = statistics.fmean(logs)
        half = float(_st.t.ppf(0.5 + level / 2, df)) * sigma / math.sqrt(len(logs))
        return Interval(mean, mean - half, mean + half, len(logs))

    def relaunched(self) -> Arm:
        """This arm as the winner counts it: its relaunches only, once it has any. Every configuration under
        confirmation was picked for a high search launch, so a search launch read as the winner's own would flatter
        it (at 20 % launch noise a runner-up's lucky search launch made it a significant winner at 84 % of the
        optimum); as a challenger's, it only makes the winner harder to declare."""
        if not self.relaunches or not self.evidence:
            return self
        return replace(self, evidence=[])


def ratio(a: Arm, b: Arm) -> Interval:
    """Per-round log ratio of a over b, on the rounds both completed."""
    rounds = sorted(set(a.runs) & set(b.runs))
    return t_interval([math.log(a.runs[r] / b.runs[r]) for r in rounds if a.runs[r] > 0 and b.runs[r] > 0])


def launch_noise(arms: Sequence[Arm]) -> tuple[float | None, int]:
    """Pooled within-configuration standard deviation of log tok/s across relaunches, and its degrees of freedom."""
    ss, df = 0.0, 0
    for a in arms:
        logs = [math.log(v) for v in a.values if v > 0]
        if len(logs) >= 2:
            m = statistics.fmean(logs)
            ss += sum((x - m) ** 2 for x in logs)
            df += len(logs) - 1
    return (math.sqrt(ss / df), df) if df else (None, 0)


def pool(
    measured: tuple[float | None, int], prior: tuple[float, int] | None, floor: bool = False
) -> tuple[float | None, int]:
    """The measured noise pooled with a prior weighing ``prior[1]`` degrees of freedom. With ``floor`` (a stated
    prior, not a measurement) the prior only ever raises the noise: a host measured noisier than the prior keeps
    its own figure and degrees of freedom (pooling 17 % measured with a stated 5 % read it as 13 % at twice the
    degrees of freedom, and decided a wrong winner after one round at 20 % launch noise)."""
    sigma, df = measured
    if prior is None or prior[1] <= 0:
        return sigma, df
    if floor and sigma is not None and df > 0 and sigma >= prior[0]:
        return sigma, df
    ss = (sigma**2 * df if sigma is not None else 0.0) + prior[0] ** 2 * prior[1]
    return math.sqrt(ss / (df + prior[1])), df + prior[1]


def diff(a: Arm, b: Arm, confidence: float = CONFIDENCE) -> Interval:
    """Unpaired: mean log tok/s of a minus b's, with the pooled noise (``Arm.pooled``) and a t-interval."""
    la = [math.log(v) for v in a.values if v > 0]
    lb = [math.log(v) for v in b.values if v > 0]
    if not la or not lb:
        return Interval(float("nan"), None, None, 0)
    mean = statistics.fmean(la) - statistics.fmean(lb)
    if a.pooled is None or a.pooled[1] < 1:
        return Interval(mean, None, None, min(len(la), len(lb)))
    sigma, df = a.pooled
    half = float(_st.t.ppf(0.5 + confidence / 2, df)) * sigma * math.sqrt(1 / len(la) + 1 / len(lb))
    return Interval(mean, mean - half, mean + half, min(len(la), len(lb)))


def two_sided(one_sided: float) -> float:
    """The level of a two-sided interval whose ends are one-sided bounds at ``one_sided`` (0.95 -> 0.9)."""
    return round(2 * one_sided - 1, 6)


def picked(winner: Arm, group: Sequence[Arm]) -> str:
    """How the winner was picked from its equivalent group: "cheapest" (the group holds other trees) or "fastest"
    (every configuration of the group shares the winner's tree)."""
    return "fastest" if all(a.cost == winner.cost for a in group) else "cheapest"


#: ``rounds_to_settle`` looks no further than this many rounds
SETTLE_HORIZON = 50


def rounds_to_settle(verdict: Verdict, confidence: float = CONFIDENCE) -> int | None:
    """The fewest further rounds after which every comparison the sequential verdict left undecided would be
    settled, if the measured means held: ``settle``'s own futility projection, asked for 1, 2, ... more launches of
    each (a round relaunches each arm once) until it leaves nothing it could not settle. None when the verdict is
    decided, or when not even ``SETTLE_HORIZON`` rounds would do (means a hair from a goal, or a large noise)."""
    winner = verdict.winner
    if verdict.paired or verdict.decided is not None or winner is None:
        return None
    cands = [a for a in verdict.arms if not a.baseline and a.values]
    base = next((a for a in verdict.arms if a.baseline and a.values), None)
    if winner.baseline:  # the baseline stands (``_baseline_stands``): judged against every configuration
        judged, others, base = winner, cands, None
    else:  # as ``decide`` judges its winner: on its relaunches
        judged, others = winner.relaunched(), [a for a in cands if a is not winner]
    for more in range(1, SETTLE_HORIZON + 1):
        if not settle(judged, others, base, verdict.margin, confidence, more=more)[1]:
            return more
    return None


def settle(
    winner: Arm,
    others: Sequence[Arm],
    base: Arm | None,
    margin: float,
    confidence: float = CONFIDENCE,
    more: int = 0,
    can_settle: bool = True,
) -> tuple[list[Arm], list[Arm], str | None]:
    """Which comparisons with the winner are still open, which can no longer be settled, and what was decided.

    Returns (open, apart, kind): ``open`` the arms worth another round (the winner first when any is), ``apart`` those
    that ``more`` further launches each could not settle even if their means held (futility: the top
    configurations cannot be told apart within the ceiling; with ``more`` 0, every comparison not settled), and
    ``kind`` when every comparison is settled: "winner", "equivalent" or "no gain". One-sided bounds at
    ``confidence``; the futility projection applies the same test, with the t quantile at the degrees of freedom the
    pooled noise would have after those launches (the normal quantile, as before, erred towards another round: on
    Kimi it cost 0.2-0.6 relaunches a study, and 2 of 240 runs exported another answer for them, docs/answer.md). With
    ``can_settle`` false (the noise is not measured well enough yet) nothing is settled: every comparison is open
    while launches are left."""
    two = two_sided(confidence)
    m = math.log(1 + margin)
    open_: list[Arm] = []
    apart: list[Arm] = []
    equivalent = False

    def reachable(a: Arm, b: Arm, iv: Interval, lo_goal: float | None, hi_goal: float | None) -> bool:
        if more <= 0 or a.pooled is None or not iv.n:
            return False
        na, nb = len(a.values) + more, len(b.values) + more
        # the test it projects: the t quantile at the degrees of freedom the noise would have by then (at least)
        q = float(_st.t.ppf(confidence, a.pooled[1] + 2 * more))
        half = q * a.pooled[0] * math.sqrt(1 / na + 1 / nb)
        return (hi_goal is not None and iv.mean + half < hi_goal) or (lo_goal is not None and iv.mean - half > lo_goal)

    for c in others:
        iv = diff(c, winner, two)
        if not can_settle:
            (open_ if more > 0 else apart).append(c)
        elif iv.hi is not None and iv.hi < m:
            equivalent = equivalent or iv.hi >= 0
        elif reachable(c, winner, iv, 0.0, m):
            open_.append(c)
        else:
            apart.append(c)
    kind = "equivalent" if equivalent else "winner"
    if base is not None and base.values:
        g = diff(winner, base, two)
        if not can_settle:
            (open_ if more > 0 else apart).append(base)
        elif g.lo is not None and g.lo > 0:
            pass
        elif g.hi is not None and g.hi < m:
            kind = "no gain"
        elif reachable(winner, base, g, 0.0, m):
            open_.append(base)
        else:
            apart.append(base)
    return ([winner, *open_] if open_ else []), apart, (None if open_ or apart else kind)


@dataclass
class Verdict:
    arms: list[Arm]
    winner: Arm | None
    fastest: Arm | None
    equivalent: list[Arm]  # the fastest's top group, the winner included
    gain: Interval | None  # the winner over the baseline (log scale)
    significant: bool | None  # None: not enough runs to say
    noise: float | None
    noise_df: int
    lines: list[str]
    paired: bool = True
    #: sequential confirmation: the arms still in an open comparison (empty once decided) and what was decided
    open: list[Arm] = field(default_factory=list)
    apart: list[Arm] = field(default_factory=list)  # comparisons the rounds left could not settle
    decided: str | None = None
    margin: float = PREFER_CHEAPER_WITHIN
    level: float = CONFIDENCE  # of the intervals (two-sided); unpaired: the level of settle's one-sided bounds

    def judged(self, a: Arm) -> Arm:
        """An arm as the verdict weighs it: the winner on its relaunches only (``Arm.relaunched``)."""
        return a.relaunched() if a is self.winner else a

    def gain_of(self, a: Arm, base: Arm) -> Interval:
        return ratio(a, base) if self.paired else diff(self.judged(a), base, self.level)

    def as_dict(self) -> dict[str, Any]:
        def arm(a: Arm) -> dict[str, Any]:
            iv = self.judged(a).interval(self.level)
            base = next((b for b in self.arms if b.baseline), None)
            g = self.gain_of(a, base) if base is not None and base.values and not a.baseline else None
            return {
                "label": a.label,
                "trial": a.trial,
                "config": a.config,
                "baseline": a.baseline,
                "launches": iv.n,
                "runs": a.relaunches,
                "tok_per_s": _exp(iv.mean),
                "ci": [_exp(iv.lo), _exp(iv.hi)],
                "gain": None if g is None else _exp(g.mean, -1),
                "gain_ci": None if g is None else [_exp(g.lo, -1), _exp(g.hi, -1)],
                "study_tok_per_s": a.study_tok_per_s,
            }

        return {
            "arms": [arm(a) for a in self.arms],
            "winner": None if self.winner is None else arm(self.winner),
            "fastest_trial": None if self.fastest is None else self.fastest.trial,
            "equivalent_trials": [a.trial for a in self.equivalent],
            "picked": None if self.winner is None else picked(self.winner, self.equivalent),
            "significant_gain": self.significant,
            "launch_noise": self.noise,
            "launch_noise_df": self.noise_df,
            "confidence": CONFIDENCE,
            "interval_level": self.level,
            "verdict": self.lines,
            "decided": self.decided,
            "undecided": [a.label for a in self.open],
            "told_apart": False if self.apart or self.open else self.decided is not None,
            "could_not_tell_apart": [a.label for a in self.apart],
            "margin": self.margin,
        }


def _exp(x: float | None, shift: float = 0.0) -> float | None:
    return None if x is None or x != x else round(math.exp(x) + shift, 6)


def _pct(iv: Interval, level: float = CONFIDENCE) -> str:
    if not iv.known:
        return f"{math.exp(iv.mean) - 1:+.1%} (one paired round: no interval)"
    ci = f"{level:.0%} CI {math.exp(iv.lo) - 1:+.1%} to {math.exp(iv.hi) - 1:+.1%}"  # type: ignore[arg-type]
    return f"{math.exp(iv.mean) - 1:+.1%} ({ci})"


def _tps(iv: Interval, level: float = CONFIDENCE) -> str:
    if not iv.known:
        return f"{math.exp(iv.mean):.1f} tok/s"
    return f"{math.exp(iv.mean):.1f} tok/s ({level:.0%} CI {math.exp(iv.lo):.1f}-{math.exp(iv.hi):.1f})"  # type: ignore[arg-type]


def decide(
    arms: Sequence[Arm],
    *,
    prior: tuple[float, int] | None = None,
    margin: float = PREFER_CHEAPER_WITHIN,
    paired: bool | None = None,
    more: int = 0,
    min_df: int = 0,
    prior_is_floor: bool = False,
    standing: Arm | None = None,
) -> Verdict:
    """The verdict on the runs so far. ``prior``: the noise assumed before any relaunch (sigma, df), pooled with
    the measured; ``more``: the launches each configuration may still get (for
    ``settle``'s futility rule); ``min_df``: the measured degrees of freedom of the noise below which
    nothing is settled (a prior alone does not decide); ``prior_is_floor``: the prior is a stated one, not a
    measurement, and only ever raises the noise (``pool``); ``paired``: gains from per-round ratios (the fixed
    interleaved design; default when no arm counts the search's launches and no prior is given) or unpaired
    differences with the pooled noise.

    Unpaired (the sequential confirmation), every line says what ``settle`` decides on: intervals at the level of its
    one-sided bounds (90 % two-sided for one-sided 95 %), the top group those not significantly slower than the
    fastest, and the winner, ranked on every launch counted, judged on its relaunches only (``Arm.relaunched``).
    ``standing`` (unpaired): the answer that stands until the launches overturn it, the search's own (its model pools
    every launch of the study): while the comparisons with the ranked winner are not all settled, it stays the
    winner. On Kimi over 60 seeds, exporting the ranked winner of an undecided confirmation lost answers within 2 %
    of the optimum that the search had (docs/answer.md)."""
    arms = list(arms)
    if paired is None:
        paired = prior is None and not any(a.evidence for a in arms)
    base = next((a for a in arms if a.baseline), None)
    cands = [a for a in arms if not a.baseline and a.values]
    noise, df = launch_noise(arms)
    sigma, pooled_df = pool((noise, df), prior, floor=prior_is_floor)
    for a in arms:
        a.pooled = (sigma, pooled_df) if sigma is not None else None
    level = CONFIDENCE if paired else two_sided(CONFIDENCE)
    lines: list[str] = []
    if not cands:
        return Verdict(
            arms, None, None, [], None, None, noise, df, ["no configuration completed a confirmation run"], paired
        )
    ranked = sorted(cands, key=lambda a: a.tok_per_s.mean, reverse=True)
    fastest = ranked[0]
    if paired:
        group = [fastest] + [a for a in ranked[1:] if a.tok_per_s.overlaps(fastest.tok_per_s)]
    else:
        group = [fastest] + [a for a in ranked[1:] if _not_slower(diff(a, fastest, level))]
    # The cheaper of an equivalent group, unless it measured clearly slower than the fastest: with three
    # launches "equivalent" spans several per cent, and a cheaper tree is no bargain at 5 % less speed.
    near = [a for a in group if a.tok_per_s.mean >= fastest.tok_per_s.mean + math.log(1 - PREFER_CHEAPER_WITHIN)]
    winner = min(near, key=lambda a: (a.cost, -a.tok_per_s.mean))
    has_base = base is not None and bool(base.values)

    def judge(w: Arm) -> tuple[Arm, Interval | None, bool | None, list[Arm], list[Arm], str | None]:
        judged = w.relaunched()  # ranked on every launch, judged on its relaunches (Arm.relaunched)
        gain = (ratio(w, base) if paired else diff(judged, base, level)) if has_base else None  # type: ignore[arg-type]
        significant = None if gain is None or not gain.known else (gain.lo > 0)  # type: ignore[operator]
        others = [a for a in cands if a is not w]
        return (
            judged,
            gain,
            significant,
            *settle(judged, others, base if has_base else None, margin, more=more, can_settle=df >= min_df),
        )

    judged, gain, significant, open_, apart, decided = judge(winner)
    if not paired and has_base and standing is base and significant is not True:
        assert base is not None  # has_base
        return _baseline_stands(
            arms, base, cands, winner, fastest, gain, (noise, df), margin, more, df >= min_df, level
        )
    kept = not paired and decided is None and standing is not winner and any(a is standing for a in cands)
    if kept:  # not decided: the search's answer stands against the ranked winner
        winner = standing  # type: ignore[assignment]
        judged, gain, significant, open_, apart, decided = judge(winner)
    open_ = [winner if a is judged else a for a in open_]
    wiv = judged.interval(level)
    lines.append(
        f"confirmed best: {winner.label} {winner.config}: {_tps(wiv, level)}, {wiv.n} launches"
        + ("; the search's answer, which the relaunches did not overturn" if kept else "")
    )
    if kept:
        lines.append(f"{fastest.label} measured fastest ({_tps(fastest.interval(level), level)}), not significantly so")
    elif len(group) > 1:
        others = [a for a in group if a is not winner]
        lines.append(
            "equivalent within the noise: "
            + ", ".join(
                [f"{winner.label} ({_tps(wiv, level)})"]
                + [f"{a.label} ({_tps(a.interval(level), level)})" for a in others]
            )
            + (
                f"; the cheapest ({winner.label}: {winner.cost[0]} steps, {winner.cost[1]} draft tokens) is exported"
                if picked(winner, group) == "cheapest"
                else f"; they share one tree, and the fastest ({winner.label}) is exported"
            )
        )
    elif len(ranked) > 1:
        r = ratio(ranked[1], fastest) if paired else diff(ranked[1], judged, level)
        lines.append(f"runner-up {ranked[1].label} is slower: {_pct(r, level)}")
    if gain is None:
        lines.append("no baseline run completed: the gain is not known")
    elif significant is None:
        lines.append(f"gain over the baseline {_pct(gain, level)}: too few paired rounds to judge it")
    elif significant:
        lines.append(f"gain over the baseline {_pct(gain, level)}")
    else:
        lines.append(f"no significant gain over the baseline: {_pct(gain, level)}")
    if noise is not None:
        lines.append(f"launch-to-launch noise {noise:.1%} (pooled over {df} degrees of freedom)")
    return Verdict(
        arms, winner, fastest, group, gain, significant, noise, df, lines, paired, open_, apart, decided, margin, level
    )


def _baseline_stands(
    arms: list[Arm],
    base: Arm,
    cands: list[Arm],
    ranked: Arm,
    fastest: Arm,
    gain: Interval | None,
    measured: tuple[float | None, int],
    margin: float,
    more: int,
    can_settle: bool,
    level: float,
) -> Verdict:
    """The search's answer was to serve without speculation, and the configuration that would win (``ranked``,
    judged on its relaunches) has no significant gain over the baseline: the baseline stays the answer. Each
    configuration stays in question while it may still beat the baseline (lower bound above 0); once none can
    gain ``margin`` or more, "no gain" is decided. (Exporting the ranked configuration anyway sent a tree at 62 %
    of the optimum, measured below no speculation, on Kimi at 20 % launch noise; docs/answer.md.)"""
    open_, apart, decided = settle(base, cands, None, margin, more=more, can_settle=can_settle)
    biv = base.interval(level)
    lines = [
        f"confirmed best: no speculation ({base.label}): {_tps(biv, level)}, {biv.n} launches; the search's answer, "
        "which the relaunches did not overturn"
    ]
    if gain is not None:
        lines.append(
            f"{ranked.label} {ranked.config}: no significant gain over the baseline: {_pct(gain, level)}"
            if gain.known
            else f"{ranked.label} {ranked.config}: {_pct(gain, level)} over the baseline"
        )
    noise, df = measured
    if noise is not None:
        lines.append(f"launch-to-launch noise {noise:.1%} (pooled over {df} degrees of freedom)")
    return Verdict(
        arms,
        base,
        fastest,
        [base],
        None,
        None,
        noise,
        df,
        lines,
        False,
        open_,
        apart,
        None if decided is None else "no gain",
        margin,
        level,
    )


def _not_slower(iv: Interval) -> bool:
    """Not significantly slower: the upper bound of the difference reaches 0, or there is no interval yet."""
    return iv.hi is None or iv.hi >= 0


def arm_cost(flags: Mapping[str, Any]) -> tuple[int, int, int]:
    from .sglang import flags as sgl

    if sgl.algorithm(flags) is None:
        return (0, 0, 0)
    steps = int(flags.get(sgl.STEPS) or 0)
    topk = int(flags.get(sgl.TOPK) or 1)
    draft = int(flags.get(sgl.DRAFT) or steps + 1)
    return (steps, draft, topk)
