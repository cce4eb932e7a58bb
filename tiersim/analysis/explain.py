"""Why an iteration takes as long as it does: the critical path of a run and what bounds it.

The engine starts a task when its stream is free (its stream predecessor ended) and all its
dependencies ended, so ``start == max(predecessor end, ready)``. Walking back from the
last-finishing task, each step goes to whichever of the two ended last when the task started:
the stream predecessor (the stream was busy: the task queued behind work on its own resource)
or the latest-finishing dependency (the task waited for data or a result from elsewhere). The
chain's segments ``[start, end]`` tile ``[0, iteration time]`` exactly, so its time per resource
says which resource the iteration is bounded by.

The breakdown counts each segment in the phase whose time windows it runs in, so a phase's
seconds on the path are the phase's length (``Result.phases``).

Each segment is labelled with its ``resource`` (``gpu compute``, ``cpu adam``, ``d2h``, ``h2d``,
``nvme_read``, ``nvme_write``, ``allgather``, ``reduce_scatter``; see ``resource_label``) and its
``limit``: for a flow, the link that caps it when it runs alone (the one with the least
capacity per byte, e.g. ``pcie_h2d``, ``dram``, ``cxl``, ``nvme``) or ``rate_cap`` when its own
cap (CPU cores, an NVMe stream's queue depth) is lower; ``delay`` for pure compute/latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tiersim.engine import TaskGraph
from tiersim.engine.accounts import COMPUTE_CATEGORIES
from tiersim.engine.graph import Task
from tiersim.errors import ConfigError
from tiersim.jsonout import plain_records
from tiersim.results import PHASES, Result, phase_windows

SEGMENT_COLUMNS = ["name", "stream", "phase", "category", "resource", "limit", "via", "start", "end", "seconds"]


def task_graph(result: Result) -> TaskGraph:
    """The task graph the run executed (carried by every result that fits)."""
    if result.graph is None:
        raise ConfigError("explain", result.strategy, f"does not fit: {result.reason}")
    return result.graph


def resource_label(stream: str, category: str) -> str:
    """``stream category`` for computation (``gpu compute``, ``cpu adam``); the category for a
    transfer (``d2h``, ``h2d``, ``nvme_read``, ``allgather``); the stream for a marker (a pipeline
    stage's too)."""
    if category in COMPUTE_CATEGORIES:
        return f"{stream} {category}"
    return stream if category in ("", "marker", "stage_marker") else category


def flow_limit(task: Task, graph: TaskGraph) -> str:
    """What caps ``task``'s flow on its own: the tightest link, ``rate_cap``, or ``delay``."""
    if task.size <= 0:
        return "delay" if task.delay > 0 else "-"
    best, best_rate = "rate_cap", task.rate_cap
    for link, units in task.usage:
        if units > 0:
            rate = graph.links[link].capacity / units
            if rate < best_rate:
                best, best_rate = link, rate
    return best


def critical_path(result: Result) -> pd.DataFrame:
    """The chain of tasks that ends last, first to last, one row per task (``SEGMENT_COLUMNS``).

    ``via`` says how a segment follows the one before it: ``stream`` (queued behind it on the
    same stream) or ``dep`` (waited for it). Sum of ``seconds`` == iteration time.
    """
    if not result.fits or result.trace.empty:
        raise ConfigError("explain", result.strategy, f"no critical path: the run does not fit ({result.reason})")
    graph = task_graph(result)
    tasks = {t.name: t for t in graph.tasks}
    records = {row.name: row for row in result.trace.itertuples(index=False)}
    if set(records) != set(tasks):
        raise ConfigError("explain", result.strategy, "trace does not match the task graph")
    chain = _walk_back(records, tasks, _stream_predecessors(graph))
    rows = []
    for name, via in chain:
        rec = records[name]
        rows.append({
            "name": name, "stream": rec.stream, "phase": rec.phase, "category": rec.category,
            "resource": resource_label(rec.stream, rec.category), "limit": flow_limit(tasks[name], graph),
            "via": via, "start": rec.start, "end": rec.end, "seconds": rec.end - rec.start,
        })
    return pd.DataFrame(rows, columns=SEGMENT_COLUMNS)


def _stream_predecessors(graph: TaskGraph) -> dict[str, str | None]:
    """{task: the task before it on its stream (None for the first)}."""
    previous: dict[str, str | None] = {}
    for stream_tasks in graph.streams().values():
        prior = None
        for task in stream_tasks:
            previous[task.name] = prior
            prior = task.name
    return previous


def _walk_back(records: dict[str, Any], tasks: dict[str, Task],
               previous: dict[str, str | None]) -> list[tuple[str, str]]:
    """The critical path, first to last, as (task, via): from the task that ends last, each
    step back to the stream predecessor when it ended at or after the task was ready, else to
    the latest-ending dependency, until a task that waited for neither."""
    current: str | None = max(records.values(), key=lambda r: (r.end, -r.start)).name
    chain: list[tuple[str, str]] = []
    while current is not None:
        rec = records[current]
        before = previous[current]
        deps = tasks[current].deps
        if before is not None and records[before].end >= rec.ready:
            chain.append((current, "stream"))
            current = before
        elif deps:
            chain.append((current, "dep"))
            current = max(deps, key=lambda d: records[d].end)
        else:
            chain.append((current, "start"))
            current = None
    chain.reverse()
    return chain


def path_breakdown(path: pd.DataFrame, windows: list[tuple[str, float, float]]) -> pd.DataFrame:
    """Critical-path seconds per (phase, resource, limit), with each one's share of its phase.

    A segment counts in the phase whose time windows (``phase_windows``) it runs in, split
    where it crosses from one into the next (a copy that backward starts and the next forward
    finishes), so each phase's seconds on the path are the phase's length."""
    pieces = []
    for seg in path[path["seconds"] > 0].itertuples(index=False):
        for phase, lo, hi in windows:
            part = min(seg.end, hi) - max(seg.start, lo)
            if part > 0:
                pieces.append((phase, seg.resource, seg.limit, part))
    work = pd.DataFrame(pieces, columns=["phase", "resource", "limit", "seconds"])
    grouped = work.groupby(["phase", "resource", "limit"], sort=False)["seconds"].sum().reset_index()
    totals = work.groupby("phase")["seconds"].sum()
    grouped["share_of_phase"] = [s / totals[p] if totals[p] > 0 else 0.0
                                 for p, s in zip(grouped["phase"], grouped["seconds"])]
    grouped["share_of_iteration"] = grouped["seconds"] / path["seconds"].sum()
    order = {p: i for i, p in enumerate(PHASES)}
    grouped["_o"] = grouped["phase"].map(lambda p: order.get(p, len(order)))
    grouped = grouped.sort_values(["_o", "seconds"], ascending=[True, False], kind="stable")
    return grouped.drop(columns="_o").reset_index(drop=True)


@dataclass(frozen=True)
class Explanation:
    """A run's critical path, its breakdown and the single resource that bounds the iteration."""

    strategy: str
    iteration_time_s: float
    path: pd.DataFrame
    breakdown: pd.DataFrame
    bound: str
    bound_share: float
    bound_limit: str

    def lines(self) -> list[str]:
        """Human-readable: the bounding resource, then per phase the top shares of the path."""
        out = [f"{self.strategy}: iteration {self.iteration_time_s:.4g} s, bounded by {self.bound} "
               f"({self.bound_share:.0%} of the critical path; limit: {self.bound_limit})"]
        for phase in PHASES:
            part = self.breakdown[self.breakdown["phase"] == phase]
            if part.empty:
                continue
            seconds = float(part["seconds"].sum())
            items = ", ".join(f"{r.resource} {r.share_of_phase:.0%}" for r in part.head(4).itertuples())
            out.append(f"  {phase} ({seconds:.4g} s on the path): {items}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (path aggregated, not every task)."""
        return {
            "strategy": self.strategy,
            "iteration_time_s": self.iteration_time_s,
            "bound": self.bound,
            "bound_share": self.bound_share,
            "bound_limit": self.bound_limit,
            "critical_path_tasks": int(len(self.path)),
            "breakdown": plain_records(self.breakdown),
        }


def explain(result: Result) -> Explanation:
    """Critical path of ``result`` and the resource holding the largest share of it."""
    path = critical_path(result)
    assert result.run is not None
    breakdown = path_breakdown(path, phase_windows(result.run))
    per_resource = breakdown.groupby("resource", sort=False)["seconds"].sum().sort_values(ascending=False,
                                                                                          kind="stable")
    bound = str(per_resource.index[0]) if len(per_resource) else "-"
    total = float(path["seconds"].sum())
    limits = breakdown[breakdown["resource"] == bound].groupby("limit")["seconds"].sum()
    limit = str(limits.idxmax()) if len(limits) else "-"
    share = float(per_resource.iloc[0]) / total if len(per_resource) and total > 0 else 0.0
    assert result.iteration_time_s is not None
    return Explanation(result.strategy, result.iteration_time_s, path, breakdown, bound, share, limit)
