"""ZeRO-1 and ZeRO-2 with CPU offload: DeepSpeed's ``stage_1_and_2.py`` path, the original
ZeRO-Offload. Parameters are not partitioned: the 16-bit model stays whole in HBM, and only
the fp32 master weights, Adam's moments and the fp32 gradients of a rank's flat partition live
in host memory.

DeepSpeed v0.16.2 ``deepspeed/runtime/zero/stage_1_and_2.py``:
- ``reduce_ready_partitions_and_remove_grads`` (line 1415): ZeRO-2 reduces every micro-step,
  ZeRO-1 only at the accumulation boundary;
- ``copy_grads_in_partition`` (line 1322): with gradient accumulation,
  ``async_accumulate_grad_in_cpu_via_gpu`` (line 1186) copies a parameter's 16-bit gradient
  D2H in the first micro-step and the host's copy H2D in later ones; at the boundary
  ``async_inplace_copy_grad_to_fp32_buffer_from_gpu`` (line 1261) converts the partition to
  fp32 on the GPU and copies it D2H into the optimizer's gradient. All non-blocking, on the
  reduction stream, which the backward's epilogue synchronizes;
- ``step`` (lines 1857-1873, 1921): CPU Adam over the fp32 partition, then the 16-bit partition
  copied back, and the 16-bit parameters all-gathered (``all_gather_dp_groups``). From 0.14.1
  (PR #5301) the fp32 partition goes H2D whole (``fp32_partition.to(device)``, a transient of
  4 B per element in HBM) and is converted on the GPU; before, one blocking ``copy_`` converts on
  the CPU into a pageable temporary and copies that (``params_to_gpu``).

tiersim's approximations: the per-parameter copies are per layer, of the rank's share of the
layer; the optimizer's flat partition is stepped in ``sub_group_size`` chunks in order (one
``optimizer.step`` and one copy in DeepSpeed: the same sum but for the per-call overhead).
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from tiersim.config.deepspeed_version import at_least
from tiersim.config.hardware import Hardware
from tiersim.engine import Task
from tiersim.strategies import footprint
from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.footprint import pinned
from tiersim.strategies.gradients import PARTITION_STREAM, params_to_gpu
from tiersim.strategies.host_layout import (
    ADAM_STATE,
    FP32_PARAMS,
    H2D_TEMPORARY,
    RETAINED,
    RUNTIME,
    Allocation,
    HostLayout,
    Repeated,
    blocks,
    once,
    repeated,
)
from tiersim.strategies.kinds import ADAM_STATE_BYTES, FP32_BYTES, adam_kind, host_copy_kind, pcie_kind
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.placement import Placement
from tiersim.workload import StepShape, TrainingStep

FP32_H2D_FROM = (0, 14, 1)
"""The release whose step copies the fp32 partition H2D and converts it on the GPU (PR #5301)."""
FP32_GRADS = "fp32 gradients"
"""The optimizer's fp32 gradient of the rank's flat partition (``single_partition_of_fp32_groups[i].grad``)."""
PIN_SETTING_FROM = (0, 10, 1)
"""The release whose host buffers follow ``offload_optimizer.pin_memory`` (PR #4131); before, all pinned."""
HOST_GRAD_BUFFER = "16-bit gradient buffer of the offload (host)"
"""``temp_grad_buffer_for_cpu_offload``: the largest parameter's 16-bit size, allocated and never used."""
ACCUMULATED = "16-bit gradients accumulated on the host"
"""``accumulated_grads_in_cpu``: each parameter's 16-bit gradient, made in the first backward."""


def fp32_h2d(step: TrainingStep) -> bool:
    """Whether the step copies the fp32 partition to the GPU whole (0.14.1 on)."""
    return at_least(step.training.deepspeed_version, FP32_H2D_FROM)


def allocations(step: TrainingStep, hw: Hardware) -> list[Repeated]:
    """One rank's host tensors in the order ``stage_1_and_2.py`` allocates them: the process;
    in ``__init__`` the fp32 partition (always pinned) and the largest parameter's 16-bit
    gradient buffer; the partition's fp32 gradient (``initialize_optimizer_states``); with
    accumulation, each parameter's 16-bit gradient (first backward); the first step's retained
    temporary and Adam's moments; before 0.14.1 the 16-bit temporary of the step's copy. All but
    the fp32 partition are pinned with ``pin_memory`` (from 0.10.1; before, always)."""
    pin = pinned if hw.pinned or not at_least(step.training.deepspeed_version, PIN_SETTING_FROM) else int
    rank, lp = step.rank_params, step.lp_bytes
    tensors = [once(Allocation(RUNTIME, 0, footprint.PROCESS_HOST_BYTES)),
               once(Allocation(FP32_PARAMS, FP32_BYTES * rank, pinned(FP32_BYTES * rank)),
                    Allocation(HOST_GRAD_BUFFER, lp * step.largest_tensor, pin(lp * step.largest_tensor)),
                    Allocation(FP32_GRADS, FP32_BYTES * rank, pin(FP32_BYTES * rank)))]
    if step.micro_steps > 1:  # layers of the same tensors, one after another, taken together
        dp, edp = step.training.data_parallel, step.training.expert_data_parallel
        parts = blocks([layer.partitions(dp, edp) for layer in step.layers])
        tensors += repeated(parts, lambda layer: (Allocation(ACCUMULATED, lp * part, pin(lp * part)) for part in layer))
    tensors.append(once(Allocation(RETAINED, 0, footprint.FIRST_STEP_RETAINED_BYTES * rank),
                        Allocation(ADAM_STATE, ADAM_STATE_BYTES * rank, ADAM_STATE_BYTES * rank)))
    if not fp32_h2d(step):
        tensors.append(once(Allocation(H2D_TEMPORARY, lp * rank, lp * rank)))
    return tensors


def layer_memory(layout: HostLayout, step: TrainingStep) -> tuple[tuple[HostMemory, ...], tuple[HostMemory, ...]]:
    """Where each layer's 16-bit accumulated gradient and fp32 gradient are."""
    parts = step.rank_partitions
    return layout.by_layer(ACCUMULATED, parts, step.lp_bytes), layout.by_layer(FP32_GRADS, parts, FP32_BYTES)


def place_gpu(step: TrainingStep, placement: Placement) -> None:
    """What ZeRO-1/2 adds in HBM: with ``overlap_comm`` the second reduce bucket (the ipg
    buffers are ``reduce_bucket_size`` elements each from 0.4; v0.3's were 4.5 times that),
    the 16-bit gradient buffer of the offload (the largest parameter) and, under ZeRO-1, the
    whole model's 16-bit gradients kept until the boundary."""
    lp = step.lp_bytes
    if step.training.overlap_comm:
        placement.put("hbm", "second reduce bucket (overlap_comm)", step.training.reduce_bucket_size * lp)
    placement.put("hbm", "16-bit gradient buffer of the offload", step.largest_tensor * lp)
    if step.training.zero_stage < 2:
        placement.put("hbm", "16-bit gradients (ZeRO-1: whole, until the boundary)", step.shard_params * lp)


def step_transient_bytes(step: TrainingStep) -> int:
    """HBM the step needs beyond the 16-bit model: the fp32 partition copied whole (0.14.1 on)."""
    return FP32_BYTES * step.rank_params if fp32_h2d(step) else 0


GRAD_CHECK_BYTES = 34
"""HBM bytes per gradient element of the boundary's checks in ``copy_grads_in_partition``
(v0.3.0 and v0.10 alike), before its fp32 copy leaves: ``grad.double().norm(2)`` reads 2 B,
writes 8 and reads them (18); the overflow check ``float(x.float().sum())`` reads 2, writes 4
and reads them (10); the conversion for the D2H reads 2 and writes 4 (6)."""


def offload_gradients(builder: StepBuilder, layout: HostLayout, micro: int, index: int, ready: str) -> str | None:
    """One layer's gradient work of ``copy_grads_in_partition`` (ZeRO-1 only at the boundary):
    with accumulation its 16-bit copy D2H (first micro-step) or H2D; at the boundary the checks
    (``GRAD_CHECK_BYTES``, on the GPU) and the fp32 D2H. With ``overlap_comm`` they run on the
    reduction stream (``PARTITION_STREAM``) and nothing waits for them; without it, on the
    compute stream, in order with the backward's kernels, and the host waits for them (the
    overflow check's ``float()`` synchronizes): the last is returned, what the next layer
    waits for."""
    step = builder.step
    last = micro == step.micro_steps - 1
    if step.training.zero_stage < 2 and not last:
        return None
    numel, prefix = step.rank_partitions[index], f"m{micro}.bwd.{index}"
    accumulated, fp32 = (where[index] for where in layer_memory(layout, step))
    stream = PARTITION_STREAM if step.training.overlap_comm else "gpu"
    after = ready
    if step.micro_steps > 1:
        direction = "d2h" if micro == 0 and step.training.zero_stage >= 2 else "h2d"
        kind = pcie_kind(builder, direction, "backward", accumulated, stream=stream)
        after = builder.add(kind.task(f"{prefix}.grad_{direction}", numel * step.lp_bytes, (after,)))
    if last:
        checks = Task(f"{prefix}.grad_checks", stream, "backward", "grad_checks", 0.0, numel * GRAD_CHECK_BYTES,
                      (("hbm", 1.0),), math.inf, (after,))
        kind = pcie_kind(builder, "d2h", "backward", fp32, stream=stream)
        after = builder.add(kind.task(f"{prefix}.fp32_grad_d2h", numel * FP32_BYTES, (builder.add(checks),)))
    return None if step.training.overlap_comm or after == ready else after


def offload_task_count(shape: StepShape) -> int:
    """Tasks ``offload_gradients`` makes over a step."""
    accumulating = shape.micro_steps > 1
    copies = (shape.micro_steps if shape.zero_stage >= 2 else 1) if accumulating else 0
    return shape.layers * (copies + 2)


def step_task_count(shape: StepShape, hw: Hardware) -> int:
    """Tasks ``optimizer_step`` makes: the unscale, CPU Adam and the copy back (one task from 0.14.1, a
    conversion and a copy before) per chunk, and the all-gather."""
    fp32_copy = at_least(shape.deepspeed_version, FP32_H2D_FROM)
    per_chunk = 1 + ((1 if fp32_copy else 2) if hw.has_gpu else 0)
    return 1 + shape.subgroups * per_chunk + (1 if hw.has_gpu and shape.data_parallel > 1 else 0)


def chunk_memory(layout: HostLayout, start: int, numel: int) -> tuple[HostMemory, HostMemory, HostMemory]:
    """Where CPU Adam's reads (fp32 param, gradient, m, v) and writes (param, m, v) of the
    partition's elements ``start`` to ``start + numel`` land, and where the params are."""
    end = start + numel
    params = layout.memory(FP32_PARAMS, FP32_BYTES * start, FP32_BYTES * end)
    grads = layout.memory(FP32_GRADS, FP32_BYTES * start, FP32_BYTES * end)
    state = layout.memory(ADAM_STATE, ADAM_STATE_BYTES * start, ADAM_STATE_BYTES * end)
    reads = params.blend(((grads, FP32_BYTES), (state, ADAM_STATE_BYTES)), FP32_BYTES)
    return reads, params.blend(((state, ADAM_STATE_BYTES),), FP32_BYTES), params


def unscale(builder: StepBuilder, layout: HostLayout, begin: str) -> str:
    """``unscale_and_clip_grads`` before CPU Adam (v0.3.0 and v0.10 alike): ``grad.mul_(1 /
    combined_scale)`` over the rank's fp32 gradient partition in host memory, a torch CPU op on
    the rank's cores reading and writing 4 B per element."""
    step = builder.step
    grads = layout.memory(FP32_GRADS, 0, FP32_BYTES * step.rank_params)
    cores = builder.figure("rank_cores")
    kind = host_copy_kind(builder, "optimizer_step", "unscale", grads, FP32_BYTES, FP32_BYTES, cores)
    return builder.add(kind.task("step.unscale", step.rank_params, (begin,)))


def optimizer_step(builder: StepBuilder, layout: HostLayout, begin: str) -> None:
    """The gradient partition unscaled (``unscale``), then each chunk: CPU Adam, then its
    16-bit parameters back on the GPU (the host waits); then the 16-bit parameters
    all-gathered over the ranks. Each access is costed where its bytes are."""
    step = builder.step
    starts = [0]
    for size in step.subgroup_sizes[:-1]:
        starts.append(starts[-1] + size)
    where = [chunk_memory(layout, start, g.numel) for start, g in zip(starts, step.subgroups, strict=True)]
    keys: tuple[Hashable, ...] = tuple((i == 0, size) for i, size in enumerate(step.subgroup_sizes))
    if layout.uniform is None:
        keys = tuple((key, where[i]) for i, key in enumerate(keys))
    done = unscale(builder, layout, begin)
    for i in builder.loop(keys):
        group, (reads, writes, params) = step.subgroups[i], where[i]
        done = builder.add(adam_kind(builder, reads, writes).task(f"step.{group.index}.adam", group.numel, (done,)))
        if not builder.hw.has_gpu:
            continue
        if fp32_h2d(step):
            h2d = pcie_kind(builder, "h2d", "optimizer_step", params)
            done = builder.add(h2d.task(f"step.{group.index}.h2d", group.numel * FP32_BYTES, (done,)))
        else:
            lp = step.lp_bytes
            temporary = layout.memory(H2D_TEMPORARY, lp * starts[i], lp * (starts[i] + group.numel))
            done = params_to_gpu(builder, params, group, done, temporary)
    if builder.hw.has_gpu:
        experts = sum(layer.expert_params for layer in step.layers)  # gathered over the expert data-parallel group
        builder.collective("step.allgather", "allgather", "optimizer_step",
                           (step.shard_params - experts) * step.lp_bytes, (done,), experts * step.lp_bytes)
