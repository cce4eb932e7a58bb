"""The engine's clock and event queue: the one module that touches SimPy.

The engine uses a clock and a queue of timed events (no processes): a task's delay is an event
that starts its flow, the flow network's timer one that ends the flows due.
``Clock`` is a heap of its own, ordered as SimPy orders its queue (by time, then by the order
of scheduling; every entry is at SimPy's normal priority, and its time is ``now + delay`` as
SimPy computes it), so a run gives SimPy's results to the bit at a fraction of its cost. Besides
stepping, it takes a stale timer back out of the queue and moves or resets every queued time
(a fast-forward). ``SimPyClock`` is the same interface on a caller's ``simpy.Environment``, for
``SharedLinks`` in process-style SimPy models. Times are s.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heapify
from typing import Any, Final, TypeAlias

import simpy
from simpy.events import Timeout

Environment: TypeAlias = simpy.Environment
SimPyEvent: TypeAlias = simpy.Event
"""An event of a caller's SimPy environment (``SimPyClock.event``)."""


class Event:
    """Something that happens at a time on a ``Clock``: ``fire`` makes it happen. ``value`` is
    what ``Clock.queued`` reports of it (a task's position, or None for a flow network's timer);
    ``at`` (s) and ``order`` (the how-manieth scheduled) place it in the queue, set when queued.
    An engine's own events are subclasses whose ``fire`` calls the engine directly (compiled, a
    native call, not one through Python as a callback is)."""

    __slots__ = ("at", "order", "value")

    def __init__(self, value: object = None) -> None:
        self.value = value
        self.at = 0.0
        self.order = 0

    def fire(self) -> None:
        """Happen (at the clock's time ``at``)."""
        raise NotImplementedError

    def owner(self) -> object:
        """What the event is for, for ``Clock.withdraw_first`` (None: nothing takes it back)."""
        return None


class Call(Event):
    """An event that calls ``callback(event)`` (``Clock.call_after``)."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[Event], None], value: object) -> None:
        super().__init__(value)
        self.callback = callback

    def fire(self) -> None:
        self.callback(self)


def _earlier(a: Event, b: Event) -> bool:
    """Whether ``a`` comes before ``b`` in the queue: by time, then by the order of scheduling
    (the order of SimPy's ``(time, priority, id)`` keys at one priority)."""
    return a.at < b.at or (a.at == b.at and a.order < b.order)


def _sift_down(queue: list[Event], start: int, pos: int) -> None:
    """``heapq``'s ``_siftdown``: move ``queue[pos]`` up towards ``start`` to its place."""
    event = queue[pos]
    while pos > start:
        parent_pos = (pos - 1) >> 1
        parent = queue[parent_pos]
        if not _earlier(event, parent):
            break
        queue[pos] = parent
        pos = parent_pos
    queue[pos] = event


def _sift_up(queue: list[Event], pos: int, end: int) -> None:
    """``heapq``'s ``_siftup`` on the heap ``queue[:end]``: move the smaller child up until a
    leaf, then ``queue[pos]``'s event down to its place (the same layout as ``heapq``, so the
    same order of equal times)."""
    start = pos
    event = queue[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not _earlier(queue[child], queue[right]):
            child = right
        queue[pos] = queue[child]
        pos = child
        child = 2 * pos + 1
    queue[pos] = event
    _sift_down(queue, start, pos)


def _heapify(queue: list[Event]) -> None:
    """``heapq.heapify`` of the queue: the same layout (each subtree is made a heap after the
    subtrees under it, whatever the order ``heapq`` takes them in)."""
    for pos in reversed(range(len(queue) // 2)):
        _sift_up(queue, pos, len(queue))


_SPENT: Final = Event()
"""What a ``Clock``'s queue holds past its events (none of them: the run is freed at once)."""


class Clock:
    """Time and the queue of pending events of one run (a heap, as ``heapq`` keeps one, of
    events by time and then order of scheduling)."""

    __slots__ = ("order", "queue", "size", "time")

    def __init__(self) -> None:
        self.time = 0.0
        self.order = 0
        self.queue: list[Event] = []
        self.size = 0
        """The queued events are ``queue[:size]``; the slots after them hold ``_SPENT``. The
        list is never shrunk as events are taken: one emptied and filled again, as a run's
        queue of one or two events is at almost every event, reallocates its items both times
        (through the C library: some 300 instructions an event)."""

    def now(self) -> float:
        """The current time (s)."""
        return self.time

    def schedule(self, delay: float, event: Event) -> None:
        """Make ``event`` happen ``delay`` seconds from now."""
        self.order += 1
        event.at = self.time + delay
        event.order = self.order
        queue, size = self.queue, self.size
        if size < len(queue):
            queue[size] = event
        else:
            queue.append(event)
        self.size = size + 1
        _sift_down(queue, 0, size)

    def call_after(self, delay: float, callback: Callable[[Event], None], value: object = None) -> None:
        """Call ``callback`` with an event carrying ``value`` ``delay`` seconds from now."""
        self.schedule(delay, Call(callback, value))

    def pending(self) -> bool:
        """Whether any event is queued."""
        return self.size > 0

    def _next(self) -> Event:
        """Take the earliest queued event out of the queue (``heapq.heappop``)."""
        queue = self.queue
        size = self.size - 1
        self.size = size
        last = queue[size]
        queue[size] = _SPENT
        if not size:
            return last
        first = queue[0]
        queue[0] = last
        _sift_up(queue, 0, size)
        return first

    def _events(self) -> list[Event]:
        """The queue with its spent slots dropped (for the operations on every queued event)."""
        queue = self.queue
        del queue[self.size:]
        return queue

    def step(self) -> None:
        """Process the next queued event."""
        event = self._next()
        self.time = event.at
        event.fire()

    def run(self) -> None:
        """Process queued events until none is left."""
        while self.size:
            event = self._next()
            self.time = event.at
            event.fire()

    def withdraw_first(self, owner: object) -> bool:
        """Take the earliest queued event of ``owner`` (``Event.owner``) out of the queue; False
        if none is. The last queued event takes its place and sifts to its own (the order of
        events is total, so where the heap keeps them does not change which comes first)."""
        queue, size = self.queue, self.size
        found = -1
        for k in range(size):
            event = queue[k]
            if (found < 0 or _earlier(event, queue[found])) and event.owner() is owner:
                found = k
        if found < 0:
            return False
        size -= 1
        self.size = size
        last = queue[size]
        queue[size] = _SPENT
        if found < size:
            queue[found] = last
            if found and _earlier(last, queue[(found - 1) >> 1]):
                _sift_down(queue, 0, found)
            else:
                _sift_up(queue, found, size)
        return True

    def queued(self) -> list[tuple[float, object]]:
        """Each queued event's time (s) and value, in queue order."""
        return [(event.at, event.value) for event in self._events()]

    def reschedule(self, times: list[float]) -> None:
        """Give the queued events the ``times`` (s), in the order ``queued`` lists them."""
        queue = self._events()
        for event, at in zip(queue, times):
            event.at = at
        _heapify(queue)

    def shift(self, seconds: float) -> None:
        """Move the clock and every queued event ``seconds`` later (a fast-forward)."""
        self.time += seconds
        for event in self._events():
            event.at += seconds


class _Relay:
    """A SimPy callback that fires a ``Clock`` event."""

    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        self.event = event

    def __call__(self, _fired: object) -> None:
        self.event.fire()


class SimPyClock(Clock):
    """The ``Clock`` interface on a caller's SimPy environment (``SharedLinks``), which its
    processes share: time and queue are SimPy's."""

    __slots__ = ("env",)

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__()
        self.env = env

    def now(self) -> float:
        return float(self.env.now)

    def schedule(self, delay: float, event: Event) -> None:
        Timeout(self.env, delay, event.value).callbacks.append(_Relay(event))

    def event(self) -> simpy.Event:
        """A new event of the environment, triggered by its owner (``succeed``)."""
        return self.env.event()

    def pending(self) -> bool:
        return self.env.peek() != float("inf")

    def step(self) -> None:
        self.env.step()

    def run(self) -> None:
        self.env.run()

    def withdraw_first(self, owner: object) -> bool:
        queue = self.env._queue
        if not _withdraw_first(queue, lambda entry: any(
                isinstance(relay, _Relay) and relay.event.owner() is owner for relay in entry[3].callbacks)):
            return False
        heapify(queue)
        return True


def _withdraw_first(queue: list[Any], matches: Callable[[Any], bool]) -> bool:
    """Take the earliest entry of SimPy's ``queue`` (by time; the first in the list of equal
    ones) that ``matches`` out of it (the last entry takes its place: the caller makes it a heap
    again); False if none matches."""
    found = -1
    for k, entry in enumerate(queue):
        if (found < 0 or float(entry[0]) < float(queue[found][0])) and matches(entry):
            found = k
    if found < 0:
        return False
    queue[found] = queue[-1]
    queue.pop()
    return True
