"""``simulate(config) -> Result``: the pure function every run, sweep and test goes through."""

from __future__ import annotations

import pandas as pd

from tiersim.engine import run_graph
from tiersim.hardware import TIERS
from tiersim.results import Result, exposed_transfer, phase_spans, trace_frame, utilisation_frame
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
    placement = pd.DataFrame(plan.placement.items, columns=["tier", "what", "bytes"])
    if not plan.fits or plan.graph is None:
        empty = pd.DataFrame()
        return Result(config, False, plan.reason, None, None, None, peak, capacity, placement, empty, empty, 0)
    run = run_graph(plan.graph)
    trace = trace_frame(run.records)
    spans = phase_spans(trace, run.makespan)
    return Result(
        config=config,
        fits=True,
        reason=None,
        iteration_time_s=run.makespan,
        phases=spans,
        exposed_transfer_s=exposed_transfer(trace, run.makespan),
        peak_bytes=peak,
        capacity_bytes=capacity,
        placement=placement,
        trace=trace,
        utilisation=utilisation_frame(run, trace, plan.graph, spans),
        events=run.events,
    )
