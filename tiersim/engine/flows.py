"""Processor-sharing links: concurrent flows share each link max-min fairly.

A flow moves ``size`` bytes; each byte consumes ``units`` of capacity on each link it uses
(each link named once in its ``usage``), and the flow's rate is at most ``cap`` bytes/s.
Whenever a flow starts or ends, rates are re-allocated by progressive filling (every
unfrozen flow's rate grows equally until a link saturates or the flow reaches its cap), among
the flows connected to the change through shared links (allocations of unconnected flows
cannot change, so they are not touched: each flow keeps its bytes left as of its last rate
change and the time it will finish at that rate). A timer is armed for the earliest finish
unless one at or before it is pending; one that a re-allocation left with no flow to end is
taken back out of the event queue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Final

from tiersim.engine.accounts import Accounts, Resource
from tiersim.engine.clock import Clock, Event
from tiersim.engine.graph import Usage
from tiersim.errors import ModelError

_REL_TOL: Final = 1e-12
"""Relative tolerance for a link counted as saturated or a flow as at its cap."""
_SATURATED_TOL: Final = 1e-9
"""A link is saturated (it may bind a flow) when its load is within this fraction of capacity."""
_DUE_TOL: Final = 1e-9
"""A flow is due at a timer when its finish is within this fraction of its own remaining time."""
_ARM_SLACK: Final = 1 + 1e-12
"""A pending timer within this factor of a new finish time (float residue of a re-allocation)
serves it: the flow ends on that timer, not on one of its own."""


_heappush: Final = heapq.heappush  # compiled, a Final name is a C static: no lookup per call
_heappop: Final = heapq.heappop

SHORTCUTS = True
"""Whether a network skips the re-allocations that provably change nothing (``FlowNetwork``)."""


class FlowSpan:
    """A stretch of a flow recorded while the network records (``FlowNetwork.recorded``):
    ``since`` to ``until`` (s), its usage, its own bound (bytes/s) and its stream."""

    __slots__ = ("bound", "since", "stream", "until", "usage")

    def __init__(self, since: float, until: float, usage: Usage, bound: float, stream: str) -> None:
        self.since = since
        self.until = until
        self.usage = usage
        self.bound = bound
        self.stream = stream


class FlowTimer(Event):
    """A flow network's timer: when it fires, the flows due then end (``FlowNetwork``). A fired
    timer is the network's ``spare``, armed again by its next ``_arm_at``."""

    __slots__ = ("network",)

    def __init__(self, network: FlowNetwork) -> None:
        super().__init__()
        self.network = network

    def fire(self) -> None:
        network = self.network
        network.spare = self
        network.on_timer()

    def owner(self) -> object:
        return self.network


class FlowsDone:
    """Who a network tells of the flows that end (``FlowNetwork``): ``flows_done(flows, now)``,
    with the flows that moved their last byte at ``now`` (s), each named by its ``key``. The
    engine's run is one (compiled, a native call, not one through Python as a callback is)."""

    def flows_done(self, flows: list[Flow], now: float) -> None:
        raise NotImplementedError


class Callback(FlowsDone):
    """A function ``(keys, now)`` as a ``FlowsDone``."""

    def __init__(self, function: Callable[[list[int], float], None]) -> None:
        self.function = function

    def flows_done(self, flows: list[Flow], now: float) -> None:
        self.function([flow.key for flow in flows], now)


class _Closed(FlowsDone):
    """A closed network's ``done`` (no flow can end on it)."""

    def flows_done(self, flows: list[Flow], now: float) -> None:
        raise ModelError("a flow ended on a closed network")


class Flow:
    """One active transfer: ``remaining`` bytes as of time ``last`` (s), its current ``rate``
    (bytes/s, at first its ``bound``: ``own_bound``, the rate it gets alone), and ``finish_at``
    (s) if the rate holds; ``key`` names it to the network's owner, ``stream`` the stream it
    moves for (``account``: that stream's ``Resource``, where the owner passed it),
    ``attributed`` the bytes of it already counted in an earlier phase and ``met`` the last
    search for connected flows that met it (``FlowNetwork._component``). ``states`` and
    ``units``: the state of each link in its ``usage`` and the units per byte it puts on it, in
    that order (``FlowNetwork.transfer`` fills them: the sharing reads links by object, not by
    name)."""

    __slots__ = (
        "account",
        "attributed",
        "began",
        "bound",
        "cap",
        "finish_at",
        "key",
        "last",
        "met",
        "rate",
        "remaining",
        "size",
        "states",
        "stream",
        "units",
        "usage",
    )

    def __init__(
        self,
        size: float,
        usage: Usage,
        cap: float,
        key: int = -1,
        bound: float = 0.0,
        last: float = 0.0,
        stream: str = "",
        account: Resource | None = None,
    ) -> None:
        self.key = key
        self.size = size
        self.usage = usage
        self.cap = cap
        self.bound = bound
        self.remaining = size
        self.rate = bound
        self.last = last
        self.finish_at = math.inf
        self.stream = stream
        self.account = account
        self.attributed = 0.0
        self.began = last
        self.met = 0
        self.states: list[LinkState] = []
        self.units: list[float] = []


class LinkState:
    """One link of a network as it is now: its ``capacity`` (link units/s), the ``load`` its
    active flows put on it (link units/s), those ``flows``, in the order they came on it, and
    its ``account`` (``Accounts.resource``); while it carries flows, ``busy_since`` (s): when
    its busy stretch began. Its totals so far: ``busy`` (s; a stretch counts as it ends, or at
    ``FlowNetwork.flush_busy``) and the link units its flows ``moved`` (native floats on the
    link, not values of a dict by name: a flow's end adds to them without a lookup); ``met``:
    the last search for connected flows that met it (``FlowNetwork._component``). While
    ``max_min_rates`` fills: the capacity left (``residual``, units/s), the units per byte the
    unfrozen flows put on it this round (``fill``; 0 between rounds) and whether it saturated
    this round (``saturated``; False between rounds)."""

    __slots__ = ("account", "busy", "busy_since", "capacity", "fill", "flows", "load", "met", "moved", "residual",
                 "saturated")

    def __init__(self, capacity: float, account: Resource) -> None:
        self.capacity = capacity
        self.load = 0.0
        self.flows: list[Flow] = []
        self.account = account
        self.busy_since = 0.0
        self.busy = 0.0
        self.moved = 0.0
        self.met = 0
        self.residual = capacity
        self.fill = 0.0
        self.saturated = False


def own_bound(usage: Usage, cap: float, capacity: dict[str, float]) -> float:
    """The rate (bytes/s) a flow would get alone: its cap or its tightest link."""
    rate = cap
    for link, units in usage:
        if units > 0 and capacity[link] / units < rate:
            rate = capacity[link] / units
    if not math.isfinite(rate):
        raise ModelError("a flow has neither a link nor a finite rate cap")
    return rate


def max_min_rates(flows: list[Flow]) -> None:
    """Set ``flow.rate`` for every flow by weighted max-min fairness (progressive filling) over
    the links of their ``states``: each round every unfrozen flow's rate grows by one step, and
    the flows at their cap or on a link that saturated this round freeze."""
    for flow in flows:
        flow.rate = 0.0
        for state in flow.states:
            state.residual = state.capacity
    active = flows
    filled: list[LinkState] = []
    while active:
        step = _fill_step(active, filled)
        for state in filled:
            state.residual -= step * state.fill
            state.saturated = state.residual <= _REL_TOL * state.capacity
        still = []
        for flow in active:
            flow.rate += step
            if not _at_cap(flow) and not _on_saturated(flow):
                still.append(flow)
        _clear(filled)
        active = still


def _fill_step(active: list[Flow], filled: list[LinkState]) -> float:
    """How much every unfrozen flow's rate may grow (bytes/s) before a flow reaches its cap or a
    link its capacity (``residual``: units/s left); each link the flows put units on gets their
    sum per byte in ``fill`` and joins ``filled``, in the order the flows meet them."""
    step = math.inf
    for flow in active:
        step = min(step, flow.cap - flow.rate)
        states, units = flow.states, flow.units
        for k in range(len(states)):
            per_byte = units[k]
            if per_byte > 0:
                state = states[k]
                if state.fill == 0.0:  # (a positive sum once it has units)
                    filled.append(state)
                state.fill += per_byte
    for state in filled:
        step = min(step, state.residual / state.fill)
    if math.isinf(step) or math.isnan(step):
        _clear(filled)
        raise ModelError("a flow has neither a link nor a finite rate cap")
    return step


def _on_saturated(flow: Flow) -> bool:
    """Whether one of ``flow``'s links saturated in this round of filling."""
    for state in flow.states:
        if state.saturated:
            return True
    return False


def _clear(filled: list[LinkState]) -> None:
    """End a round of filling: ``filled``'s links hold no round's figures, and the list is empty."""
    for state in filled:
        state.fill = 0.0
        state.saturated = False
    filled.clear()

def _earliest_finish(flows: list[Flow]) -> float:
    """The earliest ``finish_at`` of ``flows`` (s; there is one): ``min`` as a compiled loop,
    without a list of boxed floats and the builtin's call through Python."""
    first = flows[0].finish_at
    for flow in flows:
        if flow.finish_at < first:
            first = flow.finish_at
    return first


def _arm(armed: list[float], due: float) -> None:
    """``heapq.heappush``, but a time pushed on no other is appended (a network's timers are
    mostly one at a time: no call through Python)."""
    if armed:
        _heappush(armed, due)
    else:
        armed.append(due)


def _disarm(armed: list[float]) -> None:
    """``heapq.heappop`` of the earliest armed time, but a heap of one is cleared (no call
    through Python)."""
    if len(armed) == 1:
        armed.clear()
    else:
        _heappop(armed)


def _due(flow: Flow, at: float) -> bool:
    """Whether ``flow`` ends at a timer at ``at`` (s): it finishes by then, give or take
    ``_DUE_TOL`` of its own time to go and float residue of ``at``."""
    finish = flow.finish_at
    return finish <= at + _DUE_TOL * (finish - flow.last) + 1e-12 * abs(at)


def _at_cap(flow: Flow) -> bool:
    """Whether a flow has reached its own rate cap (never, for an uncapped flow; nor for a NaN
    cap, which fails the comparison: ``math.isinf`` compiles inline, ``math.isfinite`` does not)."""
    return not math.isinf(flow.cap) and flow.cap - flow.rate <= _REL_TOL * flow.cap


class FlowNetwork:
    """The set of links and the flows on them, on one ``Clock``; ``done`` (a ``FlowsDone``, or a
    function called as its ``flows_done``) hears of the flows that have moved their last byte,
    at the time they did.

    Re-allocation is skipped where it provably changes nothing: a new flow whose own bound
    (its cap, or its tightest link alone) fits in every one of its links' spare capacity
    leaves every other rate as it was, and so does a finished flow none of whose links
    was saturated. With ``SHORTCUTS`` False it re-allocates on every change (the tests compare).

    Timers: some pending timer is always at or before every active flow's ``finish_at``, or
    within float residue after it (a start that re-allocates nothing only compares the new
    flow's finish with the earliest pending timer), and the earliest pending timer has a flow
    to end (``_withdraw_stale``).
    """


    def __init__(
        self,
        clock: Clock,
        capacity: dict[str, float],
        done: FlowsDone | Callable[[list[int], float], None],
        accounts: Accounts | None = None,
    ) -> None:
        self.clock = clock
        self.shortcuts = SHORTCUTS
        self.accounts = accounts
        self.capacity = capacity
        self.done = done if isinstance(done, FlowsDone) else Callback(done)
        self.flows: list[Flow] = []
        """The active flows, in the order they started."""
        self.links: dict[str, LinkState] = {name: self._link(name, units) for name, units in capacity.items()}
        """Each link's load and flows now (one lookup per link a flow uses, where a start or an
        end reads them)."""
        self.searches = 0
        """Searches for the flows connected to a change so far (``_component``: ``met``)."""
        self.timers = 0
        """Timers armed and not taken back: each fires once (the network's events)."""
        self.armed: list[float] = []
        """When the pending timers fire (s; a heap)."""
        self.spare: FlowTimer | None = None
        """A fired timer, armed again for the next time (one made and freed per timer costs some
        300 instructions)."""
        self.changed: set[str] = set()
        """The links a timer's ending flows left carrying others (``on_timer``; empty between
        timers: one set, not one made and freed per timer)."""
        self.recorded: list[FlowSpan] | None = None
        """Once a caller sets it to a list: every flow that ends from then on, in spans split at
        each ``flush_busy``."""
        self.recorded_since = math.inf
        """When ``recorded`` began (s)."""

    def add_link(self, name: str, capacity: float) -> None:
        """A link of ``capacity`` units/s joins the network (idle)."""
        self.capacity[name] = capacity
        self.links[name] = self._link(name, capacity)

    @property
    def busy(self) -> dict[str, float]:
        """Each link's busy seconds so far (``LinkState.busy``), in the links' order."""
        return {name: link.busy for name, link in self.links.items()}

    @property
    def moved(self) -> dict[str, float]:
        """The link units each link's flows moved so far (``LinkState.moved``), in the links' order."""
        return {name: link.moved for name, link in self.links.items()}

    def _link(self, name: str, capacity: float) -> LinkState:
        """A new idle link's state, with its account (a loose one where nothing is counted)."""
        return LinkState(capacity, self.accounts.resource(name) if self.accounts is not None else Resource(name))

    def transfer(
        self, key: int, size: float, usage: Usage, cap: float, bound: float | None = None, stream: str = "",
        account: Resource | None = None,
    ) -> Flow:
        """Start a flow of ``size`` bytes now for ``stream`` (``account``: its ``Resource``, or
        None to find it by name); ``bound`` (``own_bound`` of it) may be passed precomputed."""
        now = self.clock.now()
        rate = own_bound(usage, cap, self.capacity) if bound is None else bound
        flow = Flow(size, usage, cap, key, rate, now, stream, account)
        shared = False
        fits = True  # at its own bound, beside the flows on its links
        links, states, units_of = self.links, flow.states, flow.units
        for link, units in usage:
            state = links[link]
            states.append(state)
            units_of.append(units)
            if state.flows:
                shared = True
                if state.load + rate * units > state.capacity * (1 + _REL_TOL):
                    fits = False
            else:
                state.busy_since = now
                if self.accounts is not None:
                    self.accounts.link_busy(state.account, now)
            state.flows.append(flow)
        self.flows.append(flow)
        if shared and not (fits and self.shortcuts):
            due = self._share(flow, now)
        else:
            due = flow.finish_at = now + size / rate
            for k in range(len(states)):
                states[k].load += rate * units_of[k]
        self._arm_at(due, now)
        return flow

    def _share(self, flow: Flow, now: float) -> float:
        """Re-allocate the flows connected to a new flow's links; the earliest finish among
        them (s), a stale timer taken back (the re-allocation may have slowed its flow), and
        then the earliest finish of all flows: one within float residue after a withdrawn timer
        had no timer of its own."""
        component = self._component(flow.states)
        self._reallocate(component, now)
        due = _earliest_finish(component)
        armed = self.armed
        if armed and armed[0] * _ARM_SLACK < due:
            pending = self.timers
            self._withdraw_stale()
            if self.timers != pending:  # a flow off the component may have ended on a withdrawn timer
                due = _earliest_finish(self.flows)
        return due

    def close(self) -> None:
        """Forget ``done`` (typically the network's owner, which holds the network: a reference
        cycle) once no flow is active."""
        if self.flows:
            raise ModelError("closing a flow network with active flows")
        self.done = _Closed()
        self.spare = None  # (it holds the network: a reference cycle)

    def flush_busy(self, now: float) -> None:
        """Count every busy link's stretch up to ``now`` in ``busy``."""
        for link in self.links.values():
            if link.flows:
                link.busy += now - link.busy_since
                link.busy_since = now
        if self.recorded is not None:
            for flow in self.flows:
                self.recorded.append(FlowSpan(flow.began, now, flow.usage, flow.bound, flow.stream))
                flow.began = now

    def busy_links(self) -> list[LinkState]:
        """The links carrying flows now."""
        return [link for link in self.links.values() if link.flows]

    def _component(self, links: list[LinkState]) -> list[Flow]:
        """The active flows that share a link with ``links``, transitively, in the order a
        depth-first search meets them. The search marks each link and flow it meets with its
        number (``met``), rather than keep sets of them: no set or dict made per search. Its
        stack ends at ``top``: the list is not shrunk as links are taken (compiled, a ``pop``
        that empties a list frees its items through the C library's ``realloc``)."""
        self.searches += 1
        search = self.searches
        stack: list[LinkState] = []
        for state in links:
            state.met = search
            stack.append(state)
        top = len(stack)
        members: list[Flow] = []
        while top:
            top -= 1
            for flow in stack[top].flows:
                if flow.met != search:
                    flow.met = search
                    members.append(flow)
                    for state in flow.states:
                        if state.met != search:
                            state.met = search
                            if top < len(stack):
                                stack[top] = state
                            else:
                                stack.append(state)
                            top += 1
        return members

    def _reallocate(self, flows: list[Flow], now: float) -> None:
        """Bring ``flows`` to ``now`` at their old rates, then share the links anew."""
        for flow in flows:
            rate = flow.rate
            if flow.finish_at != math.inf:  # a new flow has no load yet
                states, units = flow.states, flow.units
                for k in range(len(states)):
                    states[k].load -= rate * units[k]
            flow.remaining = max(flow.remaining - rate * (now - flow.last), 0.0)
            flow.last = now
        if len(flows) == 1:
            flows[0].rate = flows[0].bound
        else:
            max_min_rates(flows)
        for flow in flows:
            rate = flow.rate
            flow.finish_at = now + flow.remaining / rate
            states, units = flow.states, flow.units
            for k in range(len(states)):
                states[k].load += rate * units[k]

    def _arm_at(self, due: float, now: float) -> None:
        """Arm a timer for ``due`` unless one at or before it is already pending."""
        armed = self.armed
        if armed and armed[0] <= due * _ARM_SLACK:
            return
        _arm(armed, due)
        self.timers += 1
        delay = due - now
        if delay < 0.0:  # max(due - now, 0.0), without the builtin's call through Python
            delay = 0.0
        timer = self.spare
        if timer is None:
            timer = FlowTimer(self)
        else:
            self.spare = None
        self.clock.schedule(delay, timer)

    def _withdraw_stale(self) -> None:
        """Take the earliest pending timers out of the event queue while no active flow would be
        due at them (``on_timer``'s test): a re-allocation slowed the flows they were armed for,
        and they would fire for nothing. The earliest of the network's timers in the event queue
        is the earliest armed one."""
        armed, flows = self.armed, self.flows
        while armed:
            at = armed[0]
            for flow in flows:
                if _due(flow, at):
                    return
            _disarm(armed)
            if not self.clock.withdraw_first(self):
                raise ModelError("an armed timer is missing from the event queue")
            self.timers -= 1

    def on_timer(self) -> None:
        """A timer fired (``FlowTimer``): the flows due now are done, whatever float residue
        ``now``'s spacing left them; the flows they shared a saturated link with get their rates
        re-allocated."""
        now = self.clock.now()
        _disarm(self.armed)
        flows = self.flows
        due: list[Flow] = []
        first = math.inf  # the earliest finish of the others
        for flow in flows:
            if _due(flow, now):
                due.append(flow)
            elif flow.finish_at < first:
                first = flow.finish_at
        changed = self.changed
        release = not self.shortcuts
        for flow in due:
            if self._end(flow, now, changed):
                release = True
        component = None
        if changed:
            if release:
                links = self.links
                component = self._component([links[name] for name in changed])
            changed.clear()
        if component:  # (empty when the flows left on a link were due too)
            self._reallocate(component, now)
            first = _earliest_finish(flows)
        if flows:
            armed = self.armed
            if armed and armed[0] * _ARM_SLACK < first:  # a re-allocation since it was armed may have
                self._withdraw_stale()  # slowed the flow it was for
            self._arm_at(first, now)
        if due:
            self.done.flows_done(due, now)

    def _end(self, flow: Flow, now: float, changed: set[str]) -> bool:
        """``flow`` leaves the network at ``now``: its units count as moved, each link it used
        carries less (``changed``, the links still carrying others) or goes idle. Returns whether
        one of its links was saturated (it may have bound the flow, so others may speed up)."""
        self.flows.remove(flow)
        if self.recorded is not None:
            self.recorded.append(FlowSpan(flow.began, now, flow.usage, flow.bound, flow.stream))
        accounts = self.accounts
        if accounts is not None:
            accounts.flow_ended(flow)
        states = flow.states
        size, rate = flow.size, flow.rate
        counted = size - flow.attributed  # the bytes no earlier phase counted
        saturated = False
        k = 0
        for link, units in flow.usage:  # (by name for ``changed``; its state is ``states[k]``)
            state = states[k]
            k += 1
            state.moved += size * units
            if accounts is not None:
                accounts.link_moved(state.account, counted * units)
            if state.load >= state.capacity * (1 - _SATURATED_TOL):
                saturated = True
            state.flows.remove(flow)
            if state.flows:
                state.load -= rate * units
                changed.add(link)
            else:
                state.load = 0.0  # no float residue on an idle link
                state.busy += now - state.busy_since
                if accounts is not None:
                    accounts.link_idle(state.account, now)
        return saturated
