"""Simulation results: iteration time, phases, peak bytes per tier, utilisation and the trace.

The engine's records are summarised in plain Python (cheap enough for sweeps of thousands of
runs); the DataFrames (``trace``, ``utilisation``, ``placement``) are built the first time they
are read. Phase spans partition the timeline at the phase markers on the GPU stream, so
forward + backward + optimizer step = iteration time exactly. ``exposed_transfer_s`` is the
time in which neither the GPU nor the CPU computes (nothing but data movement is in progress).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from tiersim.engine import TaskGraph
from tiersim.engine.runner import EngineRun, TaskRecord
from tiersim.scenario import RunConfig
from tiersim.strategies.estimator import zero3_estimate

PHASES = ("forward", "backward", "optimizer_step")
COMPUTE_CATEGORIES = ("compute", "adam")
UTILISATION_COLUMNS = ["resource", "kind", "phase", "busy_s", "utilisation", "units_moved"]


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
    placement_items: list[tuple[str, str, int, int]]
    events: int
    run: EngineRun | None = field(default=None, repr=False)
    graph: TaskGraph | None = field(default=None, repr=False)

    @property
    def strategy(self) -> str:
        """The strategy this result is for."""
        return self.config.strategy

    @cached_property
    def placement(self) -> pd.DataFrame:
        """Bytes of each tensor group on each tier (hbm per GPU, host tiers per node): allocated
        (``bytes``) and held by the process (``reserved_bytes``)."""
        return pd.DataFrame(self.placement_items, columns=["tier", "what", "bytes", "reserved_bytes"])

    @cached_property
    def reserved_bytes(self) -> dict[str, int]:
        """Bytes each tier holds for this run (allocator rounding and caching, retained
        temporaries, runtime, the CUDA context): what decides whether it fits."""
        sums = {tier: 0 for tier in self.peak_bytes}
        for tier, _what, _allocated, held in self.placement_items:
            sums[tier] += held
        return sums

    @cached_property
    def trace(self) -> pd.DataFrame:
        """Every task: name, stream, phase, category, ready, start, end (s) and size (bytes)."""
        return trace_frame(self.run.records if self.run else [])

    @cached_property
    def utilisation(self) -> pd.DataFrame:
        """Per stream and link, over the iteration and per phase (see ``utilisation_records``)."""
        return pd.DataFrame(self._utilisation, columns=UTILISATION_COLUMNS)

    @cached_property
    def _utilisation(self) -> list[dict[str, Any]]:
        if self.run is None or self.phases is None:
            return []
        return utilisation_records(self.run, self.phases)

    def bottleneck(self) -> str | None:
        """The busiest resource (stream or link) during the optimizer step, or None."""
        if "_utilisation" in self.__dict__ or self.run is None or self.phases is None:
            rows = self._utilisation
        else:  # only the step's rows
            rows = utilisation_records(self.run, self.phases, only="optimizer_step")
        step = [row for row in rows if row["phase"] == "optimizer_step"]
        if not step:
            return None
        return str(max(step, key=lambda row: row["utilisation"])["resource"])

    def summary(self) -> dict[str, Any]:
        """The JSON-friendly summary the CLI prints (times in s, sizes in bytes)."""
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "fits": self.fits,
            "iteration_time_s": self.iteration_time_s,
            "phases": None if self.phases is None else {f"{phase}_s": self.phases[phase] for phase in PHASES},
            "exposed_transfer_s": self.exposed_transfer_s,
            "peak_bytes": dict(self.peak_bytes),
            "reserved_bytes": dict(self.reserved_bytes),
            "capacity_bytes": dict(self.capacity_bytes),
            "deepspeed_estimate": zero3_estimate(self.config.model, self.config.hardware.gpus, self.strategy),
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
        [(r.name, r.stream, r.phase, r.category, r.ready, r.start, r.end, r.size) for r in records],
        columns=["name", "stream", "phase", "category", "ready", "start", "end", "size"],
    )
    return frame.sort_values(["start", "end"], kind="stable").reset_index(drop=True)


def phase_spans(run: EngineRun) -> dict[str, float]:
    """Seconds in each phase: from each phase marker to the next one (the last to the end)."""
    tasks, end = run.tasks, run.end
    markers = sorted((i for i in run.order if tasks[i].category == "marker"), key=end.__getitem__)
    spans = {phase: 0.0 for phase in PHASES}
    stops = [end[i] for i in markers[1:]] + [run.makespan]
    for marker, stop in zip(markers, stops):
        spans[tasks[marker].phase] += stop - end[marker]
    return spans


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end) intervals (s)."""
    total, cursor = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > cursor:
            total += end - max(start, cursor)
            cursor = end
    return total


def exposed_transfer(run: EngineRun) -> float:
    """Seconds of the iteration when no compute (GPU kernels, CPU Adam) runs."""
    start, end = run.start, run.end
    return run.makespan - union_length([(start[i], end[i]) for i, task in enumerate(run.tasks)
                                        if task.category in COMPUTE_CATEGORIES])


def utilisation_records(run: EngineRun, spans: dict[str, float],
                        only: str | None = None) -> list[dict[str, Any]]:
    """Per stream and per link, over the iteration and per phase (or for phase ``only``):
    busy seconds, utilisation.

    A stream is busy while one of its tasks runs (they run one at a time, so that is the sum of
    their durations). A link's utilisation is the capacity-units its flows used divided by
    capacity x span; its busy time is when any flow was active (iteration rows only).
    """
    rows: list[dict[str, Any]] = []
    windows = {"iteration": run.makespan, **spans}
    by_stream: dict[str, dict[str, list[float]]] = {}  # stream -> phase -> [busy s, bytes]
    used: dict[tuple[str, str], float] = {}  # (link, phase) -> link units
    for task, start, end in zip(run.tasks, run.start, run.end):
        phase = task.phase
        if only is not None and phase != only:
            continue
        for link, units in task.usage:
            key = (link, phase)
            used[key] = used.get(key, 0.0) + task.size * units
        if task.category == "marker":
            continue
        phases = by_stream.get(task.stream)
        if phases is None:
            phases = by_stream[task.stream] = {} if only else {"iteration": [0.0, 0.0]}
        totals = phases.get(phase)
        if totals is None:
            totals = phases[phase] = [0.0, 0.0]
        totals[0] += end - start
        totals[1] += task.size
        if not only:
            whole = phases["iteration"]
            whole[0] += end - start
            whole[1] += task.size
    for stream in sorted(by_stream):
        for phase in sorted(by_stream[stream], key=lambda p: (p != "iteration", p)):
            busy, moved_bytes = by_stream[stream][phase]
            rows.append({"resource": stream, "kind": "stream", "phase": phase, "busy_s": busy,
                         "utilisation": _ratio(busy, windows[phase]), "units_moved": moved_bytes})
    for link, capacity in run.link_capacity.items():
        if not only:
            moved = run.link_units_moved[link]
            rows.append({"resource": link, "kind": "link", "phase": "iteration", "busy_s": run.link_busy[link],
                         "utilisation": _ratio(moved, capacity * run.makespan), "units_moved": moved})
        for phase in PHASES:
            if (link, phase) in used:
                units_used = used[(link, phase)]
                rows.append({"resource": link, "kind": "link", "phase": phase, "busy_s": float("nan"),
                             "utilisation": _ratio(units_used, capacity * spans[phase]), "units_moved": units_used})
    return rows


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0
