"""Fast-forward: the accelerator that runs a schedule's task graph while it is built and skips
what repeats, with the full simulation's results (to 1e-9).

It attaches to the engine through the schedule interface (``tiersim.engine.schedule``): a
``FastForwardSession`` reads the same statements a plain ``Session`` does. One concept per
module: ``loops`` (runs of alike iterations), ``state`` (a run's state at a boundary),
``shift`` (every time a skip moves), ``counters`` (time integrals over skipped periods),
``transient`` (geometric transients in closed form), ``deferred_run`` (background copies timed
by recursion), ``deferred`` (their check and credit to the counters), ``deferred_copies`` (those of skipped iterations),
``spans`` (their intervals in arithmetic progression) and ``session`` (the loop that ties them).
The engine and the strategies never import it (tests/system/test_layout.py); ``simulate`` picks it.
"""

from tiersim.fastforward.session import FastForwardSession, run_schedule

__all__ = ["FastForwardSession", "run_schedule"]
