"""The run's time integrals moved on over skipped periods.

Every counter a run keeps (``tiersim.engine.accounts.Accounts``: seconds per phase, exposed
seconds, per stream and link busy seconds and units moved per phase, per stream busy seconds
and bytes over the run; the network's busy seconds and units moved per link) is a plain
number, in a list whose slots are only ever appended (``Accounts.values``) or on a link of the
network (``LinkState``: links are only added), so a snapshot at a boundary (``snapshot``) is a
copy of that list and the links' totals as lists, in the links' order, and a fast-forward adds
to each counter what the skipped periods would have added: ``times`` times one period's
increase, or, settling by ``ratio``, the closed form of ``tiersim.fastforward.transient.advanced``.
Times are s, sizes bytes.
"""

from __future__ import annotations

from tiersim.engine.accounts import Accounts
from tiersim.engine.flows import FlowNetwork
from tiersim.fastforward.transient import advanced


class CounterTotals:
    """The run's time integrals at a boundary: its exposed seconds (s), a copy of
    ``Accounts.values``, and the network's busy seconds and units moved per link (in the order
    of its links). A later snapshot of the run lines up with it slot by slot
    (its lists only grow at their ends)."""

    __slots__ = ("accounts", "exposed", "network")

    def __init__(self, exposed: float, accounts: list[float], network: list[list[float]]) -> None:
        self.exposed = exposed
        self.accounts = accounts
        self.network = network


def snapshot(accounts: Accounts, network: FlowNetwork) -> CounterTotals:
    """The run's counters now (after ``Accounts.flush`` and ``FlowNetwork.flush_busy``)."""
    links = list(network.links.values())
    return CounterTotals(accounts.exposed, accounts.values[:],
                         [[link.busy for link in links], [link.moved for link in links]])


def advance_counters(accounts: Accounts, network: FlowNetwork, earlier: CounterTotals, before: CounterTotals,
                     after: CounterTotals, times: int, ratio: float) -> None:
    """Add to every counter what ``times`` more periods add: periods like the one from
    ``before`` to ``after`` (``ratio`` 0), or settling by ``ratio`` from the three consecutive
    snapshots."""
    accounts.exposed += advanced(earlier.exposed, before.exposed, after.exposed, times, ratio, True)
    advance_each(accounts.values, earlier.accounts, before.accounts, after.accounts, times, ratio)
    links = list(network.links.values())
    busy, moved = [link.busy for link in links], [link.moved for link in links]
    advance_each(busy, earlier.network[0], before.network[0], after.network[0], times, ratio)
    advance_each(moved, earlier.network[1], before.network[1], after.network[1], times, ratio)
    for link, seconds, units in zip(links, busy, moved):
        link.busy = seconds
        link.moved = units


def advance_each(target: list[float], earlier: list[float], before: list[float], after: list[float], times: int,
                 ratio: float) -> None:
    """Add to each of ``target``'s running totals what ``times`` more periods add
    (``advanced``), from its values at three consecutive period boundaries (0 for one counted
    only since). A total that did not change would add 0.0: it is left as it is."""
    if not ratio:  # ``advanced`` of a repeat, inline (a skip advances every total this way)
        for j in range(len(after)):
            value, was = after[j], before[j] if j < len(before) else 0.0
            if value != was:
                target[j] = target[j] + times * (value - was)  # ``+=`` on a list item compiles to a generic call
        return
    for j in range(len(after)):
        was = before[j] if j < len(before) else 0.0
        target[j] = target[j] + advanced(earlier[j] if j < len(earlier) else 0.0, was, after[j], times, ratio, True)
