"""The engine's clock and event queue: the one module that touches SimPy.

The engine uses a clock and a queue of timed callbacks (no processes): a task's delay is a
timeout whose callback starts its flow, the flow network's timer calls back when a flow ends.
``Clock`` is a heap of its own, ordered as SimPy orders its queue (by time, then by the order
of scheduling; every entry is at SimPy's normal priority, and its time is ``now + delay`` as
SimPy computes it), so a run gives SimPy's results to the bit at a fraction of its cost. Besides
stepping, it takes a stale timer back out of the queue and moves or resets every queued time
(a fast-forward). ``SimPyClock`` is the same interface on a caller's ``simpy.Environment``, for
``SharedLinks`` in process-style SimPy models. Times are s.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from heapq import heapify
from typing import Any, Final, TypeAlias

import simpy
from simpy.events import Timeout

Environment: TypeAlias = simpy.Environment
SimPyEvent: TypeAlias = simpy.Event
"""An event of a caller's SimPy environment (``SimPyClock.event``)."""

_heappush: Final = heapq.heappush  # compiled, a Final name is a C static: no lookup per call
_heappop: Final = heapq.heappop


class Event:
    """What a callback receives: its ``value`` is the one given to ``Clock.call_after``."""

    __slots__ = ("callback", "value")

    def __init__(self, callback: Callable[[Event], None], value: object) -> None:
        self.callback = callback
        self.value = value


class Clock:
    """Time and the queue of pending callbacks of one run: entries (time s, order, event)."""

    __slots__ = ("order", "queue", "time")

    def __init__(self) -> None:
        self.time = 0.0
        self.order = 0
        self.queue: list[tuple[float, int, Event]] = []

    def now(self) -> float:
        """The current time (s)."""
        return self.time

    def call_after(self, delay: float, callback: Callable[[Event], None], value: object = None) -> None:
        """Call ``callback`` with an event carrying ``value`` ``delay`` seconds from now."""
        self.order += 1
        _heappush(self.queue, (self.time + delay, self.order, Event(callback, value)))

    def pending(self) -> bool:
        """Whether any callback is queued."""
        return bool(self.queue)

    def step(self) -> None:
        """Process the next queued event."""
        at, _order, event = _heappop(self.queue)
        self.time = at
        event.callback(event)

    def run(self) -> None:
        """Process queued events until none is left."""
        queue = self.queue
        while queue:
            at, _order, event = _heappop(queue)
            self.time = at
            event.callback(event)

    def withdraw_first(self, callback: Callable[[Event], None]) -> bool:
        """Take the earliest queued event with ``callback`` out of the queue; False if none is."""
        return _withdraw_first(self.queue, lambda entry: entry[2].callback == callback)

    def queued(self) -> list[tuple[float, object]]:
        """Each queued event's time (s) and value, in queue order."""
        return [(entry[0], entry[2].value) for entry in self.queue]

    def reschedule(self, times: list[float]) -> None:
        """Give the queued events the ``times`` (s), in the order ``queued`` lists them."""
        queue = self.queue
        queue[:] = [(at, order, event) for at, (_was, order, event) in zip(times, queue)]
        heapify(queue)

    def shift(self, seconds: float) -> None:
        """Move the clock and every queued event ``seconds`` later (a fast-forward)."""
        self.time += seconds
        self.queue[:] = [(at + seconds, order, event) for at, order, event in self.queue]


class _Relay:
    """A SimPy callback that calls a ``Clock`` callback with an ``Event`` of its own."""

    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        self.event = event

    def __call__(self, _fired: object) -> None:
        self.event.callback(self.event)


class SimPyClock(Clock):
    """The ``Clock`` interface on a caller's SimPy environment (``SharedLinks``), which its
    processes share: time and queue are SimPy's."""

    __slots__ = ("env",)

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__()
        self.env = env

    def now(self) -> float:
        return float(self.env.now)

    def call_after(self, delay: float, callback: Callable[[Event], None], value: object = None) -> None:
        Timeout(self.env, delay, value).callbacks.append(_Relay(Event(callback, value)))

    def event(self) -> simpy.Event:
        """A new event of the environment, triggered by its owner (``succeed``)."""
        return self.env.event()

    def pending(self) -> bool:
        return self.env.peek() != float("inf")

    def step(self) -> None:
        self.env.step()

    def run(self) -> None:
        self.env.run()

    def withdraw_first(self, callback: Callable[[Event], None]) -> bool:
        return _withdraw_first(self.env._queue, lambda entry: any(
            isinstance(relay, _Relay) and relay.event.callback == callback for relay in entry[3].callbacks))


def _withdraw_first(queue: list[Any], matches: Callable[[Any], bool]) -> bool:
    """Take the earliest entry of the heap ``queue`` (time first) that ``matches`` out of it,
    keeping it a heap; False if none matches."""
    found = -1
    for k, entry in enumerate(queue):
        if (found < 0 or entry[0] < queue[found][0]) and matches(entry):
            found = k
    if found < 0:
        return False
    queue[found] = queue[-1]
    queue.pop()
    heapify(queue)
    return True
