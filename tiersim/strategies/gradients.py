"""Gradients off the GPU: ZeRO-3's ``partition_grads`` copies into the pinned host buffer,
the boundary's fp32 copy, and the optimizer step's updated parameters back to the GPU."""

from __future__ import annotations

from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.kinds import FP32_BYTES, host_copy_kind, pcie_kind
from tiersim.strategies.memory import HostMemory
from tiersim.workload import LayerWork, StepShape, SubGroup

PARTITION_STREAM = "partition_grads"
"""The stream ZeRO-3's ``partition_grads`` issues its host copies on, in order, one at a time
(DeepSpeed v0.16.2 ``stage3.py``: ``reduce_and_partition_stream``, which also carries the
reduce-scatter; tiersim keeps that on its own ``reduce_scatter`` stream)."""

def gradients_to_host(builder: StepBuilder, memory: HostMemory, micro: int, index: int, layer: LayerWork,
                      ready: str) -> str:
    """Keep one layer's reduced gradient partition in the pinned host buffer (DeepSpeed ZeRO-3
    ``partition_grads`` with an offloaded optimizer, in ``grad_accum_dtype``).

    The first micro-step copies the partition D2H and back H2D (the GPU copy feeds the norm);
    later ones fetch the partial sum H2D, add on the GPU (negligible) and copy it back D2H.
    Both run on ``PARTITION_STREAM``, after the copies of the layer before. Returns the last
    copy."""
    num_bytes = builder.step.rank_partitions[index] * builder.grad_accum_bytes
    prefix = f"m{micro}.bwd.{index}"
    first, second = ("d2h", "h2d") if micro == 0 else ("h2d", "d2h")
    there = builder.add(pcie_kind(builder, first, "backward", memory, stream=PARTITION_STREAM).task(
        f"{prefix}.grad_{first}", num_bytes, (ready,)))
    return builder.add(pcie_kind(builder, second, "backward", memory, stream=PARTITION_STREAM).task(
        f"{prefix}.grad_{second}", num_bytes, (there,)))


def gradient_copy_links(builder: StepBuilder, memory: HostMemory) -> frozenset[str]:
    """The links ``gradients_to_host``'s copies use."""
    return frozenset(link for direction in ("d2h", "h2d")
                     for link, _units in pcie_kind(builder, direction, "backward", memory,
                                                   stream=PARTITION_STREAM).usage)


def gradient_offload_tasks(shape: StepShape) -> int:
    """Tasks ``gradients_to_host`` makes over a step: two copies per layer and micro-step."""
    return 2 * shape.layers * shape.micro_steps


def fp32_gradients_d2h(builder: StepBuilder, memory: HostMemory, index: int, layer: LayerWork, ready: str,
                       after: tuple[str, ...] = ()) -> str:
    """At the accumulation boundary: the partition converted to fp32 on the GPU and copied D2H
    into a pinned host buffer (the optimizer's gradient, or a swap buffer), on
    ``PARTITION_STREAM``, after ``ready`` and the tasks ``after``."""
    num_bytes = builder.step.rank_partitions[index] * FP32_BYTES
    name = f"m{builder.boundary}.bwd.{index}.fp32_grad_d2h"
    kind = pcie_kind(builder, "d2h", "backward", memory, stream=PARTITION_STREAM)
    return builder.add(kind.task(name, num_bytes, (ready, *after)))


def params_to_gpu(builder: StepBuilder, memory: HostMemory, group: SubGroup, after: str,
                  temporary: HostMemory | None = None) -> str:
    """ZeRO-3 ``_reassign_or_swap_out_partitioned_parameters``: a sub-group's updated fp32
    params (in ``memory``) become the GPU's 16-bit partition by a blocking ``copy_``, which
    converts on the CPU into a fresh (pageable) tensor (in ``temporary``; None: ``memory``) and
    copies that H2D at the pageable rate. Returns the copy (``after`` itself on a host-only
    machine: the CPU validation of the offload path)."""
    if not builder.hw.has_gpu:
        return after
    lp, index, numel = builder.lp_bytes, group.index, group.numel
    convert = host_copy_kind(builder, "optimizer_step", "convert", memory, FP32_BYTES, lp, builder.figure("rank_cores"),
                             temporary)
    converted = builder.add(convert.task(f"step.{index}.convert", numel, (after,)))
    h2d = pcie_kind(builder, "h2d", "optimizer_step", temporary or memory, builder.figure("pageable_bandwidth"))
    return builder.add(h2d.task(f"step.{index}.h2d", numel * lp, (converted,)))
