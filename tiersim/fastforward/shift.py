"""Time shift: every time-valued piece of a run's state a fast-forward moves, in one place.

Skipping periods moves the run ``seconds`` later: the clock and every event queued (``Clock.shift``), each
active flow's time of its last rate change, finish and start of its recorded stretch, the
network's armed timers and busy links' starts, the accounts' busy stretches' starts, the
phase's start and the start of the stretch without compute, and the start and end of each
task of the loop (deferred ones already credited included). A new time-valued attribute of
the engine's state joins ``shift_run`` (and, if a settling transient can move it otherwise,
``retime``). Times are s, sizes bytes.
"""

from __future__ import annotations

from typing import cast

from tiersim.engine.accounts import Accounts
from tiersim.engine.flows import FlowNetwork
from tiersim.fastforward.deferred_run import DeferringRun
from tiersim.fastforward.state import BoundaryState, Delaying, Flowing


def shift_run(run: DeferringRun, seconds: float, first: int, credited: int) -> None:
    """Move the run ``seconds`` later: the clock and its queue, the network, the accounts and
    the times of the tasks from position ``first`` on (of deferred ones, those before
    ``credited``: those after have not been timed apart from their inputs)."""
    run.clock.shift(seconds)
    _shift_network(run.network, seconds)
    _shift_accounts(run.accounts, seconds)
    start, end = run.start, run.end
    for p in range(first, len(start)):
        began, ended = start[p], end[p]  # read once: ``+=`` on a list item is a generic call compiled
        if began >= 0:
            start[p] = began + seconds
        if ended >= 0:
            end[p] = ended + seconds
    deferred_start, deferred_end = run.deferred_start, run.deferred_end
    for p in run.deferred_since(first):  # credited deferred tasks move with their iterations
        if p >= credited:
            break
        began, ended = deferred_start[p], deferred_end[p]
        if ended >= 0:
            deferred_start[p] = began + seconds
            deferred_end[p] = ended + seconds


def _shift_network(network: FlowNetwork, seconds: float) -> None:
    for flow in network.flows:
        flow.last += seconds
        flow.finish_at += seconds
        flow.began += seconds
    network.armed = [due + seconds for due in network.armed]  # still a heap
    for link in network.busy_links():
        link.busy_since += seconds


def _shift_accounts(accounts: Accounts, seconds: float) -> None:
    for resource in accounts.busy_now():
        resource.since += seconds
    accounts.phase_since += seconds
    accounts.idle_since += seconds


def retime(run: DeferringRun, target: BoundaryState) -> None:
    """Give the pending tasks and the network's timers the times and bytes of ``target`` (a
    state of this run's pending tasks, now): each delay's end, each flow's bytes left and
    finish, each timer."""
    network = run.network
    now = run.clock.now()
    flows = {flow.key: flow for flow in network.flows}
    ends: dict[int, float] = {}
    for p, what in zip(run.pending, target.doing):
        if isinstance(what, Delaying):
            ends[p] = now + what.left
            run.start[p] = ends[p] - run.delay[p]
        elif isinstance(what, Flowing):
            flow = flows[p]
            flow.remaining, flow.last, flow.finish_at = what.left, now, now + what.to_finish
            run.start[p] = now - what.since_start
            flow.attributed = flow.size - what.left  # the bytes before now count in the skipped periods
    timers = [now + seconds for seconds in target.timers]  # in order
    queued = run.clock.queued()
    order = sorted((k for k, (_at, value) in enumerate(queued) if value is None), key=lambda k: queued[k][0])
    rank = {k: j for j, k in enumerate(order)}  # the timers (valueless events), in time order
    run.clock.reschedule([timers[rank[k]] if value is None else ends[cast(int, value)]
                          for k, (_at, value) in enumerate(queued)])
    network.armed = list(timers)
