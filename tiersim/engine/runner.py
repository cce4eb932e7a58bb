"""Run a ``TaskGraph`` on SimPy's event queue: streams advance by event callbacks, flows on a
``FlowNetwork``."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
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
    """The engine's output: per task (by position in ``tasks``) its ready, start and end times
    (s), the positions in completion order, the makespan (s) and counters per link.
    ``records`` gives the same as one record per task, built when first read."""

    tasks: list[Task] = field(repr=False)
    ready: list[float] = field(repr=False)
    start: list[float] = field(repr=False)
    end: list[float] = field(repr=False)
    order: list[int] = field(repr=False)
    makespan: float
    link_busy: dict[str, float]
    link_units_moved: dict[str, float]
    link_capacity: dict[str, float]
    events: int

    @cached_property
    def records(self) -> list[TaskRecord]:
        """One record per task, in the order they finished."""
        tasks, ready, start, end = self.tasks, self.ready, self.start, self.end
        return [TaskRecord(tasks[i].name, tasks[i].stream, tasks[i].phase, tasks[i].category, ready[i], start[i],
                           end[i], tasks[i].size) for i in self.order]


def run_graph(graph: TaskGraph) -> EngineRun:
    """Execute every task on SimPy's event queue; deterministic (simultaneous events run in
    the order they were scheduled).

    Tasks advance by callbacks on SimPy events rather than one generator process each: a task
    starts as soon as its stream's previous task and all its dependencies are done (counted
    down, not searched), waits its ``delay`` on an ``env.timeout`` and then moves its bytes on
    the ``FlowNetwork``.
    """
    run = _Run(graph)
    run.drain(0.0)
    run.env.run()
    run.network.close()
    if len(run.order) != len(graph.tasks):
        raise RuntimeError("task graph deadlocked: a dependency can never be met")
    network = run.network
    return EngineRun(
        tasks=run.tasks,
        ready=run.ready,
        start=run.start,
        end=run.end,
        order=run.order,
        makespan=max(run.end, default=0.0),
        link_busy=dict(network.busy),
        link_units_moved=dict(network.moved),
        link_capacity=dict(network.capacity),
        events=run.timeouts + network.timers,
    )


class _Run:
    """The state of one ``run_graph``, in lists indexed by task: the dependencies not yet done,
    the dependents, the next task on the stream and the flows (the graph's, read only),
    whether the stream is free for it, ready, start and end times, and the order tasks
    finished in. Once the network is closed nothing of a finished run is left in a reference
    cycle but SimPy's environment (so it is freed at once, without the cyclic garbage
    collector)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.env = simpy.Environment()
        capacity = {name: link.capacity for name, link in graph.links.items()}
        self.network = FlowNetwork(self.env, capacity, self.flows_done)
        tasks = self.tasks = graph.tasks
        count = len(tasks)
        self.unmet = graph.dep_count.copy()
        self.dependents = graph.dependents
        self.successor = graph.stream_next
        self.at_head = [False] * count
        for head in graph.stream_heads:
            self.at_head[head] = True
        self.delay = [task.delay for task in tasks]
        self.flow = graph.flows
        self.ready = [0.0] * count
        self.start = [0.0] * count
        self.end = [0.0] * count
        self.order: list[int] = []
        self.startable = [i for i in range(count) if self.at_head[i] and not self.unmet[i]]
        self.timeouts = 0

    def drain(self, now: float) -> None:
        """Start every startable task at ``now`` (the current time): each blocks on a delay or
        a flow, or (neither) finishes at once and may make more tasks startable."""
        startable, start, delays, flows = self.startable, self.start, self.delay, self.flow
        timeout, transfer, after_delay = self.env.timeout, self.network.transfer, self.after_delay
        while startable:
            i = startable.pop()
            start[i] = now
            delay = delays[i]
            if delay > 0:
                self.timeouts += 1
                timeout(delay, i).callbacks.append(after_delay)
            elif flows[i] is None:
                self.finish(i, now)
            else:
                transfer(i, *flows[i])

    def after_delay(self, event: simpy.Event) -> None:
        i = event.value
        flow = self.flow[i]
        if flow is None:
            now = self.env.now
            self.finish(i, now)
            if self.startable:
                self.drain(now)
        else:
            self.network.transfer(i, *flow)  # a flow never ends at once: nothing to drain

    def flows_done(self, keys: list[int], now: float) -> None:
        """The network's callback: the flows of these tasks moved their last byte at ``now``."""
        finish = self.finish
        for i in keys:
            finish(i, now)
        if self.startable:
            self.drain(now)

    def finish(self, i: int, now: float) -> None:
        """Task ``i`` ends at ``now``: its stream's next task and its dependents may start."""
        self.end[i] = now
        self.order.append(i)
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
