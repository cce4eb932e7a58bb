"""What a simulated iteration predicts for the quantities a training log measures.

The three phases are DeepSpeed's ``fwd``, ``bwd`` and ``step`` timers (tiersim's phase spans);
``iteration`` is Megatron's elapsed time per iteration. The swapper's rank-0 timers add up the
time of each blocking call: ``optimizer_swap_in_state`` the step's NVMe reads,
``optimizer_swap_out_state`` its NVMe writes.
"""

from __future__ import annotations

from tiersim.ingest.log_scenario import TIMER_PREFIX
from tiersim.results import Result

_SWAP_TIMERS = {
    f"{TIMER_PREFIX}optimizer_swap_in_state": "nvme_read",
    f"{TIMER_PREFIX}optimizer_swap_out_state": "nvme_write",
}


def predicted_quantities(result: Result) -> dict[str, float]:
    """Seconds of every measured quantity this run predicts (a run that does not fit: none)."""
    if not result.fits or result.phases is None or result.run is None or result.iteration_time_s is None:
        return {}
    out = {"iteration": result.iteration_time_s, **result.phases}
    run = result.run
    for timer, category in _SWAP_TIMERS.items():
        spent = [run.end[i] - run.start[i] for i, task in enumerate(run.tasks)
                 if task.category == category and task.phase == "optimizer_step"]
        if spent:
            out[timer] = sum(spent)
    return out
