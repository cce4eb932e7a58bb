"""A run that defers the tasks of background-copy streams: timed by recursion, without events.

While a schedule says some streams carry copies in the background (``Session.background_copies``),
the fast-forward adds their tasks as deferred. A deferred task takes no event: it starts at the
later of its stream's previous end and its dependencies' ends (and a ``floor``, for a copy of a
skipped iteration's task) and ends after its delay plus its bytes over its flow's own bound, as
soon as those are known (``resolve_deferred``); an event task that waits for one gets a timeout
at its end (a proxy). ``tiersim.fastforward.deferred.credit_deferred`` checks afterwards that
every deferred flow really moved at its own bound and adds them to the counters. Times are s.
"""

from __future__ import annotations

from typing import cast

from tiersim.engine.clock import Event
from tiersim.engine.graph import TaskGraph
from tiersim.engine.runner import LateTask, Run
from tiersim.errors import ModelError
from tiersim.fastforward.loops import at_or_before


class ProxyEnds(Event):
    """The end of a deferred task an event task waits for (its ``value``: the task's position)."""

    __slots__ = ("run",)

    def __init__(self, run: DeferringRun, task: int) -> None:
        super().__init__(task)
        self.run = run

    def fire(self) -> None:
        self.run.proxy_done(cast(int, self.value))


class DeferringRun(Run):
    """A ``Run`` whose tasks of deferring streams are timed apart from the event run. The
    streams deferring from each position on are ``changes`` (position, streams), in order."""

    def __init__(self, graph: TaskGraph) -> None:
        super().__init__(graph)
        self.changes: list[tuple[int, frozenset[str]]] = []
        """From each position on (in order), the streams whose tasks are deferred."""
        self._change = 0
        self._deferring: frozenset[str] = frozenset()
        self._defers = False
        """Whether ``_deferring`` holds a stream (a set's truth compiled is a call through Python)."""
        self.deferred: list[bool] = []
        """Per task joined: whether it is deferred."""
        self.deferred_at: list[int] = []
        """The positions of the deferred tasks joined, in order."""
        self.resolved: list[int] = []
        """The deferred tasks resolved so far, in the order they were."""
        self.last_deferred = -1
        """The position of the last deferred task joined (-1: none)."""
        self.deferred_start: list[float] = []
        """Deferred tasks' start and end (s; -1 until resolved), by position, at least as far as
        the last deferred one joined (lists, not dicts: no int boxed and hashed per look-up
        compiled)."""
        self.deferred_end: list[float] = []
        self.proxied: set[int] = set()
        """Deferred tasks an event task waits for: each has a timeout at its end."""
        self.proxies_pending = 0
        self.floor: dict[int, float] = {}
        """Deferred tasks that cannot start before a time (s) besides their dependencies (a
        fast-forward's copy, waiting for a skipped task)."""

    def defer_from(self, position: int, streams: frozenset[str]) -> None:
        """The tasks of ``streams`` from ``position`` on are deferred (an empty set ends it)."""
        self.changes.append((position, streams))

    def join(self, p: int, now: float) -> None:
        changes = self.changes
        while self._change < len(changes) and changes[self._change][0] <= p:
            self._deferring = changes[self._change][1]
            self._defers = len(self._deferring) > 0
            self._change += 1
        deferred = self._defers and self.tasks[p].stream in self._deferring
        self.deferred.append(deferred)
        if deferred:
            self.last_deferred = p
            self.deferred_at.append(p)
            self._join_deferred(p)
        else:
            super().join(p, now)

    def ended_before(self, p: int, now: float) -> float:
        return self._deferred_done(p, now) if self.deferred[p] else -1.0

    def stream_free(self, p: int) -> None:
        if self.deferred[p]:
            if not self.unmet[p]:
                self.resolve_deferred(p)
        else:
            super().stream_free(p)

    def dependency_done(self, p: int, now: float) -> None:
        if self.deferred[p]:
            self.unmet[p] = self.unmet[p] - 1  # ``-=`` on a list item is a generic call compiled
            if now > self.ready[p]:
                self.ready[p] = now
            if not self.unmet[p] and self.stream_before(p) >= 0:
                self.resolve_deferred(p)
        else:
            super().dependency_done(p, now)

    def deferred_since(self, position: int) -> list[int]:
        """The positions of the deferred tasks joined from ``position`` on, in order."""
        at = self.deferred_at
        return at[at_or_before(at, position - 1):]

    def ended_at(self, p: int) -> float:
        """When task ``p`` ends, deferred or not (s; -1 while unknown)."""
        if not self.deferred[p]:
            return self.end[p]
        return self.deferred_end[p]

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
        if p >= len(self.deferred_end):  # grown to twice past ``p``: a few times a run, not each task
            unknown = [-1.0] * (p + 1 + len(self.deferred_end))
            self.deferred_start.extend(unknown)
            self.deferred_end.extend(unknown)
        self.unmet.append(unmet)
        self.at_head.append(False)
        self.delay.append(task.delay)
        self.ready.append(max(latest, self.floor.get(p, 0.0)) if self.floor else latest)
        self.start.append(-1.0)
        self.end.append(-1.0)
        if not unmet and self.stream_before(p) >= 0:
            self.resolve_deferred(p)

    def resolve_deferred(self, first: int) -> None:
        """Give deferred task ``first`` its times (its inputs are known), and every deferred
        task that waited only for it, in turn; an event task waiting for one gets a timeout."""
        work = [first]
        ready, delay, flows, starts, ended = self.ready, self.delay, self.flow, self.deferred_start, self.deferred_end
        while work:
            p = work.pop()
            if ended[p] >= 0:
                continue
            began = max(ready[p], self.stream_before(p))
            flow = flows[p]
            ends = began + delay[p] + (flow.size / flow.bound if flow is not None else 0.0)
            starts[p] = began
            ended[p] = ends
            self.resolved.append(p)
            if self._release(p, ends, work):
                self._proxy(p)

    def _release(self, p: int, ends: float, work: list[int]) -> bool:
        """Deferred task ``p`` ends at ``ends``: the deferred tasks joined that wait for it and
        now know their inputs join ``work``. Returns whether an event task joined waits for it."""
        unmet, ready, deferred, joined = self.unmet, self.ready, self.deferred, len(self.unmet)
        waited = False
        for j in self.dependents[p]:
            if j >= joined:
                continue
            if deferred[j]:
                unmet[j] = unmet[j] - 1
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
        return waited

    def _deferred_done(self, p: int, now: float) -> float:
        """For an event task joining now: when deferred task ``p`` ended, if it has (s), else
        -1 (then the joining task waits for its timeout)."""
        if p in self.proxied:  # its timeout counts the waiting tasks down
            return self.end[p]
        ends = self.deferred_end[p]
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
        self.clock.schedule(max(ends - now, 0.0), ProxyEnds(self, p))

    def proxy_done(self, p: int) -> None:
        """Deferred task ``p``'s proxy timeout fired: the event tasks waiting for it may start."""
        now = self.clock.now()
        self.proxies_pending -= 1
        self.end[p] = self.deferred_end[p] = now  # the timeout's own time (a float step off at most)
        unmet, deferred = self.unmet, self.deferred
        for j in self.dependents[p]:
            if j < len(unmet) and not deferred[j]:
                unmet[j] = unmet[j] - 1
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
