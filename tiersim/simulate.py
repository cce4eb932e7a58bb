"""``simulate(config) -> Result``: the pure function every run, sweep and test goes through."""

from __future__ import annotations

import functools

from tiersim.config.scenario import RunConfig
from tiersim.config.worksize import too_many_tasks
from tiersim.engine.schedule import TaskLimit
from tiersim.fastforward import run_schedule
from tiersim.gc_pause import cyclic_gc_paused
from tiersim.results import PHASES, Result
from tiersim.strategies import STRATEGIES
from tiersim.workload import build_step


def simulate(config: RunConfig, trace: bool = False, fast_forward: bool = True,
             max_tasks: int | None = None) -> Result:
    """Build the workload, let the strategy place and schedule it, run the engine, summarise.

    The engine fast-forwards over repeating stretches of the step (``tiersim.fastforward``)
    unless ``fast_forward`` is False or ``trace`` asks for the per-task trace at once; a
    fast-forwarded result simulates the step again in full the first time its ``trace`` (or
    ``run``) is read. A run that builds more than ``max_tasks`` tasks (None: no limit; the
    CLI checks ``worksize.run_tasks``, an upper bound, before it runs) is a ``ConfigError``
    naming the setting that makes most of them. Python's cyclic garbage collector is paused
    meanwhile (``tiersim.gc_pause``).
    """
    with cyclic_gc_paused():
        return _simulate(config, trace, fast_forward, max_tasks)


def _simulate(config: RunConfig, trace: bool, fast_forward: bool, max_tasks: int | None) -> Result:
    """``simulate``'s work."""
    step = build_step(config.model, config.training)
    strategy = STRATEGIES[config.strategy](config.options)
    plan = strategy.plan(step, config.hardware)
    peak = plan.placement.totals()
    capacity = config.hardware.capacities()
    items = list(plan.placement.items)
    if not plan.fits or plan.schedule is None or plan.capacity_of is None:
        return Result(config, False, plan.misfit, None, None, None, peak, capacity, items, 0)
    try:
        run, graph = run_schedule(plan.schedule, plan.capacity_of, fast_forward and not trace and not plan.whole,
                                  max_tasks)
    except TaskLimit as built:
        raise too_many_tasks(config, "<run>", built.tasks) from None
    accounts = run.accounts
    spans = accounts.spans  # a property: built on each read
    again = functools.partial(run_schedule, plan.schedule, plan.capacity_of, False)
    return Result(
        config=config,
        fits=True,
        misfit=None,
        iteration_time_s=run.makespan,
        phases={phase: spans.get(phase, 0.0) for phase in PHASES},
        exposed_transfer_s=accounts.exposed,
        peak_bytes=peak,
        capacity_bytes=capacity,
        placement_items=items,
        events=run.events,
        engine=run,
        built=graph,
        retrace=None if run.complete else again,
    )

