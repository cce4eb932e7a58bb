"""The run's time integrals moved on over skipped periods.

Every counter a run keeps (``tiersim.engine.accounts.Accounts``: seconds per phase, exposed
seconds, per stream and link busy seconds and units moved per phase, per stream busy seconds
and bytes over the run; the network's busy seconds and units moved per link) is a plain
number, in a list whose slots are only ever appended (``Accounts.values``) or a dict whose
keys are (the network's), so a snapshot at a boundary (``snapshot``) is a copy of that list and
each dict's values as a list, and a fast-forward adds to each counter what the skipped periods
would have added: ``times`` times one period's increase, or, settling by ``ratio``, the closed
form of ``tiersim.fastforward.transient.advanced``. Times are s, sizes bytes.
"""

from __future__ import annotations

from tiersim.engine.accounts import Accounts
from tiersim.engine.flows import FlowNetwork
from tiersim.fastforward.transient import advanced


class CounterTotals:
    """The run's time integrals at a boundary: its exposed seconds (s), a copy of
    ``Accounts.values``, and the values of the network's busy seconds and units moved per link
    (each dict's, in its order). A later snapshot of the run lines up with it slot by slot
    (its lists only grow at their ends)."""

    __slots__ = ("accounts", "exposed", "network")

    def __init__(self, exposed: float, accounts: list[float], network: list[list[float]]) -> None:
        self.exposed = exposed
        self.accounts = accounts
        self.network = network


def snapshot(accounts: Accounts, network: FlowNetwork) -> CounterTotals:
    """The run's counters now (after ``Accounts.flush`` and ``FlowNetwork.flush_busy``)."""
    return CounterTotals(accounts.exposed, accounts.values[:],
                         [list(network.busy.values()), list(network.moved.values())])


def advance_counters(accounts: Accounts, network: FlowNetwork, earlier: CounterTotals, before: CounterTotals,
                     after: CounterTotals, times: int, ratio: float) -> None:
    """Add to every counter what ``times`` more periods add: periods like the one from
    ``before`` to ``after`` (``ratio`` 0), or settling by ``ratio`` from the three consecutive
    snapshots."""
    accounts.exposed += advanced(earlier.exposed, before.exposed, after.exposed, times, ratio, True)
    advance_each(accounts.values, earlier.accounts, before.accounts, after.accounts, times, ratio)
    for k in range(2):
        target = network.moved if k else network.busy
        if not ratio:  # a repeat: only the totals that changed are written back
            _repeat_each(target, before.network[k], after.network[k], times)
            continue
        values = list(target.values())
        advance_each(values, earlier.network[k], before.network[k], after.network[k], times, ratio)
        keys = list(target)
        for j in range(len(keys)):
            target[keys[j]] = values[j]


def _repeat_each(target: dict[str, float], before: list[float], after: list[float], times: int) -> None:
    """``advance_each`` of a repeat (``ratio`` 0) on a dict's values, in its order (a total
    that did not change is left as it is)."""
    j = 0
    for key in target:  # values replaced in place, no key added: the iteration holds
        if j == len(after):
            return
        value, was = after[j], before[j] if j < len(before) else 0.0
        if value != was:
            target[key] = target[key] + times * (value - was)
        j += 1


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
