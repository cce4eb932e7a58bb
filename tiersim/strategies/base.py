"""The common strategy interface and the per-iteration schedule every strategy shares.

A strategy decides two things: where each tensor lives (``placement``) and what the
gradient offload in backward and the optimizer step look like as engine tasks
(``offload_gradients``, ``optimizer_step``). ``build_plan`` lays out forward and backward
for all micro-steps (ZeRO-3 all-gathers and reduce-scatters over NVLink, GPU compute with
recompute) and calls those hooks. Adding a strategy = subclass ``Strategy`` and register it.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Hashable, NamedTuple

from tiersim.engine import Task, TaskGraph
from tiersim.engine.graph import Usage
from tiersim.hardware import TIERS, Hardware
from tiersim.profiles import GPUProfile
from tiersim.strategies.memory import HostMemory
from tiersim.workload import LayerWork, StepShape, TrainingStep

LP_TO_FP32 = 4
"""Bytes per element of the fp32 gradient partition copied to the host (DeepSpeed ZeRO-3)."""
ADAM_READ_BYTES = 16
"""Adam reads fp32 param, grad, exp_avg, exp_avg_sq per element (bytes)."""
ADAM_WRITE_BYTES = 12
"""Adam writes fp32 param, exp_avg, exp_avg_sq per element (bytes)."""


class TaskKind(NamedTuple):
    """What the tasks of one kind in a schedule share, worked out once: stream, phase,
    category, delay (s), link usage, rate cap (bytes/s) and the bytes one unit of work moves
    (a task of ``amount`` units moves ``amount * unit_bytes`` bytes)."""

    stream: str
    phase: str
    category: str
    delay: float
    usage: Usage
    rate_cap: float = math.inf
    unit_bytes: float = 1.0

    def task(self, name: str, amount: float, deps: tuple[str, ...]) -> Task:
        """A task of this kind over ``amount`` units (bytes, or elements for Adam); its fields
        are passed by position (keywords cost twice as much, and a 70B step makes 1,100)."""
        return Task(name, self.stream, self.phase, self.category, self.delay, amount * self.unit_bytes,
                    self.usage, self.rate_cap, deps)


def adam_kind(b: StepBuilder, memory: HostMemory) -> TaskKind:
    """CPU Adam over a sub-group (units: elements) as one flow of its memory traffic.

    It reads param, grad, m, v and writes param, m, v plus (when there is a GPU to feed) the
    16-bit copy for it; its rate is at most the CPU's Adam rate on the rank's cores
    (elements/s), and the memory it touches is shared with every other flow on those links.
    """
    read = ADAM_READ_BYTES
    write = ADAM_WRITE_BYTES + (b.step.lp_bytes if b.hw.has_gpu else 0)
    per_element = read + write
    cap = b.hw.cpu.adam_rate(b.hw.cores_per_rank) * per_element
    usage = memory.access(read / per_element, write / per_element)
    overhead = b.hw.cpu.adam_step_overhead or 0.0
    return TaskKind("cpu", "optimizer_step", "adam", overhead, usage, cap, per_element)


@dataclass(frozen=True)
class NoOptions:
    """A strategy without options."""


@dataclass
class Placement:
    """Bytes of each named tensor group on each tier (hbm per GPU; host tiers whole node)."""

    items: list[tuple[str, str, int]] = field(default_factory=list)

    def put(self, tier: str, what: str, num_bytes: int) -> None:
        """Place ``num_bytes`` of ``what`` on ``tier``."""
        if num_bytes:
            self.items.append((tier, what, int(num_bytes)))

    def totals(self) -> dict[str, int]:
        """Peak bytes per tier (every tier listed, 0 when unused)."""
        sums = {tier: 0 for tier in TIERS}
        for tier, _what, num_bytes in self.items:
            sums[tier] += num_bytes
        return sums


@dataclass
class Plan:
    """A strategy's output: placement, fit verdict and (when it fits) the task graph."""

    placement: Placement
    fits: bool
    reason: str | None
    graph: TaskGraph | None


def rank_link_capacity(hw: Hardware, name: str) -> float:
    """Capacity of one of a rank's links: bytes/s, or device-seconds per second for cxl and nvme
    (a schedule's graph asks on the link's first use)."""
    if name in ("nvlink", "hbm"):
        assert hw.gpu is not None, "this schedule needs a GPU"
        return hw.gpu.nvlink_bandwidth if name == "nvlink" else hw.gpu.hbm_bandwidth * hw.gpu.memory_efficiency
    if name in ("pcie_h2d", "pcie_d2h"):
        return hw.pcie_bandwidth
    if name == "dram":
        return hw.dram_bandwidth_per_rank
    if name == "cxl":
        return hw.cxl_devices_per_rank
    if name == "nvme":
        return hw.nvme_drives_per_rank
    raise KeyError(f"unknown link {name!r}")


class StepBuilder:
    """Lays out one iteration's tasks for one representative rank; strategies add to it."""

    def __init__(self, step: TrainingStep, hw: Hardware) -> None:
        self.step = step
        self.hw = hw
        self.graph = TaskGraph(capacity_of=functools.partial(rank_link_capacity, hw))
        self.add: Callable[[Task], str] = self.graph.add
        """Add a task and return its name (the graph declares the rank's links on first use)."""
        self.kinds: dict[Hashable, TaskKind] = {}
        """Task kinds made for this schedule, by what they were made from."""

    @property
    def gpu(self) -> GPUProfile:
        """The rank's GPU (every schedule but a host-only optimizer step has one)."""
        assert self.hw.gpu is not None, "this schedule needs a GPU"
        return self.hw.gpu

    @property
    def dp(self) -> int:
        """Data-parallel degree (ranks)."""
        return self.step.training.data_parallel

    def gpu_seconds(self, flops: float) -> float:
        """Seconds of GPU compute for ``flops`` at the achieved bf16 rate."""
        return flops / (self.gpu.bf16_flops * self.gpu.compute_efficiency)

    def marker(self, name: str, phase: str, deps: tuple[str, ...] = ()) -> str:
        """A zero-length task on the GPU stream marking where a phase begins."""
        return self.add(Task(name, "gpu", phase, "marker", deps=deps))

    def collective(self, name: str, stream: str, phase: str, num_bytes: float, deps: tuple[str, ...]) -> str | None:
        """A ring collective moving ``num_bytes * (dp-1)/dp`` per rank over NVLink (None if dp=1)."""
        if self.dp == 1:
            return None
        moved = num_bytes * (self.dp - 1) / self.dp
        return self.add(Task(name, stream, phase, stream, 0.0, moved, (("nvlink", 1.0),), math.inf, deps))


class Strategy(ABC):
    """Base class: subclasses set ``name``, ``Options`` and implement the three hooks."""

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    summary: ClassVar[str] = ""
    grads_on_gpu: ClassVar[bool] = False
    """Whether the 16-bit gradient partition stays in HBM (no optimizer offload)."""

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        """Add this strategy's optimizer state, gradients and buffers to ``placement``."""

    @abstractmethod
    def offload_gradients(self, b: StepBuilder, micro: int, index: int, layer: LayerWork, ready: str) -> None:
        """Tasks moving one layer's reduced gradient partition off the GPU (after ``ready``)."""

    @abstractmethod
    def optimizer_step(self, b: StepBuilder, begin: str) -> None:
        """Tasks of the optimizer step over all sub-groups, starting after ``begin``."""

    @abstractmethod
    def offload_task_count(self, shape: StepShape) -> int:
        """Tasks ``offload_gradients`` adds over a whole step of ``shape``."""

    @abstractmethod
    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        """Tasks ``optimizer_step`` adds for a step of ``shape`` on ``hw``."""

    def task_count(self, shape: StepShape, hw: Hardware) -> int:
        """Tasks ``plan`` builds for a step of ``shape`` on ``hw`` (when it fits), counted
        without building anything: what the work limits (``tiersim.limits``) are checked on."""
        layers = shape.layers
        gathers = layers if shape.zero_stage >= 3 and shape.data_parallel > 1 else 0
        reduces = layers if shape.data_parallel > 1 else 0
        per_micro = 2 + 2 * layers + 2 * gathers + reduces  # 2 markers, forward and backward layers
        return (shape.micro_steps * per_micro + 1 + self.offload_task_count(shape)
                + self.step_task_count(shape, hw))

    def check(self, hw: Hardware) -> str | None:
        """Why this strategy cannot run on ``hw`` at all (missing device), or None."""
        return None

    def plan(self, step: TrainingStep, hw: Hardware) -> Plan:
        """Place tensors, check capacity and, when everything fits, build the task graph."""
        placement = Placement()
        place_gpu_common(step, placement, self.grads_on_gpu)
        missing = self.check(hw)
        if missing:
            return Plan(placement, False, missing, None)
        self.place(step, hw, placement)
        for tier, need in placement.totals().items():
            have = hw.capacity(tier)
            if need > have:
                where = "per GPU" if tier == "hbm" else "on the node"
                reason = f"{tier} needs {need / 1e9:.1f} GB {where} but has {have / 1e9:.1f} GB"
                return Plan(placement, False, reason, None)
        return Plan(placement, True, None, self._schedule(step, hw))

    def _schedule(self, step: TrainingStep, hw: Hardware) -> TaskGraph:
        b = StepBuilder(step, hw)
        for micro in range(step.micro_steps):
            self._forward(b, micro)
            self._backward(b, micro)
        tails = tuple(b.graph.stream_tails())
        begin = b.add(Task("step.begin", "gpu", "optimizer_step", "marker", deps=tails))
        self.optimizer_step(b, begin)
        return b.graph

    def _forward(self, b: StepBuilder, micro: int) -> None:
        gather = b.step.training.zero_stage >= 3
        b.marker(f"m{micro}.forward.begin", "forward")
        computed: list[str] = []
        for i, layer in enumerate(b.step.layers):
            prefetch = (computed[i - 2],) if i >= 2 else ()
            ag = b.collective(f"m{micro}.fwd.{i}.allgather", "allgather", "forward",
                              layer.params * b.step.lp_bytes, prefetch) if gather else None
            name = f"m{micro}.fwd.{i}"
            computed.append(b.add(Task(name, "gpu", "forward", "compute",
                                       delay=b.gpu_seconds(layer.forward_flops), deps=_some(ag))))

    def _backward(self, b: StepBuilder, micro: int) -> None:
        training = b.step.training
        b.marker(f"m{micro}.backward.begin", "backward")
        computed: list[str] = []
        for i in reversed(range(len(b.step.layers))):
            layer = b.step.layers[i]
            prefetch = (computed[-2],) if len(computed) >= 2 else ()
            ag = b.collective(f"m{micro}.bwd.{i}.allgather", "allgather", "backward",
                              layer.params * b.step.lp_bytes, prefetch) if training.zero_stage >= 3 else None
            flops = layer.backward_flops + layer.recompute_flops
            name = b.add(Task(f"m{micro}.bwd.{i}", "gpu", "backward", "compute",
                              delay=b.gpu_seconds(flops), deps=_some(ag)))
            computed.append(name)
            factor = 1 if training.zero_stage >= 2 else 2
            rs = b.collective(f"m{micro}.bwd.{i}.reduce", "reduce_scatter", "backward",
                              factor * layer.params * b.step.lp_bytes, (name,))
            self.offload_gradients(b, micro, i, layer, rs or name)


def place_gpu_common(step: TrainingStep, placement: Placement, grads_on_gpu: bool) -> None:
    """What every strategy keeps in HBM: 16-bit params (and grads), gathered layers, activations."""
    placement.put("hbm", "bf16 parameters (partition)", step.lp_param_bytes_on_gpu())
    if grads_on_gpu:
        placement.put("hbm", "bf16 gradients (partition)", step.lp_grad_bytes_on_gpu())
    if step.training.zero_stage >= 3 and step.training.data_parallel > 1:
        largest = max(layer.params for layer in step.layers)
        placement.put("hbm", "gathered layers (current + prefetch)", 2 * largest * step.lp_bytes)
    bucket = min(step.training.reduce_bucket_size, max(layer.params for layer in step.layers))
    placement.put("hbm", "reduce bucket", bucket * step.lp_bytes)
    placement.put("hbm", "activations", step.activation_peak_bytes())


def pcie_kind(b: StepBuilder, direction: str, phase: str, memory: HostMemory) -> TaskKind:
    """Host<->GPU copies (units: bytes) on the copy engine of ``direction`` ("h2d" or "d2h"):
    the link's setup latency, then the bytes over PCIe, read from (h2d) or written to (d2h)
    host memory (made once per schedule)."""
    key = (direction, phase, memory)
    kind = b.kinds.get(key)
    if kind is None:
        host = memory.access(1, 0) if direction == "h2d" else memory.access(0, 1)
        usage = ((f"pcie_{direction}", 1.0), *host)
        kind = b.kinds[key] = TaskKind(direction, phase, direction, b.hw.pcie_latency, usage)
    return kind


def gradients_to_host(b: StepBuilder, memory: HostMemory, micro: int, index: int, layer: LayerWork,
                      ready: str) -> str:
    """Move one layer's reduced gradient partition into the pinned fp32 host buffer.

    With optimizer offload DeepSpeed ZeRO-3 keeps the gradient partitions in pinned host
    memory: the first micro-step copies them D2H; later ones fetch the partial sum H2D, add
    on the GPU (negligible) and copy it back D2H. Returns the D2H task.
    """
    num_bytes = partition(layer, b.dp) * LP_TO_FP32
    deps = (ready,)
    prefix = f"m{micro}.bwd.{index}"
    if micro > 0:
        fetch = pcie_kind(b, "h2d", "backward", memory)
        deps = (b.add(fetch.task(f"{prefix}.grad_fetch", num_bytes, deps)),)
    return b.add(pcie_kind(b, "d2h", "backward", memory).task(f"{prefix}.d2h", num_bytes, deps))


def gradient_offload_tasks(shape: StepShape) -> int:
    """Tasks ``gradients_to_host`` makes over a step: a D2H per layer and micro-step, and a
    fetch of the partial sum before each one after the first micro-step."""
    return shape.layers * (2 * shape.micro_steps - 1)


def params_kind(b: StepBuilder, memory: HostMemory) -> TaskKind | None:
    """H2D copies (units: elements) of a sub-group's updated 16-bit params from the host
    staging buffer; None on a host-only machine (the CPU validation of the offload path has no
    GPU), which skips them."""
    if not b.hw.has_gpu:
        return None
    return pcie_kind(b, "h2d", "optimizer_step", memory)._replace(unit_bytes=b.step.lp_bytes)


def partition(layer: LayerWork, dp: int) -> int:
    """Elements of one layer's gradient owned by one rank under ZeRO partitioning."""
    return math.ceil(layer.params / dp)


def _some(name: str | None) -> tuple[str, ...]:
    return (name,) if name else ()
