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

``cxl`` is the same code path with every host allocation weighted-interleaved across DRAM and
CXL memory (numactl --weighted-interleave), so CPU Adam, the CPU copies and the DMA engines
read and write CXL memory directly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from tiersim.config.deepspeed_version import at_least
from tiersim.config.hardware import Hardware
from tiersim.config.schema import number
from tiersim.frozen import by_fields
from tiersim.strategies import footprint
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
)
from tiersim.strategies.kinds import (
    ADAM_STATE_BYTES,
    FP32_BYTES,
    adam_kind,
    gpu_adam_task,
    host_copy_kind,
    pcie_kind,
)
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.partial import PARTIAL_FROM, Split, cpu_groups, split
from tiersim.strategies.placement import MissingDevice, Placement, largest_partition
from tiersim.workload import LayerWork, StepShape, TrainingSpec, TrainingStep

GRADIENT_HOOK_THREADS = 1
"""Threads of the boundary gradient copy. It runs inside a backward hook, and the study's node
stays at its forward CPU load through the DRAM backward (70B-dram-psutil.csv: 3.2-3.3% of 224
CPUs in both), which a copy on a rank's 56 threads would visibly raise."""


@dataclass(frozen=True)
class HostOptions:
    """CPU offload's options."""

    ratio: float = number(1.0, ge=0, le=1, doc="fraction of the optimizer sub-groups updated on the CPU "
                                               "(DeepSpeed offload_optimizer.ratio, ZeRO-3 only); the rest "
                                               "stay in HBM and the GPU updates them")

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)


class HostOffload(Strategy):
    """CPU offload of the optimizer; subclasses choose the host memory policy."""

    name = "dram"
    summary = "ZeRO-Offload: state in pinned DRAM, CPU Adam"
    Options = HostOptions
    hints = ScheduleHints(accumulation_copies=frozenset({PARTITION_STREAM}))

    def refusal(self, training: TrainingSpec) -> tuple[str, str] | None:
        ratio = self.options.ratio
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

    _split: tuple[TrainingStep, Split] | None = None

    def memory(self, hw: Hardware) -> HostMemory:
        """Where host allocations land."""
        return HostMemory.dram_only()

    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        """DeepSpeed ZeRO-3 with ``offload_optimizer: cpu``, per rank: the fp32 partition and Adam's
        moments (pageable); the fp32 gradient of each sub-group, the partition in
        ``grad_accum_dtype`` and the fp32 staging buffer of ``partition_grads`` (pinned); the
        16-bit temporary of the step's H2D copy; the first step's retained fp32 temporary; the
        process's own memory. Every allocation lands where the memory policy puts it.

        DeepSpeed v0.16.2 ``deepspeed/runtime/zero/stage3.py``: ``_create_fp32_partitions``
        (fp32 params), ``initialize_optimizer_states`` (``subgroup_gradient_buffer``, pinned
        when ``offload_optimizer.pin_memory``), ``_setup_for_real_optimizer``
        (``grad_partitions_flat_buffer``, pinned; ``pinned_grad_buffer`` of the largest
        partition); ``deepspeed/ops/adam/cpu_adam.py`` (``exp_avg``, ``exp_avg_sq``). Before
        0.15.4 there is no staging buffer but the pageable temporary of ``converts_on_host``."""
        memory = self.memory(hw)
        ranks = step.training.data_parallel
        pin = pinned if hw.pinned else int
        rank = step.rank_params
        cpu, largest, groups = rank, step.largest_subgroup, step.subgroups
        if self.options.ratio < 1:  # the GPU's sub-groups keep fp32 params, m, v and gradients in HBM
            parts = self.split(step)
            cpu, largest, groups = parts.cpu_elements, parts.largest_cpu_group, groups[:parts.cpu_groups]
            on_gpu = parts.gpu_elements
            placement.put("hbm", "fp32 params, Adam m, v (GPU sub-groups)", (FP32_BYTES + ADAM_STATE_BYTES) * on_gpu)
            placement.put("hbm", "fp32 gradients (GPU sub-groups)", FP32_BYTES * on_gpu)
        host = [
            ("fp32 params", FP32_BYTES * cpu, None),
            ("Adam m, v", ADAM_STATE_BYTES * cpu, None),
            ("fp32 gradients (per sub-group)", FP32_BYTES * cpu, sum(pin(FP32_BYTES * g.numel) for g in groups)),
            ("gradient partitions (grad_accum_dtype)", step.grad_accum_bytes * rank, pin(step.grad_accum_bytes * rank)),
            staging(step, pin),
            ("16-bit temporary of the H2D copy", step.lp_bytes * largest, None),
            ("retained after the first step", 0, footprint.FIRST_STEP_RETAINED_BYTES * cpu),
            ("process runtime", 0, footprint.PROCESS_HOST_BYTES),
        ]
        for what, allocated, held in host:
            reserved = allocated if held is None else held
            split, split_held = memory.split(allocated * ranks), memory.split(reserved * ranks)
            for tier in split:
                placement.put(tier, what, split[tier], split_held[tier])

    def gradient_conversion_bytes(self, step: TrainingStep) -> int:
        """``partition_grads`` converts one tensor's partition to fp32 at a time, on the GPU
        (none before 0.15.4: ``converts_on_host``)."""
        return 0 if converts_on_host(step) else FP32_BYTES * largest_partition(step)

    def offload_gradients(self, builder: StepBuilder, micro: int, index: int, layer: LayerWork,
                          ready: str) -> str | None:
        memory = self.memory(builder.hw)
        kept = gradients_to_host(builder, memory, micro, index, layer, ready)
        if micro < builder.step.micro_steps - 1:
            return None
        if converts_on_host(builder.step):
            return _converted_on_host(builder, memory, index, kept)
        staged = fp32_gradients_d2h(builder, memory, index, layer, kept)
        part = builder.step.rank_partitions[index]
        cpu = part if self.options.ratio == 1 else self.split(builder.step).layer_cpu[index]
        if cpu < part:  # the GPU sub-groups' share, back into their fp32 gradient in HBM
            h2d = pcie_kind(builder, "h2d", "backward", memory, stream=PARTITION_STREAM)
            builder.add(h2d.task(f"m{micro}.bwd.{index}.fp32_grad_h2d", (part - cpu) * FP32_BYTES, (staged,)))
        if not cpu:
            return staged
        copy = host_copy_kind(builder, "backward", "grad_copy", memory, FP32_BYTES, FP32_BYTES, GRADIENT_HOOK_THREADS)
        return builder.add(copy.task(f"m{micro}.bwd.{index}.grad_copy", cpu, (staged,)))

    def backward_keys(self, builder: StepBuilder, micro: int) -> tuple[Hashable, ...]:
        """Layers differ by shape and, under partial offload, by the part of their partition the
        CPU updates."""
        keys = super().backward_keys(builder, micro)
        if self.options.ratio == 1:
            return keys
        layer_cpu = self.split(builder.step).layer_cpu[::-1]
        parts = builder.step.rank_partitions[::-1]
        return tuple((key, cpu == part, cpu == 0) for key, cpu, part in zip(keys, layer_cpu, parts, strict=True))

    def accumulation_links(self, builder: StepBuilder) -> frozenset[str]:
        return gradient_copy_links(builder, self.memory(builder.hw))

    def offload_task_count(self, shape: StepShape) -> int:
        """The boundary's fp32 D2H and CPU copy per layer; under partial offload, where the
        layers' partitions are not counted, a layer may also copy H2D (the one layer whose
        partition straddles the CPU's and the GPU's sub-groups has both, so the count is at
        most one over what is built)."""
        extra = 1 if self.options.ratio < 1 else 0
        return gradient_offload_tasks(shape) + 2 * shape.layers + extra

    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        cpu = cpu_groups(shape.subgroups, self.options.ratio)
        return cpu * (3 if hw.has_gpu else 1) + shape.subgroups - cpu  # Adam, the conversion and H2D; GPU Adam

    def optimizer_step(self, builder: StepBuilder, begin: str) -> None:
        """The CPU's sub-groups in order (CPU Adam, the 16-bit copy H2D that the host waits
        for), then the GPU's, launched one after another on the GPU's stream."""
        memory = self.memory(builder.hw)
        adam = adam_kind(builder, memory)
        done = begin
        groups = builder.step.subgroups
        on_cpu = cpu_groups(len(groups), self.options.ratio)
        keys = tuple((i in (0, on_cpu), i < on_cpu, size) for i, size in enumerate(builder.step.subgroup_sizes))
        for i in builder.loop(keys):
            group = groups[i]
            if i >= on_cpu:
                done = builder.add(gpu_adam_task(builder, group, (done,)))
                continue
            updated = builder.add(adam.task(f"step.{group.index}.adam", group.numel, (done,)))
            done = params_to_gpu(builder, memory, group, updated)


def converts_on_host(step: TrainingStep) -> bool:
    """Whether ``partition_grads`` copies the boundary's gradient partition into the optimizer's
    fp32 gradient with one blocking ``fp32_grad_tensor.copy_(grad_buffer)`` (DeepSpeed before
    0.15.4: v0.13.3 ``stage3.py`` line 1467), which PyTorch runs as a D2H copy of the 16-bit
    partition into a fresh pageable temporary and a conversion to fp32 on the CPU
    (``aten/src/ATen/native/cuda/Copy.cu`` ``copy_kernel_cuda``: "For blocking transfers
    conversions are performed on CPU"). 0.15.4 on converts on the GPU and copies through the
    pinned ``pinned_grad_buffer`` (DeepSpeed PR #6670; v0.16.2 ``stage3.py`` lines 1516-1522)."""
    return not at_least(step.training.deepspeed_version, (0, 15, 4))


def staging(step: TrainingStep, pin: Callable[[int], int]) -> tuple[str, int, int | None]:
    """The host buffer the boundary's gradient copy goes through, per rank: the pinned fp32
    ``pinned_grad_buffer`` of the largest partition, or before 0.15.4 the pageable 16-bit
    temporary of ``converts_on_host`` (bytes allocated, held)."""
    largest = largest_partition(step)
    if converts_on_host(step):
        return "16-bit temporary of the gradient copy", step.grad_accum_bytes * largest, None
    return "fp32 gradient staging", FP32_BYTES * largest, pin(FP32_BYTES * largest)


def _converted_on_host(builder: StepBuilder, memory: HostMemory, index: int, kept: str) -> str:
    """``converts_on_host``: the 16-bit partition copied D2H at the pageable rate on
    ``PARTITION_STREAM``, then converted to fp32 into the optimizer's gradient on the hook's
    threads; the host thread waits for both. Returns the conversion."""
    micro, numel = builder.step.micro_steps - 1, builder.step.rank_partitions[index]
    lp = builder.step.grad_accum_bytes
    d2h = pcie_kind(builder, "d2h", "backward", memory, builder.hw.pageable_bandwidth, stream=PARTITION_STREAM)
    copied = builder.add(d2h.task(f"m{micro}.bwd.{index}.grad_d2h_pageable", numel * lp, (kept,)))
    convert = host_copy_kind(builder, "backward", "grad_convert", memory, lp, FP32_BYTES, GRADIENT_HOOK_THREADS)
    return builder.add(convert.task(f"m{micro}.bwd.{index}.grad_convert", numel, (copied,)))


@dataclass(frozen=True)
class InterleaveOptions(HostOptions):
    """CPU offload's options and the page weights of the DRAM:CXL weighted interleave (numactl
    --weighted-interleave)."""

    dram_weight: float = number(12, gt=0, doc="DRAM's page weight: dram_weight / (dram_weight + cxl_weight) "
                                              "of every host allocation is in DRAM")
    cxl_weight: float = number(5, gt=0, doc="CXL's page weight: cxl_weight / (dram_weight + cxl_weight) of every "
                                            "host allocation is on the CXL devices")

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)


class CXLInterleave(HostOffload):
    """ZeRO-Offload with host memory weighted-interleaved over DRAM and CXL."""

    name = "cxl"
    summary = "ZeRO-Offload with host memory interleaved DRAM:CXL"
    Options = InterleaveOptions

    def check(self, hw: Hardware) -> MissingDevice | None:
        return super().check(hw) or (None if hw.cxl is not None else MissingDevice("cxl", "CXL devices"))

    def memory(self, hw: Hardware) -> HostMemory:
        return HostMemory.interleave(hw, self.options.dram_weight, self.options.cxl_weight)


