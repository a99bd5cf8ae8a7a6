"""``make report``: one self-contained HTML file (plotly.js inlined once, no CDN) that reads offline.

Sections: a header (best configuration, its gain over the baseline, trials per outcome), optimisation history with
the baseline marked, parameter importances, parallel coordinates, intermediate values (what was pruned when), a
steps x topk contour, accept length against tok/s, boot time per trial by phase, a timeline of trials per host, and
the trial table. A plot that cannot be computed yet (too few trials) is replaced by a short message; the report is
written for any study, even one without a completed trial.
"""

from __future__ import annotations

import datetime as dt
import html
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState

from .boot import study_boot_summary
from .boot import summary_html as boot_summary_html
from .notes import boot_rows, outcome, redact_attrs
from .readiness import clip
from .study import records as R
from .study.records import baseline_trial, feasible

STEPS, TOPK = "speculative-num-steps", "speculative-eagle-topk"
OUTCOME_COLORS = {
    "complete": "#2e7d32",
    "pruned": "#f9a825",
    "infeasible": "#c62828",
    "duplicate": "#90a4ae",
    "failed": "#6a1b9a",
    "interrupted": "#8d6e63",
    "running": "#1565c0",
    "waiting": "#b0bec5",
}
PHASE_COLORS = ("#90caf9", "#64b5f6", "#1e88e5", "#26a69a", "#ffb74d", "#f57c00", "#ab47bc", "#78909c")
LAYOUT = dict(
    template="plotly_white", height=430, margin=dict(l=60, r=30, t=80, b=50), title_font_size=15, title_y=0.97
)


def _study_view(study: optuna.Study, trials: list[FrozenTrial]) -> optuna.Study:
    """An in-memory study holding ``trials`` only, for optuna.visualization's plots."""
    old = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" line
    try:
        view = optuna.create_study(directions=study.directions, study_name=f"{study.study_name}-view")
    finally:
        optuna.logging.set_verbosity(old)
    view.add_trials(trials)
    return view


def _searched(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible, launched speculative trials: what importances, parallel coordinates and contour are about."""
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if feasible(t) and not t.user_attrs.get(R.DUPLICATE_OF) and not t.user_attrs.get(R.BASELINE)
    ]


def _baseline_value(study: optuna.Study) -> float | None:
    v = study.user_attrs.get(R.BASELINE_TOK_PER_S)
    if isinstance(v, (int, float)) and v > 0:
        return float(v)
    b = baseline_trial(study)
    return float(b.value) if b is not None and b.value else None


def _hover(t: FrozenTrial) -> str:
    return f"trial {t.number}: {html.escape(str(t.user_attrs.get(R.CONFIG, '')))}"


# ---------------------------------------------------------------------------------------------- figures
def fig_history(study: optuna.Study) -> go.Figure:
    """Every trial's tok/s by number (coloured by outcome), the best so far, and the baseline."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    fig = go.Figure()
    by_outcome: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        by_outcome.setdefault(outcome(t), []).append(t)
    for oc, ts in by_outcome.items():
        pts = [(t, _shown_value(t)) for t in ts]
        pts = [(t, v) for t, v in pts if v is not None]
        if not pts:
            continue
        fig.add_trace(
            go.Scatter(
                x=[t.number for t, _ in pts],
                y=[v for _, v in pts],
                mode="markers",
                name=oc,
                marker=dict(
                    color=OUTCOME_COLORS.get(oc, "#555"),
                    size=10,
                    symbol="x" if oc in ("infeasible", "failed") else "circle",
                ),
                text=[_hover(t) for t, _ in pts],
                hovertemplate="%{text}<br>%{y:.1f} tok/s<extra>" + oc + "</extra>",
            )
        )
    best, xs, ys = None, [], []
    for t in sorted(trials, key=lambda t: t.number):
        if feasible(t) and not t.user_attrs.get(R.DUPLICATE_OF):
            best = t.value if best is None else max(best, t.value)  # type: ignore[type-var]
        if best is not None:
            xs.append(t.number)
            ys.append(best)
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="best so far", line=dict(color="#1565c0", shape="hv")))
    base = _baseline_value(study)
    if base:
        fig.add_hline(
            y=base,
            line=dict(color="#424242", dash="dash"),
            annotation_text=f"baseline (no speculation) {base:.1f} tok/s",
            annotation_position="bottom right",
        )
    fig.update_layout(title="Optimisation history", xaxis_title="trial", yaxis_title="tok/s", **LAYOUT)
    return fig


def _shown_value(t: FrozenTrial) -> float | None:
    """tok/s to plot: the value of a feasible trial, the last chunk of a pruned one, 0 for an infeasible one."""
    if feasible(t):
        return float(t.value)  # type: ignore[arg-type]
    if t.state == TrialState.PRUNED and t.intermediate_values:
        return float(t.intermediate_values[max(t.intermediate_values)])
    if outcome(t) == "infeasible":
        return 0.0
    return None


def fig_importances(study: optuna.Study) -> go.Figure:
    searched = _searched(study)
    if len(searched) < 2:
        raise ValueError(f"needs at least 2 completed speculative trials ({len(searched)} so far)")
    view = _study_view(study, searched)
    params = _varied_params(searched)
    if not params:
        raise ValueError("no parameter varied across the completed trials yet")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = optuna.visualization.plot_param_importances(view, params=params)
    fig.update_layout(title="Parameter importances (tok/s, feasible trials)", **LAYOUT)
    return fig


def _varied_params(trials: list[FrozenTrial]) -> list[str]:
    """Parameters every given trial has and that take more than one value among them."""
    common = set.intersection(*(set(t.params) for t in trials)) if trials else set()
    return sorted(p for p in common if len({repr(t.params[p]) for t in trials}) > 1)


def fig_parallel(study: optuna.Study) -> go.Figure:
    searched = _searched(study)
    if len(searched) < 2:
        raise ValueError(f"needs at least 2 completed speculative trials ({len(searched)} so far)")
    params = sorted({p for t in searched for p in t.params if len({repr(u.params.get(p)) for u in searched}) > 1})
    if not params:
        raise ValueError("no parameter varied across the completed trials yet")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = optuna.visualization.plot_parallel_coordinate(_study_view(study, searched), params=params)
    fig.update_layout(title="Parallel coordinates (feasible trials; colour = tok/s)", **LAYOUT)
    return fig


def fig_intermediate(study: optuna.Study) -> go.Figure:
    """Chunk tok/s per trial; a pruned trial's line ends with a marker at the chunk it was stopped after."""
    trials = [
        t for t in study.get_trials(deepcopy=False) if t.intermediate_values and not t.user_attrs.get(R.DUPLICATE_OF)
    ]
    if not trials:
        raise ValueError("no trial has reported a benchmark chunk yet")
    fig = go.Figure()
    shown: set[str] = set()
    for t in trials:
        oc = outcome(t)
        steps = sorted(t.intermediate_values)
        color = OUTCOME_COLORS.get(oc, "#555")
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[t.intermediate_values[s] for s in steps],
                mode="lines+markers",
                name=oc,
                legendgroup=oc,
                showlegend=oc not in shown,
                line=dict(color=color, width=3 if oc == "pruned" else 1.5),
                text=[_hover(t)] * len(steps),
                hovertemplate="%{text}<br>chunk %{x}: %{y:.1f} tok/s<extra></extra>",
            )
        )
        shown.add(oc)
        if oc == "pruned":
            last = steps[-1]
            fig.add_annotation(
                x=last,
                y=t.intermediate_values[last],
                text=f"#{t.number} pruned",
                showarrow=True,
                arrowhead=2,
                ax=30,
                ay=-25,
                font=dict(color=color),
            )
    base = _baseline_value(study)
    if base:
        fig.add_hline(y=base, line=dict(color="#424242", dash="dash"), annotation_text="baseline")
    fig.update_layout(
        title="Intermediate values: chunk tok/s (what was pruned when)",
        xaxis_title="chunk",
        yaxis_title="tok/s",
        xaxis=dict(dtick=1),
        **LAYOUT,
    )
    return fig


def fig_contour(study: optuna.Study) -> go.Figure:
    searched = [t for t in _searched(study) if STEPS in t.params and TOPK in t.params]
    if (
        len({(t.params[STEPS], t.params[TOPK]) for t in searched}) < 2
        or len({t.params[STEPS] for t in searched}) < 2
        or len({t.params[TOPK] for t in searched}) < 2
    ):
        raise ValueError("needs feasible trials with at least two values of both steps and topk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = optuna.visualization.plot_contour(_study_view(study, searched), params=[STEPS, TOPK])
    fig.update_layout(title="tok/s over speculative-num-steps x speculative-eagle-topk", **LAYOUT)
    return fig


def fig_accept(study: optuna.Study) -> go.Figure:
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if isinstance(t.user_attrs.get(R.ACCEPT_LENGTH), (int, float))
        and isinstance(t.user_attrs.get(R.TOK_PER_S), (int, float))
        and not t.user_attrs.get(R.DUPLICATE_OF)
    ]
    if not trials:
        raise ValueError("no trial has measured an accept length yet")
    fig = go.Figure()
    by: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        by.setdefault(outcome(t), []).append(t)
    for oc, ts in by.items():
        fig.add_trace(
            go.Scatter(
                x=[t.user_attrs[R.ACCEPT_LENGTH] for t in ts],
                y=[t.user_attrs[R.TOK_PER_S] for t in ts],
                mode="markers+text",
                name=oc,
                text=[f"#{t.number}" for t in ts],
                textposition="top center",
                marker=dict(
                    size=[8 + 3 * int(t.params.get(STEPS, 1) or 1) for t in ts], color=OUTCOME_COLORS.get(oc, "#555")
                ),
                customdata=[_hover(t) for t in ts],
                hovertemplate="%{customdata}<br>accept %{x:.2f}, %{y:.1f} tok/s<extra></extra>",
            )
        )
    base = _baseline_value(study)
    if base:
        fig.add_hline(y=base, line=dict(color="#424242", dash="dash"), annotation_text="baseline")
    fig.update_layout(
        title="Accept length against tok/s (marker size = steps)",
        xaxis_title="accept length",
        yaxis_title="tok/s",
        **LAYOUT,
    )
    return fig


def fig_boot(study: optuna.Study) -> go.Figure:
    """Boot time per launched trial, stacked by phase."""
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get(R.BOOT_PHASES) or isinstance(t.user_attrs.get(R.BOOT_S), (int, float))
    ]
    if not trials:
        raise ValueError("no server has booted yet")
    labels = [f"#{t.number}" for t in trials]
    rows = {t.number: boot_rows(t.user_attrs.get(R.BOOT_PHASES) or {}) for t in trials}
    phases: list[str] = []
    for r in rows.values():
        for name, _, _ in r:
            if name not in phases:
                phases.append(name)
    fig = go.Figure()
    for i, ph in enumerate(phases):
        ys = [next((d for n, _, d in rows[t.number] if n == ph), 0.0) for t in trials]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=ys,
                name=ph,
                marker_color=PHASE_COLORS[i % len(PHASE_COLORS)],
                customdata=[_hover(t) for t in trials],
                hovertemplate="%{customdata}<br>" + ph + ": %{y:.1f} s<extra></extra>",
            )
        )
    no_phases = [t for t in trials if not rows[t.number]]
    if no_phases:
        fig.add_trace(
            go.Bar(
                x=[f"#{t.number}" for t in no_phases],
                y=[t.user_attrs[R.BOOT_S] for t in no_phases],
                name="boot (no phases)",
                marker_color="#bdbdbd",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=[0] * len(trials),
            mode="markers",
            showlegend=False,
            hoverinfo="skip",
            marker=dict(color=[OUTCOME_COLORS.get(outcome(t), "#555") for t in trials], size=7, symbol="square"),
        )
    )
    fig.update_layout(
        barmode="stack",
        title="Boot time per trial, by phase (square = outcome colour)",
        xaxis_title="trial",
        yaxis_title="seconds since launch",
        **LAYOUT,
    )
    return fig


def fig_timeline(study: optuna.Study) -> go.Figure:
    """Gantt chart: one row per host, one bar per launched trial from t_start to t_end, coloured by outcome."""
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if isinstance(t.user_attrs.get(R.T_START), (int, float))
        and isinstance(t.user_attrs.get(R.T_END), (int, float))
        and t.user_attrs[R.T_START] > 0
    ]
    if not trials:
        raise ValueError("no trial has run on a host yet")
    fig = go.Figure()
    shown: set[str] = set()
    hosts = sorted({str(t.user_attrs.get(R.HOST) or "?") for t in trials})
    for t in sorted(trials, key=lambda t: t.user_attrs[R.T_START]):
        oc = outcome(t)
        t0, t1 = float(t.user_attrs[R.T_START]), float(t.user_attrs[R.T_END])
        start = dt.datetime.fromtimestamp(t0)
        fig.add_trace(
            go.Bar(
                y=[str(t.user_attrs.get(R.HOST) or "?")],
                x=[max(t1 - t0, 0.5) * 1000.0],
                base=[start.isoformat()],
                orientation="h",
                name=oc,
                legendgroup=oc,
                showlegend=oc not in shown,
                marker=dict(color=OUTCOME_COLORS.get(oc, "#555"), line=dict(color="white", width=1)),
                text=[f"#{t.number}"],
                textposition="inside",
                insidetextanchor="middle",
                customdata=[[_hover(t), t1 - t0]],
                hovertemplate="%{customdata[0]}<br>%{customdata[1]:.0f} s<extra>" + oc + "</extra>",
            )
        )
        shown.add(oc)
    fig.update_layout(
        title="Timeline of trials per host",
        barmode="overlay",
        xaxis=dict(type="date", title="time"),
        yaxis=dict(title="host", categoryorder="array", categoryarray=hosts),
        **LAYOUT,
    )
    fig.update_layout(height=max(220, 120 + 60 * len(hosts)))
    return fig


FIGURES: tuple[tuple[str, str, Callable[[optuna.Study], go.Figure]], ...] = (
    ("history", "Optimisation history", fig_history),
    ("importances", "Parameter importances", fig_importances),
    ("parallel", "Parallel coordinates", fig_parallel),
    ("intermediate", "Intermediate values", fig_intermediate),
    ("contour", "Steps x topk", fig_contour),
    ("accept", "Accept length against tok/s", fig_accept),
    ("boot", "Boot time per trial", fig_boot),
    ("timeline", "Timeline per host", fig_timeline),
)


# ---------------------------------------------------------------------------------------------- html
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f5f6f8;color:#222}
header{background:#263238;color:#fff;padding:18px 28px}
header h1{margin:0 0 6px 0;font-size:22px} header .sub{opacity:.8;font-size:13px}
main{padding:18px 28px;max-width:1500px;margin:auto}
.cards{display:flex;gap:14px;flex-wrap:wrap;margin-bottom:16px}
.card{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 3px rgba(0,0,0,.12);min-width:150px}
.card .k{font-size:12px;color:#666;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:22px;font-weight:600;margin-top:4px} .card .v.small{font-size:15px}
.gain{color:#2e7d32} .loss{color:#c62828}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:14px}
section.fig{background:#fff;border-radius:8px;padding:6px;box-shadow:0 1px 3px rgba(0,0,0,.12)}
.skip{padding:30px;color:#777;font-style:italic}
.skip h3{font-style:normal;color:#444;margin:0 0 8px 0}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px;margin-top:16px}
th,td{padding:5px 8px;border-bottom:1px solid #e6e6e6;text-align:left;vertical-align:top}
th{background:#eceff1} td.num{text-align:right;font-variant-numeric:tabular-nums}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px}
code{background:#eceff1;padding:1px 4px;border-radius:3px}
"""


def _pill(oc: str) -> str:
    return f'<span class="pill" style="background:{OUTCOME_COLORS.get(oc, "#555")}">{html.escape(oc)}</span>'


def _num(v: Any, fmt: str = "{:.1f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def _header(study: optuna.Study) -> str:
    """The headline cards: the exported answer (``optimizer.answer``), as the terminal and the study note show it."""
    from .answer import badge_note, gain_verdict, study_answer

    trials = study.get_trials(deepcopy=False)
    ans = study_answer(study)
    base = _baseline_value(study)
    counts: dict[str, int] = {}
    for t in trials:
        counts[outcome(t)] = counts.get(outcome(t), 0) + 1
    cards = []
    if ans is not None:
        how = f"confirmed, {ans['launches']} launches" if ans["confirmed"] else "one launch, not confirmed"
        ci = ans.get("ci") or [None, None]
        level = f"{ans['ci_level']:.0%}"
        interval = (
            f"<br><span style='font-size:13px'>{level} CI {ci[0]:.1f}-{ci[1]:.1f}</span>" if None not in ci else ""
        )
        cards.append(("answer (exported)", html.escape(f"trial {ans['trial']}: {ans['config'] or ''}"), "small"))
        cards.append(
            (
                "answer tok/s",
                f"{ans['tok_per_s']:.1f} <span style='font-size:13px'>(trial {ans['trial']}, {how})</span>{interval}",
                "",
            )
        )
        if ans.get("gain") is not None:
            cls = "gain" if ans["gain"] >= 0 else "loss"
            cards.append(("gain over baseline", f"<span class='{cls}'>{ans['gain']:+.1%}</span>", ""))
    else:
        cards.append(("answer (exported)", "no feasible trial yet", "small"))
    cards.append(("baseline tok/s", f"{base:.1f}" if base else "not measured", ""))
    cards.append(("trials", " ".join(f"{_pill(k)}&nbsp;{n}" for k, n in sorted(counts.items())) or "none", "small"))
    launched = sum(1 for t in trials if t.user_attrs.get(R.LAUNCHED))
    cards.append(("server launches", str(launched), ""))
    body = "".join(f"<div class='card'><div class='k'>{k}</div><div class='v {c}'>{v}</div></div>" for k, v, c in cards)
    extra = ""
    if ans is not None:
        items = [f"<li>{html.escape(ans['verdict'])}</li>"]
        items += [
            f"<li>equivalent: trial {a['trial']} {html.escape(str(a['config']))}: {a['tok_per_s']:.1f} tok/s; "
            f"{html.escape(gain_verdict(a['gain'], a['gain_ci'], confirmed=True, level=ans['ci_level']))}</li>"
            for a in ans["alternatives"]
        ]
        items.append(f"<li>why trial {ans['trial']}: {html.escape(ans['why'])}</li>")
        if badge_note(ans):
            items.append(f"<li>{html.escape(badge_note(ans) or '')}</li>")
        extra = f"<ul class='answer'>{''.join(items)}</ul>"
        f = redact_attrs(ans["flags"])
        env = redact_attrs(ans["env"])
        line = (
            " ".join(f"{k}={v}" for k, v in env.items())
            + (" " if env else "")
            + " ".join(f"--{k} {v}" for k, v in f.items())
        )
        if line.strip():
            extra += f"<p>Answer's launch: <code>{html.escape(line)}</code></p>"
    return f"<div class='cards'>{body}</div>{extra}"


def _table(study: optuna.Study) -> str:
    head = (
        "trial",
        "config",
        "outcome",
        "tok/s",
        "gain",
        "accept",
        "TTFT p50 ms",
        "ITL p50 ms",
        "boot s",
        "host",
        "reason",
    )
    base = _baseline_value(study)
    rows = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        val = t.value if feasible(t) else None
        gain = f"{val / base - 1:+.1%}" if val is not None and base else ""
        reason = ua.get(R.FAILURE_REASON) or (f"duplicate of {ua[R.DUPLICATE_OF]}" if "duplicate_of" in ua else "")
        if outcome(t) == "pruned" and ua.get(R.PRUNED_AT_CHUNK) is not None:
            reason = f"pruned after chunk {ua[R.PRUNED_AT_CHUNK]}"
        cells = [
            str(t.number),
            html.escape(str(ua.get(R.CONFIG, ""))) + (" <b>(baseline)</b>" if ua.get(R.BASELINE) else ""),
            _pill(outcome(t)),
            _num(val),
            gain,
            _num(ua.get(R.ACCEPT_LENGTH), "{:.2f}"),
            _num(ua.get("ttft_ms_p50")),
            _num(ua.get("itl_ms_p50"), "{:.2f}"),
            _num(ua.get(R.BOOT_S)),
            html.escape(str(ua.get(R.HOST, ""))),
            html.escape(clip(str(reason), 300)),
        ]
        rows.append(
            "<tr>"
            + "".join(
                f"<td class='num'>{c}</td>" if i in (0, 3, 4, 5, 6, 7, 8) else f"<td>{c}</td>"
                for i, c in enumerate(cells)
            )
            + "</tr>"
        )
    return (
        "<h2>Trials</h2><table><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _pct(v: Any) -> str:
    return f"{v:+.1%}" if isinstance(v, (int, float)) else ""


def _alarms(study: optuna.Study) -> str:
    from .alarms import study_alarms

    found = study_alarms(study)
    if not found:
        return ""
    rows = []
    for number, items in sorted(found.items()):
        config = study.trials[number].user_attrs.get(R.CONFIG, "")
        for a in items:
            rows.append(
                f"<tr><td class='num'>{number}</td><td>{html.escape(str(config))}</td><td><b>{html.escape(a.kind)}"
                f"</b></td><td>{html.escape(a.seen)}</td><td>{html.escape(a.cause)}</td><td>{html.escape(a.fix)}"
                "</td></tr>"
            )
    return (
        "<h2 class='alarm'>Alarms: likely misconfigurations</h2><table><thead><tr><th>trial</th><th>config</th>"
        "<th>alarm</th><th>seen</th><th>likely cause</th><th>fix</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _confirmation(study: optuna.Study) -> str:
    """The confirmation's arms with intervals, its verdict, the launch noise, and the hosts results came from."""
    from .answer import ci_level
    from .confirm import stored_verdict

    parts = []
    conf = stored_verdict(study)
    if conf:
        rows = []
        winner = (conf.get("winner") or {}).get("label")
        for a in conf.get("arms", []):
            ci = a.get("ci") or [None, None]
            gci = a.get("gain_ci") or [None, None]
            rows.append(
                "<tr>"
                + f"<td>{html.escape(a['label'])}{' <b>(confirmed best)</b>' if a['label'] == winner else ''}</td>"
                + f"<td>{html.escape(str(a.get('config', '')))}</td><td class='num'>{a.get('launches', 0)}</td>"
                + f"<td class='num'>{_num(a.get('tok_per_s'))}</td>"
                + f"<td class='num'>{_num(ci[0])}-{_num(ci[1])}</td>"
                + f"<td class='num'>{_pct(a.get('gain'))}</td>"
                + f"<td class='num'>{'' if None in gci else f'{_pct(gci[0])} to {_pct(gci[1])}'}</td>"
                + f"<td class='num'>{_num(a.get('study_tok_per_s'))}</td>"
                + f"<td class='num'>{' '.join(f'{v:.1f}' for v in a.get('runs', []))}</td></tr>"
            )
        parts.append(
            f"<h2>Confirmation ({conf.get('rounds', '?')} interleaved rounds, fresh restarts)</h2>"
            "<table><thead><tr><th>configuration</th><th>config</th><th>launches</th><th>tok/s (geo. mean)</th>"
            f"<th>{ci_level(conf):.0%} CI</th><th>gain</th><th>gain {ci_level(conf):.0%} CI</th>"
            "<th>study's launch</th><th>each launch</th></tr>"
            "</thead><tbody>" + "".join(rows) + "</tbody></table>"
            "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in conf.get("verdict", [])) + "</ul>"
        )
    noise = study.user_attrs.get(R.LAUNCH_NOISE)
    chunk = None
    try:
        from .pruning import chunk_noise

        chunk = chunk_noise(study, default=float("nan"))
    except Exception:  # noqa: BLE001 - a study without completed trials has no chunk noise
        chunk = None
    bits = []
    if isinstance(noise, dict) and isinstance(noise.get("sigma"), (int, float)):
        bits.append(
            f"between launches {noise['sigma']:.1%} (one sigma, {noise.get('df', '?')} degrees of freedom, "
            f"from {html.escape(str(noise.get('source', '')))})"
        )
    else:
        bits.append("between launches: not measured yet (no configuration was launched twice)")
    if chunk is not None and chunk == chunk:
        bits.append(f"between chunks of one launch {chunk:.1%}")
    parts.append("<p><b>Noise:</b> " + "; ".join(bits) + "</p>")
    hosts: dict[str, str] = {}
    for t in study.get_trials(deepcopy=False):
        facts = t.user_attrs.get(R.HOST_FACTS)
        if isinstance(facts, dict) and t.user_attrs.get(R.HOST):
            desc = ", ".join(f"{k} {v}" for k, v in facts.items() if k != "load_1m")
            version = t.user_attrs.get(R.SERVER_VERSION)
            hosts.setdefault(str(t.user_attrs[R.HOST]), desc + (f", server {version}" if version else ""))
    if hosts:
        parts.append(
            "<p><b>Measured on</b> (a winner holds for the machine it was measured on): "
            + "; ".join(f"{html.escape(h)}: {html.escape(d)}" for h, d in sorted(hosts.items()))
            + "</p>"
        )
    return "".join(parts)


def render_figures(study: optuna.Study) -> list[tuple[str, str, go.Figure | str]]:
    """(key, title, figure or the reason it is not shown) for every section."""
    out: list[tuple[str, str, go.Figure | str]] = []
    for key, title, make in FIGURES:
        try:
            out.append((key, title, make(study)))
        except Exception as exc:  # noqa: BLE001 - a plot that cannot be made yet is a message, not a failure
            out.append((key, title, str(exc) or type(exc).__name__))
    return out


def write_report(study: optuna.Study, path: str | Path) -> Path:
    """Write the report to ``path`` (parent directories created) and return the path."""
    import plotly.offline

    from .levels_view import report_section

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sections = []
    for key, title, fig in render_figures(study):
        if isinstance(fig, str):
            sections.append(
                f"<section class='fig' id='{key}'><div class='skip'><h3>{html.escape(title)}</h3>"
                f"not shown: {html.escape(fig)}</div></section>"
            )
        else:
            div = fig.to_html(
                full_html=False,
                include_plotlyjs=False,
                div_id=f"fig-{key}",
                config={"displaylogo": False, "responsive": True, "displayModeBar": "hover"},
            )
            sections.append(f"<section class='fig' id='{key}'>{div}</section>")
    attrs = study.user_attrs
    sub = " · ".join(
        html.escape(str(x))
        for x in (
            f"space {attrs[R.SPACE]}" if attrs.get(R.SPACE) else "",
            f"created {attrs[R.CREATED]}" if attrs.get(R.CREATED) else "",
            f"report written {time.strftime('%Y-%m-%d %H:%M:%S')}",
            f"optimizer {attrs[R.OPTIMIZER_VERSION]}" if attrs.get(R.OPTIMIZER_VERSION) else "",
        )
        if x
    )
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(study.study_name)}: speculative decoding study</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>
</head><body>
<header><h1>SGLang speculative decoding: study {html.escape(study.study_name)}</h1><div class="sub">{sub}</div></header>
<main>
{_header(study)}
{_alarms(study)}
{_confirmation(study)}
{report_section(study)}
<div class="grid">
{"".join(sections)}
</div>
{_table(study)}
{boot_summary_html(study_boot_summary(study.get_trials(deepcopy=False)))}
</main></body></html>
"""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
    return path
