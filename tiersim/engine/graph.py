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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from tiersim.errors import ModelError

Usage = tuple[tuple[str, float], ...]
"""(link name, link units one byte of a flow consumes) pairs."""

_NONE: Final[list[int]] = []
"""The dependents of a task nothing depends on, and the dependencies of a task that waits for
none (shared, never appended to)."""

_ALONE: Final[list[list[int]]] = []
"""``[p]``: the dependencies of a task that waits for the task at ``p`` alone, as most do,
shared by every graph (never appended to; a list each would be made and freed per task and
run), for ``p`` below ``_ALONE_LIMIT``."""

_ALONE_LIMIT: Final = 1 << 14
"""Positions ``_ALONE`` keeps lists for (a graph of more tasks makes its own past it)."""


def _alone(at: int) -> list[int]:
    """The dependencies ``[at]`` (``_ALONE``)."""
    if at >= _ALONE_LIMIT:
        return [at]
    lists = _ALONE
    while len(lists) <= at:
        lists.append([len(lists)])
    return lists[at]


class Link:
    """A shared-bandwidth resource: ``capacity`` link units per second, shared max-min fairly.

    A plain class, as ``Task`` is (a frozen dataclass's ``__init__`` runs in Python even
    compiled, and a run declares its links anew): nothing changes a link once made. Two links
    are equal when name and capacity are."""

    __slots__ = ("capacity", "name")

    def __init__(self, name: str, capacity: float) -> None:
        if not capacity > 0 or not math.isfinite(capacity):
            raise ModelError(f"link {name!r}: capacity must be positive and finite, got {capacity}")
        self.name = name
        self.capacity = capacity

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return Link, (self.name, self.capacity)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Link) and (self.name, self.capacity) == (other.name, other.capacity)

    def __hash__(self) -> int:
        return hash((self.name, self.capacity))

    def __repr__(self) -> str:
        return f"Link(name={self.name!r}, capacity={self.capacity!r})"


class Task:
    """One unit of work: a delay (s) then a flow of ``size`` bytes over ``usage`` links.

    A plain class (a dataclass with slots is not native to mypyc, and a 70B iteration creates
    over a thousand): nothing changes a task once it is in a graph; the graph checks it when
    it is added. Two tasks are equal when every field is."""

    __slots__ = ("category", "delay", "deps", "name", "phase", "rate_cap", "size", "stream", "usage")

    def __init__(self, name: str, stream: str, phase: str, category: str, delay: float = 0.0, size: float = 0.0,
                 usage: Usage = (), rate_cap: float = math.inf, deps: tuple[str, ...] = ()) -> None:
        self.name = name
        self.stream = stream
        self.phase = phase
        self.category = category
        self.delay = delay
        self.size = size
        self.usage = usage
        self.rate_cap = rate_cap
        self.deps = deps

    def _fields(self) -> tuple[str, str, str, str, float, float, Usage, float, tuple[str, ...]]:
        return (self.name, self.stream, self.phase, self.category, self.delay, self.size, self.usage, self.rate_cap,
                self.deps)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return Task, self._fields()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and self._fields() == other._fields()

    def __repr__(self) -> str:
        return "Task" + repr(self._fields())


class FlowSpec:
    """A task's flow as the engine starts it: ``size`` bytes over ``usage`` at most
    ``rate_cap`` bytes/s, its own ``bound`` (bytes/s: the cap or its tightest link alone) and
    the stream it moves for."""

    __slots__ = ("bound", "rate_cap", "size", "stream", "usage")

    def __init__(self, size: float, usage: Usage, rate_cap: float, bound: float, stream: str) -> None:
        self.size = size
        self.usage = usage
        self.rate_cap = rate_cap
        self.bound = bound
        self.stream = stream

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return FlowSpec, (self.size, self.usage, self.rate_cap, self.bound, self.stream)


class _OwnBound:
    """A flow's own bound (bytes/s) over a ``usage`` at most ``rate_cap`` bytes/s, as
    ``TaskGraph`` keeps it per usage."""

    __slots__ = ("bound", "rate_cap", "usage")

    def __init__(self, usage: Usage, rate_cap: float, bound: float) -> None:
        self.usage = usage
        self.rate_cap = rate_cap
        self.bound = bound

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return _OwnBound, (self.usage, self.rate_cap, self.bound)


class _Tail:
    """The position of the last task on a stream, as ``TaskGraph`` keeps it per stream (moved
    on in place as the stream's tasks are added), the last own bound worked out for one of its
    flows (a stream's tasks are mostly of one kind, sharing a usage) and its last flow."""

    __slots__ = ("at", "flow", "last")

    def __init__(self, at: int, last: _OwnBound | None, flow: FlowSpec | None) -> None:
        self.at = at
        self.last = last
        self.flow = flow

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return _Tail, (self.at, self.last, self.flow)


@dataclass
class TaskGraph:
    """Links plus tasks in program order; ``add`` checks names, dependencies and links (declared
    with ``link``, or on first use by ``capacity_of``) as it goes and indexes them for the
    engine. Per task, by position: the positions of the tasks that depend on it, the positions
    of the tasks it depends on, the previous and next task on its stream (-1 for none) and its
    flow (a ``FlowSpec``, None without one)."""

    links: dict[str, Link] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    capacity_of: Callable[[str], float] | None = field(default=None, repr=False)
    """Gives the capacity of a link a task uses before it is declared (it is then declared);
    without it, such a task is an error."""
    dependents: list[list[int]] = field(default_factory=list, repr=False)
    deps: list[list[int]] = field(default_factory=list, repr=False)
    stream_prev: list[int] = field(default_factory=list, repr=False)
    stream_next: list[int] = field(default_factory=list, repr=False)
    flows: list[FlowSpec | None] = field(default_factory=list, repr=False)
    _positions: dict[str, int] = field(default_factory=dict, repr=False)
    _bounds: dict[int, _OwnBound] = field(default_factory=dict, repr=False)
    """By the identity of a usage (a schedule's kinds share theirs): it, a rate cap and a flow's
    own bound with them (hashing a usage costs more than the task)."""
    _stream_tails: dict[str, _Tail] = field(default_factory=dict, repr=False)

    def link(self, name: str, capacity: float) -> str:
        """Declare a link (units/s) and return its name; redeclaring must agree."""
        existing = self.links.get(name)
        if existing is not None and existing.capacity != capacity:
            raise ModelError(f"link {name!r} declared twice with different capacities")
        self.links[name] = Link(name, capacity)
        return name

    def add(self, task: Task) -> str:
        """Append a task; its dependencies must already be in the graph (so it is acyclic), and
        its links declared, each named once in its usage."""
        if not (task.delay >= 0 and task.size >= 0 and task.rate_cap > 0):
            raise ModelError(f"task {task.name!r}: delay and size must be >= 0 and rate_cap positive")
        here = len(self.tasks)
        deps = self._dependencies(task)
        tail = self._stream_tails.get(task.stream)
        bound = self._bound(task, tail)
        if task.size > 0 and (math.isinf(bound) or math.isnan(bound)):
            raise ModelError(f"task {task.name!r}: a flow needs a link it uses or a finite rate cap")
        positions = self._positions
        if positions.setdefault(task.name, here) != here:  # one lookup for the check and the entry
            raise ModelError(f"duplicate task name {task.name!r}")
        self.tasks.append(task)
        self.deps.append(deps)
        dependents = self.dependents
        for at in deps:
            if dependents[at]:
                dependents[at].append(here)
            else:
                dependents[at] = [here]
        dependents.append(_NONE)
        flow = self._flow(task, tail, bound) if task.size > 0 else None
        self.flows.append(flow)
        self._join_stream(task.stream, tail, here, flow)
        return task.name

    @staticmethod
    def _flow(task: Task, tail: _Tail | None, bound: float) -> FlowSpec:
        """``task``'s flow, at its own ``bound``: that of the task before it on its stream where
        that one moves as many bytes over the same usage at the same cap (a flow is never
        changed, so alike tasks in a row share one), else a new one."""
        last = tail.flow if tail is not None else None
        if last is not None and last.usage is task.usage and last.size == task.size and last.rate_cap == task.rate_cap:
            return last
        return FlowSpec(task.size, task.usage, task.rate_cap, bound, task.stream)

    def _dependencies(self, task: Task) -> list[int]:
        """The positions of the distinct tasks ``task`` depends on, in its order. Most tasks
        depend on the one task added just before them alone, by the very name ``add`` returned
        for it: that one is found without a lookup (names are distinct)."""
        names = task.deps
        if not names:
            return _NONE
        positions = self._positions
        try:
            if len(names) == 1:  # most tasks: nothing to compare
                last = len(self.tasks) - 1
                if last >= 0 and names[0] is self.tasks[last].name:
                    return _alone(last)
                return _alone(positions[names[0]])
            deps: list[int] = []
            for dep in names:
                at = positions[dep]
                if at not in deps:
                    deps.append(at)
        except KeyError as missing:
            raise ModelError(f"task {task.name!r} depends on unknown task {missing.args[0]!r}") from None
        return deps

    def _bound(self, task: Task, tail: _Tail | None) -> float:
        """``task``'s flow's own bound (bytes/s), kept per usage and cap (``_own_bound``): the
        last of its stream's (``tail``), or that of its usage."""
        usage = task.usage
        if not usage:  # no link: its cap (a compute task or a marker, most of a schedule)
            return task.rate_cap
        known = tail.last if tail is not None else None
        if known is None or known.usage is not usage:
            known = self._bounds.get(id(usage))
        if known is None or known.usage is not usage or known.rate_cap != task.rate_cap:
            known = self._own_bound(task)
        if tail is not None:
            tail.last = known
        return known.bound

    def _join_stream(self, stream: str, tail: _Tail | None, here: int, flow: FlowSpec | None) -> None:
        """The task at ``here``, of ``flow`` (None: none), follows ``tail``, the last on
        ``stream`` (None: none)."""
        if tail is None:
            self._stream_tails[stream] = _Tail(here, None, flow)
            self.stream_prev.append(-1)
        else:
            self.stream_prev.append(tail.at)
            self.stream_next[tail.at] = here
            tail.at = here
            if flow is not None:
                tail.flow = flow
        self.stream_next.append(-1)

    def _own_bound(self, task: Task) -> _OwnBound:
        """The own bound of a flow of ``task``, the rate (bytes/s) it gets alone: its cap or its
        tightest link, the links declared on first use and checked to be named once (kept per
        usage and cap: a schedule makes hundreds of tasks of a few kinds, and a link's capacity
        never changes)."""
        bound = task.rate_cap
        usage = task.usage
        for link_name, units in usage:
            link = self.links.get(link_name)
            if link is None:
                link = self._undeclared(task, link_name)
            if units > 0 and link.capacity / units < bound:
                bound = link.capacity / units
        if len(usage) > 1 and _repeats_a_link(usage):
            raise ModelError(f"task {task.name!r} names a link twice in its usage")
        known = self._bounds[id(usage)] = _OwnBound(usage, task.rate_cap, bound)
        return known

    def _undeclared(self, task: Task, name: str) -> Link:
        if self.capacity_of is None:
            raise ModelError(f"task {task.name!r} uses undeclared link {name!r}")
        self.link(name, self.capacity_of(name))
        return self.links[name]

    def streams(self) -> dict[str, list[Task]]:
        """Tasks grouped by stream, each list in program order."""
        grouped: dict[str, list[Task]] = {}
        for task in self.tasks:
            grouped.setdefault(task.stream, []).append(task)
        return grouped

    def stream_tail(self, stream: str) -> int:
        """The position of the last task on ``stream`` (-1 for none)."""
        tail = self._stream_tails.get(stream)
        return -1 if tail is None else tail.at

    def stream_tails(self) -> dict[str, str]:
        """The name of the last task on each stream, by stream (in order of their first tasks)."""
        return {stream: self.tasks[tail.at].name for stream, tail in self._stream_tails.items()}


def _repeats_a_link(usage: Usage) -> bool:
    if len(usage) == 2:  # most flows: a device or link, and host memory
        return usage[0][0] == usage[1][0]
    return len({name for name, _ in usage}) < len(usage)
