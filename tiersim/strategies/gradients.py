"""Gradients off the GPU: ZeRO-3's ``partition_grads`` copies into the pinned host buffer,
the boundary's fp32 copy, and the optimizer step's updated parameters back to the GPU."""

from __future__ import annotations

from typing import Final

from tiersim.strategies.builder import KindMaker, Names, StepBuilder, TaskKind
from tiersim.strategies.kinds import FP32_BYTES, host_copy_kind, pcie_kind
from tiersim.strategies.memory import HostMemory
from tiersim.workload import LayerWork, StepShape, SubGroup

PARTITION_STREAM = "partition_grads"
"""The stream ZeRO-3's ``partition_grads`` issues its host copies on, in order, one at a time
(DeepSpeed v0.16.2 ``stage3.py``: ``reduce_and_partition_stream``, which also carries the
reduce-scatter; tiersim keeps that on its own ``reduce_scatter`` stream)."""


def partition_d2h(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
    """``partition_grads``' D2H copies into ``memory`` on ``PARTITION_STREAM`` (a copy writes
    where it reads: the makers of ``StepBuilder.kind`` take ``writes``, unused here)."""
    return pcie_kind(builder, "d2h", "backward", memory, stream=PARTITION_STREAM)


def partition_h2d(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
    """``partition_grads``' H2D copies from ``memory`` on ``PARTITION_STREAM``."""
    return pcie_kind(builder, "h2d", "backward", memory, stream=PARTITION_STREAM)


PARTITION_COPIES: Final[dict[str, KindMaker]] = {"d2h": partition_d2h, "h2d": partition_h2d}
"""The makers of ``partition_grads``' copies, by direction."""
PARTITION_NAMES: Final[dict[str, Names]] = {"d2h": Names("m{}.bwd.{}.grad_d2h"), "h2d": Names("m{}.bwd.{}.grad_h2d")}
"""The names of ``partition_grads``' copies of a layer in a micro-step, by direction."""
FP32_GRAD_D2H: Final = Names("m{}.bwd.{}.fp32_grad_d2h")
CONVERT: Final = Names("step.{}.convert")
PARAMS_H2D: Final = Names("step.{}.h2d")


def params_convert(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None) -> TaskKind:
    """The step's conversions of fp32 params in ``memory`` into 16-bit ones in ``writes``
    (``params_to_gpu``)."""
    return host_copy_kind(builder, "optimizer_step", "convert", memory, FP32_BYTES, builder.lp_bytes,
                          builder.figure("rank_cores"), writes)


def params_h2d(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
    """The step's H2D copies of 16-bit params from pageable ``memory`` (``params_to_gpu``)."""
    return pcie_kind(builder, "h2d", "optimizer_step", memory, builder.figure("pageable_bandwidth"))

def gradients_to_host(builder: StepBuilder, memory: HostMemory, micro: int, index: int, layer: LayerWork,
                      ready: str) -> str:
    """Keep one layer's reduced gradient partition in the pinned host buffer (DeepSpeed ZeRO-3
    ``partition_grads`` with an offloaded optimizer, in ``grad_accum_dtype``).

    The first micro-step copies the partition D2H and back H2D (the GPU copy feeds the norm);
    later ones fetch the partial sum H2D, add on the GPU (negligible) and copy it back D2H.
    Both run on ``PARTITION_STREAM``, after the copies of the layer before. Returns the last
    copy."""
    num_bytes = builder.step.rank_partitions[index] * builder.grad_accum_bytes
    first, second = ("d2h", "h2d") if micro == 0 else ("h2d", "d2h")
    there = builder.add(builder.kind(PARTITION_COPIES[first], memory).task(PARTITION_NAMES[first].of(micro, index),
                                                                           num_bytes, (ready,)))
    return builder.add(builder.kind(PARTITION_COPIES[second], memory).task(PARTITION_NAMES[second].of(micro, index),
                                                                           num_bytes, (there,)))


def gradient_copy_links(builder: StepBuilder, memory: HostMemory) -> frozenset[str]:
    """The links ``gradients_to_host``'s copies use."""
    return frozenset(link for make in PARTITION_COPIES.values() for link, _units in builder.kind(make, memory).usage)


def gradient_offload_tasks(shape: StepShape) -> int:
    """Tasks ``gradients_to_host`` makes over a step: two copies per layer and micro-step."""
    return 2 * shape.layers * shape.micro_steps


def fp32_gradients_d2h(builder: StepBuilder, memory: HostMemory, index: int, layer: LayerWork, ready: str,
                       after: tuple[str, ...] = ()) -> str:
    """At the accumulation boundary: the partition converted to fp32 on the GPU and copied D2H
    into a pinned host buffer (the optimizer's gradient, or a swap buffer), on
    ``PARTITION_STREAM``, after ``ready`` and the tasks ``after``."""
    num_bytes = builder.step.rank_partitions[index] * FP32_BYTES
    name = FP32_GRAD_D2H.of(builder.boundary, index)
    return builder.add(builder.kind(partition_d2h, memory).task(name, num_bytes, (ready, *after)))


def params_to_gpu(builder: StepBuilder, memory: HostMemory, group: SubGroup, after: str,
                  temporary: HostMemory | None = None) -> str:
    """ZeRO-3 ``_reassign_or_swap_out_partitioned_parameters``: a sub-group's updated fp32
    params (in ``memory``) become the GPU's 16-bit partition by a blocking ``copy_``, which
    converts on the CPU into a fresh (pageable) tensor (in ``temporary``; None: ``memory``) and
    copies that H2D at the pageable rate. Returns the copy (``after`` itself on a host-only
    machine: the CPU validation of the offload path)."""
    if not builder.has_gpu:
        return after
    index, numel = group.index, group.numel
    converted = builder.add(builder.kind(params_convert, memory, temporary).task(CONVERT.of(index), numel,
                                                                                  (after,)))
    h2d = builder.kind(params_h2d, temporary or memory)
    return builder.add(h2d.task(PARAMS_H2D.of(index), numel * builder.lp_bytes, (converted,)))
