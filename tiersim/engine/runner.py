"""Run a ``TaskGraph`` on its ``Clock``: streams advance by event callbacks, flows on a
``FlowNetwork``. A graph may grow while it runs (``Run.extend``): that is how a fast-forward
builds only the part of a schedule the run has reached (and, through the hooks ``join``,
``stream_free``, ``dependency_done`` and ``ended_before``, times some tasks apart from the
event run: ``tiersim.fastforward.deferred_run``)."""

from __future__ import annotations

from functools import cached_property
from typing import Any, NamedTuple, cast

from tiersim.engine.accounts import Accounts, Resource
from tiersim.engine.clock import Clock, Event
from tiersim.engine.flows import Flow, FlowNetwork, FlowsDone
from tiersim.engine.graph import Task, TaskGraph
from tiersim.errors import ConfigError, ModelError


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


class DelayEnds(Event):
    """The end of a task's delay (its ``value``: the task's position in the run). A fired one
    is the run's ``spare``, queued again for the next delay (``Run.delay_ends``)."""

    __slots__ = ("run",)

    def __init__(self, run: Run, task: int) -> None:
        super().__init__(task)
        self.run = run

    def fire(self) -> None:
        run, task = self.run, cast(int, self.value)
        run.spare = self
        run.after_delay(task)


class LateTask(Exception):
    """A task joined a running graph after the moment it could have started: the graph was
    built too lazily for this schedule (the caller builds it whole instead)."""


class EngineRun:
    """The engine's output: the makespan (s), counters per link, the events processed and the
    time integrals of ``accounts``. When ``complete``, also per task (by position in
    ``tasks``) its ready, start and end times (s) and the positions in completion order;
    ``records`` gives the same as one record per task, built when first read. A
    fast-forwarded run is not complete: it holds the tasks it built, not every task.

    A plain class, as ``Task`` is (a frozen dataclass's ``__init__`` runs in Python even
    compiled: some 18,000 instructions a run): nothing changes a run once made. Two runs are
    equal when every field is."""

    def __init__(self, tasks: list[Task], ready: list[float], start: list[float], end: list[float], order: list[int],
                 makespan: float, link_busy: dict[str, float], link_units_moved: dict[str, float],
                 link_capacity: dict[str, float], events: int, accounts: Accounts, complete: bool = True) -> None:
        self.tasks = tasks
        self.ready = ready
        self.start = start
        self.end = end
        self.order = order
        self.makespan = makespan
        self.link_busy = link_busy
        self.link_units_moved = link_units_moved
        self.link_capacity = link_capacity
        self.events = events
        self.accounts = accounts
        self.complete = complete

    def _fields(self) -> tuple[Any, ...]:
        return (self.tasks, self.ready, self.start, self.end, self.order, self.makespan, self.link_busy,
                self.link_units_moved, self.link_capacity, self.events, self.accounts, self.complete)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return EngineRun, self._fields()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EngineRun) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"EngineRun(makespan={self.makespan!r}, link_busy={self.link_busy!r}, "
                f"link_units_moved={self.link_units_moved!r}, link_capacity={self.link_capacity!r}, "
                f"events={self.events!r}, complete={self.complete!r})")

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


class Run(FlowsDone):
    """The state of one run, in lists indexed by task: the dependencies not yet done, whether
    the stream is free for it, ready, start and end times (-1 until then) and the order tasks
    finished in, and its stream's account; the graph's own lists give the dependents, the next
    task on the stream and the flows. ``pending`` holds the tasks joined and not finished. Once the network is closed
    nothing of a finished run is left in a reference cycle (so it is freed at once, without the
    cyclic garbage collector)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.clock = Clock()
        self.graph = graph
        self.accounts = Accounts()
        self.network = FlowNetwork(self.clock, {}, self, self.accounts)
        self.tasks = graph.tasks
        self.dependents = graph.dependents
        self.successor = graph.stream_next
        self.flow = graph.flows
        self.streams: list[Resource] = []
        """Per task, its stream's ``Accounts.resource``: found by name for a stream's first task,
        then passed on from each task to the next on the stream (no lookup by name a task)."""
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
        self.spare: DelayEnds | None = None
        """A fired delay's event, queued again for the next (one made and freed per delay costs
        some 300 instructions)."""

    def extend(self) -> None:
        """Take in the tasks added to the graph since the last call and start those that can
        start now. A task whose dependencies and stream were all done before now is
        ``LateTask``: it should have started then."""
        graph, network = self.graph, self.network
        if len(graph.links) > len(network.capacity):  # links are only added: a new one joins
            for name, link in graph.links.items():
                if name not in network.capacity:
                    network.add_link(name, link.capacity)
        now = self.clock.now()
        streams, prev = self.streams, graph.stream_prev
        for p in range(len(self.unmet), len(graph.tasks)):
            before = prev[p]
            streams.append(streams[before] if before >= 0 else self.accounts.resource(graph.tasks[p].stream))
            self.join(p, now)
        if self.startable:
            self.drain(now)

    def join(self, p: int, now: float) -> None:
        """Take in event task ``p`` at ``now``: count its dependencies not yet done and whether
        its stream is free, and make it startable if nothing holds it (``LateTask`` if it could
        have started before now)."""
        graph, end = self.graph, self.end
        unmet, latest = 0, 0.0
        for d in graph.deps[p]:
            done = end[d]
            if done < 0:
                done = self.ended_before(d, now)
            if done < 0:
                unmet += 1
            elif done > latest:
                latest = done
        prev = graph.stream_prev[p]
        before = end[prev] if prev >= 0 else 0.0
        if before < 0:
            before = self.ended_before(prev, now)
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

    def result(self, complete: bool = True) -> EngineRun:
        """The run's output once the event queue is empty (every task done, or a deadlock);
        ``complete``: whether it has a record of every task (``EngineRun.complete``)."""
        self.network.close()
        self.spare = None  # (it holds the run: a reference cycle)
        if self.pending:
            raise ModelError("task graph deadlocked: a dependency can never be met")
        network = self.network
        makespan = _latest(self.end)
        self.accounts.flush(makespan, ())
        return EngineRun(
            tasks=self.tasks,
            ready=self.ready,
            start=self.start,
            end=self.end,
            order=self.order,
            makespan=makespan,
            link_busy=network.busy,
            link_units_moved=network.moved,
            link_capacity=dict(network.capacity),
            events=self.timeouts + network.timers,
            accounts=self.accounts,
            complete=complete,
        )

    def drain(self, now: float) -> None:
        """Start every startable task at ``now`` (the current time): each blocks on a delay or
        a flow, or (neither) finishes at once and may make more tasks startable."""
        # methods are called on their objects, not through local names (compiled, those would be
        # calls through Python)
        startable, start, delays, flows, tasks = self.startable, self.start, self.delay, self.flow, self.tasks
        streams = self.streams
        while startable:
            i = _pop(startable)
            start[i] = now
            task = tasks[i]
            if task.category != "marker":
                self.accounts.task_started(streams[i], task.category, now)
            delay = delays[i]
            flow = flows[i]
            if delay > 0:
                self.timeouts += 1
                self.clock.schedule(delay, self.delay_ends(i))
            elif flow is None:
                self.finish(i, now)
            else:
                self.network.transfer(i, flow.size, flow.usage, flow.rate_cap, flow.bound, flow.stream, streams[i])

    def delay_ends(self, i: int) -> DelayEnds:
        """An event for the end of task ``i``'s delay: the spare, if a delay has ended since it
        was last taken."""
        event = self.spare
        if event is None:
            return DelayEnds(self, i)
        self.spare = None
        event.value = i
        return event

    def after_delay(self, i: int) -> None:
        """Task ``i``'s delay is over: its flow starts, or (none) it finishes."""
        flow = self.flow[i]
        if flow is None:
            now = self.clock.now()
            self.finish(i, now)
            if self.startable:
                self.drain(now)
        else:
            # a flow never ends at once: nothing to drain
            self.network.transfer(i, flow.size, flow.usage, flow.rate_cap, flow.bound, flow.stream, self.streams[i])

    def flows_done(self, flows: list[Flow], now: float) -> None:
        """The network's ``FlowsDone``: these tasks' flows (each keyed by its task's position)
        moved their last byte at ``now``."""
        for flow in flows:
            self.finish(flow.key, now)
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
            self.accounts.task_ended(self.streams[i], task.category, self.start[i], task.size, now)
        after = self.successor[i]
        if after >= 0:
            self.stream_free(after)
        for j in self.dependents[i]:
            self.dependency_done(j, now)

    def stream_free(self, p: int) -> None:
        """The task before ``p`` on its stream has ended: ``p`` may start once its dependencies
        are done."""
        self.at_head[p] = True
        if not self.unmet[p]:
            self.startable.append(p)

    def dependency_done(self, p: int, now: float) -> None:
        """One of ``p``'s dependencies ended at ``now``: ``p`` may start once none is left and
        its stream is free."""
        self.unmet[p] -= 1
        if not self.unmet[p]:
            self.ready[p] = now
            if self.at_head[p]:
                self.startable.append(p)

    def ended_before(self, p: int, now: float) -> float:
        """For a task joining at ``now``: when task ``p``, which has not ended in the event run,
        ended (s), or -1 (the joining task waits for it)."""
        return -1.0


def _pop(items: list[int]) -> int:
    """``items.pop()``, but a list left empty is cleared: compiled, ``pop`` shrinks it to no
    bytes through the C library's ``realloc`` and the next append grows it back there (some
    300 instructions a task; a run's startable tasks are mostly one at a time)."""
    last = items[-1]
    if len(items) > 1:
        items.pop()
    else:
        items.clear()
    return last


def _latest(times: list[float]) -> float:
    """The largest of ``times`` (s), 0 for none: ``max(times, default=0.0)`` as a compiled loop
    over native floats (the builtin compares them as objects, 15 k instructions a run)."""
    if not times:
        return 0.0
    latest = times[0]
    for time in times:
        if time > latest:
            latest = time
    return latest
