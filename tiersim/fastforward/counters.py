"""The run's time integrals moved on over skipped periods.

Every counter a run keeps (``tiersim.engine.accounts.Accounts``: seconds per phase, exposed
seconds, per stream and link busy seconds and units moved per phase, per stream busy seconds
and bytes over the run; the network's busy seconds and units moved per link) is a plain
number in a dict, so a fast-forward adds to each what the skipped periods would have added:
``times`` times one period's increase, or, settling by ``ratio``, the closed form of
``tiersim.fastforward.transient.advanced``. Times are s, sizes bytes.
"""

from __future__ import annotations

from tiersim.engine.accounts import Accounts, Totals
from tiersim.engine.flows import FlowNetwork
from tiersim.fastforward.state import CounterTotals
from tiersim.fastforward.transient import advanced


def advance_counters(accounts: Accounts, network: FlowNetwork, earlier: CounterTotals, before: CounterTotals,
                     after: CounterTotals, times: int, ratio: float) -> None:
    """Add to every counter what ``times`` more periods add: periods like the one from
    ``before`` to ``after`` (``ratio`` 0), or settling by ``ratio`` from the three consecutive
    totals."""
    _advance_accounts(accounts, earlier.accounts, before.accounts, after.accounts, times, ratio)
    for name, target in (("busy", network.busy), ("moved", network.moved)):
        advance_each(target, earlier.network[name], before.network[name], after.network[name], times, ratio)


def _advance_accounts(accounts: Accounts, earlier: Totals, before: Totals, after: Totals, times: int,
                      ratio: float) -> None:
    accounts.exposed += advanced(earlier["exposed"], before["exposed"], after["exposed"], times, ratio, True)
    for name, target in (("spans", accounts.spans), ("stream_busy", accounts.stream_busy),
                         ("stream_bytes", accounts.stream_bytes)):
        advance_each(target, earlier[name], before[name], after[name], times, ratio)
    for name, nested in (("busy_in", accounts.busy_in), ("moved_in", accounts.moved_in)):
        for phase, values in after[name].items():
            advance_each(nested.setdefault(phase, {}), earlier[name].get(phase, {}), before[name].get(phase, {}),
                         values, times, ratio)


def advance_each(target: dict[str, float], earlier: dict[str, float], before: dict[str, float],
                 after: dict[str, float], times: int, ratio: float) -> None:
    """Add to each of ``target``'s running totals what ``times`` more periods add (``advanced``),
    from its values at three consecutive period boundaries (0 where missing)."""
    if not ratio:  # ``advanced`` of a repeat, inline (a skip advances every total this way)
        for key, value in after.items():
            target[key] = target.get(key, 0.0) + times * (value - before.get(key, 0.0))
        return
    for key, value in after.items():
        target[key] = target.get(key, 0.0) + advanced(earlier.get(key, 0.0), before.get(key, 0.0), value, times,
                                                      ratio, True)
