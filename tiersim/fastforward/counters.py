"""The run's time integrals moved on over skipped periods.

Every counter a run keeps (``tiersim.engine.accounts.Accounts``: seconds per phase, exposed
seconds, per stream and link busy seconds and units moved per phase, per stream busy seconds
and bytes over the run; the network's busy seconds and units moved per link) is a plain
number in a dict whose keys are only ever added, so a snapshot at a boundary (``snapshot``)
is each dict's values as a list, and a fast-forward adds to each counter what the skipped
periods would have added: ``times`` times one period's increase, or, settling by ``ratio``,
the closed form of ``tiersim.fastforward.transient.advanced``. Times are s, sizes bytes.
"""

from __future__ import annotations

from tiersim.engine.accounts import Accounts
from tiersim.engine.flows import FlowNetwork
from tiersim.fastforward.transient import advanced


class CounterTotals:
    """The run's time integrals at a boundary: its exposed seconds (s) and the values of each
    of its other counters' dicts (``counter_dicts``), as lists in the same order (later
    snapshots of a run line up with earlier ones: each list, and the list of lists, only grows
    at its end)."""

    __slots__ = ("exposed", "values")

    def __init__(self, exposed: float, values: list[list[float]]) -> None:
        self.exposed = exposed
        self.values = values


def counter_dicts(accounts: Accounts, network: FlowNetwork) -> list[dict[str, float]]:
    """Every counter of the run but its exposed seconds, as dicts in a fixed order: the
    network's busy seconds and units moved per link, then ``Accounts.counters``."""
    return [network.busy, network.moved, *accounts.counters()]


def snapshot(accounts: Accounts, network: FlowNetwork) -> CounterTotals:
    """The run's counters now (after ``Accounts.flush`` and ``FlowNetwork.flush_busy``)."""
    return CounterTotals(accounts.exposed, [list(values.values()) for values in counter_dicts(accounts, network)])


def advance_counters(accounts: Accounts, network: FlowNetwork, earlier: CounterTotals, before: CounterTotals,
                     after: CounterTotals, times: int, ratio: float) -> None:
    """Add to every counter what ``times`` more periods add: periods like the one from
    ``before`` to ``after`` (``ratio`` 0), or settling by ``ratio`` from the three consecutive
    snapshots. A dict whose values did not change over them is left as it is (each would add
    0.0)."""
    accounts.exposed += advanced(earlier.exposed, before.exposed, after.exposed, times, ratio, True)
    targets = counter_dicts(accounts, network)
    for k, values in enumerate(after.values):
        was = _at(before.values, k)
        had = _at(earlier.values, k) if ratio else was
        if values != was or had != was:
            advance_each(targets[k], had, was, values, times, ratio)


def _at(values: list[list[float]], k: int) -> list[float]:
    """The ``k``-th dict's values in a snapshot (none, for a dict added since)."""
    return values[k] if k < len(values) else []


def advance_each(target: dict[str, float], earlier: list[float], before: list[float], after: list[float],
                 times: int, ratio: float) -> None:
    """Add to each of ``target``'s running totals what ``times`` more periods add
    (``advanced``), from its values at three consecutive period boundaries, in the dict's order
    (0 for a key added since)."""
    keys = list(target)
    if not ratio:  # ``advanced`` of a repeat, inline (a skip advances every total this way)
        for j in range(len(after)):
            value, was = after[j], before[j] if j < len(before) else 0.0
            if value != was:
                target[keys[j]] += times * (value - was)
        return
    for j in range(len(after)):
        was = before[j] if j < len(before) else 0.0
        target[keys[j]] += advanced(earlier[j] if j < len(earlier) else 0.0, was, after[j], times, ratio, True)
