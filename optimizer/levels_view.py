"""Per-level answers for people: the report's section (best configuration per load level, latency limits, the
Pareto front of tok/s against p99 ITL with its plot), the lines of a trial's dashboard note, and the terminal
table. Everything is read from storage through ``optimizer.levels``."""

from __future__ import annotations

import html
from typing import Any

import optuna
import plotly.graph_objects as go

from .levels import (
    adaptive_lines,
    adaptive_rows,
    level_answers,
    pareto_front,
    pareto_points,
    study_plan,
    table_lines,
    trial_levels,
)
from .objective import LIMIT_METRICS


def _num(v: Any, fmt: str = "{:.1f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def fig_pareto(study: optuna.Study) -> go.Figure | None:
    plan = study_plan(study)
    if plan is None:
        return None
    points = pareto_points(study, plan)
    if len(points) < 2:
        return None
    front = {r["trial"] for r in pareto_front(study, plan)}
    level = plan.level if plan.level is not None else plan.levels[-1]
    fig = go.Figure()
    for on_front, name, color in ((False, "dominated", "#b0bec5"), (True, "Pareto front", "#c62828")):
        pts = [p for p in points if (p[2] in front) == on_front]
        if not pts:
            continue
        if on_front:
            pts.sort(key=lambda p: p[1])
        fig.add_trace(
            go.Scatter(
                x=[p[1] for p in pts],
                y=[p[0] for p in pts],
                mode="lines+markers" if on_front else "markers",
                name=name,
                marker=dict(size=10 if on_front else 8, color=color),
                line=dict(shape="hv", color=color) if on_front else None,
                text=[f"trial {p[2]}: {p[3]}" for p in pts],
                hovertemplate="%{text}<br>%{y:.1f} tok/s, p99 ITL %{x:.2f} ms<extra></extra>",
            )
        )
    fig.update_layout(
        template="plotly_white",
        height=430,
        margin=dict(l=60, r=30, t=80, b=50),
        title=f"Trade-off at concurrency {level}: tok/s against p99 inter-token latency",
        xaxis_title="p99 ITL (ms, lower is better)",
        yaxis_title="output tok/s (higher is better)",
    )
    return fig


def report_section(study: optuna.Study) -> str:
    """The report's per-level section; empty for a single-level study without limits or trade-off."""
    plan = study_plan(study)
    if plan is None or not (plan.multi_level or plan.limits or plan.pareto):
        return ""
    parts = [f"<h2>Answers per load level</h2><p>Objective: {html.escape(plan.describe())}.</p>"]
    if plan.limits:
        items = "".join(f"<li>{html.escape(t)}</li>" for t in plan.limit_text())
        parts.append(
            f"<p>Latency limits (a configuration that breaks one ran, but cannot be the best):</p><ul>{items}</ul>"
        )
    if plan.multi_level:
        head = ("concurrency", "best configuration", "trial", "tok/s", "baseline tok/s", "gain", "TTFT p99 ms",
                "ITL p99 ms", "accept", "")  # fmt: skip
        rows = []
        for a in level_answers(study, plan):
            r = a.row()
            gain = r["gain_over_baseline"]
            cls = "gain" if gain is not None and gain > 0 else "loss"
            cells = [
                str(a.level),
                html.escape(str(r["config"] or "-")),
                "" if r["trial"] is None else str(r["trial"]),
                _num(r["tok_per_s"]),
                _num(r["baseline_tok_per_s"]),
                f"<span class='{cls}'>{gain:+.1%}</span>" if gain is not None else "",
                _num(r["ttft_ms_p99"]),
                _num(r["itl_ms_p99"], "{:.2f}"),
                _num(r["accept_length"], "{:.2f}"),
                f"<b>{html.escape(r['note'])}</b>" if r["note"] else html.escape(str(r["file"] or "")),
            ]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append(
            "<table><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
        parts.append(_adaptive_table(study, plan))
    front = pareto_front(study, plan)
    if plan.pareto or len(front) > 1:
        level = plan.level if plan.level is not None else plan.levels[-1]
        rows = "".join(
            f"<tr><td>{r['trial']}</td><td>{html.escape(str(r['config']))}</td><td>{r['tok_per_s']:.1f}</td>"
            f"<td>{r['itl_ms_p99']:.2f}</td></tr>"
            for r in front
        )
        parts.append(
            f"<h3>Pareto front at concurrency {level}</h3><p>No other trial is both faster and lower in p99 ITL.</p>"
            "<table><thead><tr><th>trial</th><th>configuration</th><th>tok/s</th><th>ITL p99 ms</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
        fig = fig_pareto(study)
        if fig is not None:
            div = fig.to_html(
                full_html=False, include_plotlyjs=False, div_id="fig-pareto", config={"displaylogo": False}
            )
            parts.append(f"<section class='fig' id='pareto'>{div}</section>")
    return "".join(parts)


def _adaptive_table(study: optuna.Study, plan) -> str:
    rows = adaptive_rows(study, plan)
    if not rows:
        return ""
    body = ""
    for r in rows:
        vs = r["adaptive_vs_static"]
        cls = "gain" if vs is not None and vs > 0 else "loss"
        body += (
            f"<tr><td>{r['concurrency']}</td><td>{html.escape(str(r['static_config'] or '-'))}</td>"
            f"<td>{_num(r['static_tok_per_s'])}</td><td>{html.escape(str(r['adaptive_config'] or '-'))}</td>"
            f"<td>{_num(r['adaptive_tok_per_s'])}</td>"
            + (f"<td><span class='{cls}'>{vs:+.1%}</span></td>" if vs is not None else "<td></td>")
            + "</tr>"
        )
    return (
        "<h3>SGLang's adaptive speculation against the static answers</h3><p>Each level's best static "
        "configuration next to the best launch in SGLang's adaptive mode (<code>--speculative-adaptive</code>).</p>"
        "<table><thead><tr><th>concurrency</th><th>best static</th><th>tok/s</th><th>adaptive mode</th>"
        f"<th>tok/s</th><th>vs static</th></tr></thead><tbody>{body}</tbody></table>"
    )


def note_lines(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> list[str]:
    """Markdown lines for a trial's note: its figures at each level and whether it meets each latency limit."""
    per = trial_levels(frozen)
    if not per:
        return []
    plan = study_plan(study)
    lines = ["### Per load level", ""]
    lines.append("| concurrency | tok/s | TTFT p99 ms | ITL p99 ms | accept length | measured |")
    lines.append("|---|---|---|---|---|---|")
    for c in sorted(per):
        m = per[c]
        done = "all chunks" if m.get("complete") else f"{m.get('chunks_run', 0)} of {m.get('chunks_planned', '?')}"
        lines.append(
            f"| {c} | {_num(m.get('tok_per_s'))} | {_num(m.get('ttft_ms_p99'))} | {_num(m.get('itl_ms_p99'), '{:.2f}')} "
            f"| {_num(m.get('accept_length'), '{:.2f}')} | {done} |"
        )
    lines.append("")
    if plan is not None and plan.limits:
        for c, items in plan.limits.items():
            m = per.get(c)
            for key, bound in items:
                got = m.get(LIMIT_METRICS[key]) if m else None
                state = "not measured" if got is None else ("met" if got <= bound else "**broken**")
                lines.append(f"- limit c{c} {key.replace('_ms', '').replace('_', ' ')} <= {bound:g} ms: {state}"
                             + (f" ({got:.2f} ms)" if got is not None else ""))  # fmt: skip
        lines.append("")
    return lines


def terminal_lines(summary: dict[str, Any], study: optuna.Study) -> list[str]:
    plan = study_plan(study)
    if plan is None or not summary.get("levels"):
        return []
    out = [f"best per load level (objective: {plan.describe()}):"]
    out += table_lines(level_answers(study, plan))
    ad = adaptive_lines(adaptive_rows(study, plan))
    if ad:
        out += ["SGLang's adaptive speculation against the best static configuration, per load level:", *ad]
    sched = summary.get("adaptive")
    if isinstance(sched, dict) and sched.get("levels"):
        steps = ", ".join(f"c{r['concurrency']} {r['steps']} steps" for r in sched["levels"])
        conf = sched.get("confirmation") if sched.get("confirmed") else None
        how = f"confirmed over {conf.get('rounds')} rounds" if conf else "not confirmed"
        out.append(f"one server for every level (best-adaptive.sh, SGLang's adaptive mode, {how}): {steps}")
        out += [f"  c{r['concurrency']}: {r['note']}" for r in sched["levels"] if r.get("note")]
        for c, row in ((conf or {}).get("levels") or {}).items():
            out.append(f"  c{c}: tuned schedule {_vs(row.get('tuned_vs_static'))} against the static best, "
                       f"{_vs(row.get('tuned_vs_default'))} against SGLang's default adaptive config")  # fmt: skip
    for text in plan.limit_text():
        out.append(f"latency limit {text}")
    return out


def study_note_lines(study: optuna.Study) -> str:
    """The study note's per-level table (empty for a single-level study)."""
    plan = study_plan(study)
    if plan is None or not plan.multi_level:
        return ""
    lines = ["", f"### Best per load level (objective: {plan.describe()})", "", "```text"]
    lines += table_lines(level_answers(study, plan))
    ad = adaptive_lines(adaptive_rows(study, plan))
    if ad:
        lines += ["", "SGLang's adaptive speculation against the best static configuration:", *ad]
    lines += ["```", ""]
    lines += [f"- latency limit {t}" for t in plan.limit_text()]
    return "\n".join(lines) + "\n"


def _vs(cmp: dict | None) -> str:
    """A confirmation's gain with its 95 % interval, or why there is none."""
    if not cmp:
        return "not measured"
    ci = cmp.get("ci")
    return f"{cmp['gain']:+.1%}" + (f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else " (no interval yet)")
