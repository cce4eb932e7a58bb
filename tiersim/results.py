"""Simulation results: iteration time, phases, peak bytes per tier, utilisation and the trace.

The engine's records are summarised in plain Python (cheap enough for sweeps of thousands of
runs); the DataFrames (``trace``, ``utilisation``, ``placement``) are built the first time they
are read. Phase spans partition the timeline at the phase markers on the GPU stream, so
forward + backward + optimizer step = iteration time exactly. ``exposed_transfer_s`` is the
time in which neither the GPU nor the CPU computes (nothing but data movement is in progress).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import pandas as pd

from tiersim.engine import TaskGraph
from tiersim.engine.graph import Task
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
    engine: EngineRun | None = field(default=None, repr=False)
    """The engine's run as simulated: its time integrals, and per-task records when complete."""
    built: TaskGraph | None = field(default=None, repr=False)
    """The tasks the run built (all of them when it is complete)."""
    retrace: Callable[[], tuple[EngineRun, TaskGraph]] | None = field(default=None, repr=False, compare=False)
    """Simulates the step again in full (a fast-forwarded run's trace, on request)."""

    @cached_property
    def _full(self) -> tuple[EngineRun | None, TaskGraph | None]:
        if self.engine is None or self.engine.complete or self.retrace is None:
            return self.engine, self.built
        return self.retrace()

    @property
    def run(self) -> EngineRun | None:
        """The complete engine run (every task's times), simulated in full if need be."""
        return self._full[0]

    @property
    def graph(self) -> TaskGraph | None:
        """Every task of the run (simulated in full if need be)."""
        return self._full[1]

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
        if self.engine is None or self.phases is None:
            return []
        return utilisation_rows(self.engine, self.phases)

    def bottleneck(self) -> str | None:
        """The busiest resource (stream or link) during the optimizer step, or None."""
        if "_utilisation" in self.__dict__ or self.engine is None or self.phases is None:
            rows = self._utilisation
        else:  # only the step's rows
            rows = utilisation_rows(self.engine, self.phases, only="optimizer_step")
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


def phase_windows(run: EngineRun) -> list[tuple[str, float, float]]:
    """The timeline cut at the phase markers: (phase, start, stop) from each marker's end to the
    next one's (the last to the end of the run), in time order; they tile [0, makespan]."""
    tasks, end = run.tasks, run.end
    markers = sorted((i for i in run.order if tasks[i].category == "marker"), key=end.__getitem__)
    stops = [end[i] for i in markers[1:]] + [run.makespan]
    return [(tasks[marker].phase, end[marker], stop) for marker, stop in zip(markers, stops)]


def phase_spans(run: EngineRun) -> dict[str, float]:
    """Seconds in each phase: from each phase marker to the next one (the last to the end)."""
    spans = {phase: 0.0 for phase in PHASES}
    for phase, start, stop in phase_windows(run):
        spans[phase] += stop - start
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
    busy seconds, utilisation and units moved (bytes; link units for a link).

    Over the iteration a stream is busy while one of its tasks runs (they run one at a time,
    so that is the sum of their durations) and a link while any flow is on it; a link's
    utilisation is the units its flows used over capacity x iteration time. A phase counts
    what happens inside its time windows (``phase_windows``), whichever phase a task belongs
    to: a copy that backward starts and the next micro-step's forward finishes is busy in
    both, each for its part. So busy seconds never exceed the phase's length and each
    utilisation is at most 1 (see ``_bytes_by_window`` for how a flow's bytes are split).
    """
    windows = phase_windows(run)
    starts = [start for _phase, start, _stop in windows]
    chosen = [k for k, window in enumerate(windows) if only is None or window[0] == only]
    lo = min((windows[k][1] for k in chosen), default=0.0)
    hi = max((windows[k][2] for k in chosen), default=0.0)
    tasks, start_at, end_at = run.tasks, run.start, run.end
    busy: dict[tuple[str, str], float] = {}  # (stream or link, phase) -> s
    moved: dict[tuple[str, str], float] = {}  # (stream or link, phase) -> bytes or link units
    link_spans: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (link, phase) -> flows' intervals
    whole: dict[str, list[float]] = {}  # stream -> [busy s, bytes] over the iteration
    groups: dict[tuple[str, int, str], list[Any]] = {}  # tasks of a kind inside one window (most)
    crossing: list[int] = []  # tasks whose flow crosses a window's end
    right = bisect.bisect_right
    for i, task in enumerate(tasks):
        if task.category == "marker":
            continue
        begin, finish = start_at[i], end_at[i]
        if only is None:
            totals = whole.setdefault(task.stream, [0.0, 0.0])
            totals[0] += finish - begin
            totals[1] += task.size
        if finish <= lo or begin >= hi:
            continue
        phase, _start, stop = windows[right(starts, begin) - 1]
        if finish <= stop:  # inside one window: summed per kind (stream and link usage) below
            key = (task.stream, id(task.usage), phase)
            group = groups.get(key)
            if group is None:
                group = groups[key] = [0.0, 0.0, task, []]
            group[0] += finish - begin
            if task.size > 0:
                group[1] += task.size
                group[3].append((begin + task.delay, finish))
            continue
        for j, part in _overlaps(windows, starts, begin, finish):
            key2 = (task.stream, windows[j][0])
            busy[key2] = busy.get(key2, 0.0) + part
        if task.size > 0:
            first = begin + task.delay
            for j, _part in _overlaps(windows, starts, first, finish):
                _phase, w_lo, w_hi = windows[j]
                for link, _units in task.usage:
                    link_spans.setdefault((link, _phase), []).append((max(first, w_lo), min(finish, w_hi)))
            phase, _start, stop = windows[right(starts, first) - 1]
            if finish > stop:
                crossing.append(i)
            else:
                _add_moved(moved, task, phase, task.size)
    for (stream, _usage, phase), (seconds, num_bytes, task, intervals) in groups.items():
        busy[(stream, phase)] = busy.get((stream, phase), 0.0) + seconds
        if num_bytes:
            _add_moved(moved, task, phase, num_bytes)
            for link, _units in task.usage:
                link_spans.setdefault((link, phase), []).extend(intervals)
    for i, parts in _bytes_by_window(run, crossing, windows, starts):
        for k, num_bytes in parts:
            _add_moved(moved, tasks[i], windows[k][0], num_bytes)
    streams = sorted(whole) if only is None else sorted({stream for stream, _phase in busy})
    for key3, intervals in link_spans.items():
        busy[key3] = union_length(intervals)
    rows: list[dict[str, Any]] = []
    phases = [p for p in PHASES if only is None or p == only]
    for stream in streams:
        if only is None:
            seconds, moved_bytes = whole[stream]
            rows.append({"resource": stream, "kind": "stream", "phase": "iteration", "busy_s": seconds,
                         "utilisation": _ratio(seconds, run.makespan), "units_moved": moved_bytes})
        for phase in phases:
            if (stream, phase) in busy:
                seconds = busy[(stream, phase)]
                rows.append({"resource": stream, "kind": "stream", "phase": phase, "busy_s": seconds,
                             "utilisation": _ratio(seconds, spans[phase]),
                             "units_moved": moved.get((stream, phase), 0.0)})
    for link, capacity in run.link_capacity.items():
        if only is None:
            units_moved = run.link_units_moved[link]
            rows.append({"resource": link, "kind": "link", "phase": "iteration", "busy_s": run.link_busy[link],
                         "utilisation": _ratio(units_moved, capacity * run.makespan), "units_moved": units_moved})
        for phase in phases:
            if (link, phase) in busy:
                units_used = moved.get((link, phase), 0.0)
                rows.append({"resource": link, "kind": "link", "phase": phase, "busy_s": busy[(link, phase)],
                             "utilisation": _ratio(units_used, capacity * spans[phase]), "units_moved": units_used})
    return rows


def utilisation_rows(run: EngineRun, spans: dict[str, float], only: str | None = None) -> list[dict[str, Any]]:
    """Per stream and per link, over the iteration and per phase (or for phase ``only``):
    busy seconds, utilisation and units moved (bytes; link units for a link), from the run's
    time integrals (``tiersim.engine.accounts``): the same as ``utilisation_records`` of the
    trace, without one. A link's utilisation is the units its flows used over capacity x
    time."""
    acc = run.accounts
    phases = [p for p in PHASES if only is None or p == only]
    if only is None:
        streams = sorted(acc.stream_busy)
    else:
        streams = sorted(s for s in acc.stream_busy if (s, only) in acc.busy)
    rows: list[dict[str, Any]] = []
    for stream in streams:
        if only is None:
            seconds = acc.stream_busy[stream]
            rows.append({"resource": stream, "kind": "stream", "phase": "iteration", "busy_s": seconds,
                         "utilisation": _ratio(seconds, run.makespan), "units_moved": acc.stream_bytes[stream]})
        for phase in phases:
            if (stream, phase) in acc.busy:
                seconds = acc.busy[(stream, phase)]
                rows.append({"resource": stream, "kind": "stream", "phase": phase, "busy_s": seconds,
                             "utilisation": _ratio(seconds, spans[phase]),
                             "units_moved": acc.moved.get((stream, phase), 0.0)})
    for link, capacity in run.link_capacity.items():
        if only is None:
            units_moved = run.link_units_moved[link]
            rows.append({"resource": link, "kind": "link", "phase": "iteration", "busy_s": run.link_busy[link],
                         "utilisation": _ratio(units_moved, capacity * run.makespan), "units_moved": units_moved})
        for phase in phases:
            if (link, phase) in acc.busy:
                units_used = acc.moved.get((link, phase), 0.0)
                rows.append({"resource": link, "kind": "link", "phase": phase, "busy_s": acc.busy[(link, phase)],
                             "utilisation": _ratio(units_used, capacity * spans[phase]), "units_moved": units_used})
    return rows


def _add_moved(moved: dict[tuple[str, str], float], task: Task, phase: str, num_bytes: float) -> None:
    """Add ``num_bytes`` of ``task``'s flow to its stream's bytes and its links' units in ``phase``."""
    key = (task.stream, phase)
    moved[key] = moved.get(key, 0.0) + num_bytes
    for link, units in task.usage:
        key = (link, phase)
        moved[key] = moved.get(key, 0.0) + num_bytes * units


def _overlaps(windows: list[tuple[str, float, float]], starts: list[float], begin: float,
              finish: float) -> list[tuple[int, float]]:
    """(window index, seconds of [begin, finish] inside it) for the windows it overlaps."""
    k = max(0, bisect.bisect_right(starts, begin) - 1)
    if finish <= windows[k][2]:  # most tasks: inside one window
        return [(k, finish - begin)] if finish > begin else []
    out = []
    while k < len(windows) and windows[k][1] < finish:
        part = min(finish, windows[k][2]) - max(begin, windows[k][1])
        if part > 0:
            out.append((k, part))
        k += 1
    return out


def _bytes_by_window(run: EngineRun, crossing: list[int], windows: list[tuple[str, float, float]],
                     starts: list[float]) -> list[tuple[int, list[tuple[int, float]]]]:
    """For the tasks whose flow crosses a window's end, the bytes each moved in each window it
    runs in, as (task, [(window, bytes)]).

    A flow's bytes before a window's end ``b`` are the integral of its rate, and a flow's rate
    at any moment is the max-min fair share (``max_min_rates``, the engine's allocation) among
    the flows active at that moment, which the trace gives; so only the stretch from the
    earliest start of a flow crossing ``b`` to ``b`` is re-allocated, interval by interval.
    (Every other flow moved all its bytes in the one window it runs in.)
    """
    from tiersim.engine.flows import Flow, max_min_rates

    if not crossing:
        return []
    tasks, capacity = run.tasks, run.link_capacity
    span = {i: (run.start[i] + task.delay, run.end[i]) for i, task in enumerate(tasks) if task.size > 0}
    at_boundary: dict[float, list[int]] = {}
    for i in crossing:
        first, last = span[i]
        k = bisect.bisect_right(starts, first) - 1
        while k + 1 < len(windows) and windows[k][2] < last:
            at_boundary.setdefault(windows[k][2], []).append(i)
            k += 1
    by_first = sorted(span, key=lambda i: span[i][0])
    firsts = [span[i][0] for i in by_first]
    before: dict[tuple[int, float], float] = {}  # (task, boundary) -> bytes moved before it
    for boundary, across in at_boundary.items():
        lo = min(span[i][0] for i in across)
        near = [i for i in by_first[:bisect.bisect_left(firsts, boundary)] if span[i][1] > lo]
        cuts = sorted({lo, boundary, *(t for i in near for t in span[i] if lo < t < boundary)})
        moved = dict.fromkeys(across, 0.0)
        for t0, t1 in itertools.pairwise(cuts):
            active = [i for i in near if span[i][0] <= t0 < span[i][1]]
            live = [Flow(tasks[i].size, tasks[i].usage, tasks[i].rate_cap) for i in active]
            max_min_rates(live, capacity)
            for i, flow in zip(active, live):
                if i in moved:
                    moved[i] += flow.rate * (t1 - t0)
        for i, num_bytes in moved.items():
            before[(i, boundary)] = min(num_bytes, tasks[i].size)
    out = []
    for i in crossing:
        first, last = span[i]
        k = bisect.bisect_right(starts, first) - 1
        done, split = 0.0, []
        while k < len(windows) and windows[k][1] < last:
            stop = windows[k][2]
            upto = before[(i, stop)] if stop < last else tasks[i].size
            split.append((k, max(0.0, upto - done)))
            done = max(done, upto)
            k += 1
        out.append((i, split))
    return out


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0
