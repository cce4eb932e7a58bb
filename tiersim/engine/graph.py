"""Task graphs: what the engine runs.

A ``Task`` runs on one ``stream`` (tasks of a stream run one at a time, in the order they were
added, like a CUDA stream or a worker thread). It starts when its stream is free and all its
``deps`` are done, waits ``delay`` seconds (compute, or a request's latency), then moves
``size`` bytes as one flow over the links in ``usage``. ``usage`` maps a link name to the link
units one byte of this flow consumes (1.0 for a plain byte link; 1/B_read for a device whose
capacity is expressed in device-seconds per second). A flow's own rate is also capped by
``rate_cap`` (bytes/s), e.g. what its queue depth allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


Usage = tuple[tuple[str, float], ...]
"""(link name, link units one byte of a flow consumes) pairs."""


@dataclass(frozen=True)
class Link:
    """A shared-bandwidth resource: ``capacity`` link units per second, shared max-min fairly."""

    name: str
    capacity: float

    def __post_init__(self) -> None:
        if not self.capacity > 0 or not math.isfinite(self.capacity):
            raise ValueError(f"link {self.name!r}: capacity must be positive and finite, got {self.capacity}")


@dataclass(slots=True)
class Task:
    """One unit of work: a delay (s) then a flow of ``size`` bytes over ``usage`` links.

    Not frozen (a frozen dataclass costs three times as much to create, and a 70B iteration
    creates over a thousand), but nothing changes a task once it is in a graph."""

    name: str
    stream: str
    phase: str
    category: str
    delay: float = 0.0
    size: float = 0.0
    usage: Usage = ()
    rate_cap: float = math.inf
    deps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.delay < 0 or self.size < 0:
            raise ValueError(f"task {self.name!r}: delay and size must be >= 0")
        if self.size > 0 and not self.usage and not math.isfinite(self.rate_cap):
            raise ValueError(f"task {self.name!r}: a flow needs links or a finite rate cap")
        if not self.rate_cap > 0:
            raise ValueError(f"task {self.name!r}: rate_cap must be positive")


@dataclass
class TaskGraph:
    """Links plus tasks in program order; ``add`` checks names and dependencies as it goes and
    indexes them for the engine: per task (by position) the positions of its distinct
    dependencies and of the previous task on its stream (-1 for a stream's first task)."""

    links: dict[str, Link] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    dep_positions: list[tuple[int, ...]] = field(default_factory=list, repr=False)
    stream_previous: list[int] = field(default_factory=list, repr=False)
    _positions: dict[str, int] = field(default_factory=dict, repr=False)
    _stream_tails: dict[str, int] = field(default_factory=dict, repr=False)

    def link(self, name: str, capacity: float) -> str:
        """Declare a link (units/s) and return its name; redeclaring must agree."""
        existing = self.links.get(name)
        if existing is not None and existing.capacity != capacity:
            raise ValueError(f"link {name!r} declared twice with different capacities")
        self.links[name] = Link(name, capacity)
        return name

    def add(self, task: Task) -> str:
        """Append a task; its dependencies must already be in the graph (so it is acyclic)."""
        positions = self._positions
        if task.name in positions:
            raise ValueError(f"duplicate task name {task.name!r}")
        try:
            named = task.deps
            if not named:
                deps: tuple[int, ...] = ()
            elif len(named) == 1:
                deps = (positions[named[0]],)
            else:
                distinct: list[int] = []
                for dep in named:
                    at = positions[dep]
                    if at not in distinct:
                        distinct.append(at)
                deps = tuple(distinct)
        except KeyError as missing:
            raise ValueError(f"task {task.name!r} depends on unknown task {missing.args[0]!r}") from None
        for link_name, _units in task.usage:
            if link_name not in self.links:
                raise ValueError(f"task {task.name!r} uses undeclared link {link_name!r}")
        here = len(self.tasks)
        positions[task.name] = here
        self.tasks.append(task)
        self.dep_positions.append(deps)
        tails = self._stream_tails
        self.stream_previous.append(tails.get(task.stream, -1))
        tails[task.stream] = here
        return task.name

    def streams(self) -> dict[str, list[Task]]:
        """Tasks grouped by stream, each list in program order."""
        grouped: dict[str, list[Task]] = {}
        for task in self.tasks:
            grouped.setdefault(task.stream, []).append(task)
        return grouped

    def stream_tails(self) -> list[str]:
        """The name of the last task on each stream (in order of the streams' first tasks)."""
        return [self.tasks[at].name for at in self._stream_tails.values()]
