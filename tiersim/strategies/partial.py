"""Partial optimizer offload (DeepSpeed's ZeRO-Offload++ "Twin-Flow", ``offload_optimizer.ratio``):
which optimizer sub-groups CPU Adam updates and which the GPU does, and what of each layer's
gradient partition belongs to each.

DeepSpeed v0.16.2 ``deepspeed/runtime/zero/stage3.py``:
- lines 849-858: sub-group ``i`` of ``N`` is updated on the CPU when ``i < int(ratio * N)``,
  else on the GPU (the first sub-groups, in model order, go to the CPU; 0.18 reverses this);
- lines 899-902 and 1063: a GPU sub-group's fp32 parameters and fp32 gradient buffer live in
  HBM, and ``torch.optim.AdamW`` (``backup_optimizer``, lines 239-252) keeps its moments there;
- lines 1516-1522 (``partition_grads``): at the boundary every partition still goes D2H through
  the pinned staging buffer, then into its fp32 gradient: a CPU copy, or an H2D copy on the
  same stream for a GPU sub-group;
- lines 971-987 and 2118-2130 (``_optimizer_step``, ``step``): the sub-groups are stepped in
  order, so the CPU ones (CPU Adam, blocking 16-bit copy H2D) come first and the GPU ones are
  launched after them on the GPU's stream.
Partial offload came in 0.12.3 (PR #4636); tiersim models it from 0.15.4's boundary copy on.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiersim.workload import TrainingStep

PARTIAL_FROM = (0, 15, 4)
"""The first DeepSpeed release whose partial offload tiersim models (``converts_on_host`` before)."""


@dataclass(frozen=True)
class Split:
    """Where one rank's optimizer state is updated, in elements: the first ``cpu_groups``
    sub-groups (``cpu_elements``) on the CPU, the rest (``gpu_elements``) on the GPU; per layer,
    the elements of its partition in CPU sub-groups (``layer_cpu``)."""

    cpu_groups: int
    cpu_elements: int
    gpu_elements: int
    layer_cpu: tuple[int, ...]
    largest_cpu_group: int


def cpu_groups(subgroups: int, ratio: float) -> int:
    """DeepSpeed's count of CPU sub-groups: ``int(ratio * N)`` (floored, as Python floors it)."""
    return int(ratio * subgroups)


def split(step: TrainingStep, ratio: float) -> Split:
    """The ``Split`` of ``step``'s sub-groups and layers at ``ratio`` (ZeRO-3: each layer's
    partition is its tensors' partitions, in the order the sub-groups are formed)."""
    count = cpu_groups(len(step.subgroups), ratio)
    cpu_sizes = step.subgroup_sizes[:count]
    cpu = sum(cpu_sizes)
    layer_cpu = []
    start = 0
    for part in step.rank_partitions:
        layer_cpu.append(min(max(cpu - start, 0), part))
        start += part
    return Split(count, cpu, step.rank_params - cpu, tuple(layer_cpu), max(cpu_sizes, default=0))
