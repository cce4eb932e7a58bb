"""Processor-sharing links: concurrent flows share each link max-min fairly.

A flow moves ``size`` bytes; each byte consumes ``units`` of capacity on each link it uses,
and the flow's rate is at most ``cap`` bytes/s. Whenever a flow starts or ends, rates are
re-allocated by progressive filling (every unfrozen flow's rate grows equally until a link
saturates or the flow reaches its cap), among the flows connected to the change through
shared links (allocations of unconnected flows cannot change). One timer is pending at a
time: the next completion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import simpy

_REL_TOL = 1e-12
"""Relative tolerance for a link counted as saturated or a flow as at its cap."""


@dataclass(eq=False, slots=True)
class Flow:
    """One active transfer: bytes left, current rate (bytes/s) and its completion event."""

    size: float
    usage: tuple[tuple[str, float], ...]
    cap: float
    done: Callable[[], None]
    remaining: float = field(init=False)
    rate: float = 0.0
    links: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.remaining = self.size
        self.links = frozenset(link for link, _ in self.usage)


def max_min_rates(flows: list[Flow], capacity: dict[str, float]) -> None:
    """Set ``flow.rate`` for every flow by weighted max-min fairness (progressive filling)."""
    if len(flows) == 1:
        flow = flows[0]
        flow.rate = min([flow.cap, *(capacity[link] / units for link, units in flow.usage if units > 0)])
        if not math.isfinite(flow.rate):
            raise ValueError("a flow has neither a link nor a finite rate cap")
        return
    residual = {link: capacity[link] for flow in flows for link, _ in flow.usage}
    for flow in flows:
        flow.rate = 0.0
    active = flows
    while active:
        load: dict[str, float] = {}
        step = math.inf
        for flow in active:
            if flow.cap - flow.rate < step:
                step = flow.cap - flow.rate
            for link, units in flow.usage:
                load[link] = load.get(link, 0.0) + units
        for link, units in load.items():
            if units > 0 and residual[link] / units < step:
                step = residual[link] / units
        if not math.isfinite(step):
            raise ValueError("a flow has neither a link nor a finite rate cap")
        saturated = set()
        for link, units in load.items():
            residual[link] -= step * units
            if units > 0 and residual[link] <= _REL_TOL * capacity[link]:
                saturated.add(link)
        still = []
        for flow in active:
            flow.rate += step
            if not _at_cap(flow) and not (saturated and not saturated.isdisjoint(flow.links)):
                still.append(flow)
        active = still


def _at_cap(flow: Flow) -> bool:
    """Whether a flow has reached its own rate cap (never, for an uncapped flow)."""
    return math.isfinite(flow.cap) and flow.cap - flow.rate <= _REL_TOL * flow.cap


def connected(flows: list[Flow], links: set[str]) -> list[Flow]:
    """The flows that share a link with ``links``, transitively."""
    reach = set(links)
    members: list[Flow] = []
    rest = flows
    grew = True
    while grew:
        grew = False
        others = []
        for flow in rest:
            if not reach.isdisjoint(flow.links):
                members.append(flow)
                reach |= flow.links
                grew = True
            else:
                others.append(flow)
        rest = others
    return members


class FlowNetwork:
    """The set of links and the flows on them, inside one SimPy environment."""

    def __init__(self, env: simpy.Environment, capacity: dict[str, float]) -> None:
        self.env = env
        self.capacity = capacity
        self.flows: list[Flow] = []
        self.timers = 0
        self._last = 0.0
        self._generation = 0
        self.busy: dict[str, float] = {name: 0.0 for name in capacity}
        self.moved: dict[str, float] = {name: 0.0 for name in capacity}

    def transfer(self, size: float, usage: tuple[tuple[str, float], ...], cap: float,
                 done: Callable[[], None]) -> None:
        """Start a flow now; ``done()`` is called when its last byte has moved."""
        self._advance()
        flow = Flow(size, usage, cap, done)
        self.flows.append(flow)
        affected = connected(self.flows, set(flow.links)) if flow.links else [flow]
        max_min_rates(affected, self.capacity)
        self._arm()

    def _advance(self) -> None:
        """Move every flow forward to ``env.now`` at its current rate; account link busy time."""
        dt = self.env.now - self._last
        if dt > 0:
            used: set[str] = set()
            for flow in self.flows:
                self._move(flow, min(flow.rate * dt, flow.remaining))
                used |= flow.links
            for link in used:
                self.busy[link] += dt
        self._last = self.env.now

    def _arm(self) -> None:
        """Arm one timer for the next completion; earlier timers become stale."""
        self._generation += 1
        if not self.flows:
            return
        wait = min(flow.remaining / flow.rate for flow in self.flows)
        due = [flow for flow in self.flows if flow.remaining / flow.rate <= wait * (1 + 1e-9)]
        generation = self._generation
        timer = self.env.timeout(wait)
        self.timers += 1
        timer.callbacks.append(lambda _event: self._on_timer(generation, due))

    def _on_timer(self, generation: int, due: list[Flow]) -> None:
        """The flows due now are done, whatever float residue ``now``'s spacing left them;
        the flows they shared links with get their rates re-allocated."""
        if generation != self._generation:
            return
        self._advance()
        changed: set[str] = set()
        for flow in due:
            self._move(flow, flow.remaining)
            changed |= flow.links
        finished = {id(flow) for flow in due}
        self.flows = [flow for flow in self.flows if id(flow) not in finished]
        if changed:
            affected = connected(self.flows, changed)
            if affected:
                max_min_rates(affected, self.capacity)
        self._arm()
        for flow in due:
            flow.done()

    def _move(self, flow: Flow, amount: float) -> None:
        """Take ``amount`` bytes off a flow and credit its links with the units they cost."""
        flow.remaining -= amount
        for link, units in flow.usage:
            self.moved[link] += amount * units
