"""Shared links for process-style SimPy models: a transfer is an event to ``yield``.

SimPy's resources hand a process an event (``yield resource.request()``); ``SharedLinks`` does
the same for tiersim's processor-sharing links (``tiersim.engine.flows``), so a model written
as SimPy processes shares bandwidth as the engine's task graphs do. Seconds, bytes, link units
per second.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from tiersim.engine.clock import Environment, Event, SimPyClock, SimPyEvent
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.graph import Link
from tiersim.errors import ModelError


class SharedLinks:
    """Links of ``capacity`` units/s (name -> capacity) inside ``env``, shared max-min fairly
    by the transfers in flight on them."""

    def __init__(self, env: Environment, capacity: Mapping[str, float]) -> None:
        for name, value in capacity.items():
            Link(name, value)  # positive and finite, or a ModelError naming the link
        self.clock = SimPyClock(env)
        self.network = FlowNetwork(self.clock, dict(capacity), self._done)
        self._pending: dict[int, SimPyEvent] = {}
        self._keys = itertools.count()

    def transfer(self, size: float, usage: Mapping[str, float], cap: float = math.inf,
                 latency: float = 0.0) -> SimPyEvent:
        """An event that succeeds, with the time (s) as its value, once ``size`` bytes have
        moved: after ``latency`` seconds the flow starts, each byte using ``usage[link]`` units
        of each link, at most ``cap`` bytes/s."""
        if not size >= 0 or not math.isfinite(size):
            raise ModelError(f"transfer size must be non-negative and finite, got {size}")
        if not latency >= 0 or not math.isfinite(latency):
            raise ModelError(f"transfer latency must be non-negative and finite, got {latency}")
        if not cap > 0:
            raise ModelError(f"transfer rate cap must be positive, got {cap}")
        unknown = sorted(set(usage) - set(self.network.capacity))
        if unknown:
            raise ModelError(f"transfer over undeclared link(s) {', '.join(unknown)}")
        used = tuple((link, units) for link, units in usage.items() if units > 0)
        if not used and cap == math.inf:
            raise ModelError("a transfer needs a link it uses or a finite rate cap")
        done = self.clock.event()
        key = next(self._keys)

        def start(_event: Event | None = None) -> None:
            if size == 0:
                done.succeed(self.clock.now())
                return
            self._pending[key] = done
            self.network.transfer(key, size, used, cap)

        if latency > 0:
            self.clock.call_after(latency, start)
        else:
            start()
        return done

    def _done(self, keys: list[int], now: float) -> None:
        for key in keys:
            self._pending.pop(key).succeed(now)
