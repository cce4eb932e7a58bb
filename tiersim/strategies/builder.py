"""The step builder: lays out one iteration's tasks for one representative rank, through the
engine's schedule interface (``tiersim.engine.schedule``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Final

from tiersim.config.hardware import Hardware
from tiersim.config.profiles import GPUProfile
from tiersim.config.ranks import data_parallel_span
from tiersim.engine.graph import Task, TaskGraph, Usage
from tiersim.engine.schedule import Session
from tiersim.layer_kernels import PassKernels
from tiersim.strategies.gpu_kernels import pass_seconds
from tiersim.strategies.memory import HostMemory
from tiersim.workload import TrainingSpec, TrainingStep


class Names:
    """The task names of one ``pattern``: ``str.format`` of one or two indices >= 0 (a
    micro-step, a layer, a sub-group), each made once per process and kept. A schedule's names
    repeat from run to run, and a kept one is not formatted, hashed (the graph indexes its
    tasks by name) or freed again."""

    __slots__ = ("pattern", "rows")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.rows: list[list[str]] = []

    def of(self, first: int, second: int = 0) -> str:
        """The name of indices ``first`` and ``second`` (unused by a pattern of one)."""
        rows = self.rows
        while len(rows) <= first:
            rows.append([])
        row = rows[first]
        while len(row) <= second:
            row.append(self.pattern.format(first, len(row)))
        return row[second]


_JOINED: Final[dict[str, dict[str, str]]] = {}
"""``joined``'s names, by name and suffix."""


def joined(name: str, suffix: str) -> str:
    """``name + suffix``, made once per process and kept (as ``Names`` keeps its own): the name
    of a task that follows another's (``m0.fwd.3.allgather``)."""
    by_suffix = _JOINED.get(name)
    if by_suffix is None:
        by_suffix = _JOINED[name] = {}
    made = by_suffix.get(suffix)
    if made is None:
        made = by_suffix[suffix] = name + suffix
    return made


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


class _Made:
    """The kind a maker last made in a schedule (``StepBuilder.kind``), and for which host
    memories."""

    __slots__ = ("kind", "memory", "writes")

    def __init__(self, memory: HostMemory, writes: HostMemory | None, kind: TaskKind) -> None:
        self.memory = memory
        self.writes = writes
        self.kind = kind


KindMaker = Callable[["StepBuilder", HostMemory, "HostMemory | None"], TaskKind]
"""Makes the kind of the tasks of one place in a strategy over a host memory, and where they
write (None: the same); ``StepBuilder.kind`` asks it once per schedule and memory."""


def first_apart(keys: Sequence[Hashable]) -> tuple[Hashable, ...]:
    """A loop's keys with its first iteration alike no other (it builds otherwise: it waits for
    a task before the loop instead of the iteration before)."""
    return tuple((i == 0, key) for i, key in enumerate(keys))


class RankFigures:
    """What one ``Hardware`` gives a rank: its figures (``StepBuilder.figure``), its links'
    capacities (``rank_link_capacity``), its tiers' usable bytes (``Strategy.plan``) and the
    seconds of layer passes on its GPU (``StepBuilder.pass_seconds``), each read once per
    hardware object and kept (``figures_of``). A ``Hardware`` is frozen, so it gives the same
    every time; its properties run in Python (1-10 k instructions each), and a sweep's points
    share a few."""

    __slots__ = ("_usable", "figures", "hw", "links", "passes")

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw
        self.figures: dict[str, float] = {}
        self.links: dict[str, float] = {}
        self._usable: dict[str, int] | None = None
        self.passes: dict[int, tuple[PassKernels, int, float]] = {}
        """Each pass's ZeRO stage and seconds (``pass_seconds``), by the pass object's identity
        (it is held, so its identity is not reused)."""

    def usable_bytes(self) -> dict[str, int]:
        """``hw.usable_bytes()`` (bytes of each tier a run may hold; not to be changed)."""
        if self._usable is None:
            self._usable = self.hw.usable_bytes()
        return self._usable

    def figure(self, name: str) -> float:
        """``hw``'s figure ``name`` (``rank_cores``, ``pcie_latency``: physical cores, s)."""
        known = self.figures.get(name)
        if known is None:
            known = self.figures[name] = float(getattr(self.hw, name))
        return known

    def pass_seconds(self, work: PassKernels, zero_stage: int) -> float:
        """Seconds of one layer pass under ZeRO stage ``zero_stage`` on the rank's GPU
        (``gpu_kernels.pass_seconds``): a step's passes are the same objects from run to run
        (``build_step`` keeps its steps), and its decoder layers share theirs."""
        known = self.passes.get(id(work))
        if known is None or known[1] != zero_stage:
            known = self.passes[id(work)] = (work, zero_stage, pass_seconds(work, self.hw.rank_gpu, zero_stage))
        return known[2]

    def link_capacity(self, name: str) -> float:
        """``rank_link_capacity`` of link ``name``."""
        known = self.links.get(name)
        if known is None:
            known = self.links[name] = _link_capacity(self.hw, name)
        return known


_KEPT: Final[dict[int, RankFigures]] = {}
"""``figures_of``'s figures, by the identity of their hardware (which they hold: the identity
is not reused while kept)."""

_KEPT_MOST: Final = 64
"""Hardware objects ``_KEPT`` holds at most (it starts afresh past it)."""


def figures_of(hw: Hardware) -> RankFigures:
    """The figures of ``hw`` read so far in this process (``RankFigures``)."""
    kept = _KEPT.get(id(hw))
    if kept is None:
        if len(_KEPT) >= _KEPT_MOST:
            _KEPT.clear()
        kept = _KEPT[id(hw)] = RankFigures(hw)
    return kept


def rank_link_capacity(hw: Hardware, name: str) -> float:
    """Capacity of one of a rank's links: bytes/s, or device-seconds per second for cxl and nvme
    (a schedule's graph asks on the link's first use; kept per hardware: ``figures_of``)."""
    return figures_of(hw).link_capacity(name)


def _link_capacity(hw: Hardware, name: str) -> float:
    """``rank_link_capacity``, read from ``hw``."""
    if name == "fabric":
        return hw.fabric_bandwidth
    if name == "network":
        return hw.network_bandwidth_per_rank
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


def collectives_bound_by_host_link(training: TrainingSpec, hw: Hardware) -> bool:
    """Whether ZeRO's collectives move at most at a PCIe link's rate (a fabric through the host
    bridges faster than the GPU's link, or a node's NICs faster than its GPUs' links carry their
    share): there the fast-forward's time integrals of the collectives' stream do not match the
    plain session's, so the schedule runs on the plain one (``Plan.whole``)."""
    if training.data_parallel == 1:
        return False
    bounds = {link: rank_link_capacity(hw, link) / units for link, units in collective_usage(training, hw)}
    host = min((bound for link, bound in bounds.items() if link.startswith("pcie")), default=math.inf)
    return host <= min(bounds.values())


def collective_usage(training: TrainingSpec, hw: Hardware) -> Usage:
    """The links a ZeRO collective's bytes cross, per byte a rank moves (``StepBuilder.collective_usage``)."""
    per_node, nodes = data_parallel_span(training.data_parallel, training.tensor_parallel, hw.gpus)
    if nodes == 1:
        return fabric_usage(hw, 1.0)
    links = dict(fabric_usage(hw, (per_node - 1) / per_node)) if per_node > 1 else {}
    network = hw.network
    assert network is not None  # resolve_hardware requires one with several nodes
    links["network"] = network.bandwidth / network.collective_rate / per_node
    for direction in ("pcie_d2h", "pcie_h2d"):
        links[direction] = links.get(direction, 0.0) + 1.0 / per_node
    if not hw.gpudirect:
        links["dram"] = 4.0 / per_node
    return tuple(links.items())


def fabric_usage(hw: Hardware, units: float) -> Usage:
    """``units`` of the GPU fabric per byte, and as many of the PCIe link both ways where the
    fabric runs through the host bridges."""
    fabric = hw.fabric
    if fabric is not None and fabric.via_host_link:
        return (("fabric", units), ("pcie_d2h", units), ("pcie_h2d", units))
    return (("fabric", units),)


class StepBuilder:
    """Lays out one iteration's tasks for one representative rank; strategies add to it.

    ``stage``: the prefix (``"s1/"``) of the names of the tasks, streams and links of one
    pipeline stage's rank, whose tasks share a graph with the other stages' ("" without
    pipeline parallelism); ``names``: its tasks' own prefix where it differs (one of the
    stage's interleaved model chunks, ``"s1/c0/"``); ``phases``: whether its markers begin
    phases (one stage's do)."""

    def __init__(self, step: TrainingStep, hw: Hardware, session: Session | None = None, stage: str = "",
                 phases: bool = True, names: str | None = None) -> None:
        self.step = step
        training = step.training
        self.dp: int = training.data_parallel
        """Data-parallel degree (ranks)."""
        self.zero_stage: int = training.zero_stage
        """DeepSpeed's ZeRO stage."""
        self.boundary: int = step.micro_steps - 1
        """The micro-step at the gradient accumulation boundary (the last)."""
        self.lp_bytes: int = step.lp_bytes
        """Bytes per element of the 16-bit parameters and gradients."""
        self.grad_accum_bytes: int = step.grad_accum_bytes
        """Bytes per element of the gradient partition accumulated across micro-steps."""
        self.layers = step.layers
        """The rank's layers (``TrainingStep.layers``)."""
        self.cpu_checkpointing: bool = training.cpu_checkpointing
        """Whether checkpointed layers keep their inputs in host memory (DeepSpeed's ``cpu_checkpointing``)."""
        # the figures above are read once per schedule: a ``TrainingStep``'s attribute runs in Python
        self.stage = stage
        self.names = stage if names is None else names
        self.marker_category = "marker" if phases else "stage_marker"
        self.staged: dict[Usage, Usage] = {}
        """Each usage the stage's tasks name, with the stage's links (made once per usage)."""
        self.hw = hw
        self.rank = figures_of(hw)
        """What ``hw`` gives the rank (``figure``)."""
        self.has_gpu: bool = hw.has_gpu
        """Whether the rank has a GPU (``Hardware.has_gpu``)."""
        self.session = session or Session(functools.partial(rank_link_capacity, hw))
        self.graph: TaskGraph = self.session.graph
        self.kinds: dict[Hashable, TaskKind] = {}
        """Task kinds made for this schedule, by what they were made from."""
        self._made: dict[KindMaker, _Made] = {}
        """The kind each maker last made (``kind``), by maker."""
        self._collectives: dict[str, dict[str, TaskKind]] = {}
        """The collectives' kinds (``collective``), by stream and phase."""
        self.background: set[str] = set()
        """Streams whose backward work may run on into the optimizer step (the step does not
        wait for them to begin; the strategy waits where it needs them)."""
        self._collective_latency = -1.0
        """``collective_latency`` once worked out (s; -1 before)."""
        self._collective_usage: Usage | None = None
        """``collective_usage`` once worked out (one tuple, shared by every collective kind)."""

    def kind(self, make: KindMaker, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
        """The kind ``make`` makes over ``memory`` and ``writes``: the one it last made, when
        for these same objects (a task takes its kind without hashing a key; a schedule's
        layers mostly share their memory), else ``make``'s, from ``kinds``."""
        made = self._made.get(make)
        if made is None or made.memory is not memory or made.writes is not writes:
            made = self._made[make] = _Made(memory, writes, make(self, memory, writes))
        return made.kind

    def add(self, task: Task) -> str:
        """Add a task and return its name (the graph declares the rank's links on first use)."""
        if self.stage:
            task = self.on_stage(task)
        return self.graph.add(task)

    def on_stage(self, task: Task) -> Task:
        """``task`` as the stage's rank runs it: its name prefixed with ``names``, its stream and
        links with ``stage``, a marker's category ``marker_category`` (its dependencies are names
        already added, prefixed)."""
        prefix = self.stage
        usage = self.staged.get(task.usage)
        if usage is None:
            usage = self.staged[task.usage] = tuple((prefix + link, units) for link, units in task.usage)
        category = self.marker_category if task.category == "marker" else task.category
        return Task(self.names + task.name, prefix + task.stream, task.phase, category, task.delay, task.size, usage,
                    task.rate_cap, task.deps)

    def loop(self, keys: Sequence[Hashable], amplifies: bool = False) -> Iterator[int]:
        """The indices of a loop, one per key; equal keys mark alike iterations; ``amplifies``:
        a float step in its start may grow through it (``Session.loop``)."""
        return self.session.loop(keys, False, amplifies)

    def tails(self) -> tuple[str, ...]:
        """The last task of every stream of the rank but the ``background`` ones: what the host
        thread waits for when it synchronizes the device."""
        prefix, skip = self.stage, len(self.stage)
        return tuple(name for stream, name in self.graph.stream_tails().items()
                     if stream.startswith(prefix) and stream[skip:] not in self.background)

    @property
    def gpu(self) -> GPUProfile:
        """The rank's GPU (every schedule but a host-only optimizer step has one)."""
        return self.hw.rank_gpu

    def figure(self, name: str) -> float:
        """``hw``'s figure ``name`` (``rank_cores``, ``pageable_bandwidth``: physical cores,
        bytes/s), read once per hardware object (``RankFigures``): a ``Hardware`` property runs
        in Python, and a step asks for these per sub-group."""
        return self.rank.figure(name)

    def pass_seconds(self, work: PassKernels) -> float:
        """Seconds of one layer pass on the rank's GPU (``tiersim.strategies.gpu_kernels``; kept
        per hardware: ``RankFigures.pass_seconds``)."""
        return self.rank.pass_seconds(work, self.zero_stage)

    def marker(self, name: str, phase: str, deps: tuple[str, ...] = ()) -> str:
        """A zero-length task on the GPU stream marking where a phase begins."""
        # fields by position: compiled, a keyword argument makes the call go through Python
        return self.add(Task(name, "gpu", phase, "marker", 0.0, 0.0, (), math.inf, deps))

    def compute(self, name: str, phase: str, work: PassKernels, deps: tuple[str, ...]) -> str:
        """A layer pass's kernels on the compute stream, then its tensor-parallel collectives
        (``tensor_parallel``) and its expert all-to-alls (``exchange``); the name of the last."""
        done = self.add(Task(name, "gpu", phase, "compute", self.pass_seconds(work), 0.0, (), math.inf, deps))
        done = self.tensor_parallel(name, phase, work, done)
        return self.exchange(name, phase, work.all_to_all, done) if work.all_to_all else done

    def tensor_parallel(self, name: str, phase: str, work: PassKernels, after: str) -> str:
        """Pass ``name``'s collectives among the tensor-parallel ranks of a node, as one task
        (``name.tp``) on the compute stream (Megatron issues them there and the next kernel
        waits for them): each call's fabric latency, then the bytes one rank sends (ring) over
        the fabric's bus bandwidth, shared with ZeRO's collectives; ``after`` itself where the
        pass has none."""
        if not work.tp_calls:
            return after
        return self.add(Task(joined(name, ".tp"), "gpu", phase, "tensor_parallel",
                             work.tp_calls * self.figure("fabric_latency"), work.tp_bytes, self.fabric_usage(1.0),
                             math.inf, (after,)))

    def exchange(self, name: str, phase: str, sent: tuple[float, ...], after: str) -> str:
        """A pass's expert all-to-alls among the expert-parallel ranks of a node
        (``PassKernels.all_to_all``: the bytes each sends off the rank) as one task on the compute
        stream, which waits for them (``_AllToAll`` is a blocking ``all_to_all_single`` on it):
        the fabric's per-call latency for each, then their bytes over the GPU fabric (and PCIe
        where the fabric runs through the host bridges), shared with ZeRO's collectives. The
        kernels between them run in the pass's own time; a rank's send and receive of equal bytes
        share its links' two directions, as a ring's do."""
        key = ("all_to_all", phase, len(sent))
        kind = self.kinds.get(key)
        if kind is None:
            kind = self.kinds[key] = TaskKind("gpu", phase, "all_to_all", len(sent) * self.figure("fabric_latency"),
                                              self.fabric_usage(1.0))
        return self.add(kind.task(joined(name, ".all_to_all"), sum(sent), (after,)))

    def collective(self, name: str, stream: str, phase: str, num_bytes: float, deps: tuple[str, ...],
                   expert_bytes: float = 0.0) -> str | None:
        """A ring collective (all-gather or reduce-scatter) of ``num_bytes`` over the data-parallel
        ranks and ``expert_bytes`` over the expert data-parallel ones (expert parallelism's
        experts): after its per-call latency (``collective_latency``) it moves ``num_bytes *
        (dp-1)/dp`` (and ``expert_bytes * (edp-1)/edp``) per rank over the links of
        ``collective_usage`` (None if dp=1)."""
        if self.dp == 1:
            return None
        kinds = self._collectives.get(stream)
        if kinds is None:
            kinds = self._collectives[stream] = {}
        kind = kinds.get(phase)
        if kind is None:
            kind = kinds[phase] = TaskKind(stream, phase, stream, self.collective_latency(), self.collective_usage())
        ring = num_bytes * (self.dp - 1) / self.dp
        if expert_bytes:
            edp = self.step.training.expert_data_parallel
            ring += expert_bytes * (edp - 1) / edp
        return self.add(kind.task(name, ring, deps))

    @property
    def dp_span(self) -> tuple[int, int]:
        """The data-parallel group's ranks on each node and the nodes it spans."""
        return data_parallel_span(self.dp, self.step.training.tensor_parallel, self.hw.gpus)

    def collective_latency(self) -> float:
        """Seconds one collective call costs besides its bytes: the fabric's per-call latency and,
        across ``k`` nodes, the network's (``network_latency``) for a ring of ``dp`` ranks: its
        ``k - 1`` steps between nodes and ``dp - k`` within them (NCCL's ``nInterSteps`` and
        ``nsteps - nInterSteps`` for a ring all-gather or reduce-scatter, ``src/graph/tuning.cc``)."""
        if self._collective_latency < 0:
            nodes = self.dp_span[1]
            latency = self.figure("fabric_latency")
            if nodes > 1:
                latency += self.network_latency(nodes - 1, self.dp - nodes)
            self._collective_latency = latency
        return self._collective_latency

    def network_latency(self, between: int, within: int = 0) -> float:
        """Seconds a call that crosses the network pays besides its bytes, as NCCL's tuning model
        counts a ring's: its ``call_latency``, for each of its ``between`` steps from node to node
        the ``step_latency`` and one message ``latency``, and for each of its ``within`` steps
        inside a node the ``proxy_step_latency``."""
        network = self.hw.network
        assert network is not None  # resolve_hardware requires one with several nodes
        return (network.call_latency + between * (network.step_latency + network.latency)
                + within * network.proxy_step_latency)

    @property
    def sends_cross_nodes(self) -> bool:
        """Whether a pipeline stage's sends to the next stage leave the node: Megatron puts a
        stage's ``tensor_parallel x data_parallel`` ranks in a row, so neighbouring stages lie
        on different nodes where a stage fills whole nodes (a node of several stages sends
        most of its activations within itself, and is taken to send them all so)."""
        training = self.step.training
        return self.hw.nodes > 1 and training.tensor_parallel * self.dp >= self.hw.gpus

    def p2p_latency(self, across: bool) -> float:
        """Seconds a point-to-point transfer costs besides its bytes: the fabric's per-call
        latency and, ``across`` nodes, the network's for one step."""
        return self.figure("fabric_latency") + (self.network_latency(1) if across else 0.0)

    def p2p_usage(self, across: bool) -> Usage:
        """The links a point-to-point transfer crosses: the GPU fabric within a node (as a
        collective on one node), or ``across`` nodes a NIC, reached over the GPU's PCIe link,
        shared by the node's ranks, which all send at once; without GPUDirect RDMA through a
        pinned host buffer, written and read in host DRAM (the receiver's side is its own
        rank's)."""
        if not across:
            return self.fabric_usage(1.0)
        usage: Usage = (("network", 1.0), ("pcie_d2h", 1.0))
        return usage if self.hw.gpudirect else (*usage, ("dram", 2.0))

    def collective_usage(self) -> Usage:
        """The links a collective's bytes cross, per byte a rank moves: NCCL's ring all-gather and
        reduce-scatter run one ring over every rank of the group, a node's ranks in a row. On one
        node every rank sends its bytes to the next over the GPU fabric (and where the fabric runs
        through the host bridges, over its PCIe link both ways). Over ``k`` nodes of ``g`` ranks
        each, NCCL's rings (one per channel) enter and leave each node at a different GPU, so a
        rank sends ``(g-1)/g`` of its bytes over the fabric and ``1/g`` through a NIC, which reads
        and writes GPU memory over the GPU's PCIe link (GPUDirect RDMA); the node's NICs carry the
        bytes of all its ranks' groups at once (``network_bandwidth_per_rank``), each byte
        holding a NIC ``bandwidth / collective_rate`` bytes' time: NCCL's ring reaches the
        measured ``collective_bandwidth`` through it, not the payload rate. Without GPUDirect
        RDMA, NCCL stages them through a pinned host buffer: each byte sent is written to host
        DRAM by the GPU and read by the NIC, each byte received written by the NIC and read by the
        GPU, 4 bytes of DRAM traffic per byte through a NIC."""
        if self._collective_usage is None:
            self._collective_usage = collective_usage(self.step.training, self.hw)
        return self._collective_usage

    def fabric_usage(self, units: float) -> Usage:
        """``units`` of the GPU fabric per byte (``fabric_usage``)."""
        return fabric_usage(self.hw, units)
