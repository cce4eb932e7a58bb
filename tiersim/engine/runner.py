"""Run a ``TaskGraph`` in SimPy: one process per stream, flows on a ``FlowNetwork``."""

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


def run_graph(graph: TaskGraph) -> EngineRun:
    """Execute every task; deterministic (SimPy orders simultaneous events by insertion)."""
    env = simpy.Environment()
    network = FlowNetwork(env, {name: link.capacity for name, link in graph.links.items()})
    done = {task.name: env.event() for task in graph.tasks}
    records: list[TaskRecord] = []
    end_of: dict[str, float] = {}

    def stream(tasks: list[Task]) -> simpy.events.ProcessGenerator:
        for task in tasks:
            for dep in task.deps:
                if not done[dep].triggered:
                    yield done[dep]
            ready = max((end_of[d] for d in task.deps), default=0.0)
            start = float(env.now)
            if task.delay > 0:
                yield env.timeout(task.delay)
            if task.size > 0:
                yield network.transfer(task.size, task.usage, task.rate_cap)
            end_of[task.name] = env.now
            records.append(
                TaskRecord(task.name, task.stream, task.phase, task.category, ready, start, env.now, task.size)
            )
            done[task.name].succeed()

    processes = [env.process(stream(tasks)) for tasks in graph.streams().values()]
    env.run()
    unfinished = [p for p in processes if p.is_alive]
    if unfinished or len(records) != len(graph.tasks):
        raise RuntimeError("task graph deadlocked: a dependency can never be met")
    makespan = max((r.end for r in records), default=0.0)
    return EngineRun(
        records=records,
        makespan=makespan,
        link_busy=dict(network.busy),
        link_units_moved=dict(network.moved),
        link_capacity=dict(network.capacity),
        events=len(graph.tasks) + network.timers,
    )
