"""The iteration every strategy shares: micro-steps of forward and backward (ZeRO-3
all-gathers and reduce-scatters over the GPU fabric, GPU compute with recompute), the
strategy's gradient offload in each backward, then its optimizer step."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from tiersim.config.hardware import Hardware
from tiersim.engine.schedule import Session, iterations_back
from tiersim.strategies.builder import StepBuilder
from tiersim.workload import LayerWork, TrainingStep

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.strategies.base import Strategy


def schedule_iteration(strategy: Strategy, step: TrainingStep, hw: Hardware, session: Session) -> None:
    """The iteration: micro-steps of forward and backward, then the optimizer step. The
    first micro-step, the last (the accumulation boundary) and those between build
    differently (see ``micro_keys``). The loop's iterations are a micro-step's backward and
    the next one's forward: each waits for the last only through the streams
    (``self_contained``), and it ends in a forward, which leaves the same tasks in flight
    after a first micro-step as after an accumulating one (and after the first forward,
    before the loop)."""
    builder = StepBuilder(step, hw, session)
    _forward(builder, 0, ())
    first_alike = step.micro_steps > 2 and _first_alike(strategy, builder)
    for micro in builder.session.loop_runs(micro_keys(step.micro_steps, first_alike), self_contained=True):
        _backward(strategy, builder, micro)
        if micro + 1 < step.micro_steps:
            _forward(builder, micro + 1, builder.tails())
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


def _first_alike(strategy: Strategy, builder: StepBuilder) -> bool:
    """Whether the first micro-step gives the results an accumulating one gives
    (``micro_keys``): their offloads differ at most in the order of each layer's copies, and
    no other task of a micro-step uses the links those copies use (its collectives; its
    compute and markers use none)."""
    links = strategy.accumulation_links(builder)
    return links is not None and links.isdisjoint(link for link, _units in builder.collective_usage())


def _gather(builder: StepBuilder, name: str, phase: str, layer: LayerWork, deps: tuple[str, ...]) -> str | None:
    """ZeRO-3 all-gather of a layer's 16-bit parameters before it runs (None below stage 3)."""
    if builder.step.training.zero_stage < 3:
        return None
    return builder.collective(name, "allgather", phase, layer.params * builder.step.lp_bytes, deps)


def _forward(builder: StepBuilder, micro: int, after: tuple[str, ...]) -> None:
    """Each layer's parameters are gathered while the layer before computes (DeepSpeed
    prefetches the next parameter in the trace), then the layer computes. Nothing of it is
    issued before ``after`` (the previous micro-step's backward) is done: DeepSpeed ends
    every backward by synchronizing the stream its gradient reduction and offload copies run
    on (v0.16.2 ``stage3.py``, ``independent_gradient_partition_epilogue``)."""
    begin = builder.marker(f"m{micro}.forward.begin", "forward", after)
    computed: list[str] = []
    layers = builder.step.layers
    for i in builder.loop(builder.step.layer_shapes):
        layer = layers[i]
        prefetch = tuple(iterations_back(computed, 2) or [begin])
        ag = _gather(builder, f"m{micro}.fwd.{i}.allgather", "forward", layer, prefetch)
        computed.append(builder.compute(f"m{micro}.fwd.{i}", "forward", layer.forward_kernels, _some(ag)))


def _backward(strategy: Strategy, builder: StepBuilder, micro: int) -> None:
    """Layers in reverse (``_backward_layer``); the streams whose copies run in the background
    of this micro-step's backward (``Strategy.background_streams``) are said so for its span."""
    builder.marker(f"m{micro}.backward.begin", "backward")
    background = strategy.background_streams(builder, micro)
    if background:
        builder.session.background_copies(background)
    computed: list[str] = []
    blocking: str | None = None
    layers = builder.step.layers
    for j in builder.loop(strategy.backward_keys(builder, micro)):
        i = len(layers) - 1 - j
        blocking = _backward_layer(strategy, builder, micro, i, computed, blocking)
    if background:
        builder.session.background_copies(frozenset())


def _backward_layer(strategy: Strategy, builder: StepBuilder, micro: int, i: int, computed: list[str],
                    blocking: str | None) -> str | None:
    """A checkpointed layer is gathered, recomputed, gathered again (ZeRO-3 released its
    parameters after the recomputed forward) and differentiated; each gather is prefetched
    while the compute before it runs, as in forward. The layer's gradients are
    reduce-scattered and offloaded. Where the offload blocks the host thread (``blocking``,
    what it returns), nothing of the next layer (not even its prefetch) is issued before it is
    done."""
    layer = builder.step.layers[i]
    prefix = f"m{micro}.bwd.{i}"
    passes = (("recompute", layer.forward_kernels), ("", layer.backward_kernels)) if layer.checkpointed else (
        ("", layer.backward_kernels),)
    for label, work in passes:
        name = f"{prefix}.{label}" if label else prefix
        after = tuple(iterations_back(computed, 2))
        if blocking is not None:
            after = (*after, blocking)
        ag = _gather(builder, f"{name}.allgather" if label else f"{prefix}.allgather", "backward", layer, after)
        computed.append(builder.compute(name, "backward", work, _some(ag) or after))
    factor = 1 if builder.step.training.zero_stage >= 2 else 2
    rs = builder.collective(f"{prefix}.reduce", "reduce_scatter", "backward",
                      factor * layer.params * builder.step.lp_bytes, (computed[-1],))
    return strategy.offload_gradients(builder, micro, i, layer, rs or computed[-1])


def _some(name: str | None) -> tuple[str, ...]:
    return (name,) if name else ()
