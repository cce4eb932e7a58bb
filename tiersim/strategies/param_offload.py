"""``offload_param``: ZeRO-Infinity parameter offload, beside any optimizer strategy.

The 16-bit parameter partitions leave HBM. With ``device: cpu`` every rank's partitions live
in one flat host buffer, which ZeRO-3 always pins (DeepSpeed v0.16.2 ``stage3.py``
``_create_param_groups_fp16_flat_cpu_memory``). With ``device: nvme`` the first ``max_in_cpu``
elements, whole optimizer sub-groups, live in that buffer and the rest in swap files, each
tensor partition of at least ``max(1 MiB, aio.block_size)`` bytes (``swappable_tensor``); a
smaller one stays in host memory.

Forward and backward fetch each layer's partition before each pass that needs it (a
checkpointed layer twice in backward), as the ``PartitionedParameterCoordinator`` does: an aio
read of the layer's NVMe part into the swapper's pinned buffers (``swap_in``), an H2D copy of
the partition on the all-gather stream (``param.ds_tensor.to(device)`` in
``all_gather_coalesced``), then the all-gather; the parameters are released after the pass,
which frees its swap buffers (``_partition_param``: nothing is written back). The fetch of a
layer is issued ``prefetch_depth`` layers ahead; a read also waits for the buffers the passes
before free (``buffer_count``). After the optimizer step each updated sub-group is converted to
16 bits into the host partition on the CPU (``_reassign_or_swap_out_partitioned_parameters``:
no H2D); a sub-group on NVMe is converted into the swapper's pinned buffer and written out
(``_partitioned_params_swap_out``), after the writes before it (``synchronize_writes``); the
iteration ends with the last write.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from tiersim.config.hardware import Hardware
from tiersim.engine.schedule import iterations_back
from tiersim.errors import ConfigError
from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.footprint import pinned
from tiersim.strategies.gradient_swapper import MIN_AIO_BYTES
from tiersim.strategies.gradients import params_to_gpu
from tiersim.strategies.host_layout import Allocation
from tiersim.strategies.kinds import FP32_BYTES, host_copy_kind, pcie_kind
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.param_options import ParamOffload
from tiersim.strategies.placement import MissingDevice, Placement, largest_partition
from tiersim.strategies.swap import AIO_ALIGNED_BYTES, SwapOptions, aio_kind
from tiersim.workload import SubGroup, TrainingStep

FETCH_STREAM = "allgather"
"""The stream a partition's H2D copy runs on: the coordinator's all-gather stream, in order with
the all-gathers."""


@dataclass(frozen=True)
class ParamLayout:
    """Where one rank's 16-bit partitions live: for each layer the elements and tensors on NVMe
    (the rest in host memory), for each optimizer sub-group whether it is on NVMe, and the
    elements of the pinned flat host buffer."""

    nvme_elements: tuple[int, ...]
    nvme_tensors: tuple[int, ...]
    nvme_groups: tuple[bool, ...]
    host_elements: int


def param_layout(step: TrainingStep, offload: ParamOffload, block_size: int) -> ParamLayout:
    """``offload``'s layout of ``step``'s partitions (aio requests of ``block_size`` bytes)."""
    rank = step.rank_params
    if offload.device == "cpu":
        zeros = (0,) * len(step.layers)
        return ParamLayout(zeros, zeros, (False,) * len(step.subgroups), rank)
    ends = [sum(step.subgroup_sizes[: i + 1]) for i in range(len(step.subgroups))]
    in_host = max([0, *(end for end in ends if end <= offload.max_in_cpu)])
    smallest = max(MIN_AIO_BYTES, block_size)
    dp = step.training.data_parallel
    elements: list[int] = []
    tensors: list[int] = []
    offset = 0
    for layer in step.layers:
        parts = [-(-numel // dp) for numel in layer.tensors]
        starts = [offset + sum(parts[:k]) for k in range(len(parts))]
        swapped = [p for p, start in zip(parts, starts, strict=True)
                   if start >= in_host and p * step.lp_bytes >= smallest]
        elements.append(sum(swapped))
        tensors.append(len(swapped))
        offset += sum(parts)
    groups = tuple(end > in_host for end in ends)
    return ParamLayout(tuple(elements), tuple(tensors), groups, min(rank, offload.max_in_cpu))


def prefetch_depth(step: TrainingStep) -> int:
    """Layers whose fetch is issued ahead of the one computing: the coordinator prefetches
    parameters in trace order until ``stage3_prefetch_bucket_size`` elements are in flight, so
    whole layers of the largest layer's size (0: each fetched when its pass begins)."""
    bucket = step.training.prefetch_bucket_size
    return min(len(step.layers), math.ceil(bucket / step.largest_layer))


def swap_options(options: object) -> SwapOptions:
    """The aio settings the parameter swapper uses: the strategy's own (``nvme``), else DeepSpeed's
    defaults."""
    return options if isinstance(options, SwapOptions) else SwapOptions()


def check_offload(offload: ParamOffload, hw: Hardware) -> MissingDevice | None:
    """The device ``offload`` needs that ``hw`` lacks (NVMe drives), or None."""
    return MissingDevice("nvme", "NVMe drives") if offload.device == "nvme" and hw.nvme is None else None


def refuse_offload(offload: ParamOffload, options: object, step: TrainingStep, hw: Hardware, source: str,
                   path: str) -> None:
    """A ConfigError at ``path`` where DeepSpeed would not run ``offload`` (a strategy's
    ``options`` carry it): below ZeRO stage 3 (``offload_param`` is "valid only with stage 3"),
    without a GPU, or with an NVMe partition not smaller than ``buffer_size``
    (``AsyncPartitionedParameterSwapper.get_buffer`` asserts it); or where tiersim does not model
    it: beside partial optimizer offload."""
    if step.training.zero_stage < 3:
        raise ConfigError(source, f"{path}.device", f"parameter offload needs ZeRO stage 3 (DeepSpeed: valid only "
                                                    f"with stage 3), training.zero_stage is {step.training.zero_stage}")
    if not hw.has_gpu:
        raise ConfigError(source, f"{path}.device", "parameter offload needs a GPU to fetch the parameters to")
    if getattr(options, "ratio", 1.0) < 1:
        raise ConfigError(source, f"{path}.device", "parameter offload with partial optimizer offload (ratio below "
                                                    "1) is not modelled")
    if offload.device == "nvme" and offload.buffer_size < smallest_buffer(step):
        raise ConfigError(source, f"{path}.buffer_size", f"{offload.buffer_size} elements, but a parameter "
                                                         f"partition has {largest_partition(step)}: DeepSpeed's "
                                                         "swapper needs every partition smaller than a buffer")


def smallest_buffer(step: TrainingStep) -> int:
    """The smallest ``buffer_size`` (elements) DeepSpeed's parameter swapper takes for ``step``:
    one more than its largest parameter partition (``get_buffer`` asserts ``numel <
    elements_per_buffer``)."""
    return largest_partition(step) + 1


PARAM_PARTITIONS = "16-bit parameter partitions (pinned flat buffer)"
PARAM_SWAP_IN = "parameter swap-in buffers"
PARAM_SWAP_OUT = "parameter swap-out buffer"


def param_allocations(step: TrainingStep, offload: ParamOffload, layout: ParamLayout) -> list[Allocation]:
    """One rank's host tensors of the offloaded parameters, in the order DeepSpeed makes them:
    with NVMe the swapper's ``buffer_count`` buffers (one pinned allocation, each buffer aligned
    to the aio threads; ``zero.Init``), then the pinned flat buffer of the partitions in host
    memory, and, when a sub-group is on NVMe, the pinned buffer of the largest sub-group its
    update is written out through (``reserve_partitioned_swap_space``; both in ZeRO-3's
    ``_create_fp16_partitions_with_defragmentation``). Pinned allocations hold the next power
    of two (``footprint.pinned``)."""
    lp = step.lp_bytes
    sizes = [(PARAM_PARTITIONS, layout.host_elements * lp)]
    if offload.device == "nvme":
        sizes.insert(0, (PARAM_SWAP_IN, offload.buffer_count * _aligned(offload.buffer_size, lp) * lp))
        if any(layout.nvme_groups):
            sizes.append((PARAM_SWAP_OUT, _aligned(step.largest_subgroup, lp) * lp))
    return [Allocation(what, num_bytes, pinned(num_bytes)) for what, num_bytes in sizes]


def place_params(step: TrainingStep, offload: ParamOffload, layout: ParamLayout, placement: Placement,
                 ranks: int, host: bool = True) -> None:
    """The partitions' bytes on NVMe and (``host``; a strategy that lays out its host memory
    itself places them there) the ``param_allocations`` in DRAM, for the ``ranks`` of one node."""
    placement.put("nvme", "16-bit parameter partitions", sum(layout.nvme_elements) * step.lp_bytes * ranks)
    for tensor in param_allocations(step, offload, layout) if host else ():
        placement.put("dram", tensor.what, tensor.allocated * ranks, tensor.reserved * ranks)


def _aligned(numel: int, lp: int) -> int:
    """``numel`` rounded up to the swapper's alignment for one aio thread (elements)."""
    alignment = AIO_ALIGNED_BYTES // lp
    return -(-numel // alignment) * alignment


class ParamFetch:
    """The fetch tasks of one schedule (``schedule_iteration`` makes one when parameters are
    offloaded)."""

    def __init__(self, step: TrainingStep, offload: ParamOffload, memory: HostMemory, swap: SwapOptions) -> None:
        self.offload = offload
        self.memory = memory
        self.swap = swap
        self.layout = param_layout(step, offload, swap.block_size)
        self.depth = prefetch_depth(step)
        self.passes_in_buffers = max(1, offload.buffer_count // max(1, *self.layout.nvme_tensors))
        """Passes whose NVMe parts fit in the swap buffers at once: a read waits for the pass
        that many before it to release its buffers."""

    def keys(self, shapes: Sequence[Hashable]) -> tuple[Hashable, ...]:
        """A layer loop's keys (forward order) with each layer's NVMe part."""
        return tuple(zip(shapes, self.layout.nvme_elements, strict=True))

    def links(self, builder: StepBuilder) -> frozenset[str]:
        """The links a fetch uses."""
        used = {link for link, _units in pcie_kind(builder, "h2d", "forward", self.memory, stream=FETCH_STREAM).usage}
        if self.offload.device == "nvme":
            used |= {"nvme", "dram"}
        return frozenset(used)

    def fetch(self, builder: StepBuilder, name: str, phase: str, index: int, after: tuple[str, ...],
              computed: list[str]) -> str:
        """The tasks bringing layer ``index``'s partition to the GPU, after ``after``; with NVMe the
        read also waits for free buffers (``computed``: the passes so far). Returns the H2D."""
        step = builder.step
        deps = after
        nvme = self.layout.nvme_elements[index]
        if nvme:
            read = aio_kind(builder, self.swap, "param_read", phase, False)
            freed = tuple(iterations_back(computed, self.passes_in_buffers))
            deps = (builder.add(read.task(f"{name}.param_read", nvme * step.lp_bytes, (*after, *freed))),)
        h2d = pcie_kind(builder, "h2d", phase, self.memory, stream=FETCH_STREAM)
        return builder.add(h2d.task(f"{name}.param_h2d", step.rank_partitions[index] * step.lp_bytes, deps))

    def update(self, builder: StepBuilder, group: SubGroup, after: str, fp32_on_gpu: bool = False,
               source: HostMemory | None = None) -> str:
        """A sub-group's updated fp32 params (on the host in ``source``, default DRAM) into its
        16-bit host partition, after ``after``: from the GPU (``fp32_on_gpu``) a blocking ``copy_``
        that copies them D2H at the pageable rate into a DRAM temporary and converts on the CPU;
        from the host a conversion on the CPU. A sub-group on NVMe waits for the parameter writes
        before it and is then written out while the next sub-group steps. Returns the conversion."""
        lp = builder.step.lp_bytes
        source = source or HostMemory.dram_only()
        if fp32_on_gpu:
            d2h = pcie_kind(builder, "d2h", "optimizer_step", source, builder.figure("pageable_bandwidth"))
            after = builder.add(d2h.task(f"step.{group.index}.param_d2h", group.numel * FP32_BYTES, (after,)))
        on_nvme = self.layout.nvme_groups[group.index]
        write = aio_kind(builder, self.swap, "param_write", "optimizer_step", True) if on_nvme else None
        previous = builder.graph.stream_tails().get(write.stream) if write is not None else None
        convert = host_copy_kind(builder, "optimizer_step", "convert", source, FP32_BYTES, lp,
                                 builder.figure("rank_cores"), self.memory)
        converted = builder.add(convert.task(f"step.{group.index}.convert", group.numel,
                                             (after, previous) if previous else (after,)))
        if write is not None:
            builder.add(write.task(f"step.{group.index}.param_write", group.numel * lp, (converted,)))
        return converted

    def update_keys(self, keys: Sequence[Hashable]) -> tuple[Hashable, ...]:
        """An optimizer-step loop's keys with whether each sub-group is on NVMe."""
        return tuple(zip(keys, self.layout.nvme_groups, strict=True))


def fetch_tasks(offload: ParamOffload | None) -> int:
    """Tasks one pass's fetch makes at most (an NVMe read, the H2D)."""
    return 0 if offload is None else 2 if offload.device == "nvme" else 1


def update_tasks(offload: ParamOffload | None, has_gpu: bool, fp32_on_gpu: bool = False) -> int:
    """Tasks one sub-group's parameter update makes at most after its optimizer step: without
    offload the conversion and H2D (``params_to_gpu``), none from the GPU's own Adam."""
    if offload is None:
        return 0 if fp32_on_gpu or not has_gpu else 2
    return int(fp32_on_gpu) + 1 + int(offload.device == "nvme")


def updated_params(builder: StepBuilder, fetch: ParamFetch | None, memory: HostMemory, group: SubGroup,
                   after: str) -> str:
    """A host optimizer's update of ``group`` into the 16-bit parameters: to the GPU
    (``params_to_gpu``) or, offloaded, into the host partition (``ParamFetch.update``)."""
    if fetch is None:
        return params_to_gpu(builder, memory, group, after)
    return fetch.update(builder, group, after)
