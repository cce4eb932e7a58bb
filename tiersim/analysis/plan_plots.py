"""Pictures of a ``tiersim plan`` answer (plotly figures drawn from the planner's frames).

``sizing_figure``: hardware cost (USD) against iteration time (s, log axis) for every candidate
of ``fastest``/``cheapest`` that fits, coloured by its binding constraint, one marker symbol per
strategy, open markers for candidates the time target or budget excludes; the Pareto front
(no other candidate is both faster and cheaper) is a line, the target and budget dashed lines.
Candidates that do not fit have no iteration time; a note under the plot counts them by tier.

``largest_model_figure``: one panel per strategy, the bytes each tier holds against model size
(``plan.memory_by_model_size``, GB on a log axis), each tier's capacity as a dashed line of its
colour, and the largest model that fits marked with the tier that stops the next step.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from tiersim.errors import API, ConfigError

SYMBOLS = {"gpu": "circle", "dram": "square", "cxl": "diamond", "nvme": "triangle-up"}
TIER_COLOURS = {"hbm": "#4C78A8", "dram": "#54A24B", "cxl": "#F58518", "nvme": "#9D755D"}
BINDING_COLOURS = ("#E45756", "#4C78A8", "#F58518", "#54A24B", "#B279A2", "#72B7B2", "#9D755D", "#FF9DA6")


def binding_label(binding: str | None) -> str:
    """The kind of a binding constraint, for a colour: ``bandwidth: link nvme (99% ...)`` ->
    ``bandwidth: link nvme``; ``capacity: dram (needs ...)`` -> ``capacity: dram``."""
    if not binding:
        return "unknown"
    return str(binding).split(" (")[0].split(";")[0].strip()


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value))


def pareto_front(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows no other row beats on both iteration time and cost (lower is better), by time.

    Only rows with both an iteration time and a cost take part.
    """
    rows = frame[frame["iteration_time_s"].map(lambda v: not _missing(v))
                 & frame["cost_usd"].map(lambda v: not _missing(v))]
    rows = rows.sort_values(["iteration_time_s", "cost_usd"], kind="stable")
    keep, cheapest = [], float("inf")
    for index, cost in zip(rows.index, rows["cost_usd"]):
        if float(cost) < cheapest:
            keep.append(index)
            cheapest = float(cost)
    return rows.loc[keep]


def sizing_figure(frame: pd.DataFrame, title: str, max_iteration_time: float | None = None,
                  budget: float | None = None) -> go.Figure:
    """Cost against iteration time of a ``fastest``/``cheapest`` frame (see module doc)."""
    drawn = frame[frame["fits"].astype(bool) & frame["cost_usd"].map(lambda v: not _missing(v))]
    if drawn.empty:
        raise ConfigError(API, "frame", "no candidate fits with a price, so there is nothing to plot")
    labels = drawn["binding"].map(binding_label)
    colours = {label: BINDING_COLOURS[i % len(BINDING_COLOURS)] for i, label in enumerate(dict.fromkeys(labels))}
    fig = go.Figure()
    for label, colour in colours.items():
        group = drawn[labels == label]
        for strategy, rows in group.groupby("strategy", sort=False):
            eligible = rows["rank"].map(lambda v: not _missing(v))
            symbol = SYMBOLS.get(str(strategy), "x")
            fig.add_trace(go.Scatter(
                x=rows["iteration_time_s"], y=rows["cost_usd"], mode="markers", name=str(strategy),
                legendgroup=label, legendgrouptitle_text=label,
                marker={"color": colour, "size": 11, "line": {"width": 1.5, "color": colour},
                        "symbol": [symbol if ok else f"{symbol}-open" for ok in eligible]},
                hovertext=[_hover(r) for r in rows.to_dict(orient="records")], hoverinfo="text",
            ))
    front = pareto_front(drawn)
    fig.add_trace(go.Scatter(x=front["iteration_time_s"], y=front["cost_usd"], mode="lines", name="Pareto front",
                             line={"color": "#333333", "width": 1.5, "shape": "hv"}, hoverinfo="skip"))
    best = drawn[drawn["rank"].map(lambda v: not _missing(v) and int(v) == 1)]
    if len(best):
        row = best.iloc[0]
        fig.add_annotation(x=math.log10(float(row["iteration_time_s"])),  # a log axis places by log10
                           y=float(row["cost_usd"]), text="rank 1", showarrow=True, arrowhead=2, ax=30, ay=-30)
    if max_iteration_time is not None:
        fig.add_vline(x=max_iteration_time, line_dash="dash", line_color="#777777")
        fig.add_annotation(text=f"target {max_iteration_time:g} s", x=math.log10(max_iteration_time), xref="x",
                           xanchor="left", y=1, yref="y domain", yanchor="top", showarrow=False)
    if budget is not None:
        fig.add_hline(y=budget, line_dash="dash", line_color="#777777",
                      annotation_text=f"budget ${budget:,.0f}", annotation_position="top left")
    unfit = frame[~frame["fits"].astype(bool)]
    note = f"{len(drawn)} of {len(frame)} candidates drawn; open marker: excluded by the time target or budget"
    if len(unfit):
        counts = Counter(binding_label(b) for b in unfit["binding"])
        note += "; not drawn, do not fit: " + ", ".join(f"{k} ({n})" for k, n in counts.items())
    fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=-0.2, showarrow=False, xanchor="left",
                       font={"size": 11})
    fig.update_layout(title=title, xaxis={"title": "iteration time (s)", "type": "log"},
                      yaxis={"title": "hardware cost (USD)", "tickformat": "$,.0f"},
                      legend={"title": {"text": "binding constraint / strategy"}, "groupclick": "toggleitem"},
                      height=560, width=1100, margin={"l": 90, "r": 20, "t": 60, "b": 110})
    return fig


def _hover(row: dict[str, Any]) -> str:
    sizing = f"DRAM {row['dram_gib_per_socket']:g} GiB/socket, CXL {row['cxl_devices']}, NVMe {row['nvme_drives']}"
    rank = "-" if _missing(row.get("rank")) else str(row["rank"])
    why = f"<br>excluded: {row['excluded']}" if not _missing(row.get("excluded")) else ""
    return (f"rank {rank}: {row['strategy']}, {sizing}<br>{row['iteration_time_s']:.4g} s, ${row['cost_usd']:,.0f}"
            f"<br>{row['binding']}{why}")


def largest_model_figure(memory: pd.DataFrame, frame: pd.DataFrame, title: str) -> go.Figure:
    """Bytes per tier against model size, a panel per strategy (see module doc).

    ``memory`` has columns strategy, params_b, tier, need_bytes, capacity_bytes (as
    ``plan.memory_by_model_size`` gives); ``frame`` is the largest-model answer.
    """
    from plotly.subplots import make_subplots

    order = list(SYMBOLS)
    strategies = sorted(dict.fromkeys(memory["strategy"]),
                        key=lambda s: (order.index(s) if s in order else len(order), s))
    fig = make_subplots(
        rows=1, cols=len(strategies), subplot_titles=strategies, shared_yaxes=False, horizontal_spacing=0.06
    )
    shown: set[str] = set()
    best = frame.set_index("strategy")
    for col, strategy in enumerate(strategies, start=1):
        part = memory[memory["strategy"] == strategy]
        for tier, rows in part.groupby("tier", sort=False):
            _add_tier(fig, str(strategy), str(tier), rows.sort_values("params_b"), col, shown)
        if strategy in best.index and not _missing(best.loc[strategy, "params_b"]):
            _mark_largest_fit(fig, best.loc[strategy], col)
        fig.update_xaxes(
            title_text="model size (B parameters)", range=[0, 1.05 * float(part["params_b"].max())], row=1, col=col
        )
        fig.update_yaxes(
            title_text="GB held (HBM per GPU, host tiers per node)" if col == 1 else None, type="log", row=1, col=col
        )
    fig.update_layout(
        title=title,
        legend_title="tier",
        height=520,
        width=max(700, 400 * len(strategies)),
        margin={"l": 80, "r": 20, "t": 80, "b": 60},
    )
    return fig


def _add_tier(fig: go.Figure, strategy: str, tier: str, rows: pd.DataFrame, col: int, shown: set[str]) -> None:
    """One tier's bytes held (GB) against model size in panel ``col``, and its capacity as a
    dashed line of its colour; its legend entry only where ``shown`` does not yet hold it."""
    colour = TIER_COLOURS.get(tier, "#333333")
    fig.add_trace(
        go.Scatter(
            x=rows["params_b"],
            y=rows["need_bytes"] / 1e9,
            mode="lines+markers",
            name=tier,
            legendgroup=tier,
            showlegend=tier not in shown,
            line={"color": colour},
            hovertemplate=f"{strategy}: {tier} holds %{{y:.4g}} GB at %{{x:.4g}} B params<extra></extra>",
        ),
        row=1,
        col=col,
    )
    shown.add(tier)
    capacity = float(rows["capacity_bytes"].iloc[0]) / 1e9
    fig.add_hline(y=capacity, line_dash="dash", line_color=colour, row=1, col=col)
    fig.add_annotation(
        text=f"{tier} capacity {capacity:,.0f} GB",
        x=0,
        xref="x domain",
        xanchor="left",
        y=math.log10(capacity),
        yanchor="bottom",
        showarrow=False,  # log axis: log10
        font={"size": 10, "color": colour},
        row=1,
        col=col,
    )


def _mark_largest_fit(fig: go.Figure, best: pd.Series, col: int) -> None:
    """A dotted line in panel ``col`` at the largest model that fits (B params), naming the
    tier that stops the next step where the answer ``best`` gives one."""
    size = float(best["params_b"])
    tier = best.get("next_binding_tier")
    bound = f"; next step: {tier} full" if not _missing(tier) else ""
    fig.add_vline(
        x=size,
        line_dash="dot",
        line_color="#333333",
        row=1,
        col=col,
        annotation_text=f"largest fit {size:.1f} B{bound}",
        annotation_position="bottom right",
        annotation_font={"size": 10},
        annotation_yref="y domain",
        annotation_y=0,
    )
