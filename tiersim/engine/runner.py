"""Run a ``TaskGraph`` on SimPy's event queue: streams advance by event callbacks, flows on a
``FlowNetwork``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import simpy

from tiersim.engine.flows import FlowNetwork
from tiersim.engine.graph import Task, TaskGraph


class TaskRecord(NamedTuple):
    """What happened to one task: ``ready`` (deps met), ``start`` (stream free), ``end`` (s)."""

    name: str
    stream: str
    phase: str
    category: str
    ready: float
    start: float
    end: float
    size: float


@dataclass(frozen=True)
class EngineRun:
    """The engine's output: records in completion order, makespan (s), counters per link."""

    records: list[TaskRecord]
    makespan: float
    link_busy: dict[str, float]
    link_units_moved: dict[str, float]
    link_capacity: dict[str, float]
    events: int


class _Stream:
    """One stream's cursor: the index of its next task and when that task started."""

    __slots__ = ("tasks", "index", "start")

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks
        self.index = 0
        self.start = 0.0


def run_graph(graph: TaskGraph) -> EngineRun:
    """Execute every task on SimPy's event queue; deterministic (simultaneous events run in
    the order they were scheduled).

    Streams advance by callbacks on SimPy events rather than one generator process each: a
    stream's next task starts as soon as the stream is free and its dependencies are done,
    waits its ``delay`` on an ``env.timeout`` and then moves its bytes on the ``FlowNetwork``.
    """
    env = simpy.Environment()
    network = FlowNetwork(env, {name: link.capacity for name, link in graph.links.items()})
    records: list[TaskRecord] = []
    end_of: dict[str, float] = {}
    waiting: dict[str, list[_Stream]] = {}
    runnable: list[_Stream] = [_Stream(tasks) for tasks in graph.streams().values()]
    timeouts = 0

    def drain() -> None:
        """Start every runnable stream's next task (each blocks on a dependency, a delay or
        a flow, or finishes at once and makes its stream runnable again)."""
        nonlocal timeouts
        while runnable:
            stream = runnable.pop()
            if stream.index == len(stream.tasks):
                continue
            task = stream.tasks[stream.index]
            missing = next((dep for dep in task.deps if dep not in end_of), None)
            if missing is not None:
                waiting.setdefault(missing, []).append(stream)
                continue
            stream.start = float(env.now)
            if task.delay > 0:
                timeouts += 1
                env.timeout(task.delay).callbacks.append(lambda _event, s=stream: after_delay(s))
            else:
                after_delay(stream)

    def after_delay(stream: _Stream) -> None:
        task = stream.tasks[stream.index]
        if task.size > 0:
            network.transfer(task.size, task.usage, task.rate_cap, lambda s=stream: finish(s))
        else:
            finish(stream)

    def finish(stream: _Stream) -> None:
        task = stream.tasks[stream.index]
        now = float(env.now)
        ready = max((end_of[dep] for dep in task.deps), default=0.0)
        end_of[task.name] = now
        records.append(TaskRecord(task.name, task.stream, task.phase, task.category, ready, stream.start, now,
                                  task.size))
        stream.index += 1
        runnable.append(stream)
        runnable.extend(waiting.pop(task.name, ()))
        drain()

    drain()
    env.run()
    if len(records) != len(graph.tasks):
        raise RuntimeError("task graph deadlocked: a dependency can never be met")
    makespan = max((r.end for r in records), default=0.0)
    return EngineRun(
        records=records,
        makespan=makespan,
        link_busy=dict(network.busy),
        link_units_moved=dict(network.moved),
        link_capacity=dict(network.capacity),
        events=timeouts + network.timers,
    )
