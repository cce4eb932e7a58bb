"""Run a ``TaskGraph`` on SimPy's event queue: streams advance by event callbacks, flows on a
``FlowNetwork``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import simpy

from tiersim.engine.flows import FlowNetwork
from tiersim.engine.graph import TaskGraph


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


def run_graph(graph: TaskGraph) -> EngineRun:
    """Execute every task on SimPy's event queue; deterministic (simultaneous events run in
    the order they were scheduled).

    Tasks advance by callbacks on SimPy events rather than one generator process each: a task
    starts as soon as its stream's previous task and all its dependencies are done (counted
    down, not searched), waits its ``delay`` on an ``env.timeout`` and then moves its bytes on
    the ``FlowNetwork``.
    """
    run = _Run(graph)
    run.drain()
    run.env.run()
    if len(run.records) != len(graph.tasks):
        raise RuntimeError("task graph deadlocked: a dependency can never be met")
    network = run.network
    return EngineRun(
        records=run.records,
        makespan=max((r.end for r in run.records), default=0.0),
        link_busy=dict(network.busy),
        link_units_moved=dict(network.moved),
        link_capacity=dict(network.capacity),
        events=run.timeouts + network.timers,
    )


class _Run:
    """The state of one ``run_graph``: per task (by index) the dependencies not yet done,
    its dependents, the next task on its stream, whether its stream is free for it, ready and
    start times. A plain object, so that nothing of a finished run is left in a reference cycle
    (it is freed at once, without the cyclic garbage collector)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.env = simpy.Environment()
        self.network = FlowNetwork(self.env, {name: link.capacity for name, link in graph.links.items()})
        tasks = self.tasks = graph.tasks
        count = len(tasks)
        position = {task.name: i for i, task in enumerate(tasks)}
        self.unmet = [0] * count
        self.dependents: list[list[int]] = [[] for _ in range(count)]
        for i, task in enumerate(tasks):
            deps = set(task.deps)
            self.unmet[i] = len(deps)
            for dep in deps:
                self.dependents[position[dep]].append(i)
        self.successor = [-1] * count
        self.at_head = [False] * count
        for stream in graph.streams().values():
            indices = [position[task.name] for task in stream]
            self.at_head[indices[0]] = True
            for before, after in zip(indices, indices[1:]):
                self.successor[before] = after
        self.links = [frozenset(link for link, _ in task.usage) for task in tasks]
        self.ready = [0.0] * count
        self.start = [0.0] * count
        self.records: list[TaskRecord] = []
        self.startable = [i for i in range(count) if self.at_head[i] and not self.unmet[i]]
        self.timeouts = 0
        self.draining = False

    def drain(self) -> None:
        """Start every startable task (each blocks on a delay or a flow, or finishes at once
        and makes more tasks startable)."""
        if self.draining:
            return
        self.draining = True
        startable = self.startable
        while startable:
            i = startable.pop()
            self.start[i] = self.env.now
            delay = self.tasks[i].delay
            if delay > 0:
                self.timeouts += 1
                self.env.timeout(delay, i).callbacks.append(self.after_delay)
            else:
                self.move(i)
        self.draining = False

    def after_delay(self, event: simpy.Event) -> None:
        self.move(event.value)
        self.drain()

    def move(self, i: int) -> None:
        task = self.tasks[i]
        if task.size > 0:
            self.network.transfer(task.size, task.usage, task.rate_cap, partial(self.finish, i), self.links[i])
        else:
            self.finish(i)

    def finish(self, i: int) -> None:
        task = self.tasks[i]
        now = self.env.now
        self.records.append(TaskRecord(task.name, task.stream, task.phase, task.category, self.ready[i],
                                       self.start[i], now, task.size))
        after = self.successor[i]
        if after >= 0:
            self.at_head[after] = True
            if not self.unmet[after]:
                self.startable.append(after)
        unmet = self.unmet
        for j in self.dependents[i]:
            unmet[j] -= 1
            if not unmet[j]:
                self.ready[j] = now
                if self.at_head[j]:
                    self.startable.append(j)
        self.drain()

