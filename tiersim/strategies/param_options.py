"""The settings of ZeRO-Infinity's parameter offload (DeepSpeed ``zero_optimization.offload_param``),
as a block every strategy's options may carry (``strategies.NAME.offload_param``); what they do
is ``tiersim.strategies.param_offload``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tiersim.config.schema import integer
from tiersim.frozen import by_fields


@dataclass(frozen=True)
class ParamOffload:
    """DeepSpeed ``offload_param`` (v0.16.2 ``deepspeed/runtime/zero/offload_config.py``,
    ``DeepSpeedZeroOffloadParamConfig``; its defaults)."""

    device: Literal["cpu", "nvme"]
    """Where the 16-bit parameter partitions live between uses: pinned host memory (``cpu``) or
    NVMe swap files (``nvme``), fetched layer by layer in forward and backward."""
    buffer_count: int = integer(5, gt=0, doc="pinned swap-in buffers of the NVMe parameter swapper, one "
                                             "parameter partition each (offload_param.buffer_count)")
    buffer_size: int = integer(100_000_000, gt=0, doc="elements of one swap-in buffer; every parameter partition "
                                                      "swapped to NVMe must be smaller (offload_param.buffer_size)")
    max_in_cpu: int = integer(1_000_000_000, ge=0, doc="with device nvme, elements of each rank's partitions kept "
                                                       "in pinned host memory, whole optimizer sub-groups from the "
                                                       "first (offload_param.max_in_cpu)")
    pin_memory: bool = False
    """DeepSpeed's ``offload_param.pin_memory``: pins only the partitions ``zero.Init`` makes;
    ZeRO-3 then moves them into a flat buffer it always pins, so no fetch depends on it."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)


@dataclass(frozen=True)
class ParamOffloadOptions:
    """The strategy's one option: parameter offload (DeepSpeed ``offload_param``)."""

    offload_param: ParamOffload | None = None
    """The 16-bit parameters offloaded (``ParamOffload``); absent: they stay in HBM."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)
