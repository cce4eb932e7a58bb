"""Plotly figures of a run: a timeline (Gantt), utilisation bars, phase bars, and an HTML report.

``timeline_figure`` has one row per stream (GPU compute, all-gather, reduce-scatter, each copy
engine, CPU Adam, aio read/write) plus one row per shared tier link (``link dram``, ``link cxl``,
``link nvme``, ``link pcie_h2d``...) showing when any flow was on it; bars are coloured by task
category and their hover gives the task name, bytes, start and end. To keep a figure light a
stream's consecutive tasks of one category closer than ``merge_gap`` (default: 1/2000 of the
iteration) are drawn as one bar when there are more than ``max_bars`` tasks (the hover then
says how many tasks it holds).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import plotly.graph_objects as go

from tiersim.engine import TaskGraph
from tiersim.errors import ConfigError
from tiersim.results import PHASES, Result

STREAM_ORDER = ("gpu", "allgather", "reduce_scatter", "h2d", "d2h", "cpu", "aio_read", "aio_write")
COLOURS = {
    "compute": "#4C78A8", "adam": "#F58518", "accumulate": "#E45756", "h2d": "#72B7B2", "d2h": "#54A24B",
    "allgather": "#B279A2", "reduce_scatter": "#FF9DA6", "nvme_read": "#9D755D", "nvme_write": "#BAB0AC",
    "link": "#808080",
}
PHASE_COLOURS = {"forward": "#4C78A8", "backward": "#F58518", "optimizer_step": "#54A24B", "iteration": "#7F7F7F"}


def _merge(work: pd.DataFrame, gap: float) -> pd.DataFrame:
    """Merge consecutive tasks of one (stream, category) whose gap is at most ``gap`` seconds."""
    rows: list[dict[str, Any]] = []
    for (stream, category), group in work.sort_values("start", kind="stable").groupby(["stream", "category"],
                                                                                       sort=False):
        current: dict[str, Any] | None = None
        for rec in group.itertuples(index=False):
            if current is not None and rec.start - current["end"] <= gap:
                current["end"] = max(current["end"], rec.end)
                current["size"] += rec.size
                current["tasks"] += 1
                current["last"] = rec.name
                continue
            if current is not None:
                rows.append(current)
            current = {"stream": stream, "category": category, "start": rec.start, "end": rec.end,
                       "size": float(rec.size), "tasks": 1, "name": rec.name, "last": rec.name}
        if current is not None:
            rows.append(current)
    return pd.DataFrame(rows)


def _link_intervals(result: Result, graph: TaskGraph) -> pd.DataFrame:
    """Per link, the merged intervals in which at least one flow used it."""
    trace = result.trace.set_index("name")
    spans: dict[str, list[tuple[float, float, float]]] = {}
    for task in graph.tasks:
        if task.size <= 0 or task.name not in trace.index:
            continue
        rec = trace.loc[task.name]
        for link, _units in task.usage:
            spans.setdefault(link, []).append((float(rec["start"]) + task.delay, float(rec["end"]), task.size))
    rows = []
    for link, items in spans.items():
        items.sort()
        cur: list[Any] | None = None
        for start, end, size in items:
            if cur is not None and start <= cur[1]:
                cur[1] = max(cur[1], end)
                cur[2] += size
                cur[3] += 1
                continue
            if cur is not None:
                rows.append({"stream": f"link {link}", "category": "link", "start": cur[0], "end": cur[1],
                             "size": cur[2], "tasks": cur[3], "name": f"flows on {link}", "last": ""})
            cur = [start, end, size, 1]
        if cur is not None:
            rows.append({"stream": f"link {link}", "category": "link", "start": cur[0], "end": cur[1],
                         "size": cur[2], "tasks": cur[3], "name": f"flows on {link}", "last": ""})
    return pd.DataFrame(rows)


def timeline_bars(result: Result, max_bars: int = 1500, merge_gap: float | None = None,
                  links: bool = True) -> pd.DataFrame:
    """The bars ``timeline_figure`` draws: stream, category, start, end, size, tasks, name."""
    if not result.fits or result.trace.empty:
        raise ConfigError("plot", result.strategy, f"nothing to draw: the run does not fit ({result.reason})")
    makespan = float(result.iteration_time_s or 0.0)
    work = result.trace[result.trace["category"] != "marker"]
    gap = merge_gap if merge_gap is not None else (makespan / 2000 if len(work) > max_bars else -1.0)
    bars = _merge(work, gap)
    if links:
        from tiersim.explain import task_graph

        link_bars = _link_intervals(result, task_graph(result))
        if not link_bars.empty:
            bars = pd.concat([bars, link_bars], ignore_index=True)
    return bars


def _row_order(streams: Sequence[str]) -> list[str]:
    known = [s for s in STREAM_ORDER if s in streams]
    others = sorted(s for s in streams if s not in STREAM_ORDER and not s.startswith("link "))
    link_rows = sorted(s for s in streams if s.startswith("link "))
    return known + others + link_rows


def timeline_figure(result: Result, max_bars: int = 1500, links: bool = True) -> go.Figure:
    """Gantt chart of one run: a row per stream and per tier link, bars coloured by category."""
    bars = timeline_bars(result, max_bars=max_bars, links=links)
    rows = _row_order(list(bars["stream"].unique()))
    fig = go.Figure()
    for category, group in bars.groupby("category", sort=False):
        hover = [
            f"{html.escape(n)}" + (f" .. {html.escape(last)} ({k} tasks)" if k > 1 and last else
                                   (f" ({k} flows)" if k > 1 else ""))
            + f"<br>{s:.6g} s - {e:.6g} s ({e - s:.4g} s)<br>{size / 1e9:.4g} GB"
            for n, last, k, s, e, size in zip(group["name"], group["last"], group["tasks"], group["start"],
                                             group["end"], group["size"])
        ]
        fig.add_trace(go.Bar(
            y=group["stream"], x=group["end"] - group["start"], base=group["start"], orientation="h",
            name=str(category), marker_color=COLOURS.get(str(category), "#333333"), hovertext=hover,
            hoverinfo="text", marker_line_width=0,
        ))
    fig.update_layout(
        barmode="overlay", bargap=0.25, height=120 + 32 * len(rows),
        title=f"{result.config.scenario} / {result.strategy}: iteration {result.iteration_time_s:.4g} s",
        xaxis_title="time (s)", yaxis={"categoryorder": "array", "categoryarray": rows[::-1], "title": None},
        legend_title="category", margin={"l": 120, "r": 20, "t": 50, "b": 40},
    )
    if result.phases:
        t = 0.0
        for phase in PHASES:
            if result.phases[phase] > 0 and t > 0:
                fig.add_vline(x=t, line_dash="dot", line_color="#999999")
            t += result.phases[phase]
    return fig


def utilisation_figure(result: Result) -> go.Figure:
    """Utilisation of every stream and link, over the iteration and per phase (grouped bars)."""
    if not result.fits or result.utilisation.empty:
        raise ConfigError("plot", result.strategy, f"nothing to draw: the run does not fit ({result.reason})")
    util = result.utilisation
    resources = list(dict.fromkeys(util["resource"]))
    labels = {r: (f"link {r}" if k == "link" else r) for r, k in zip(util["resource"], util["kind"])}
    fig = go.Figure()
    for phase in ("iteration", *PHASES):
        part = util[util["phase"] == phase]
        fig.add_trace(go.Bar(
            x=[labels[r] for r in part["resource"]], y=part["utilisation"], name=phase,
            marker_color=PHASE_COLOURS[phase],
            hovertext=[f"{labels[r]} in {phase}: {u:.1%}" for r, u in zip(part["resource"], part["utilisation"])],
            hoverinfo="text",
        ))
    fig.update_layout(
        barmode="group", title=f"{result.config.scenario} / {result.strategy}: utilisation",
        yaxis={"title": "utilisation", "tickformat": ".0%", "range": [0, 1.05]},
        xaxis={"categoryorder": "array", "categoryarray": [labels[r] for r in resources]},
        height=380, margin={"l": 60, "r": 20, "t": 50, "b": 80},
    )
    return fig


def phase_bars(results: Sequence[Result] | pd.DataFrame, label: str = "strategy") -> go.Figure:
    """Stacked forward / backward / optimizer-step seconds, one bar per result (or frame row).

    A frame needs ``label`` and ``forward_s``, ``backward_s``, ``optimizer_step_s`` columns (as
    ``tiersim.plan`` and ``tiersim.report.flat_row`` give); rows that do not fit are skipped.
    """
    if isinstance(results, pd.DataFrame):
        frame = results[results["fits"].astype(bool)] if "fits" in results else results
        names = [str(v) for v in frame[label]]
        values = {p: list(frame[f"{p}_s"]) for p in PHASES}
    else:
        fitted = [r for r in results if r.fits and r.phases]
        names = [r.strategy for r in fitted]
        values = {p: [r.phases[p] for r in fitted] for p in PHASES}  # type: ignore[index]
    fig = go.Figure()
    for phase in PHASES:
        fig.add_trace(go.Bar(y=names, x=values[phase], name=phase, orientation="h",
                             marker_color=PHASE_COLOURS[phase]))
    fig.update_layout(barmode="stack", xaxis_title="seconds per iteration", height=140 + 40 * len(names),
                      title="iteration time by phase", margin={"l": 120, "r": 20, "t": 50, "b": 40},
                      yaxis={"autorange": "reversed"})
    return fig


def write_report(results: Sequence[Result], path: str | Path, title: str | None = None) -> Path:
    """One self-contained HTML file (plotly.js inlined, works offline): phase bars, then for each
    fitted strategy its critical-path explanation, timeline and utilisation."""
    from tiersim.explain import explain

    path = Path(path)
    fitted = [r for r in results if r.fits]
    if not fitted:
        raise ConfigError(str(path), "--plot", "no strategy fits, so there is nothing to plot")
    scenario = results[0].config.scenario
    parts = [f"<h1>{html.escape(title or scenario)}</h1>"]
    figures: list[tuple[str, go.Figure | None]] = [("", phase_bars(fitted))]
    for r in results:
        if not r.fits:
            note = f"<p><b>{html.escape(r.strategy)}</b>: does not fit ({html.escape(str(r.reason))})</p>"
            figures.append((note, None))
            continue
        lines = explain(r).lines()
        note = f"<h2>{html.escape(r.strategy)}</h2><pre>{html.escape(chr(10).join(lines))}</pre>"
        figures.append((note, timeline_figure(r)))
        figures.append(("", utilisation_figure(r)))
    first = True
    for note, fig in figures:
        if note:
            parts.append(note)
        if fig is not None:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=True if first else False))
            first = False
    body = "\n".join(parts)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title or scenario)}</title>"
            f"</head><body style='font-family: sans-serif'>\n{body}\n</body></html>\n")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page)
    except OSError as exc:
        raise ConfigError(str(path), "--plot", f"cannot write file ({exc.strerror})") from None
    return path
