"""``dram`` and ``cxl``: DeepSpeed ZeRO-3 with ``offload_optimizer.device: cpu``. fp32 master
weights, gradients and Adam state live in pinned host memory.

Backward: every micro-step keeps each layer's reduced gradient partition in the pinned host
buffer (a D2H and an H2D copy in ``grad_accum_dtype``). At the accumulation boundary
``partition_grads`` also converts it to fp32 on the GPU, copies it D2H into a pinned staging
buffer, synchronizes the device and copies it on the CPU into the optimizer's fp32 gradient:
the host thread waits for all of it, so the next layer's backward cannot begin before.
DeepSpeed before 0.15.4 instead copies the 16-bit partition D2H into a pageable temporary and
converts it to fp32 on the CPU (``converts_on_host``); the host thread waits for that too.

Step, per sub-group: CPU Adam, then the updated params converted to 16 bits on the CPU and
copied H2D from that pageable temporary (a blocking copy, before the next sub-group).

With ``ratio`` below 1 (DeepSpeed's partial offload, ``tiersim.strategies.partial``) the last
sub-groups' state stays in HBM: their boundary gradients go back H2D after the staging copy and
the GPU updates them after the CPU's sub-groups.

``cxl`` is the same code path with host memory on DRAM and CXL nodes under a numactl policy
(``tiersim.strategies.host_layout``): by default weighted-interleaved (numactl
--weighted-interleave), or bound to DRAM first and spilling to CXL in DeepSpeed's allocation
order (-m). CPU Adam, the CPU copies and the DMA engines read and write each tensor's bytes
where they are.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import ClassVar

from tiersim.config.deepspeed_version import at_least
from tiersim.config.hardware import Hardware
from tiersim.strategies import zero12, zero12_hbm
from tiersim.strategies.base import ScheduleHints, Strategy
from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.footprint import pinned
from tiersim.strategies.gradients import (
    PARTITION_STREAM,
    fp32_gradients_d2h,
    gradient_copy_links,
    gradient_offload_tasks,
    gradients_to_host,
    params_to_gpu,
    partition_h2d,
)
from tiersim.strategies.host_layout import (
    ADAM_STATE,
    CONVERT_TEMPORARY,
    FP32_GRADS,
    FP32_PARAMS,
    GRAD_PARTITIONS,
    H2D_TEMPORARY,
    STAGING,
    Allocation,
    HostLayout,
    Repeated,
    allocations,
    blocks,
    host_layout,
    once,
    spread,
)
from tiersim.strategies.host_options import CXLOptions, HostOptions
from tiersim.strategies.kinds import (
    ADAM_STATE_BYTES,
    FP32_BYTES,
    adam_kind,
    gpu_adam_task,
    host_copy_kind,
    pcie_kind,
)
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.param_offload import PARAM_PARTITIONS, param_allocations, update_tasks
from tiersim.strategies.partial import PARTIAL_FROM, Split, cpu_groups, split
from tiersim.strategies.placement import MissingDevice, Placement, largest_partition
from tiersim.workload import LayerWork, StepShape, TrainingSpec, TrainingStep

GRADIENT_HOOK_THREADS = 1
"""Threads of the boundary gradient copy. It runs inside a backward hook, and the study's node
stays at its forward CPU load through the DRAM backward (70B-dram-psutil.csv: 3.2-3.3% of 224
CPUs in both), which a copy on a rank's 56 threads would visibly raise."""

class HostOffload(Strategy):
    """CPU offload of the optimizer; subclasses choose the host memory policy."""

    name = "dram"
    summary = "ZeRO-Offload: state in pinned DRAM, CPU Adam"
    hints = ScheduleHints(accumulation_copies=frozenset({PARTITION_STREAM}))
    Options: ClassVar[type] = HostOptions
    places_param_host = False  # the offloaded parameters' buffers are in ``layout``
    _layout: tuple[TrainingStep, Hardware, HostLayout] | None = None
    _split: tuple[TrainingStep, Split] | None = None

    def refusal(self, training: TrainingSpec) -> tuple[str, str] | None:
        """ZeRO stage 0 (no ZeRO optimizer to offload); partial offload outside ZeRO-3 or
        before 0.15.4."""
        ratio = self.options.ratio
        if training.zero_stage == 0:
            return "training.zero_stage", ("0: DeepSpeed offloads the optimizer state of a ZeRO optimizer only "
                                           "(stage 1, 2 or 3)")
        if ratio == 1:
            return None
        where = f"strategies.{self.name}.ratio"
        if training.zero_stage < 3:
            return where, (f"{ratio}: partial offload is ZeRO-3's (DeepSpeed's stage_1_and_2.py does not read "
                           f"offload_optimizer.ratio), and training.zero_stage is {training.zero_stage}")
        if not at_least(training.deepspeed_version, PARTIAL_FROM):
            return where, (f"{ratio}: tiersim models partial offload from DeepSpeed 0.15.4 on, and "
                           f"training.deepspeed_version is {training.deepspeed_version}")
        return None

    def check(self, hw: Hardware) -> MissingDevice | None:
        """Partial offload updates part of the state on the GPU."""
        return MissingDevice("hbm", "GPU for the GPU's sub-groups") if self.options.ratio < 1 and not hw.has_gpu \
            else None

    def split(self, step: TrainingStep) -> Split:
        """Which sub-groups and which part of each layer's partition the CPU updates (kept for
        the last step asked about: the hooks ask once per layer)."""
        known = self._split
        if known is None or known[0] is not step:
            known = self._split = (step, split(step, self.options.ratio))
        return known[1]

    def layout(self, step: TrainingStep, hw: Hardware) -> HostLayout:
        """Where each of the rank's host tensors lives (worked out once per step and hardware);
        under partial offload the CPU's sub-groups alone have host state."""
        known = self._layout
        if known is None or known[0] is not step or known[1] is not hw:
            groups = step.subgroup_sizes[:cpu_groups(len(step.subgroups), self.options.ratio)]
            tensors = allocations(step, hw, staging(step, pinned if hw.pinned else int), groups) \
                if step.training.zero_stage >= 3 else zero12.allocations(step, hw)
            offload = self.param_offload
            if offload is not None:  # made first (zero.Init, ZeRO-3's init); no H2D temporary
                params = param_allocations(step, offload, self.params_layout(step, offload))
                tensors = [tensors[0], once(*params),
                           *(t for t in tensors[1:] if t.tensors[0].what != H2D_TEMPORARY)]
            known = self._layout = (step, hw, self.lay_out(hw, tensors))
        return known[2]

    def param_memory(self, step: TrainingStep, hw: Hardware) -> HostMemory:
        """The offloaded parameters' flat buffer, where the memory policy put it."""
        return self.layout(step, hw).memory(PARAM_PARTITIONS)

    def lay_out(self, hw: Hardware, tensors: list[Repeated]) -> HostLayout:
        """``tensors`` on the host's memory nodes: here all of them in DRAM."""
        return HostLayout(hw, spread(tensors, 1.0), HostMemory.dram_only())

    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        """DeepSpeed ZeRO-3 with ``offload_optimizer: cpu``, per rank: the fp32 partition and Adam's
        moments (pageable); the fp32 gradient of each sub-group, the partition in
        ``grad_accum_dtype`` and the fp32 staging buffer of ``partition_grads`` (pinned); the
        16-bit temporary of the step's H2D copy; the first step's retained fp32 temporary; the
        process's own memory (``host_layout.allocations``, in DeepSpeed's order). Every
        allocation lands where the memory policy puts it; an interleave splits each label's
        bytes alike, a bind each tensor by what DRAM had left. ZeRO-1/2: ``zero12``'s."""
        if step.training.zero_stage < 3:
            zero12.place_gpu(step, placement)
        if self.options.ratio < 1:  # the GPU's sub-groups keep fp32 params, m, v and gradients in HBM
            on_gpu = self.split(step).gpu_elements
            placement.put("hbm", "fp32 params, Adam m, v (GPU sub-groups)", (FP32_BYTES + ADAM_STATE_BYTES) * on_gpu)
            placement.put("hbm", "fp32 gradients (GPU sub-groups)", FP32_BYTES * on_gpu)
        ranks = hw.gpus  # the ranks sharing one node's host memory
        layout = self.layout(step, hw)
        for what, pieces in layout.labels().items():
            allocated = sum(p.allocated() for p in pieces) * ranks
            reserved = sum(p.reserved() for p in pieces) * ranks
            if layout.uniform is not None:
                dram, dram_held = layout.uniform.split(allocated)["dram"], layout.uniform.split(reserved)["dram"]
            else:
                dram, dram_held = (sum(held) for held in zip(*(p.in_dram(ranks) for p in pieces)))
            placement.put("dram", what, dram, dram_held)
            placement.put("cxl", what, allocated - dram, reserved - dram_held)

    def backward_keys(self, builder: StepBuilder, micro: int) -> tuple[Hashable, ...]:
        """Layers differ by shape; under partial offload by the part of their partition the CPU
        updates; where a bind splits the gradient buffers, by where their partitions are."""
        keys = super().backward_keys(builder, micro)
        step = builder.step
        if self.options.ratio < 1:
            layer_cpu = self.split(step).layer_cpu[::-1]
            parts = step.rank_partitions[::-1]
            keys = tuple((key, cpu == part, cpu == 0) for key, cpu, part in zip(keys, layer_cpu, parts, strict=True))
        layout = self.layout(step, builder.hw)
        if layout.uniform is None:
            where = zip(*zero12.layer_memory(layout, step)) if step.training.zero_stage < 3 else zip(
                layout.by_layer(GRAD_PARTITIONS, step.rank_partitions, step.grad_accum_bytes),
                layout.by_layer(FP32_GRADS, step.rank_partitions, FP32_BYTES))
            keys = tuple(zip(keys, tuple(where)[::-1], strict=True))
        return keys

    def gradient_conversion_bytes(self, step: TrainingStep) -> int:
        """``partition_grads`` converts one tensor's partition to fp32 at a time, on the GPU
        (none before 0.15.4: ``converts_on_host``)."""
        return 0 if step.training.zero_stage >= 3 and converts_on_host(step) else FP32_BYTES * largest_partition(step)

    def step_transient_bytes(self, step: TrainingStep) -> int:
        return zero12.step_transient_bytes(step) if step.training.zero_stage < 3 else 0

    def gpu_peak(self, step: TrainingStep) -> dict[str, int] | None:
        return zero12_hbm.transient_peak(step) if step.training.zero_stage < 3 else None

    def offload_gradients(self, builder: StepBuilder, micro: int, index: int, layer: LayerWork,
                          ready: str) -> str | None:
        step = builder.step
        layout = self.layout(step, builder.hw)
        if step.training.zero_stage < 3:
            return zero12.offload_gradients(builder, layout, micro, index, ready)
        kept = gradients_to_host(builder, layout.by_layer(GRAD_PARTITIONS, step.rank_partitions,
                                                          step.grad_accum_bytes)[index], micro, index, layer, ready)
        if micro < step.micro_steps - 1:
            return None
        numel = step.rank_partitions[index]
        label = CONVERT_TEMPORARY if converts_on_host(step) else STAGING
        staged_in = layout.memory(label, 0, numel * staging_bytes(step))
        fp32 = layout.by_layer(FP32_GRADS, step.rank_partitions, FP32_BYTES)[index]
        if converts_on_host(step):
            return _converted_on_host(builder, staged_in, fp32, index, kept)
        staged = fp32_gradients_d2h(builder, staged_in, index, layer, kept)
        cpu = numel if self.options.ratio == 1 else self.split(step).layer_cpu[index]
        if cpu < numel:  # the GPU sub-groups' share, back into their fp32 gradient in HBM
            builder.add(builder.kind(partition_h2d, staged_in).task(f"m{micro}.bwd.{index}.fp32_grad_h2d",
                                                                    (numel - cpu) * FP32_BYTES, (staged,)))
        if not cpu:
            return staged
        copy = host_copy_kind(builder, "backward", "grad_copy", staged_in, FP32_BYTES, FP32_BYTES,
                              GRADIENT_HOOK_THREADS, fp32)
        return builder.add(copy.task(f"m{micro}.bwd.{index}.grad_copy", cpu, (staged,)))

    def accumulation_links(self, builder: StepBuilder) -> frozenset[str] | None:
        if builder.step.training.zero_stage < 3:
            return None  # the first micro-step copies D2H, the others H2D
        return gradient_copy_links(builder, self.layout(builder.step, builder.hw).memory(GRAD_PARTITIONS))

    def offload_task_count(self, shape: StepShape) -> int:
        """The boundary's fp32 D2H and CPU copy per layer; under partial offload, where the
        layers' partitions are not counted, a layer may also copy H2D (the one layer whose
        partition straddles the CPU's and the GPU's sub-groups has both, so the count is at
        most one over what is built)."""
        if shape.zero_stage < 3:
            return zero12.offload_task_count(shape)
        extra = 1 if self.options.ratio < 1 else 0
        return gradient_offload_tasks(shape) + 2 * shape.layers + extra

    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        if shape.zero_stage < 3:
            return zero12.step_task_count(shape, hw)
        cpu = cpu_groups(shape.subgroups, self.options.ratio)
        # Adam, the conversion and H2D (or the offloaded parameters' update); GPU Adam
        return cpu * (1 + update_tasks(self.param_offload, hw.has_gpu)) + shape.subgroups - cpu

    def optimizer_step(self, builder: StepBuilder, begin: str) -> None:
        """The CPU's sub-groups in order: CPU Adam reading its fp32 params, gradient and moments
        and writing the params and moments, then the conversion into the 16-bit temporary and
        its H2D copy that the host waits for, each access on the tiers its tensors are on; then
        the GPU's, launched one after another on the GPU's stream."""
        layout = self.layout(builder.step, builder.hw)
        if builder.step.training.zero_stage < 3:
            zero12.optimizer_step(builder, layout, begin)
            return
        fetch = self.param_fetch(builder.step, builder.hw)
        groups = builder.step.subgroups
        on_cpu = cpu_groups(len(groups), self.options.ratio)
        where = _subgroup_memory(layout, on_cpu)
        keys: tuple[Hashable, ...] = tuple((i in (0, on_cpu), i < on_cpu, size)
                                           for i, size in enumerate(builder.step.subgroup_sizes))
        if layout.uniform is None:
            keys = tuple((key, where[i] if i < on_cpu else None) for i, key in enumerate(keys))
        if fetch is not None:
            keys = fetch.update_keys(keys)
        done = begin
        for i in builder.loop(keys):
            group = groups[i]
            if i >= on_cpu:
                done = builder.add(gpu_adam_task(builder, group, (done,)))
                continue
            (reads, writes), params = where[i], layout.subgroup(FP32_PARAMS, i)
            adam = adam_kind(builder, reads, writes)
            updated = builder.add(adam.task(f"step.{group.index}.adam", group.numel, (done,)))
            if fetch is not None:  # into the offloaded 16-bit partition on the host: no H2D
                done = fetch.update(builder, group, updated, source=params)
                continue
            temporary = layout.memory(H2D_TEMPORARY, 0, group.numel * builder.step.lp_bytes)
            done = params_to_gpu(builder, params, group, updated, temporary)


def _subgroup_memory(layout: HostLayout, count: int) -> list[tuple[HostMemory, HostMemory]]:
    """Where CPU Adam's reads (fp32 param, gradient, m, v) and writes (param, m, v) of each of
    the first ``count`` sub-groups land, worked out once for neighbours whose tensors are alike."""
    if layout.uniform is not None:
        return [(layout.uniform, layout.uniform)] * count
    tensors = tuple(zip(*(layout.subgroups(what)[:count] for what in (FP32_PARAMS, FP32_GRADS, ADAM_STATE))))
    return [where for block, alike in blocks(tensors)
            for where in [(params.blend(((grads, FP32_BYTES), (state, ADAM_STATE_BYTES)), FP32_BYTES),
                           params.blend(((state, ADAM_STATE_BYTES),), FP32_BYTES))
                          for params, grads, state in block] * alike]


def converts_on_host(step: TrainingStep) -> bool:
    """Whether ``partition_grads`` copies the boundary's gradient partition into the optimizer's
    fp32 gradient with one blocking ``fp32_grad_tensor.copy_(grad_buffer)`` (DeepSpeed before
    0.15.4: v0.13.3 ``stage3.py`` line 1467), which PyTorch runs as a D2H copy of the 16-bit
    partition into a fresh pageable temporary and a conversion to fp32 on the CPU
    (``aten/src/ATen/native/cuda/Copy.cu`` ``copy_kernel_cuda``: "For blocking transfers
    conversions are performed on CPU"). 0.15.4 on converts on the GPU and copies through the
    pinned ``pinned_grad_buffer`` (DeepSpeed PR #6670; v0.16.2 ``stage3.py`` lines 1516-1522)."""
    return not at_least(step.training.deepspeed_version, (0, 15, 4))


def staging(step: TrainingStep, pin: Callable[[int], int]) -> Allocation:
    """The host buffer the boundary's gradient copy goes through, per rank: the pinned fp32
    ``pinned_grad_buffer`` of the largest partition, or before 0.15.4 the pageable 16-bit
    temporary of ``converts_on_host`` (bytes allocated, held)."""
    num_bytes = staging_bytes(step) * largest_partition(step)
    if converts_on_host(step):
        return Allocation(CONVERT_TEMPORARY, num_bytes, num_bytes)
    return Allocation(STAGING, num_bytes, pin(num_bytes))


def staging_bytes(step: TrainingStep) -> int:
    """Bytes per element of the staging buffer: fp32, or the 16-bit ``grad_accum_dtype`` before
    0.15.4."""
    return step.grad_accum_bytes if converts_on_host(step) else FP32_BYTES


def _converted_on_host(builder: StepBuilder, staged_in: HostMemory, fp32: HostMemory, index: int, kept: str) -> str:
    """``converts_on_host``: the 16-bit partition copied D2H at the pageable rate on
    ``PARTITION_STREAM`` into the temporary (in ``staged_in``), then converted to fp32 into the
    optimizer's gradient (in ``fp32``) on the hook's threads; the host thread waits for both.
    Returns the conversion."""
    micro, numel = builder.step.micro_steps - 1, builder.step.rank_partitions[index]
    lp = builder.step.grad_accum_bytes
    pageable = builder.figure("pageable_bandwidth")
    d2h = pcie_kind(builder, "d2h", "backward", staged_in, pageable, stream=PARTITION_STREAM)
    copied = builder.add(d2h.task(f"m{micro}.bwd.{index}.grad_d2h_pageable", numel * lp, (kept,)))
    convert = host_copy_kind(builder, "backward", "grad_convert", staged_in, lp, FP32_BYTES, GRADIENT_HOOK_THREADS,
                             fp32)
    return builder.add(convert.task(f"m{micro}.bwd.{index}.grad_convert", numel, (copied,)))


class CXLInterleave(HostOffload):
    """ZeRO-Offload with host memory on DRAM and CXL nodes under a numactl policy."""

    name = "cxl"
    summary = "ZeRO-Offload with host memory on DRAM and CXL (numactl -w, -i, -m or -p)"
    Options = CXLOptions

    def check(self, hw: Hardware) -> MissingDevice | None:
        return super().check(hw) or (None if hw.cxl is not None else MissingDevice("cxl", "CXL devices"))

    def lay_out(self, hw: Hardware, tensors: list[Repeated]) -> HostLayout:
        """``tensors`` under the policy: a weighted interleave by the weights, an interleave
        of equal pages over the socket's DRAM node and its CXL nodes, or a fill."""
        options = self.options
        if options.policy == "interleave":
            interleave = HostMemory.interleave(hw, 1.0, hw.cxl_count / hw.sockets)
        else:
            interleave = HostMemory.interleave(hw, options.dram_weight, options.cxl_weight)
        return host_layout(options.policy, hw, tensors, interleave)
