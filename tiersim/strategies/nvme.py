"""``nvme``: ZeRO-Infinity optimizer offload. fp32 params, gradients and Adam state live on
NVMe; each sub-group is swapped in through pinned buffers, updated by CPU Adam, its 16-bit
params copied to the GPU as for ``dram``, and swapped out, as DeepSpeed's partitioned (and,
with pipeline_read/write, pipelined) optimizer swapper does. Gradients collect in the pinned
host gradient buffer as for ``dram``; at the accumulation boundary each layer's partition is
converted to fp32 on the GPU, copied into a pinned swap buffer and written to NVMe in the
background (``swap_out_gradients``); the step's first swap-in waits for those writes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Final

from tiersim.config.deepspeed_version import at_least
from tiersim.config.hardware import Hardware
from tiersim.engine.schedule import iterations_back
from tiersim.strategies import footprint
from tiersim.strategies.base import ScheduleHints, Strategy
from tiersim.strategies.builder import Names, StepBuilder
from tiersim.strategies.footprint import pinned
from tiersim.strategies.gradient_swapper import MIN_AIO_BYTES, drains
from tiersim.strategies.gradients import (
    PARTITION_STREAM,
    fp32_gradients_d2h,
    gradient_copy_links,
    gradient_offload_tasks,
    gradients_to_host,
)
from tiersim.strategies.kinds import FP32_BYTES, adam_kind
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.param_offload import update_tasks, updated_params
from tiersim.strategies.placement import MissingDevice, Placement, largest_partition
from tiersim.strategies.swap import AIO_ALIGNED_BYTES, TENSORS_SWAPPED_OUT, aio_kind
from tiersim.strategies.swap_options import TENSORS_SWAPPED_IN, SwapOptions
from tiersim.workload import LayerWork, StepShape, TrainingSpec, TrainingStep

GRAD_WRITE: Final = Names("m{}.bwd.{}.grad_write")
SWAP_IN: Final = Names("step.{}.swap_in")
ADAM: Final = Names("step.{}.adam")
SWAP_OUT: Final = Names("step.{}.swap_out")


class NVMeSwap(Strategy):
    """Optimizer state on NVMe, swapped through ``buffer_count`` pinned buffers."""

    name = "nvme"
    summary = "ZeRO-Infinity: state on NVMe, swapped through pinned buffers"
    Options = SwapOptions
    hints = ScheduleHints(boundary_copies=frozenset({PARTITION_STREAM, "aio_write"}),
                          accumulation_copies=frozenset({PARTITION_STREAM}))

    def refusal(self, training: TrainingSpec) -> tuple[str, str] | None:
        """DeepSpeed swaps the optimizer state to NVMe under ZeRO-3 only (its engine asserts it;
        ``stage_1_and_2.py`` offloads to CPU memory whatever the device)."""
        if training.zero_stage < 3:
            return "training.zero_stage", (f"{training.zero_stage}: DeepSpeed offloads the optimizer state to NVMe "
                                           "under ZeRO-3 only; ZeRO-1/2 offload to CPU memory (dram or cxl)")
        return None

    def check(self, hw: Hardware) -> MissingDevice | None:
        return None if hw.nvme is not None else MissingDevice("nvme", "NVMe drives")

    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        """ZeRO-Infinity, per rank: fp32 params, Adam's moments and fp32 gradients in swap files
        on NVMe; in DRAM the swapper's ``buffer_count`` pinned buffers of the largest sub-group,
        ZeRO-3's pinned gradient partition and staging buffer, the fp32 gradient buffer of the
        swapped sub-groups, the 16-bit temporary of the step's H2D copy, the process's own memory.

        DeepSpeed v0.16.2 ``deepspeed/runtime/swap_tensor/utils.py`` (``SwapBufferManager``: one
        pinned buffer per ``buffer_count`` of the aligned largest sub-group),
        ``swap_tensor/optimizer_utils.py`` (``numel_alignment``), ``zero/stage3.py``
        (``grad_partitions_flat_buffer``, ``pinned_grad_buffer``, the ``gradient_buffer`` of
        ``initialize_optimizer_states``), ``zero/offload_config.py`` (``buffer_count``)."""
        ranks = hw.gpus  # the ranks sharing one node's host memory and drives
        pin = pinned if hw.pinned else int
        rank = step.rank_params
        largest = step.largest_subgroup
        placement.put("nvme", "fp32 params + Adam m, v", step.optimizer_state_bytes() * ranks)
        placement.put("nvme", "fp32 gradients", step.fp32_grad_bytes() * ranks)
        buffer = FP32_BYTES * _aligned(largest, self.options.thread_count)
        staging = FP32_BYTES * largest_partition(step)
        host = [
            ("pinned swap buffers", self.options.buffer_count * buffer, self.options.buffer_count * pin(buffer)),
            ("gradient partitions (grad_accum_dtype)", step.grad_accum_bytes * rank, pin(step.grad_accum_bytes * rank)),
            ("fp32 gradient staging", staging, pin(staging)),
            ("fp32 gradient buffer of swapped sub-groups", FP32_BYTES * largest, FP32_BYTES * largest),
            ("16-bit temporary of the H2D copy", step.lp_bytes * largest, step.lp_bytes * largest),
            ("process runtime", 0, footprint.PROCESS_HOST_BYTES),
        ]
        for what, allocated, held in host:
            placement.put("dram", what, allocated * ranks, held * ranks)

    def gradient_conversion_bytes(self, step: TrainingStep) -> int:
        """The swappable path keeps every fp32 partition of a bucket until it swaps them out."""
        return FP32_BYTES * math.ceil(step.training.reduce_bucket_size / step.training.data_parallel)

    def offload_gradients(self, builder: StepBuilder, micro: int, index: int, layer: LayerWork,
                          ready: str) -> str | None:
        """Every micro-step keeps the partition in the pinned host buffer; the boundary also
        copies it to the gradient swapper's pinned buffers in fp32 and writes it to NVMe.

        DeepSpeed 0.14 and later (tiersim's model of the seed's 0.16 runs): the copy and the
        write run in the background until the step's first swap-in. 0.13 and earlier: as the
        gradient swapper does it (``tiersim.strategies.gradient_swapper``), the host thread
        waits for the blocking copy, and, where the swapper runs out of buffers, first for every
        write submitted before; the next layer's backward is issued after."""
        dram = HostMemory.dram_only()
        kept = gradients_to_host(builder, dram, micro, index, layer, ready)
        if micro < builder.boundary:
            return None
        waiting = swapper_waits(builder.step)
        write = aio_kind(builder, self.options, "aio_write", "backward", True)
        written = builder.graph.stream_tail(write.stream) if waiting and self._drains(builder.step)[index] else -1
        drained = (builder.graph.tasks[written].name,) if written >= 0 else ()
        staged = fp32_gradients_d2h(builder, dram, index, layer, kept, drained)
        builder.background.add(write.stream)
        num_bytes = builder.step.rank_partitions[index] * FP32_BYTES
        builder.add(write.task(GRAD_WRITE.of(micro, index), num_bytes, (staged,)))
        return staged if waiting else None

    def _drains(self, step: TrainingStep) -> tuple[bool, ...]:
        """For each layer, whether the gradient swapper runs out of buffers while taking its
        fp32 gradients at the boundary (``gradient_swapper.drains``; layers in forward order)."""
        opts = self.options
        alignment = AIO_ALIGNED_BYTES * opts.thread_count // FP32_BYTES
        dp = step.training.data_parallel
        layers = tuple(tuple(-(-numel // dp) for numel in layer.tensors) for layer in step.layers[::-1])
        min_numel = -(-max(MIN_AIO_BYTES, opts.block_size) // FP32_BYTES)
        return drains(layers, _aligned(step.largest_subgroup, opts.thread_count), opts.buffer_count, alignment,
                      min_numel)[::-1]

    def background_streams(self, builder: StepBuilder, micro: int) -> frozenset[str]:
        """As the base class, but a boundary whose backward waits for its copies has none."""
        if micro == builder.boundary and swapper_waits(builder.step):
            return frozenset()
        return super().background_streams(builder, micro)

    def backward_keys(self, builder: StepBuilder, micro: int) -> tuple[Hashable, ...]:
        """A boundary layer where the gradient swapper waits for the drives builds otherwise."""
        shapes = super().backward_keys(builder, micro)
        if micro < builder.boundary or not swapper_waits(builder.step):
            return shapes
        return tuple(zip(shapes, self._drains(builder.step)[::-1], strict=True))

    def accumulation_links(self, builder: StepBuilder) -> frozenset[str]:
        return gradient_copy_links(builder, HostMemory.dram_only())

    def offload_task_count(self, shape: StepShape) -> int:
        return gradient_offload_tasks(shape) + 2 * shape.layers  # the boundary's fp32 D2H and NVMe write

    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        # swap in, Adam, swap out, and the conversion and H2D (or the offloaded parameters' update)
        return shape.subgroups * (3 + update_tasks(self.param_offload, hw.has_gpu))

    def optimizer_step(self, builder: StepBuilder, begin: str) -> None:
        opts = self.options
        pipeline_read, pipeline_write = opts.pipeline_read, opts.pipeline_write
        dram = HostMemory.dram_only()
        swap_in = aio_kind(builder, self.options, "aio_read", "optimizer_step", False)
        swap_out = aio_kind(builder, self.options, "aio_write", "optimizer_step", True)
        adam = adam_kind(builder, dram)
        fetch = self.param_fetch(builder.step, builder.hw)
        # The first swap-in flushes the gradient writes still in flight from backward.
        flushed = builder.graph.stream_tails().get(swap_out.stream)
        # With pipeline_read, sub-group i is read when sub-group i-1's update begins.
        lag = 2 if pipeline_read else 1
        in_flight = opts.groups_in_flight
        reads: list[str] = []
        updated: list[str] = []
        writes: list[str] = []
        # Lists are read from their ends (``iterations_back``): a session need not build every
        # iteration it counts.
        groups = builder.step.subgroups
        # Sub-groups of equal size add alike tasks but for the first (it waits for the gradient
        # writes); a sub-group the pipeline or buffer reuse would make wait for one before the
        # first waits for none (``iterations_back``).
        shapes = tuple((size, i == 0) for i, size in enumerate(builder.step.subgroup_sizes))
        for i in builder.loop(fetch.update_keys(shapes) if fetch else shapes, chaotic_swaps(opts)):
            group = groups[i]
            deps = [begin] + ([flushed] if i == 0 and flushed else [])
            if pipeline_read:
                deps += iterations_back(reads, 1)
            deps += iterations_back(updated, lag)
            if not pipeline_write:
                deps += iterations_back(writes, lag)
            deps += iterations_back(writes, in_flight)
            numel = group.numel
            fp32 = numel * FP32_BYTES
            reads.append(builder.add(swap_in.task(SWAP_IN.of(i), TENSORS_SWAPPED_IN * fp32, tuple(deps))))
            # The update loop is sequential: a sub-group's Adam follows the previous one's
            # parameter copy (and, without pipeline_write, its swap-out).
            adam_deps = [reads[-1]]
            if i > 0:
                adam_deps.append(updated[-1])
                if not pipeline_write:
                    adam_deps.append(writes[-1])
            adam_done = builder.add(adam.task(ADAM.of(i), numel, tuple(adam_deps)))
            updated.append(updated_params(builder, fetch, dram, group, adam_done))
            writes.append(builder.add(swap_out.task(SWAP_OUT.of(i), TENSORS_SWAPPED_OUT * fp32, (updated[-1],))))


def chaotic_swaps(options: SwapOptions) -> bool:
    """Whether the optimizer step overlaps sub-groups' swap-ins with swap-outs on the drives
    (``pipeline_read`` and ``pipeline_write``): a float step in when the step begins can then
    grow about 1.4x per sub-group, unless the sub-groups settle into a repeat; the schedule
    says its loop ``amplifies``."""
    return options.pipeline_read and options.pipeline_write


_SWAPPER_WAITS: Final[dict[str, bool]] = {}
"""``swapper_waits`` by DeepSpeed version, worked out once for each (``at_least`` runs in
Python, and a boundary asks for each layer)."""


def swapper_waits(step: TrainingStep) -> bool:
    """Whether the boundary backward waits for the gradient swapper, as DeepSpeed's code does
    (``tiersim.strategies.gradient_swapper``): tiersim's path for DeepSpeed 0.13 and earlier.
    The code is the same in 0.16.2; tiersim keeps its background model there, with which the
    seed node was fitted."""
    version = step.training.deepspeed_version
    waits = _SWAPPER_WAITS.get(version)
    if waits is None:
        waits = _SWAPPER_WAITS[version] = not at_least(version, (0, 14))
    return waits


def _aligned(numel: int, threads: int) -> int:
    """fp32 ``numel`` rounded up to the swapper's alignment (``numel_alignment``, elements)."""
    alignment = AIO_ALIGNED_BYTES * threads // FP32_BYTES
    return -(-numel // alignment) * alignment
