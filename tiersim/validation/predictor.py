"""Predictions for validation cases: the simulator's own optimizer-step schedule
(``tiersim.validation.optimizer_step.predict_optimizer_step``) on the calibrated host profile."""

from __future__ import annotations

from tiersim.config.profiles import HostProfile
from tiersim.strategies.swap import SwapOptions
from tiersim.validation.cases import Case
from tiersim.validation.optimizer_step import predict_optimizer_step
from tiersim.validation.real_step import SwapConfig

PREDICTOR = "tiersim.validation.optimizer_step.predict_optimizer_step"


def swap_options(swap: SwapConfig) -> SwapOptions:
    """The real executor's swap settings as the simulator's ``SwapOptions``."""
    return SwapOptions(
        buffer_count=swap.buffer_count,
        block_size=swap.block_size,
        queue_depth=swap.queue_depth,
        thread_count=swap.thread_count,
        pipeline_read=swap.pipeline_read,
        pipeline_write=swap.pipeline_write,
    )


def predict_case(host: HostProfile, case: Case) -> float:
    """Predicted seconds for one validation case."""
    strategy = "dram" if case.strategy in ("dram", "dram+pcie") else case.strategy
    swap = swap_options(case.swap) if case.swap is not None else None
    return float(predict_optimizer_step(host, strategy, list(case.subgroup_numels), threads=case.threads, swap=swap))
