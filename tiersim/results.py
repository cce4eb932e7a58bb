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
from tiersim.engine.usage import UsageRow, busiest, usage_table
from tiersim.strategies.estimator import zero3_estimate
from tiersim.strategies.placement import Placement, Unfit

if TYPE_CHECKING:  # pandas is imported where a DataFrame is first built: a run that prints needs none
    import pandas as pd

PHASES = ("forward", "backward", "optimizer_step")
UTILISATION_COLUMNS = ["resource", "kind", "phase", "busy_s", "utilisation", "units_moved"]


@dataclass(frozen=True, init=False)
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

    def __init__(self, config: RunConfig, fits: bool, misfit: Unfit | None, iteration_time_s: float | None,
                 phases: dict[str, float] | None, exposed_transfer_s: float | None, peak_bytes: dict[str, int],
                 capacity_bytes: dict[str, int], placement_items: list[tuple[str, str, int, int]], events: int,
                 engine: EngineRun | None = None, built: TaskGraph | None = None,
                 retrace: Callable[[], tuple[EngineRun, TaskGraph]] | None = None) -> None:
        """The fields above, in their order, set in one write of the instance's dict: the frozen
        dataclass's own ``__init__`` sets each by ``object.__setattr__``, which cost a sweep run
        about 20,000 instructions (tests/unit/test_results.py keeps the two in step)."""
        vars(self).update(config=config, fits=fits, misfit=misfit, iteration_time_s=iteration_time_s,
                          phases=phases, exposed_transfer_s=exposed_transfer_s, peak_bytes=peak_bytes,
                          capacity_bytes=capacity_bytes, placement_items=placement_items, events=events,
                          engine=engine, built=built, retrace=retrace)

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
        return busiest(self.engine, self.phases, "optimizer_step")

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






def utilisation_rows(run: EngineRun, spans: dict[str, float], only: str | None = None) -> list[dict[str, Any]]:
    """Per stream and per link, over the iteration and per phase (or for phase ``only``):
    busy seconds, utilisation and units moved (bytes; link units for a link), from the run's
    time integrals (``tiersim.engine.usage``), which need no trace. A link's utilisation is
    the units its flows used over capacity x time."""
    return [dict(zip(UTILISATION_COLUMNS, row)) for row in _usage(run, spans, only)]


def _usage(run: EngineRun, spans: dict[str, float], only: str | None) -> list[UsageRow]:
    """``utilisation_rows`` as the engine's tuples (what ``Result.bottleneck`` reads, cheaply)."""
    return usage_table(run, spans, [p for p in PHASES if only is None or p == only], only is None)


def _param_device(options: object) -> str | None:
    """The device of a strategy's ``offload_param`` block, or None."""
    offload = getattr(options, "offload_param", None)
    return getattr(offload, "device", None)
