"""Simulation results: iteration time, phases, peak bytes per tier, utilisation and the trace.

The engine's records are summarised in plain Python (cheap enough for sweeps of thousands of
runs); the DataFrames (``trace``, ``utilisation``, ``placement``) are built the first time they
are read. Phase spans partition the timeline at the phase markers on the GPU stream, so
forward + backward + optimizer step = iteration time exactly. ``exposed_transfer_s`` is the
time in which neither the GPU nor the CPU computes (nothing but data movement is in progress).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tiersim.config.scenario import RunConfig
from tiersim.engine import TaskGraph
from tiersim.engine.runner import EngineRun, TaskRecord
from tiersim.strategies.estimator import zero3_estimate
from tiersim.strategies.placement import Placement, Unfit

if TYPE_CHECKING:  # pandas is imported where a DataFrame is first built: a run that prints needs none
    import pandas as pd

PHASES = ("forward", "backward", "optimizer_step")
UTILISATION_COLUMNS = ["resource", "kind", "phase", "busy_s", "utilisation", "units_moved"]


@dataclass(frozen=True)
class Result:
    """One strategy's outcome for one config; ``fits=False`` runs carry only the placement."""

    config: RunConfig
    fits: bool
    misfit: Unfit | None
    """Why it does not fit (a tier short of bytes or a missing device); None when it fits."""
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
    def reason(self) -> str | None:
        """Why it does not fit, in words (None when it fits)."""
        return None if self.misfit is None else str(self.misfit)

    @property
    def strategy(self) -> str:
        """The strategy this result is for."""
        return self.config.strategy

    @cached_property
    def placement(self) -> pd.DataFrame:
        """Bytes of each tensor group on each tier (hbm per GPU, host tiers per node): allocated
        (``bytes``) and held by the process (``reserved_bytes``)."""
        import pandas as pd

        return pd.DataFrame(self.placement_items, columns=["tier", "what", "bytes", "reserved_bytes"])

    @cached_property
    def reserved_bytes(self) -> dict[str, int]:
        """Bytes each tier holds for this run (allocator rounding and caching, retained
        temporaries, runtime, the CUDA context): what decides whether it fits."""
        return Placement(self.placement_items).reserved()  # compiled: a sweep's row reads it

    @cached_property
    def trace(self) -> pd.DataFrame:
        """Every task: name, stream, phase, category, ready, start, end (s) and size (bytes)."""
        return trace_frame(self.run.records if self.run else [])

    @cached_property
    def utilisation(self) -> pd.DataFrame:
        """Per stream and link, over the iteration and per phase (see ``utilisation_rows``)."""
        import pandas as pd

        return pd.DataFrame(self._utilisation, columns=UTILISATION_COLUMNS)

    @cached_property
    def _utilisation(self) -> list[dict[str, Any]]:
        if self.engine is None or self.phases is None:
            return []
        return utilisation_rows(self.engine, self.phases)

    def bottleneck(self) -> str | None:
        """The busiest resource (stream or link) during the optimizer step, or None."""
        if self.engine is None or self.phases is None:
            return None
        step = usage_table(self.engine, self.phases, only="optimizer_step")
        if not step:
            return None
        # Resources tied to float residue (a stream and the link it saturates) go by table order.
        top = max(row[4] for row in step)
        return next(row[0] for row in step if row[4] >= top * (1 - 1e-9))

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
            "deepspeed_estimate": zero3_estimate(self.config.model, self.config.hardware.gpus, self.strategy,
                                                 _param_device(self.config.options), self.config.hardware.nodes),
        }
        if not self.fits:
            out["reason"] = self.reason
        else:
            out["bottleneck"] = self.bottleneck()
            out["events"] = self.events
        return out


def trace_frame(records: list[TaskRecord]) -> pd.DataFrame:
    """The engine's task records as a DataFrame, ordered by start time."""
    import pandas as pd

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






UsageRow = tuple[str, str, str, float, float, float]
"""One row of the utilisation table, in the order of ``UTILISATION_COLUMNS``."""


def utilisation_rows(run: EngineRun, spans: dict[str, float], only: str | None = None) -> list[dict[str, Any]]:
    """Per stream and per link, over the iteration and per phase (or for phase ``only``):
    busy seconds, utilisation and units moved (bytes; link units for a link), from the run's
    time integrals (``tiersim.engine.accounts``), which need no trace. A link's utilisation is
    the units its flows used over capacity x time."""
    return [dict(zip(UTILISATION_COLUMNS, row)) for row in usage_table(run, spans, only)]


def usage_table(run: EngineRun, spans: dict[str, float], only: str | None = None) -> list[UsageRow]:
    """``utilisation_rows`` as tuples (what ``Result.bottleneck`` reads, cheaply). The accounts'
    mappings are built when read: each is read once, and only for the phases asked for."""
    acc = run.accounts
    phases = [(p, *acc.in_phase(p)) for p in PHASES if only is None or p == only]
    stream_busy = acc.stream_busy
    whole: dict[str, tuple[float, float]] = {}
    if only is None:
        stream_bytes = acc.stream_bytes
        whole = {stream: (seconds, stream_bytes[stream]) for stream, seconds in stream_busy.items()}
        streams = sorted(stream_busy)
    else:
        streams = sorted(stream_busy.keys() & (phases[0][1].keys() if phases else set()))
    return _stream_rows(run, spans, phases, streams, whole) + _link_rows(run, spans, phases, only is None)


PhaseTotals = tuple[str, dict[str, float], dict[str, float]]
"""A phase, its busy seconds and its units moved, by resource."""


def _stream_rows(run: EngineRun, spans: dict[str, float], phases: list[PhaseTotals], streams: list[str],
                 whole: dict[str, tuple[float, float]]) -> list[UsageRow]:
    """``usage_table`` of the ``streams``: busy over the span's length; bytes moved (over the
    iteration: ``whole``, seconds and bytes by stream, where the table has the iteration)."""
    rows: list[UsageRow] = []
    for stream in streams:
        if stream in whole:
            seconds, bytes_moved = whole[stream]
            rows.append((stream, "stream", "iteration", seconds, _ratio(seconds, run.makespan), bytes_moved))
        for phase, busy, moved in phases:
            if stream in busy:
                seconds = busy[stream]
                rows.append((stream, "stream", phase, seconds, _ratio(seconds, spans[phase]), moved.get(stream, 0.0)))
    return rows


def _link_rows(run: EngineRun, spans: dict[str, float], phases: list[PhaseTotals], iteration: bool) -> list[UsageRow]:
    """``usage_table`` of the links: units used over capacity x the span's length."""
    rows: list[UsageRow] = []
    for link, capacity in run.link_capacity.items():
        if iteration:
            units_moved = run.link_units_moved[link]
            rows.append((link, "link", "iteration", run.link_busy[link],
                         _ratio(units_moved, capacity * run.makespan), units_moved))
        for phase, busy, moved in phases:
            if link in busy:
                units_used = moved.get(link, 0.0)
                rows.append((link, "link", phase, busy[link], _ratio(units_used, capacity * spans[phase]),
                             units_used))
    return rows


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _param_device(options: object) -> str | None:
    """The device of a strategy's ``offload_param`` block, or None."""
    offload = getattr(options, "offload_param", None)
    return getattr(offload, "device", None)
