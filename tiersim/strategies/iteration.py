"""The iteration every strategy shares: micro-steps of forward and backward (ZeRO-3
all-gathers and reduce-scatters over the GPU fabric, GPU compute with recompute), the
strategy's gradient offload in each backward, then its optimizer step."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Final

from tiersim.config.hardware import Hardware
from tiersim.engine.schedule import Session, iterations_back
from tiersim.strategies.builder import KindMaker, Names, StepBuilder, TaskKind, joined
from tiersim.strategies.gradients import PARTITION_STREAM
from tiersim.strategies.kinds import PCIE_LINKS, pcie_kind
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.param_offload import ParamFetch
from tiersim.workload import LayerWork, TrainingStep

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.strategies.base import Strategy


def checkpoint_d2h(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
    """``cpu_checkpointing``'s copies of checkpoints to pageable ``memory`` after their layers'
    forward (``_checkpoint_copy``)."""
    return pcie_kind(builder, "d2h", "forward", memory, builder.figure("pageable_bandwidth"), stream="gpu")


def checkpoint_h2d(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
    """``cpu_checkpointing``'s copies of checkpoints back before their layers' recomputation."""
    return pcie_kind(builder, "h2d", "backward", memory, builder.figure("pageable_bandwidth"), stream="gpu")


_CHECKPOINT_COPIES: Final[dict[str, KindMaker]] = {"d2h": checkpoint_d2h, "h2d": checkpoint_h2d}
"""The makers of ``cpu_checkpointing``'s copies, by direction."""
_CHECKPOINT_SUFFIXES: Final[dict[str, str]] = {"d2h": ".checkpoint_d2h", "h2d": ".checkpoint_h2d"}
"""What the names of ``cpu_checkpointing``'s copies add to their layers', by direction."""
FORWARD_BEGIN: Final = Names("m{}.forward.begin")
"""The marker a micro-step's forward begins at."""
BACKWARD_BEGIN: Final = Names("m{}.backward.begin")
"""The marker a micro-step's backward begins at."""
FORWARD: Final = Names("m{}.fwd.{}")
"""A layer's forward in a micro-step (``m0.fwd.3``), the prefix of its other tasks' names."""
BACKWARD: Final = Names("m{}.bwd.{}")
"""A layer's backward in a micro-step (``m0.bwd.3``), the prefix of its other tasks' names."""


def schedule_iteration(strategy: Strategy, step: TrainingStep, hw: Hardware, session: Session) -> None:
    """The iteration: micro-steps of forward and backward, then the optimizer step. The
    first micro-step, the last (the accumulation boundary) and those between build
    differently (see ``micro_keys``). The loop's iterations are a micro-step's backward and
    the next one's forward: each waits for the last only through the streams
    (``self_contained``), and it ends in a forward, which leaves the same tasks in flight
    after a first micro-step as after an accumulating one (and after the first forward,
    before the loop)."""
    builder = StepBuilder(step, hw, session)
    fetch = strategy.param_fetch(step, hw)
    forward_pass(builder, fetch, 0, ())
    first_alike = step.micro_steps > 2 and _first_alike(strategy, builder, fetch)
    for micro in builder.session.loop_runs(micro_keys(step.micro_steps, first_alike), self_contained=True):
        backward_pass(strategy, builder, fetch, micro)
        if micro + 1 < step.micro_steps:
            forward_pass(builder, fetch, micro + 1, builder.tails())
    strategy.optimizer_step(builder, builder.marker("step.begin", "optimizer_step", builder.tails()))


def micro_keys(micro_steps: int, first_alike: bool = False) -> tuple[tuple[Hashable, int], ...]:
    """The micro-step loop's keys, as runs (key, count): the first keeps its gradients (D2H
    then H2D), the last is the accumulation boundary, those between accumulate alike (H2D then
    D2H).

    ``first_alike`` (``_first_alike``): the two differ only in the order of each layer's
    copies, and nothing else of a micro-step uses the links those copies use. Then each copy
    moves at its own bound, alone on its links (the copies run one after another on one
    stream), so a layer's two copies end when they would in the other order (the same two
    durations, added the other way round), and each link is busy, and each stream, for as long:
    in every time integral and in when the next forward may begin, the two orders agree to float
    residue. So the first is keyed as the accumulating ones."""
    if micro_steps == 1:
        return (("only", 1),)
    if first_alike:
        return (("accumulate", micro_steps - 1), ("boundary", 1))
    middle = ((("accumulate", micro_steps - 2),) if micro_steps > 2 else ())
    return (("first", 1), *middle, ("boundary", 1))


def _first_alike(strategy: Strategy, builder: StepBuilder, fetch: ParamFetch | None) -> bool:
    """Whether the first micro-step gives the results an accumulating one gives
    (``micro_keys``): their offloads differ at most in the order of each layer's copies, and
    no other task of a micro-step uses the links those copies use (its collectives and
    parameter fetches; its compute and markers use none)."""
    links = strategy.accumulation_links(builder)
    others = {link for link, _units in builder.collective_usage()} | (fetch.links(builder) if fetch else set())
    return links is not None and links.isdisjoint(others)


def _fixed_rate(builder: StepBuilder, micro: int, streams: frozenset[str]) -> frozenset[str]:
    """``streams`` (copies in the background of micro-step ``micro``'s backward) but the host
    copies of ``PARTITION_STREAM`` where the micro-step's ZeRO collectives (a reduce-scatter each
    layer from ZeRO-2 on, an all-reduce at the boundary below it, all-gathers under ZeRO-3)
    cross the GPU's PCIe link (``collective_usage``): a GPU fabric through the host bridges, or
    across nodes a NIC's share (GPUDirect RDMA, or a pinned host buffer). The copies' bound is
    the link itself, so beside any share of a collective they move at the rate it leaves them,
    not in the background at a fixed one (``ScheduleHints``). Deferred, they were kept only
    where no collective ran while they did, which the session's check learns only after a
    loop's states, and otherwise refused and the schedule run again."""
    collectives = builder.dp > 1 and (builder.zero_stage >= 2 or micro == builder.boundary)
    if PARTITION_STREAM in streams and collectives and not PCIE_LINKS.isdisjoint(
            link for link, _units in builder.collective_usage()):
        return streams - {PARTITION_STREAM}
    return streams


def _gather(builder: StepBuilder, fetch: ParamFetch | None, name: str, phase: str, index: int,
            after: tuple[str, ...], computed: list[str]) -> tuple[str, ...]:
    """What a layer's pass waits for: its offloaded partition fetched (``ParamFetch.fetch``) and
    the ZeRO-3 all-gather of its 16-bit parameters (none below stage 3 or with one rank); with
    neither, nothing."""
    if fetch is not None:
        after = (fetch.fetch(builder, name, phase, index, after, computed),)
    gathered = None
    if builder.zero_stage >= 3:
        num_bytes = builder.layers[index].params * builder.lp_bytes
        gathered = builder.collective(joined(name, ".allgather"), "allgather", phase, num_bytes, after)
    return (gathered,) if gathered else after if fetch is not None else ()


def _ahead(fetch: ParamFetch | None) -> int:
    """Passes back whose compute a pass's fetch waits for: the layer before it computes while
    it is fetched (DeepSpeed prefetches the next parameter in the trace), or with parameter
    offload ``prefetch_depth`` layers before."""
    return 2 if fetch is None else 1 + fetch.depth


def forward_pass(builder: StepBuilder, fetch: ParamFetch | None, micro: int, after: tuple[str, ...]) -> None:
    """Each layer's parameters are fetched and gathered while the layer before computes
    (``_ahead``), then the layer computes. Nothing of it is issued before ``after`` (the
    previous micro-step's backward) is done: DeepSpeed ends every backward by synchronizing the
    stream its gradient reduction and offload copies run on (v0.16.2 ``stage3.py``,
    ``independent_gradient_partition_epilogue``)."""
    begin = builder.marker(FORWARD_BEGIN.of(micro), "forward", after)
    computed: list[str] = []
    layers = builder.layers
    shapes = builder.step.layer_shapes
    for i in builder.loop(fetch.keys(shapes) if fetch else shapes):
        name = FORWARD.of(micro, i)
        prefetch = tuple(iterations_back(computed, _ahead(fetch)) or [begin])
        ready = _gather(builder, fetch, name, "forward", i, prefetch, computed)
        computed.append(builder.compute(name, "forward", layers[i].forward_kernels, ready))
        _checkpoint_copy(builder, "d2h", name, layers[i], (computed[-1],))


def _checkpoint_copy(builder: StepBuilder, direction: str, prefix: str, layer: LayerWork,
                     deps: tuple[str, ...]) -> None:
    """``cpu_checkpointing``: a checkpointed layer's input copied to the host after its forward
    (``d2h``) or back before its recomputation (``h2d``), as DeepSpeed's ``CheckpointFunction``
    copies it (``.to(device)`` of a pageable host tensor): on the compute stream, at the pageable
    rate, the host waiting for it."""
    if not (builder.cpu_checkpointing and layer.checkpointed):
        return
    kind = builder.kind(_CHECKPOINT_COPIES[direction], HostMemory.dram_only())
    builder.add(kind.task(joined(prefix, _CHECKPOINT_SUFFIXES[direction]), layer.activation_bytes, deps))


def backward_pass(strategy: Strategy, builder: StepBuilder, fetch: ParamFetch | None, micro: int,
                  after: tuple[str, ...] = (), reduce: bool = True) -> None:
    """Layers in reverse (``_backward_layer``), after ``after`` (a pipeline stage's: the
    gradient from the next stage), each layer's gradients reduced and offloaded as it is done
    unless not ``reduce`` (a pipeline stage reduces after its passes: ``reduce_gradients``);
    the streams whose copies run in the background of this micro-step's backward
    (``Strategy.background_streams``) are said so for its span."""
    begin = builder.marker(BACKWARD_BEGIN.of(micro), "backward", after)
    background = _fixed_rate(builder, micro, strategy.background_streams(builder, micro))
    if background:
        builder.session.background_copies(background)
    computed: list[str] = []
    blocking: str | None = None
    layers = builder.layers
    keys = strategy.backward_keys(builder, micro)
    if fetch is not None:
        keys = tuple(zip(keys, fetch.layout.nvme_elements[::-1], strict=True))
    for j in builder.loop(keys):
        i = len(layers) - 1 - j
        _backward_layer(strategy, builder, fetch, (micro, begin), i, computed, blocking)
        blocking = reduce_layer(strategy, builder, micro, i, computed[-1]) if reduce else None
    if background:
        builder.session.background_copies(frozenset())


def _backward_layer(strategy: Strategy, builder: StepBuilder, fetch: ParamFetch | None, micro: tuple[int, str],
                    i: int, computed: list[str], blocking: str | None) -> None:
    """A checkpointed layer is gathered, recomputed, gathered again (ZeRO-3 released its
    parameters after the recomputed forward) and differentiated; each gather is prefetched
    while the compute before it runs, as in forward. Where the offload of the layer before
    blocks the host thread (``blocking``), nothing of this layer (not even its prefetch) is
    issued before it is done. ``micro``: the micro-step and its backward's first task."""
    layer = builder.layers[i]
    micro_step, begin = micro
    prefix = BACKWARD.of(micro_step, i)
    passes = ((".recompute", layer.forward_kernels), ("", layer.backward_kernels)) if layer.checkpointed else (
        ("", layer.backward_kernels),)
    for label, work in passes:
        name = joined(prefix, label) if label else prefix
        # an offloaded partition is fetched once the backward is issued (its marker)
        after = tuple(iterations_back(computed, _ahead(fetch)) or ([begin] if fetch else []))
        if blocking is not None:
            after = (*after, blocking)
        if label:  # the checkpoint back from the host before its recomputation
            _checkpoint_copy(builder, "h2d", prefix, layer, after)
        ready = _gather(builder, fetch, name, "backward", i, after, computed)
        computed.append(builder.compute(name, "backward", work, ready or after))


def reduce_layer(strategy: Strategy, builder: StepBuilder, micro: int, i: int, ready: str,
                 after: tuple[str, ...] = ()) -> str | None:
    """Layer ``i``'s gradients, once ``ready`` (and ``after``), reduce-scattered over the
    data-parallel ranks (below ZeRO-2 all-reduced, at the boundary only; an expert's over the
    expert data-parallel ones) and offloaded (``Strategy.offload_gradients``); returns the task
    the host thread waits for, if any."""
    layer = builder.layers[i]
    stage = builder.zero_stage
    if stage < 2 and micro < builder.boundary:  # below ZeRO-2 gradients reduce at the boundary
        return strategy.offload_gradients(builder, micro, i, layer, ready)
    per_element = (1 if stage >= 2 else 2) * builder.lp_bytes
    experts = layer.expert_params if layer.expert_tensors else 0
    rs = builder.collective(joined(BACKWARD.of(micro, i), ".reduce"), "reduce_scatter", "backward",
                            per_element * (layer.params - experts), (ready, *after), per_element * experts)
    return strategy.offload_gradients(builder, micro, i, layer, rs or ready)

