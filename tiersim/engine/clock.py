"""The engine's clock and event queue: the one module that touches SimPy.

The engine uses SimPy as a clock and a queue of timed callbacks (no processes): a task's delay
is a timeout whose callback starts its flow, the flow network's timer calls back when a flow
ends. ``Clock`` wraps one ``simpy.Environment`` (the engine's own, or a caller's, for
``SharedLinks``); it reads SimPy's private clock and queue on the hot paths (``now``) and for
the few operations SimPy has no public call for: taking a stale timer back out of the queue,
and moving or resetting every queued time (a fast-forward). Times are s.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TypeAlias

import simpy
from simpy.events import Timeout

Environment: TypeAlias = simpy.Environment
Event: TypeAlias = simpy.Event
"""What a callback receives: its ``value`` is the one given to ``Clock.call_after``."""


class Clock:
    """Time and the queue of pending callbacks of one run."""

    __slots__ = ("env",)

    def __init__(self, env: simpy.Environment | None = None) -> None:
        self.env = env if env is not None else simpy.Environment()

    def now(self) -> float:
        """The current time (s), read without SimPy's property (a hot path)."""
        return self.env._now

    def call_after(self, delay: float, callback: Callable[[simpy.Event], None], value: object = None) -> None:
        """Call ``callback`` with an event carrying ``value`` ``delay`` seconds from now."""
        Timeout(self.env, delay, value).callbacks.append(callback)

    def event(self) -> simpy.Event:
        """A new event, triggered by its owner (``succeed``)."""
        return self.env.event()

    def pending(self) -> bool:
        """Whether any callback is queued."""
        return bool(self.env._queue)

    def step(self) -> None:
        """Process the next queued event."""
        self.env.step()

    def run(self) -> None:
        """Process queued events until none is left."""
        self.env.run()

    def withdraw_first(self, callback: Callable[[simpy.Event], None]) -> bool:
        """Take the earliest queued event with ``callback`` out of the queue; False if none is."""
        queue = self.env._queue
        found = -1
        for k, entry in enumerate(queue):
            if (found < 0 or entry[0] < queue[found][0]) and callback in entry[3].callbacks:
                found = k
        if found < 0:
            return False
        queue[found] = queue[-1]
        queue.pop()
        heapq.heapify(queue)
        return True

    def queued(self) -> list[tuple[float, object]]:
        """Each queued event's time (s) and value, in queue order."""
        return [(entry[0], entry[3].value) for entry in self.env._queue]

    def reschedule(self, times: list[float]) -> None:
        """Give the queued events the ``times`` (s), in the order ``queued`` lists them."""
        queue = self.env._queue
        queue[:] = [(at, priority, eid, event) for at, (_was, priority, eid, event) in zip(times, queue)]
        heapq.heapify(queue)

    def shift(self, seconds: float) -> None:
        """Move the clock and every queued event ``seconds`` later (a fast-forward)."""
        env = self.env
        env._now += seconds
        env._queue[:] = [(at + seconds, priority, eid, event) for at, priority, eid, event in env._queue]
