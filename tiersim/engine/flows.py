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

import simpy

_REL_TOL = 1e-12


@dataclass(eq=False, slots=True)
class Flow:
    """One active transfer: bytes left, current rate (bytes/s) and its completion event."""

    size: float
    usage: tuple[tuple[str, float], ...]
    cap: float
    done: simpy.Event
    remaining: float = field(init=False)
    rate: float = 0.0

    def __post_init__(self) -> None:
        self.remaining = self.size


def max_min_rates(flows: list[Flow], capacity: dict[str, float]) -> None:
    """Set ``flow.rate`` for every flow by weighted max-min fairness (progressive filling)."""
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
            if not _at_cap(flow) and not any(link in saturated for link, _ in flow.usage):
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
            if any(link in reach for link, _ in flow.usage):
                members.append(flow)
                reach.update(link for link, _ in flow.usage)
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

    def transfer(self, size: float, usage: tuple[tuple[str, float], ...], cap: float) -> simpy.Event:
        """Start a flow now; the returned event fires when its last byte has moved."""
        done = self.env.event()
        self._advance()
        flow = Flow(size, usage, cap, done)
        self.flows.append(flow)
        self._reschedule({link for link, _ in usage}, [flow])
        return done

    def _advance(self) -> None:
        """Move every flow forward to ``env.now`` at its current rate; account link busy time."""
        dt = self.env.now - self._last
        if dt > 0:
            used: set[str] = set()
            for flow in self.flows:
                self._move(flow, min(flow.rate * dt, flow.remaining))
                used.update(link for link, _ in flow.usage)
            for link in used:
                self.busy[link] += dt
        self._last = self.env.now

    def _reschedule(self, changed: set[str], started: list[Flow]) -> None:
        """Finish flows that are done, re-allocate rates around ``changed`` links (plus the
        ``started`` flows) and arm the timer for the next finish."""
        finished = [f for f in self.flows if f.remaining <= _REL_TOL * f.size]
        if finished:
            self.flows = [f for f in self.flows if f.remaining > _REL_TOL * f.size]
            for flow in finished:
                changed.update(link for link, _ in flow.usage)
                flow.done.succeed()
        self._generation += 1
        if not self.flows:
            return
        affected = connected(self.flows, changed)
        affected += [flow for flow in started if not flow.usage and flow.remaining > 0]
        if affected:
            max_min_rates(affected, self.capacity)
        wait = min(flow.remaining / flow.rate for flow in self.flows)
        due = [flow for flow in self.flows if flow.remaining / flow.rate <= wait * (1 + 1e-9)]
        generation = self._generation
        timer = self.env.timeout(wait)
        self.timers += 1
        timer.callbacks.append(lambda _event: self._on_timer(generation, due))

    def _on_timer(self, generation: int, due: list[Flow]) -> None:
        """The flows due now are done, whatever float residue ``now``'s spacing left them."""
        if generation != self._generation:
            return
        self._advance()
        for flow in due:
            self._move(flow, flow.remaining)
        self._reschedule(set(), [])

    def _move(self, flow: Flow, amount: float) -> None:
        """Take ``amount`` bytes off a flow and credit its links with the units they cost."""
        flow.remaining -= amount
        for link, units in flow.usage:
            self.moved[link] += amount * units
