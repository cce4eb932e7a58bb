"""Simulation results: iteration time, phases, peak bytes per tier, utilisation and the trace.

Stats are the engine's records, turned into DataFrames here at the end. Phase spans partition
the timeline at the phase markers on the GPU stream, so forward + backward + optimizer step =
iteration time exactly. ``exposed_transfer_s`` is the time in which neither the GPU nor the CPU
computes (nothing but data movement is in progress).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tiersim.engine import TaskGraph
from tiersim.engine.runner import EngineRun, TaskRecord
from tiersim.scenario import RunConfig

PHASES = ("forward", "backward", "optimizer_step")
COMPUTE_CATEGORIES = ("compute", "adam", "accumulate")


@dataclass(frozen=True)
class Result:
    """One strategy's outcome for one config; ``fits=False`` runs carry only the placement."""

    config: RunConfig
    fits: bool
    reason: str | None
    iteration_time_s: float | None
    phases: dict[str, float] | None
    exposed_transfer_s: float | None
    peak_bytes: dict[str, int]
    capacity_bytes: dict[str, int]
    placement: pd.DataFrame
    trace: pd.DataFrame
    utilisation: pd.DataFrame
    events: int

    @property
    def strategy(self) -> str:
        """The strategy this result is for."""
        return self.config.strategy

    def bottleneck(self) -> str | None:
        """The busiest resource during the optimizer step (highest utilisation), or None."""
        if self.utilisation.empty:
            return None
        step = self.utilisation[self.utilisation["phase"] == "optimizer_step"]
        if step.empty:
            return None
        return str(step.sort_values("utilisation", ascending=False).iloc[0]["resource"])

    def summary(self) -> dict[str, Any]:
        """The JSON-friendly summary the CLI prints (times in s, sizes in bytes)."""
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "fits": self.fits,
            "iteration_time_s": self.iteration_time_s,
            "phases": None
            if self.phases is None
            else {f"{phase}_s": self.phases[phase] for phase in PHASES},
            "exposed_transfer_s": self.exposed_transfer_s,
            "peak_bytes": dict(self.peak_bytes),
            "capacity_bytes": dict(self.capacity_bytes),
        }
        if not self.fits:
            out["reason"] = self.reason
        else:
            out["bottleneck"] = self.bottleneck()
            out["events"] = self.events
        return out


def trace_frame(records: list[TaskRecord]) -> pd.DataFrame:
    """The engine's task records as a DataFrame, ordered by start time."""
    frame = pd.DataFrame.from_records(
        [r.__dict__ for r in records],
        columns=["name", "stream", "phase", "category", "ready", "start", "end", "size"],
    )
    return frame.sort_values(["start", "end"], kind="stable").reset_index(drop=True)


def phase_spans(trace: pd.DataFrame, makespan: float) -> dict[str, float]:
    """Seconds in each phase: from each phase marker to the next one (the last to the end)."""
    markers = trace[trace["category"] == "marker"].sort_values("end", kind="stable")
    spans = {phase: 0.0 for phase in PHASES}
    ends = list(markers["end"]) + [makespan]
    for (_, row), stop in zip(markers.iterrows(), ends[1:]):
        spans[row["phase"]] += stop - row["end"]
    return spans


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, cursor = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > cursor:
            total += end - max(start, cursor)
            cursor = end
    return total


def exposed_transfer(trace: pd.DataFrame, makespan: float) -> float:
    """Seconds of the iteration when no compute (GPU kernels, CPU Adam, accumulation) runs."""
    busy = trace[trace["category"].isin(COMPUTE_CATEGORIES)]
    return makespan - _union_length(list(zip(busy["start"], busy["end"])))


def utilisation_frame(
    run: EngineRun, trace: pd.DataFrame, graph: TaskGraph, spans: dict[str, float]
) -> pd.DataFrame:
    """Per stream and per link, over the iteration and per phase: busy seconds, utilisation.

    A stream is busy while one of its tasks runs. A link's utilisation is the capacity-units
    its flows used divided by capacity x span; its busy time is when any flow was active
    (iteration rows only).
    """
    rows: list[dict[str, Any]] = []
    windows = {"iteration": run.makespan, **spans}
    work = trace[trace["category"] != "marker"]
    for stream, group in work.groupby("stream", sort=True):
        parts = [("iteration", group)] + [(str(p), g) for p, g in group.groupby("phase", sort=True)]
        for phase, part in parts:
            busy = _union_length(list(zip(part["start"], part["end"])))
            rows.append({"resource": stream, "kind": "stream", "phase": phase, "busy_s": busy,
                         "utilisation": _ratio(busy, windows[phase]), "units_moved": float(part["size"].sum())})
    used: dict[tuple[str, str], float] = {}
    for task in graph.tasks:
        for link, units in task.usage:
            used[(link, task.phase)] = used.get((link, task.phase), 0.0) + task.size * units
    for link, capacity in run.link_capacity.items():
        moved = run.link_units_moved[link]
        rows.append({"resource": link, "kind": "link", "phase": "iteration", "busy_s": run.link_busy[link],
                     "utilisation": _ratio(moved, capacity * run.makespan), "units_moved": moved})
        for phase in PHASES:
            if (link, phase) in used:
                units_used = used[(link, phase)]
                rows.append({"resource": link, "kind": "link", "phase": phase, "busy_s": float("nan"),
                             "utilisation": _ratio(units_used, capacity * spans[phase]), "units_moved": units_used})
    return pd.DataFrame(rows, columns=["resource", "kind", "phase", "busy_s", "utilisation", "units_moved"])


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0
