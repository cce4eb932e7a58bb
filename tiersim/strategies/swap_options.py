"""The ZeRO-Infinity swapper's settings (``strategies.nvme``), apart from the compiled
``tiersim.strategies.swap``: the scenario schema reads their types at run time (the
``offload_param`` block's ``ParamOffload``), which mypyc does not keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiersim.config.schema import integer, size
from tiersim.errors import ConfigError
from tiersim.frozen import by_fields
from tiersim.strategies.param_options import ParamOffload

TENSORS_SWAPPED_IN = 4
"""fp32 param, exp_avg, exp_avg_sq and gradient of a sub-group are read for its update."""


@dataclass(frozen=True)
class SwapOptions:
    """DeepSpeed ``offload_optimizer`` (device nvme) and ``aio`` settings."""

    buffer_count: int = integer(4, gt=0, doc="pinned swap buffers, one sub-group tensor each, at least 4 (DeepSpeed "
                                             "offload_optimizer.buffer_count)")
    block_size: int = size(1 << 20, gt=0, doc="bytes of one aio request (DeepSpeed aio.block_size)")
    queue_depth: int = integer(8, gt=0, doc="requests in flight on each aio thread (DeepSpeed aio.queue_depth)")
    thread_count: int = integer(1, gt=0, doc="threads submitting a swap stream's aio requests (DeepSpeed "
                                            "aio.thread_count)")
    pipeline_read: bool = False
    """A sub-group's swap-in runs during the previous sub-group's update (it waits only for the
    update before that); false: after it (DeepSpeed ``offload_optimizer.pipeline_read``)."""
    pipeline_write: bool = False
    """Swap-outs run in the background: the next sub-group's swap-in and update wait only for
    free buffers, not for the previous swap-out (DeepSpeed ``offload_optimizer.pipeline_write``)."""
    offload_param: ParamOffload | None = None
    """The 16-bit parameters offloaded too (``tiersim.strategies.param_offload``); absent: in HBM."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    def validate(self, source: str, path: str) -> None:
        """A sub-group's swap-in needs ``TENSORS_SWAPPED_IN`` buffers at once."""
        if self.buffer_count < TENSORS_SWAPPED_IN:
            field = f"{path}.buffer_count" if path else "buffer_count"
            raise ConfigError(source, field, f"must be at least {TENSORS_SWAPPED_IN} (one per swapped tensor)")

    @property
    def groups_in_flight(self) -> int:
        """Sub-groups whose tensors fit in the buffers at the same time."""
        return self.buffer_count // TENSORS_SWAPPED_IN
