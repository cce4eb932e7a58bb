"""Run a ``TaskGraph`` on SimPy's event queue: streams advance by event callbacks, flows on a
``FlowNetwork``. A graph may grow while it runs (``Run.extend``): that is how a
fast-forward builds only the part of a schedule the run has reached. Deferred tasks
(``tiersim.fastforward.deferred``) take no event: ``Run`` times them by recursion as their inputs
end, and gives an event task that waits for one a timeout at its end."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, cast

from tiersim.engine.accounts import Accounts
from tiersim.engine.clock import Clock, Event
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.graph import Task, TaskGraph
from tiersim.errors import ConfigError, ModelError
from tiersim.frozen import by_fields


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


class LateTask(Exception):
    """A task joined a running graph after the moment it could have started: the graph was
    built too lazily for this schedule (the caller builds it whole instead)."""


@dataclass(frozen=True)
class EngineRun:
    """The engine's output: the makespan (s), counters per link, the events processed and the
    time integrals of ``accounts``. When ``complete``, also per task (by position in
    ``tasks``) its ready, start and end times (s) and the positions in completion order;
    ``records`` gives the same as one record per task, built when first read. A
    fast-forwarded run is not complete: it holds the tasks it built, not every task."""

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
    accounts: Accounts = field(repr=False)
    complete: bool = True

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    @cached_property
    def records(self) -> list[TaskRecord]:
        """One record per task, in the order they finished."""
        if not self.complete:
            raise ConfigError("<api>", "trace", "a fast-forwarded run keeps no per-task records: "
                              "simulate(config, trace=True)")
        tasks, ready, start, end = self.tasks, self.ready, self.start, self.end
        return [TaskRecord(tasks[i].name, tasks[i].stream, tasks[i].phase, tasks[i].category, ready[i], start[i],
                           end[i], tasks[i].size) for i in self.order]


def run_graph(graph: TaskGraph) -> EngineRun:
    """Execute every task on SimPy's event queue; deterministic (simultaneous events run in
    the order they were scheduled).

    Tasks advance by callbacks on SimPy events rather than one generator process each: a task
    starts as soon as its stream's previous task and all its dependencies are done (counted
    down, not searched), waits its ``delay`` on the ``Clock`` and then moves its bytes on
    the ``FlowNetwork``.
    """
    run = Run(graph)
    run.extend()
    run.clock.run()
    return run.result()


class Run:
    """The state of one run, in lists indexed by task: the dependencies not yet done, whether
    the stream is free for it, ready, start and end times (-1 until then) and the order tasks
    finished in; the graph's own lists give the dependents, the next task on the stream and
    the flows. ``pending`` holds the tasks joined and not finished. Once the network is closed
    nothing of a finished run is left in a reference cycle but its clock's SimPy environment (so it is
    freed at once, without the cyclic garbage collector)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.clock = Clock()
        self.graph = graph
        self.accounts = Accounts()
        self.network = FlowNetwork(self.clock, {}, self.flows_done, self.accounts)
        self.tasks = graph.tasks
        self.dependents = graph.dependents
        self.successor = graph.stream_next
        self.flow = graph.flows
        self.unmet: list[int] = []
        self.at_head: list[bool] = []
        self.delay: list[float] = []
        self.ready: list[float] = []
        self.start: list[float] = []
        self.end: list[float] = []
        self.order: list[int] = []
        self.pending: dict[int, None] = {}
        self.startable: list[int] = []
        self.timeouts = 0
        self.deferred = graph.deferred
        self.deferred_start: dict[int, float] = {}
        """Deferred tasks resolved so far: start and end (s), by position."""
        self.deferred_end: dict[int, float] = {}
        self.proxied: set[int] = set()
        """Deferred tasks an event task waits for: each has a timeout at its end."""
        self.proxies_pending = 0
        self.floor: dict[int, float] = {}
        """Deferred tasks that cannot start before a time (s) besides their dependencies (a
        fast-forward's copy, waiting for a skipped task)."""

    def extend(self) -> None:
        """Take in the tasks added to the graph since the last call and start those that can
        start now. A task whose dependencies and stream were all done before now is
        ``LateTask``: it should have started then."""
        graph, network = self.graph, self.network
        for name, link in graph.links.items():
            if name not in network.capacity:
                network.add_link(name, link.capacity)
        now = self.clock.now()
        deferred = self.deferred
        for p in range(len(self.unmet), len(graph.tasks)):
            if deferred[p]:
                self._join_deferred(p)
            else:
                self._join(p, now)
        if self.startable:
            self.drain(now)

    def _join(self, p: int, now: float) -> None:
        """Take in event task ``p`` at ``now``: count its dependencies not yet done and whether
        its stream is free, and make it startable if nothing holds it (``LateTask`` if it could
        have started before now)."""
        graph, end, deferred = self.graph, self.end, self.deferred
        unmet, latest = 0, 0.0
        for d in graph.deps[p]:
            done = end[d]
            if done < 0 and deferred[d]:
                done = self._deferred_done(d, now)
            if done < 0:
                unmet += 1
            elif done > latest:
                latest = done
        prev = graph.stream_prev[p]
        before = end[prev] if prev >= 0 else 0.0
        if before < 0 and deferred[prev]:
            before = self._deferred_done(prev, now)
        head = before >= 0
        self.unmet.append(unmet)
        self.at_head.append(head)
        self.delay.append(graph.tasks[p].delay)
        self.ready.append(latest)
        self.start.append(-1.0)
        end.append(-1.0)
        self.pending[p] = None
        if head and not unmet:
            if max(latest, before) < now * (1 - 1e-12):
                raise LateTask(graph.tasks[p].name)
            self.startable.append(p)

    def result(self) -> EngineRun:
        """The run's output once the event queue is empty (every task done, or a deadlock)."""
        self.network.close()
        if self.pending:
            raise ModelError("task graph deadlocked: a dependency can never be met")
        network = self.network
        makespan = max(self.end, default=0.0)
        self.accounts.flush(makespan, ())
        return EngineRun(
            tasks=self.tasks,
            ready=self.ready,
            start=self.start,
            end=self.end,
            order=self.order,
            makespan=makespan,
            link_busy=dict(network.busy),
            link_units_moved=dict(network.moved),
            link_capacity=dict(network.capacity),
            events=self.timeouts + network.timers,
            accounts=self.accounts,
        )

    def drain(self, now: float) -> None:
        """Start every startable task at ``now`` (the current time): each blocks on a delay or
        a flow, or (neither) finishes at once and may make more tasks startable."""
        # methods are called on their objects, not through local names (compiled, those would be
        # calls through Python)
        startable, start, delays, flows, tasks = self.startable, self.start, self.delay, self.flow, self.tasks
        while startable:
            i = startable.pop()
            start[i] = now
            task = tasks[i]
            if task.category != "marker":
                self.accounts.task_started(task.stream, task.category, now)
            delay = delays[i]
            flow = flows[i]
            if delay > 0:
                self.timeouts += 1
                self.clock.call_after(delay, self.after_delay, i)
            elif flow is None:
                self.finish(i, now)
            else:
                self.network.transfer(i, flow.size, flow.usage, flow.rate_cap, flow.bound, flow.stream)

    def after_delay(self, event: Event) -> None:
        i = cast(int, event.value)  # the task's position, given as the timeout's value
        flow = self.flow[i]
        if flow is None:
            now = self.clock.now()
            self.finish(i, now)
            if self.startable:
                self.drain(now)
        else:
            # a flow never ends at once: nothing to drain
            self.network.transfer(i, flow.size, flow.usage, flow.rate_cap, flow.bound, flow.stream)

    def flows_done(self, keys: list[int], now: float) -> None:
        """The network's callback: the flows of these tasks moved their last byte at ``now``."""
        for i in keys:
            self.finish(i, now)
        if self.startable:
            self.drain(now)

    def finish(self, i: int, now: float) -> None:
        """Task ``i`` ends at ``now``: its stream's next task and its dependents may start."""
        self.end[i] = now
        self.order.append(i)
        del self.pending[i]
        task = self.tasks[i]
        if task.category == "marker":
            self.accounts.phase_begins(task.phase, now, self.network.flows)
        else:
            self.accounts.task_ended(task.stream, task.category, self.start[i], task.size, now)
        after = self.successor[i]
        deferred = self.deferred
        if after >= 0:
            if deferred[after]:
                if not self.unmet[after]:
                    self.resolve_deferred(after)
            else:
                self.at_head[after] = True
                if not self.unmet[after]:
                    self.startable.append(after)
        unmet = self.unmet
        for j in self.dependents[i]:
            unmet[j] -= 1
            if deferred[j]:
                if now > self.ready[j]:
                    self.ready[j] = now
                if not unmet[j] and self.stream_before(j) >= 0:
                    self.resolve_deferred(j)
            elif not unmet[j]:
                self.ready[j] = now
                if self.at_head[j]:
                    self.startable.append(j)

    def ended_at(self, p: int) -> float:
        """When task ``p`` ends, deferred or not (s; -1 while unknown)."""
        return self.deferred_end.get(p, -1.0) if self.deferred[p] else self.end[p]

    def stream_before(self, p: int) -> float:
        """When the task before ``p`` on its stream ends (s; 0 for none, -1 while unknown)."""
        prev = self.graph.stream_prev[p]
        return 0.0 if prev < 0 else self.ended_at(prev)

    def _join_deferred(self, p: int) -> None:
        """Take in a deferred task: it is resolved as soon as its inputs are known."""
        unmet, latest = 0, 0.0
        for d in self.graph.deps[p]:
            done = self.ended_at(d)
            if done < 0:
                unmet += 1
            elif done > latest:
                latest = done
        task = self.tasks[p]
        if task.category in self.accounts.compute_categories:
            raise ModelError(f"task {task.name!r}: a compute task cannot be deferred")
        self.unmet.append(unmet)
        self.at_head.append(False)
        self.delay.append(task.delay)
        self.ready.append(max(latest, self.floor.get(p, 0.0)))
        self.start.append(-1.0)
        self.end.append(-1.0)
        if not unmet and self.stream_before(p) >= 0:
            self.resolve_deferred(p)

    def resolve_deferred(self, first: int) -> None:
        """Give deferred task ``first`` its times (its inputs are known), and every deferred
        task that waited only for it, in turn; an event task waiting for one gets a timeout."""
        work = [first]
        unmet, ready, deferred, joined = self.unmet, self.ready, self.deferred, len(self.unmet)
        while work:
            p = work.pop()
            if p in self.deferred_end:
                continue
            began = max(ready[p], self.stream_before(p))
            flow = self.flow[p]
            ends = began + self.delay[p] + (flow.size / flow.bound if flow is not None else 0.0)
            self.deferred_start[p] = began
            self.deferred_end[p] = ends
            waited = False
            for j in self.dependents[p]:
                if j >= joined:
                    continue
                if deferred[j]:
                    unmet[j] -= 1
                    if ends > ready[j]:
                        ready[j] = ends
                    if not unmet[j] and self.stream_before(j) >= 0:
                        work.append(j)
                else:
                    waited = True
            after = self.successor[p]
            if 0 <= after < joined:
                if deferred[after]:
                    if not unmet[after]:
                        work.append(after)
                else:
                    waited = True
            if waited:
                self._proxy(p)

    def _deferred_done(self, p: int, now: float) -> float:
        """For an event task joining now: when deferred task ``p`` ended, if it has (s), else
        -1 (then the joining task waits for its timeout)."""
        if p in self.proxied:  # its timeout counts the waiting tasks down
            return self.end[p]
        ends = self.deferred_end.get(p, -1.0)
        if 0 <= ends <= now:
            self.end[p] = ends
            return ends
        if ends > now:
            self._proxy(p)
        return -1.0

    def _proxy(self, p: int) -> None:
        """A timeout at deferred task ``p``'s end, for the event tasks waiting for it."""
        if p in self.proxied:
            return
        self.proxied.add(p)
        now = self.clock.now()
        ends = self.deferred_end[p]
        if ends < now * (1 - 1e-12):
            raise LateTask(self.tasks[p].name)
        self.timeouts += 1
        self.proxies_pending += 1
        self.clock.call_after(max(ends - now, 0.0), self._proxy_done, p)

    def _proxy_done(self, event: Event) -> None:
        p = cast(int, event.value)
        now = self.clock.now()
        self.proxies_pending -= 1
        self.end[p] = self.deferred_end[p] = now  # the timeout's own time (a float step off at most)
        unmet, deferred = self.unmet, self.deferred
        for j in self.dependents[p]:
            if not deferred[j] and j < len(unmet):
                unmet[j] -= 1
                if not unmet[j]:
                    self.ready[j] = now
                    if self.at_head[j]:
                        self.startable.append(j)
        after = self.successor[p]
        if 0 <= after < len(unmet) and not deferred[after]:
            self.at_head[after] = True
            if not unmet[after]:
                self.startable.append(after)
        if self.startable:
            self.drain(now)
