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
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tiersim.config.hardware import TIERS, Hardware
from tiersim.config.profiles import GPUProfile
from tiersim.engine import Task
from tiersim.engine.graph import TaskGraph, Usage
from tiersim.engine.session import Runs, Session, reach_back, runs_of
from tiersim.frozen import by_fields
from tiersim.layer_kernels import PassKernels
from tiersim.strategies import footprint
from tiersim.strategies.gpu_kernels import pass_seconds
from tiersim.strategies.memory import HostMemory
from tiersim.workload import LayerWork, StepShape, SubGroup, TrainingStep

FP32_BYTES = 4
"""Bytes per element of fp32 master weights, Adam moments and the optimizer's gradients."""
ADAM_READ_BYTES = 16
"""Adam reads fp32 param, grad, exp_avg, exp_avg_sq per element (bytes)."""
ADAM_WRITE_BYTES = 12
"""Adam writes fp32 param, exp_avg, exp_avg_sq per element (bytes)."""
ADAM_STATE_BYTES = 8
"""Adam's fp32 exp_avg and exp_avg_sq per element (bytes)."""
PARTITION_STREAM = "partition_grads"
"""The stream ZeRO-3's ``partition_grads`` issues its host copies on, in order, one at a time
(DeepSpeed v0.16.2 ``stage3.py``: ``reduce_and_partition_stream``, which also carries the
reduce-scatter; tiersim keeps that on its own ``reduce_scatter`` stream)."""


class TaskKind:
    """What the tasks of one kind in a schedule share, worked out once: stream, phase,
    category, delay (s), link usage, rate cap (bytes/s) and the bytes one unit of work moves
    (a task of ``amount`` units moves ``amount * unit_bytes`` bytes)."""

    __slots__ = ("category", "delay", "phase", "rate_cap", "stream", "unit_bytes", "usage")

    def __init__(self, stream: str, phase: str, category: str, delay: float, usage: Usage,
                 rate_cap: float = math.inf, unit_bytes: float = 1.0) -> None:
        self.stream = stream
        self.phase = phase
        self.category = category
        self.delay = delay
        self.usage = usage
        self.rate_cap = rate_cap
        self.unit_bytes = unit_bytes

    def task(self, name: str, amount: float, deps: tuple[str, ...]) -> Task:
        """A task of this kind over ``amount`` units (bytes, or elements for Adam); its fields
        are passed by position (keywords cost twice as much, and a 70B step makes 1,100)."""
        return Task(name, self.stream, self.phase, self.category, self.delay, amount * self.unit_bytes,
                    self.usage, self.rate_cap, deps)


def adam_kind(b: StepBuilder, memory: HostMemory) -> TaskKind:
    """CPU Adam over a sub-group (units: elements) as one flow of its memory traffic.

    DeepSpeed's CPU Adam reads param, grad, m, v and writes param, m, v (fp32; ZeRO-3 makes
    the 16-bit copy for the GPU afterwards, see ``params_to_gpu``). Its rate is the lower of two
    bounds: the compute bound, the CPU's Adam rate on the rank's physical cores' worth for its
    SIMD build (``Hardware.adam_rate``, elements/s), and the memory bound, its 28 bytes per
    element over the rank's share of the socket's DRAM bandwidth, which the ``dram`` link
    shares with every other flow on it. ``adam_step_overhead`` is the fixed cost of one call.
    """
    per_element = ADAM_READ_BYTES + ADAM_WRITE_BYTES
    cap = b.hw.adam_rate * per_element
    usage = memory.access(ADAM_READ_BYTES / per_element, ADAM_WRITE_BYTES / per_element)
    overhead = b.hw.cpu.adam_step_overhead or 0.0
    return TaskKind("cpu", "optimizer_step", "adam", overhead, usage, cap, per_element)


def host_copy_kind(b: StepBuilder, phase: str, category: str, memory: HostMemory, read: float,
                   write: float, threads: float) -> TaskKind:
    """A torch copy or dtype conversion on ``threads`` physical cores' worth (units: elements)
    reading ``read`` and writing ``write`` bytes per element of host memory, at most
    ``threads x memcpy_bandwidth_per_core`` bytes written per second and its memory's share."""
    key = ("host_copy", phase, category, memory, read, write, threads)
    kind = b.kinds.get(key)
    if kind is None:
        usage = memory.access(read / write, 1.0)
        rate = threads * b.hw.cpu.memcpy_bandwidth_per_core
        kind = b.kinds[key] = TaskKind("cpu", phase, category, 0.0, usage, rate, write)
    return kind


@dataclass(frozen=True)
class NoOptions:
    """A strategy without options."""


@dataclass
class Placement:
    """Bytes of each named tensor group on each tier (hbm per GPU; host tiers whole node): the
    bytes its tensors take (allocated) and the bytes the process holds for them (reserved:
    allocator rounding and caching, retained temporaries, runtime; see ``footprint``)."""

    items: list[tuple[str, str, int, int]] = field(default_factory=list)

    def put(self, tier: str, what: str, allocated: int, reserved: int | None = None) -> None:
        """Place ``what`` on ``tier``: ``allocated`` bytes, holding ``reserved`` (default the same)."""
        held = allocated if reserved is None else reserved
        if allocated or held:
            self.items.append((tier, what, int(allocated), int(held)))

    def totals(self) -> dict[str, int]:
        """Peak allocated bytes per tier (every tier listed, 0 when unused)."""
        sums = {tier: 0 for tier in TIERS}
        for tier, _what, allocated, _reserved in self.items:
            sums[tier] += allocated
        return sums

    def reserved(self) -> dict[str, int]:
        """Bytes held per tier (every tier listed): what decides whether a run fits."""
        sums = {tier: 0 for tier in TIERS}
        for tier, _what, _allocated, held in self.items:
            sums[tier] += held
        return sums


@dataclass(frozen=True)
class Misfit:
    """A tier short of capacity: the bytes a run holds on it against the bytes it has (per GPU
    for hbm, on the node for the host tiers)."""

    tier: str
    need_bytes: int
    have_bytes: int

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    @property
    def scope(self) -> str:
        """What the bytes count: "per GPU" (hbm) or "on the node" (host tiers)."""
        return "per GPU" if self.tier == "hbm" else "on the node"

    def __str__(self) -> str:
        return (f"{self.tier} needs {self.need_bytes / 1e9:.1f} GB {self.scope} "
                f"but has {self.have_bytes / 1e9:.1f} GB")


@dataclass(frozen=True)
class MissingDevice:
    """A device a strategy needs that the hardware lacks: its tier (``cxl``, ``nvme``) and
    what it is called in words ("CXL devices")."""

    tier: str
    what: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    def __str__(self) -> str:
        return f"no {self.what} in hardware.{self.tier}"


Unfit = Misfit | MissingDevice
"""Why a run does not fit: a tier short of bytes or a missing device."""


@dataclass
class Plan:
    """A strategy's output: placement, fit verdict and (when it fits) the schedule, which
    adds the iteration's tasks to a ``Session``."""

    placement: Placement
    fits: bool
    misfit: Unfit | None
    schedule: Callable[[Session], None] | None
    capacity_of: Callable[[str], float] | None = None
    """Capacity of each of the rank's links the schedule uses (units/s), by name."""


def rank_link_capacity(hw: Hardware, name: str) -> float:
    """Capacity of one of a rank's links: bytes/s, or device-seconds per second for cxl and nvme
    (a schedule's graph asks on the link's first use)."""
    if name == "fabric":
        return hw.fabric_bandwidth
    if name == "hbm":
        return hw.rank_gpu.hbm_bandwidth * hw.rank_gpu.memory_efficiency
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

    def __init__(self, step: TrainingStep, hw: Hardware, session: Session | None = None) -> None:
        self.step = step
        self.hw = hw
        self.session = session or Session(functools.partial(rank_link_capacity, hw), fast_forward=False)
        self.graph: TaskGraph = self.session.graph
        self.repeat: Callable[[Runs], Iterator[int]] = self.session.repeat
        """The indices of a loop whose alike iterations the session may fast-forward over."""
        self.kinds: dict[Hashable, TaskKind] = {}
        """Task kinds made for this schedule, by what they were made from."""
        self.pass_times: dict[int, tuple[PassKernels, float]] = {}
        """Seconds of each layer pass object (the decoder layers share theirs), by ``id``, worked
        out once per schedule (hashing a pass's GEMMs on every task would cost more)."""
        self.background: set[str] = set()
        """Streams whose backward work may run on into the optimizer step (the step does not
        wait for them to begin; the strategy waits where it needs them)."""

    def add(self, task: Task) -> str:
        """Add a task and return its name (the graph declares the rank's links on first use)."""
        return self.graph.add(task)

    def tails(self) -> tuple[str, ...]:
        """The last task of every stream but the ``background`` ones: what the host thread
        waits for when it synchronizes the device."""
        return tuple(name for stream, name in self.graph.stream_tails().items() if stream not in self.background)

    @property
    def gpu(self) -> GPUProfile:
        """The rank's GPU (every schedule but a host-only optimizer step has one)."""
        return self.hw.rank_gpu

    @property
    def dp(self) -> int:
        """Data-parallel degree (ranks)."""
        return self.step.training.data_parallel

    def pass_seconds(self, work: PassKernels) -> float:
        """Seconds of one layer pass on the rank's GPU (``tiersim.strategies.gpu_kernels``)."""
        known = self.pass_times.get(id(work))
        if known is None:
            known = self.pass_times[id(work)] = (work, pass_seconds(work, self.gpu, self.step.training.zero_stage))
        return known[1]

    def marker(self, name: str, phase: str, deps: tuple[str, ...] = ()) -> str:
        """A zero-length task on the GPU stream marking where a phase begins."""
        # fields by position: compiled, a keyword argument makes the call go through Python
        return self.add(Task(name, "gpu", phase, "marker", 0.0, 0.0, (), math.inf, deps))

    def compute(self, name: str, phase: str, work: PassKernels, deps: tuple[str, ...]) -> str:
        """A layer pass's kernels on the compute stream."""
        return self.add(Task(name, "gpu", phase, "compute", self.pass_seconds(work), 0.0, (), math.inf, deps))

    def collective(self, name: str, stream: str, phase: str, num_bytes: float, deps: tuple[str, ...]) -> str | None:
        """A ring collective (all-gather or reduce-scatter) of ``num_bytes``: after the fabric's
        per-call latency it moves ``num_bytes * (dp-1)/dp`` per rank over the GPU fabric and,
        where the fabric runs through the host bridges, also over the GPU's PCIe link in both
        directions (None if dp=1)."""
        if self.dp == 1:
            return None
        kind = self.kinds.get(("collective", stream, phase))
        if kind is None:
            kind = self.kinds[("collective", stream, phase)] = TaskKind(
                stream, phase, stream, self.hw.fabric_latency, self.collective_usage())
        return self.add(kind.task(name, num_bytes * (self.dp - 1) / self.dp, deps))

    def collective_usage(self) -> Usage:
        """The links a collective's bytes cross: the GPU fabric and, where it runs through the
        host bridges, the GPU's PCIe link both ways."""
        fabric = self.hw.fabric
        usage: Usage = (("fabric", 1.0),)
        if fabric is not None and fabric.via_host_link:
            usage = (*usage, ("pcie_d2h", 1.0), ("pcie_h2d", 1.0))
        return usage


class Strategy(ABC):
    """Base class: subclasses set ``name``, ``Options`` and implement the three hooks."""

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    summary: ClassVar[str] = ""
    grads_on_gpu: ClassVar[bool] = False
    """Whether the 16-bit gradient partition stays in HBM (no optimizer offload)."""
    deferred_copies: ClassVar[frozenset[str]] = frozenset()
    """Streams whose tasks the boundary micro-step's backward defers (``Session.defer``):
    copies that fall behind its compute at fixed rates."""
    accumulation_copies: ClassVar[frozenset[str]] = frozenset()
    """Streams whose tasks the backward of a micro-step before the boundary defers: copies
    that only the next forward waits for."""

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        """Add this strategy's optimizer state, gradients and buffers to ``placement``."""

    @abstractmethod
    def offload_gradients(self, b: StepBuilder, micro: int, index: int, layer: LayerWork, ready: str) -> str | None:
        """Tasks moving one layer's reduced gradient partition off the GPU (after ``ready``).
        Returns the task the training loop's host thread waits for before it goes on with the
        backward (a blocking copy), or None when the offload runs in the background. They may
        wait for an earlier micro-step's tasks only through their streams (the micro-step loop
        is ``self_contained``: ``Session.repeat``)."""

    def deferred_streams(self, b: StepBuilder, micro: int) -> frozenset[str]:
        """Streams whose tasks the backward of ``micro`` defers: ``deferred_copies`` at the
        accumulation boundary, ``accumulation_copies`` before it."""
        return self.deferred_copies if micro == b.step.micro_steps - 1 else self.accumulation_copies

    def backward_keys(self, b: StepBuilder, micro: int) -> tuple[Hashable, ...]:
        """For each layer in backward order, what makes its backward's tasks differ from another
        layer's (``Session.repeat``): by default its shape."""
        return b.step.layer_shapes[::-1]

    def accumulation_links(self, b: StepBuilder) -> frozenset[str] | None:
        """The links ``offload_gradients`` uses in a micro-step before the boundary, if there
        it adds nothing but ``gradients_to_host``'s copies (or nothing at all), so that the first
        micro-step's offload differs from an accumulating one's at most in the order of each
        layer's two copies; None otherwise (the default: a strategy that does not say is not
        assumed alike)."""
        return None

    @abstractmethod
    def optimizer_step(self, b: StepBuilder, begin: str) -> None:
        """Tasks of the optimizer step over all sub-groups, starting after ``begin``."""

    def check(self, hw: Hardware) -> MissingDevice | None:
        """The device this strategy needs that ``hw`` lacks, or None."""
        return None

    @abstractmethod
    def offload_task_count(self, shape: StepShape) -> int:
        """Tasks ``offload_gradients`` makes over a step of ``shape``."""

    @abstractmethod
    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        """Tasks ``optimizer_step`` makes for a step of ``shape`` on ``hw``."""

    def task_count(self, shape: StepShape, hw: Hardware) -> int:
        """Tasks ``plan`` builds for a step of ``shape`` on ``hw`` (when it fits), counted
        without building anything: what the work limits (``tiersim.config.limits``) are checked on.
        Per micro-step: two markers, a forward per layer and a backward per layer (twice for a
        checkpointed one, which also recomputes), a gather before each of those under ZeRO-3,
        and a reduce-scatter per layer; then the step's marker and the strategy's own tasks."""
        passes = shape.layers + (shape.layers + shape.checkpointed)
        gathers = passes if shape.zero_stage >= 3 and shape.data_parallel > 1 else 0
        reduces = shape.layers if shape.data_parallel > 1 else 0
        per_micro = 2 + passes + gathers + reduces
        return (shape.micro_steps * per_micro + 1 + self.offload_task_count(shape)
                + self.step_task_count(shape, hw))

    def gradient_conversion_bytes(self, step: TrainingStep) -> int:
        """Peak bytes of fp32 gradient partitions this strategy converts on the GPU in backward."""
        return 0

    def plan(self, step: TrainingStep, hw: Hardware) -> Plan:
        """Place tensors, check capacity and, when everything fits, build the task graph."""
        placement = Placement()
        missing = self.check(hw)
        if hw.gpu is not None:
            place_gpu_common(step, placement, hw.gpu, self.grads_on_gpu, self.gradient_conversion_bytes(step))
        if missing:
            return Plan(placement, False, missing, None)
        self.place(step, hw, placement)
        for tier, need in placement.reserved().items():
            have = hw.usable(tier)
            if need > have:
                return Plan(placement, False, Misfit(tier, need, have), None)
        return Plan(placement, True, None, functools.partial(self._schedule, step, hw),
                    functools.partial(rank_link_capacity, hw))

    def _schedule(self, step: TrainingStep, hw: Hardware, session: Session) -> None:
        """The iteration: micro-steps of forward and backward, then the optimizer step. The
        first micro-step, the last (the accumulation boundary) and those between build
        differently (see ``micro_runs``). The loop's iterations are a micro-step's backward and
        the next one's forward: each waits for the last only through the streams, and it ends
        in a forward, which leaves the same tasks in flight after a first micro-step as after an
        accumulating one (and after the first forward, before the loop), so the session sees the
        accumulating ones repeat after one of them, or, where the first gives what they give,
        after the first (``Session.repeat``, ``self_contained``)."""
        b = StepBuilder(step, hw, session)
        self._forward(b, 0, ())
        first_alike = step.micro_steps > 2 and self._first_alike(b)
        for micro in b.session.repeat(micro_runs(step.micro_steps, first_alike), self_contained=True):
            self._backward(b, micro)
            if micro + 1 < step.micro_steps:
                self._forward(b, micro + 1, b.tails())
        self.optimizer_step(b, b.marker("step.begin", "optimizer_step", b.tails()))

    def _first_alike(self, b: StepBuilder) -> bool:
        """Whether the first micro-step gives the results an accumulating one gives
        (``micro_runs``): their offloads differ at most in the order of each layer's copies, and
        no other task of a micro-step uses the links those copies use (its collectives; its
        compute and markers use none)."""
        links = self.accumulation_links(b)
        return links is not None and links.isdisjoint(link for link, _units in b.collective_usage())

    def _gather(self, b: StepBuilder, name: str, phase: str, layer: LayerWork, deps: tuple[str, ...]) -> str | None:
        """ZeRO-3 all-gather of a layer's 16-bit parameters before it runs (None below stage 3)."""
        if b.step.training.zero_stage < 3:
            return None
        return b.collective(name, "allgather", phase, layer.params * b.step.lp_bytes, deps)

    def _forward(self, b: StepBuilder, micro: int, after: tuple[str, ...]) -> None:
        """Each layer's parameters are gathered while the layer before computes (DeepSpeed
        prefetches the next parameter in the trace), then the layer computes. Nothing of it is
        issued before ``after`` (the previous micro-step's backward) is done: DeepSpeed ends
        every backward by synchronizing the stream its gradient reduction and offload copies run
        on (v0.16.2 ``stage3.py``, ``independent_gradient_partition_epilogue``)."""
        begin = b.marker(f"m{micro}.forward.begin", "forward", after)
        computed: list[str] = []
        layers = b.step.layers
        for i in b.repeat(runs_of(b.step.layer_shapes)):
            layer = layers[i]
            prefetch = tuple(reach_back(computed, 2) or [begin])
            ag = self._gather(b, f"m{micro}.fwd.{i}.allgather", "forward", layer, prefetch)
            computed.append(b.compute(f"m{micro}.fwd.{i}", "forward", layer.forward_kernels, _some(ag)))

    def _backward(self, b: StepBuilder, micro: int) -> None:
        """Layers in reverse. A checkpointed layer is gathered, recomputed, gathered again (ZeRO-3
        released its parameters after the recomputed forward) and differentiated; each gather is
        prefetched while the compute before it runs, as in forward. The layer's gradients are
        reduce-scattered and offloaded. Where the offload blocks the host thread, nothing of the
        next layer (not even its prefetch) is issued before it is done."""
        training = b.step.training
        b.marker(f"m{micro}.backward.begin", "backward")
        deferring = self.deferred_streams(b, micro)
        if deferring:
            b.session.defer(deferring)
        computed: list[str] = []
        blocking: str | None = None
        layers = b.step.layers
        for j in b.repeat(runs_of(self.backward_keys(b, micro))):
            i = len(layers) - 1 - j
            layer = layers[i]
            prefix = f"m{micro}.bwd.{i}"
            passes = (("recompute", layer.forward_kernels), ("", layer.backward_kernels)) if layer.checkpointed else (
                ("", layer.backward_kernels),)
            for label, work in passes:
                name = f"{prefix}.{label}" if label else prefix
                after = tuple(reach_back(computed, 2))
                if blocking is not None:
                    after = (*after, blocking)
                ag = self._gather(b, f"{name}.allgather" if label else f"{prefix}.allgather", "backward", layer, after)
                computed.append(b.compute(name, "backward", work, _some(ag) or after))
            factor = 1 if training.zero_stage >= 2 else 2
            rs = b.collective(f"{prefix}.reduce", "reduce_scatter", "backward",
                              factor * layer.params * b.step.lp_bytes, (computed[-1],))
            blocking = self.offload_gradients(b, micro, i, layer, rs or computed[-1])
        if deferring:
            b.session.defer(frozenset())


def micro_runs(micro_steps: int, first_alike: bool = False) -> Runs:
    """The micro-step loop as runs: the first keeps its gradients (D2H then H2D), the last is
    the accumulation boundary, those between accumulate alike (H2D then D2H).

    ``first_alike`` (``Strategy._first_alike``): the two differ only in the order of each
    layer's copies, and nothing else of a micro-step uses the links those copies use. Then each
    copy moves at its own bound, alone on its links (the copies run one after another on one
    stream), so a layer's two copies end when they would in the other order (the same two
    durations, added the other way round), and each link is busy, and each stream, for as long:
    in every time integral and in when the next forward may begin, the two orders agree to float
    residue. So the first joins the accumulating ones' run, and the session may see the loop
    repeat from its start, after one micro-step, instead of after the first and one accumulating
    one."""
    if micro_steps == 1:
        return (("only", 1),)
    if first_alike:
        return (("accumulate", micro_steps - 1), ("boundary", 1))
    middle = ((("accumulate", micro_steps - 2),) if micro_steps > 2 else ())
    return (("first", 1), *middle, ("boundary", 1))


def place_gpu_common(step: TrainingStep, placement: Placement, gpu: GPUProfile, grads_on_gpu: bool,
                     gradient_conversion: int) -> None:
    """What every strategy keeps in HBM (per GPU): the 16-bit parameter partition (and gradients),
    ZeRO-3's contiguous reduce bucket, and at the backward peak the gathered layers, activations,
    the largest tensor's gradient before it moves into the bucket and ``gradient_conversion``
    bytes of fp32 gradient partitions on their way off the GPU. The caching allocator reserves
    ``ALLOCATOR_RESERVE`` per transient byte; the CUDA context and libraries add
    ``gpu.reserved_memory`` beside it."""
    placement.put("hbm", "bf16 parameters (partition)", step.lp_param_bytes_on_gpu())
    if grads_on_gpu:
        placement.put("hbm", "bf16 gradients (partition)", step.lp_grad_bytes_on_gpu())
    placement.put("hbm", "reduce bucket", step.training.reduce_bucket_size * step.lp_bytes)
    transient = {
        "activations": step.activation_peak_bytes,
        "gradient of the largest tensor": step.largest_tensor * step.lp_bytes,
        "fp32 gradient partitions (on their way to the host)": gradient_conversion,
    }
    if step.training.zero_stage >= 3 and step.training.data_parallel > 1:
        largest = step.largest_layer
        transient["gathered layers (current + prefetch)"] = 2 * largest * step.lp_bytes
    for what, num_bytes in transient.items():
        placement.put("hbm", what, num_bytes)
    reserve = round(footprint.ALLOCATOR_RESERVE * sum(transient.values())) - sum(transient.values())
    placement.put("hbm", "caching-allocator reserve (freed blocks kept)", 0, reserve)
    placement.put("hbm", "CUDA context and libraries", 0, gpu.reserved_memory)


def place_host_runtime(step: TrainingStep, placement: Placement) -> None:
    """Each rank's process's own host memory (runtime, not tensors), in DRAM."""
    placement.put("dram", "process runtime (per rank)", 0, footprint.PROCESS_HOST_BYTES * step.training.data_parallel)


def largest_partition(step: TrainingStep) -> int:
    """Elements of the largest tensor partition one rank owns (ZeRO-3 partitions each tensor)."""
    return math.ceil(step.largest_tensor / step.training.data_parallel)  # ceil is monotone


def pcie_kind(b: StepBuilder, direction: str, phase: str, memory: HostMemory, rate_cap: float = math.inf,
              stream: str | None = None) -> TaskKind:
    """Host<->GPU copies (units: bytes) in ``direction`` ("h2d" or "d2h"), on ``stream`` (by
    default the copy engine of that direction): the link's setup latency, then the bytes over
    PCIe, read from (h2d) or written to (d2h) host memory, at most ``rate_cap`` bytes/s (made
    once per schedule)."""
    key = (direction, phase, memory, rate_cap, stream)
    kind = b.kinds.get(key)
    if kind is None:
        host = memory.access(1, 0) if direction == "h2d" else memory.access(0, 1)
        usage = ((f"pcie_{direction}", 1.0), *host)
        kind = b.kinds[key] = TaskKind(stream or direction, phase, direction, b.hw.pcie_latency, usage, rate_cap)
    return kind


def gradients_to_host(b: StepBuilder, memory: HostMemory, micro: int, index: int, layer: LayerWork,
                      ready: str) -> str:
    """Keep one layer's reduced gradient partition in the pinned host buffer (DeepSpeed ZeRO-3
    ``partition_grads`` with an offloaded optimizer, in ``grad_accum_dtype``).

    The first micro-step copies the partition D2H and back H2D (the GPU copy feeds the norm);
    later ones fetch the partial sum H2D, add on the GPU (negligible) and copy it back D2H.
    Both run on ``PARTITION_STREAM``, after the copies of the layer before. Returns the last
    copy."""
    num_bytes = b.step.rank_partitions[index] * b.step.grad_accum_bytes
    prefix = f"m{micro}.bwd.{index}"
    first, second = ("d2h", "h2d") if micro == 0 else ("h2d", "d2h")
    there = b.add(pcie_kind(b, first, "backward", memory, stream=PARTITION_STREAM).task(
        f"{prefix}.grad_{first}", num_bytes, (ready,)))
    return b.add(pcie_kind(b, second, "backward", memory, stream=PARTITION_STREAM).task(
        f"{prefix}.grad_{second}", num_bytes, (there,)))


def gradient_copy_links(b: StepBuilder, memory: HostMemory) -> frozenset[str]:
    """The links ``gradients_to_host``'s copies use."""
    return frozenset(link for direction in ("d2h", "h2d")
                     for link, _units in pcie_kind(b, direction, "backward", memory, stream=PARTITION_STREAM).usage)


def gradient_offload_tasks(shape: StepShape) -> int:
    """Tasks ``gradients_to_host`` makes over a step: two copies per layer and micro-step."""
    return 2 * shape.layers * shape.micro_steps


def fp32_gradients_d2h(b: StepBuilder, memory: HostMemory, index: int, layer: LayerWork, ready: str,
                       after: tuple[str, ...] = ()) -> str:
    """At the accumulation boundary: the partition converted to fp32 on the GPU and copied D2H
    into a pinned host buffer (the optimizer's gradient, or a swap buffer), on
    ``PARTITION_STREAM``, after ``ready`` and the tasks ``after``."""
    num_bytes = b.step.rank_partitions[index] * FP32_BYTES
    name = f"m{b.step.micro_steps - 1}.bwd.{index}.fp32_grad_d2h"
    kind = pcie_kind(b, "d2h", "backward", memory, stream=PARTITION_STREAM)
    return b.add(kind.task(name, num_bytes, (ready, *after)))


def params_to_gpu(b: StepBuilder, memory: HostMemory, group: SubGroup, after: str) -> str:
    """ZeRO-3 ``_reassign_or_swap_out_partitioned_parameters``: a sub-group's updated fp32
    params become the GPU's 16-bit partition by a blocking ``copy_``, which converts on the
    CPU into a fresh (pageable) tensor and copies that H2D at the pageable rate. Returns the
    copy (``after`` itself on a host-only machine: the CPU validation of the offload path)."""
    if not b.hw.has_gpu:
        return after
    lp = b.step.lp_bytes
    convert = host_copy_kind(b, "optimizer_step", "convert", memory, FP32_BYTES, lp, b.hw.rank_cores)
    converted = b.add(convert.task(f"step.{group.index}.convert", group.numel, (after,)))
    h2d = pcie_kind(b, "h2d", "optimizer_step", memory, b.hw.pageable_bandwidth)
    return b.add(h2d.task(f"step.{group.index}.h2d", group.numel * lp, (converted,)))


def _some(name: str | None) -> tuple[str, ...]:
    return (name,) if name else ()
