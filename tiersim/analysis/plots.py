"""Plotly figures of a run: a timeline (Gantt), utilisation bars, phase bars, and an HTML report.

``timeline_figure`` has one row per stream (GPU compute, all-gather, reduce-scatter, each copy
engine, CPU Adam, aio read/write) plus one row per shared tier link (``link dram``, ``link cxl``,
``link nvme``, ``link pcie_h2d``...) showing when any flow was on it; bars are coloured by task
category and their hover gives the task name, bytes, start and end. To keep a figure light a
stream's consecutive tasks of one category closer than ``merge_gap`` (default: 1/2000 of the
iteration) are drawn as one bar when there are more than ``max_bars`` tasks (the hover then
says how many tasks it holds).

``write_report`` writes a run's figures as one HTML page, or (PNG, SVG, PDF) as one tall static
figure that ``stack_figures`` assembles from the same figures (``tiersim.analysis.figure_export``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from tiersim.engine import TaskGraph
from tiersim.errors import API, ConfigError
from tiersim.results import PHASES, Result

STREAM_ORDER = ("gpu", "allgather", "reduce_scatter", "partition_grads", "h2d", "d2h", "cpu", "aio_read", "aio_write")
COLOURS = {
    "compute": "#4C78A8", "adam": "#F58518", "accumulate": "#E45756", "h2d": "#72B7B2", "d2h": "#54A24B",
    "allgather": "#B279A2", "reduce_scatter": "#FF9DA6", "nvme_read": "#9D755D", "nvme_write": "#BAB0AC",
    "p2p": "#EECA3B", "tensor_parallel": "#17BECF", "all_to_all": "#D67195", "link": "#808080",
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
    work = result.trace[~result.trace["category"].isin(("marker", "stage_marker"))]
    gap = merge_gap if merge_gap is not None else (makespan / 2000 if len(work) > max_bars else -1.0)
    bars = _merge(work, gap)
    if links:
        from tiersim.analysis.explain import task_graph

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
        xaxis_title="time (s)",
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1], "title": "stream or link"},
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
    windows = ("iteration", *PHASES)
    width = 0.8 / len(windows)  # the bars of one resource side by side, placed explicitly (any barmode)
    for i, phase in enumerate(windows):
        part = util[util["phase"] == phase]
        fig.add_trace(go.Bar(
            x=[labels[r] for r in part["resource"]], y=part["utilisation"], name=phase,
            marker_color=PHASE_COLOURS[phase], width=width, offset=-0.4 + i * width,
            hovertext=[f"{labels[r]} in {phase}: {u:.1%}" for r, u in zip(part["resource"], part["utilisation"])],
            hoverinfo="text",
        ))
    fig.update_layout(
        barmode="overlay", title=f"{result.config.scenario} / {result.strategy}: utilisation",
        yaxis={"title": "utilisation", "tickformat": ".0%", "range": [0, 1.05]},
        xaxis={"categoryorder": "array", "categoryarray": [labels[r] for r in resources],
               "title": "stream or link"},
        legend_title="phase", height=380, margin={"l": 60, "r": 20, "t": 50, "b": 80},
    )
    return fig


def phase_bars(results: Sequence[Result] | pd.DataFrame, label: str = "strategy") -> go.Figure:
    """Stacked forward / backward / optimizer-step seconds, one bar per result (or frame row).

    A frame needs ``label`` and ``forward_s``, ``backward_s``, ``optimizer_step_s`` columns (as
    ``tiersim.analysis.plan`` and ``tiersim.analysis.report.flat_row`` give); rows that do not fit are skipped.
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
    base = [0.0] * len(names)  # stacked by explicit bases, so the bars stay stacked in any barmode
    for phase in PHASES:
        fig.add_trace(go.Bar(y=names, x=values[phase], base=base, name=phase, orientation="h",
                             marker_color=PHASE_COLOURS[phase]))
        base = [b + v for b, v in zip(base, values[phase])]
    fig.update_layout(barmode="overlay", xaxis_title="seconds per iteration", height=140 + 40 * len(names),
                      title="iteration time by phase", margin={"l": 120, "r": 20, "t": 50, "b": 40},
                      yaxis={"autorange": "reversed", "title": label}, legend_title="phase")
    return fig


def _axis_ref(ref: str, offset: int) -> str:
    """``x``/``y2``/``y domain`` with its axis number moved up by ``offset`` (others unchanged)."""
    head, _, tail = ref.partition(" ")
    if not head or head[0] not in "xy" or not (head[1:] == "" or head[1:].isdigit()):
        return ref
    number = int(head[1:] or 1) + offset
    return f"{head[0]}{number}" + (f" {tail}" if tail else "")


def stack_figures(figures: Sequence[go.Figure], title: str | None = None, width: int = 1200,
                  gap: int = 30) -> go.Figure:
    """One tall figure holding ``figures`` top to bottom, for a static picture of a report.

    Each panel keeps its axes, traces, shapes, annotations, margins, height (px) and title; a
    trace's legend entry shows the first time its name appears, in a legend beside that panel.
    Bars are overlaid (one barmode holds for the whole figure), so panels place their bars
    explicitly (``base``, ``offset``), as this module's figures do.
    """
    heights = [int(f.layout.height or 450) for f in figures]
    top = 60 if title else 10
    total = top + sum(heights) + gap * (len(figures) - 1) + 10
    out = go.Figure()
    out.update_layout(width=width, height=total, showlegend=True, barmode="overlay",
                      margin={"l": max(int(f.layout.margin.l or 80) for f in figures), "r": 220, "t": top, "b": 10},
                      title=title)
    paper = total - top - 10  # px of paper, top to bottom
    y0 = float(top)
    axes = 0
    shown: set[str] = set()
    for k, (fig, height) in enumerate(zip(figures, heights), start=1):
        lo, hi = _plot_span(fig, y0 - top, height, paper)
        layout = fig.layout.to_plotly_json()
        count = _copy_axes(out, layout, axes, lo, hi)
        legend = f"legend{k}" if k > 1 else "legend"
        if _copy_traces(out, fig, axes, legend, shown):
            out.layout[legend] = {"y": hi, "yanchor": "top", "x": 1.02, "xanchor": "left",
                                  "title": {"text": fig.layout.legend.title.text or ""}}
        for shape in layout.get("shapes", ()):
            out.add_shape(_on_panel(shape, axes, lo, hi, {"y0": 0.0, "y1": 1.0}))
        for note in layout.get("annotations", ()):
            out.add_annotation(_on_panel(note, axes, lo, hi, {"y": 0.5}))
        if fig.layout.title.text:
            out.add_annotation(text=f"<b>{html.escape(fig.layout.title.text)}</b>", xref="paper", yref="paper", x=0,
                               y=hi, yanchor="bottom", xanchor="left", showarrow=False, font={"size": 14}, yshift=6)
        axes += count or 1
        y0 += height + gap
    return out


def _plot_span(fig: go.Figure, y0: float, height: float, paper: float) -> tuple[float, float]:
    """The paper fractions (bottom, top) of a panel's plot area, the panel ``height`` px tall
    starting ``y0`` px from the top of ``paper`` px, less its margins (60 px when unset)."""
    margin = fig.layout.margin
    bottom = y0 + height - (margin.b if margin.b is not None else 60)
    top = y0 + (margin.t if margin.t is not None else 60)
    return 1.0 - bottom / paper, 1.0 - top / paper


def _copy_axes(out: go.Figure, layout: dict[str, Any], axes: int, lo: float, hi: float) -> int:
    """Copy a panel's axes into ``out``, numbered after the ``axes`` already there, its y
    domains scaled into [``lo``, ``hi``] of the paper; returns the panel's number of axes."""
    count = 0
    for key, axis in layout.items():
        if not key.startswith(("xaxis", "yaxis")):
            continue
        number = int(key[5:] or 1)
        count = max(count, number)
        axis = dict(axis)
        for ref in ("anchor", "matches", "overlaying", "scaleanchor"):
            if ref in axis:
                axis[ref] = _axis_ref(axis[ref], axes)
        if key.startswith("yaxis"):
            a, b = axis.get("domain", (0.0, 1.0))
            axis["domain"] = (lo + a * (hi - lo), lo + b * (hi - lo))
        else:
            axis.setdefault("anchor", f"y{number + axes}")
        out.layout[f"{key[:5]}{number + axes}"] = axis
    return count


def _copy_traces(out: go.Figure, fig: go.Figure, axes: int, legend: str, shown: set[str]) -> bool:
    """Copy a panel's traces into ``out`` on its moved axes and in its ``legend``, a name's
    entry shown only the first time (``shown`` holds the names shown); whether any was."""
    legend_used = False
    for trace in fig.data:
        copy = go.Figure(trace).data[0]
        copy.update(xaxis=_axis_ref(trace.xaxis or "x", axes), yaxis=_axis_ref(trace.yaxis or "y", axes),
                    legend=legend, legendgroup=trace.legendgroup or trace.name)
        first = trace.name not in shown and trace.showlegend is not False
        copy.showlegend = first
        if first:
            shown.add(trace.name)
            legend_used = True
        out.add_trace(copy)
    return legend_used


def _on_panel(item: dict[str, Any], axes: int, lo: float, hi: float, ys: dict[str, float]) -> dict[str, Any]:
    """A copy of a shape or annotation on its panel's moved axes; placed on the paper, its
    ``ys`` (with their defaults) are scaled into [``lo``, ``hi``]."""
    item = dict(item)
    for ref in ("xref", "yref"):
        item[ref] = _axis_ref(item.get(ref, ref[0]), axes)
    if item["yref"] == "paper":
        for key, default in ys.items():
            item[key] = lo + item.get(key, default) * (hi - lo)
    return item


def report_parts(results: Sequence[Result], source: str = API) -> list[str | go.Figure]:
    """What a run's report shows, in order: phase bars, then per strategy its critical-path
    explanation (HTML text), timeline and utilisation, or why it does not fit."""
    from tiersim.analysis.explain import explain

    fitted = [r for r in results if r.fits]
    if not fitted:
        raise ConfigError(source, "results", "no strategy fits, so there is nothing to plot")
    parts: list[str | go.Figure] = [phase_bars(fitted)]
    for r in results:
        if not r.fits:
            parts.append(f"<p><b>{html.escape(r.strategy)}</b>: does not fit ({html.escape(str(r.reason))})</p>")
            continue
        lines = explain(r).lines()
        parts.append(f"<h2>{html.escape(r.strategy)}</h2><pre>{html.escape(chr(10).join(lines))}</pre>")
        parts += [timeline_figure(r), utilisation_figure(r)]
    return parts


def write_report(results: Sequence[Result], path: str | Path, title: str | None = None,
                 plotlyjs: str = "inline") -> Path:
    """A run's report, in the format of ``path``'s extension: an HTML page (``plotlyjs``: inline,
    directory or cdn), or a PNG/SVG/PDF of the same figures stacked (without the text)."""
    from tiersim.analysis.figure_export import STATIC_FORMATS, figure_format, write_html, write_static

    fmt = figure_format(path)
    parts = report_parts(results, str(path))
    heading = title or results[0].config.scenario
    if fmt in STATIC_FORMATS:
        figures = [p for p in parts if isinstance(p, go.Figure)]
        return write_static(stack_figures(figures, title=heading), path)
    return write_html(path, parts, heading, plotlyjs)
