"""``dram`` and ``cxl``: ZeRO-Offload. fp32 master weights, gradients and Adam state live in
pinned host memory. In backward each layer's fp32 gradient partition goes D2H into the pinned
host gradient buffer (later micro-steps fetch, add and return it), CPU Adam updates each sub-group and the
updated 16-bit parameters go H2D. ``cxl`` is the same code path with every host allocation
weighted-interleaved across DRAM and CXL memory (numactl --weighted-interleave), so CPU Adam
and the DMA engines read and write CXL memory directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiersim.hardware import Hardware
from tiersim.schema import number
from tiersim.strategies.base import (
    Placement,
    StepBuilder,
    Strategy,
    adam_kind,
    gradient_offload_tasks,
    gradients_to_host,
    params_kind,
)
from tiersim.strategies.memory import HostMemory
from tiersim.workload import LayerWork, StepShape, TrainingStep


class HostOffload(Strategy):
    """CPU offload of the optimizer; subclasses choose the host memory policy."""

    name = "dram"
    summary = "ZeRO-Offload: state in pinned DRAM, CPU Adam"

    def memory(self, hw: Hardware) -> HostMemory:
        """Where host allocations land."""
        return HostMemory.dram_only()

    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        memory = self.memory(hw)
        ranks = step.training.data_parallel
        largest = max(group.numel for group in step.subgroups)
        host = {
            "fp32 params + Adam m, v": step.optimizer_state_bytes() * ranks,
            "fp32 gradients": step.fp32_grad_bytes() * ranks,
            "bf16 staging for H2D": largest * step.lp_bytes * ranks,
        }
        for what, num_bytes in host.items():
            for tier, part in memory.split(num_bytes).items():
                placement.put(tier, what, part)

    def offload_gradients(self, b: StepBuilder, micro: int, index: int, layer: LayerWork, ready: str) -> None:
        gradients_to_host(b, self.memory(b.hw), micro, index, layer, ready)

    def offload_task_count(self, shape: StepShape) -> int:
        return gradient_offload_tasks(shape)

    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        return shape.subgroups * (2 if hw.has_gpu else 1)  # Adam, then H2D of the 16-bit params

    def optimizer_step(self, b: StepBuilder, begin: str) -> None:
        memory = self.memory(b.hw)
        adam, h2d = adam_kind(b, memory), params_kind(b, memory)
        for group in b.step.subgroups:
            updated = b.add(adam.task(f"step.{group.index}.adam", group.numel, (begin,)))
            if h2d:
                b.add(h2d.task(f"step.{group.index}.h2d", group.numel, (updated,)))


@dataclass(frozen=True)
class InterleaveOptions:
    """Page weights of the DRAM:CXL weighted interleave (numactl --weighted-interleave)."""

    dram_weight: float = number(12, gt=0)
    cxl_weight: float = number(5, gt=0)


class CXLInterleave(HostOffload):
    """ZeRO-Offload with host memory weighted-interleaved over DRAM and CXL."""

    name = "cxl"
    summary = "ZeRO-Offload with host memory interleaved DRAM:CXL"
    Options = InterleaveOptions

    def check(self, hw: Hardware) -> str | None:
        return None if hw.cxl is not None else "no CXL devices in hardware.cxl"

    def memory(self, hw: Hardware) -> HostMemory:
        return HostMemory.interleave(hw, self.options.dram_weight, self.options.cxl_weight)


