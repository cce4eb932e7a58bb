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
    usage: tuple[tuple[str, float], ...] = ()
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
    """Links plus tasks in program order; ``add`` checks names and dependencies as it goes."""

    links: dict[str, Link] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    _names: set[str] = field(default_factory=set, repr=False)

    def link(self, name: str, capacity: float) -> str:
        """Declare a link (units/s) and return its name; redeclaring must agree."""
        existing = self.links.get(name)
        if existing is not None and existing.capacity != capacity:
            raise ValueError(f"link {name!r} declared twice with different capacities")
        self.links[name] = Link(name, capacity)
        return name

    def add(self, task: Task) -> str:
        """Append a task; its dependencies must already be in the graph (so it is acyclic)."""
        if task.name in self._names:
            raise ValueError(f"duplicate task name {task.name!r}")
        for dep in task.deps:
            if dep not in self._names:
                raise ValueError(f"task {task.name!r} depends on unknown task {dep!r}")
        for link_name, _units in task.usage:
            if link_name not in self.links:
                raise ValueError(f"task {task.name!r} uses undeclared link {link_name!r}")
        self._names.add(task.name)
        self.tasks.append(task)
        return task.name

    def streams(self) -> dict[str, list[Task]]:
        """Tasks grouped by stream, each list in program order."""
        grouped: dict[str, list[Task]] = {}
        for task in self.tasks:
            grouped.setdefault(task.stream, []).append(task)
        return grouped
