"""``simulate(config) -> Result``: the pure function every run, sweep and test goes through."""

from __future__ import annotations

from tiersim.engine import run_graph
from tiersim.hardware import TIERS
from tiersim.results import Result, exposed_transfer, phase_spans
from tiersim.scenario import RunConfig
from tiersim.strategies import STRATEGIES
from tiersim.workload import build_step


def simulate(config: RunConfig) -> Result:
    """Build the workload, let the strategy place and schedule it, run the engine, summarise."""
    step = build_step(config.model, config.training)
    strategy = STRATEGIES[config.strategy](config.options)
    plan = strategy.plan(step, config.hardware)
    peak = plan.placement.totals()
    capacity = {tier: config.hardware.capacity(tier) for tier in TIERS}
    items = list(plan.placement.items)
    if not plan.fits or plan.graph is None:
        return Result(config, False, plan.reason, None, None, None, peak, capacity, items, 0)
    run = run_graph(plan.graph)
    return Result(
        config=config,
        fits=True,
        reason=None,
        iteration_time_s=run.makespan,
        phases=phase_spans(run),
        exposed_transfer_s=exposed_transfer(run),
        peak_bytes=peak,
        capacity_bytes=capacity,
        placement_items=items,
        events=run.events,
        run=run,
        graph=plan.graph,
    )
