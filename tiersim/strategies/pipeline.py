"""Pipeline parallelism: one representative rank per stage, each running its own layers'
forward and backward of every micro-batch in 1F1B order, the activations sent point to point
to the next stage and their gradients back, then the stage's optimizer step.

The order is Megatron's non-interleaved 1F1B (``forward_backward_pipelining_without_interleaving``),
which is DeepSpeed's ``TrainSchedule`` (v0.16.2 ``deepspeed/runtime/pipe/schedule.py``) pass for
pass: stage ``s`` of ``p`` runs ``min(p - s - 1, m)`` warm-up forwards, then a forward and a
backward in turn, then the backwards left. Nothing here computes a bubble: a stage's forward
waits for the previous stage's activations and its backward for the next stage's gradient, so
the idle time follows from the task graph. The micro-batches are the step's gradient
accumulation steps; a stage reduces its gradients over the data-parallel ranks after its
last pass (``reduce_gradients``). A send is blocking, as ``torch.distributed.send`` under NCCL is (DeepSpeed's
``p2p.send``; Megatron's non-interleaved schedule waits on its requests): it runs on the sending
stage's compute stream, the fabric's per-call latency then ``tokens x hidden x 2`` bytes over the
sender's GPU fabric link (between nodes, through its NIC); the receiver is taken to have
posted its receive (neither framework makes a sender wait long for it in 1F1B's steady state).
Sends go as Megatron issues them, right after their pass; DeepSpeed issues a forward's send at
its next step, after that step's receive, which the model leaves out. Each stage's optimizer
step is the strategy's over the stage's own parameters; the step ends when the slowest stage's
step does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tiersim.config.hardware import Hardware
from tiersim.engine.schedule import Session
from tiersim.errors import ModelError
from tiersim.layer_kernels import sequence_tokens
from tiersim.strategies.builder import StepBuilder, TaskKind, rank_link_capacity
from tiersim.strategies.iteration import backward_pass, forward_pass, reduce_layer
from tiersim.workload import TrainingSpec, TrainingStep, stage_parts, tied_copy

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.strategies.base import Strategy

Pass = tuple[int, int, bool, int]
"""(stage, model chunk, forward (True) or backward, micro-batch)."""


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[tuple[bool, int]]:
    """The passes of ``stage`` in 1F1B order, as (forward, micro-batch): ``min(stages - stage
    - 1, micro_batches)`` warm-up forwards, then forward and backward in turn, then the
    backwards left."""
    warmup = min(stages - stage - 1, micro_batches)
    passes = [(True, i) for i in range(warmup)]
    for i in range(micro_batches - warmup):
        passes += [(True, i + warmup), (False, i)]
    return passes + [(False, i) for i in range(micro_batches - warmup, micro_batches)]


def interleaved(stage: int, stages: int, micro_batches: int, chunks: int) -> list[tuple[int, bool, int]]:
    """The passes of ``stage`` holding ``chunks`` model chunks in Megatron core's interleaved
    1F1B order (``forward_backward_pipelining_with_interleaving``), as (chunk, forward,
    micro-batch): forwards run groups of ``stages`` micro-batches through chunk 0, then chunk 1,
    ... (``get_schedule_table``), backwards the same groups through the chunks in reverse;
    ``2 (stages - stage - 1) + (chunks - 1) stages`` warm-up forwards, then forward and backward
    in turn, then the backwards left. ``micro_batches`` is a multiple of ``stages``."""
    table = [(micro, chunk) for group in range(0, micro_batches, stages) for chunk in range(chunks)
             for micro in range(group, group + stages)]
    forwards = [(chunk, True, micro) for micro, chunk in table]
    backwards = [(chunks - 1 - chunk, False, micro) for micro, chunk in table]
    warmup = min(2 * (stages - stage - 1) + (chunks - 1) * stages, len(table))
    passes = forwards[:warmup]
    for k in range(len(table) - warmup):
        passes += [forwards[k + warmup], backwards[k]]
    return passes + backwards[len(table) - warmup:]


def stage_passes(stage: int, stages: int, micro_batches: int, chunks: int) -> list[tuple[int, bool, int]]:
    """The passes of ``stage`` in order, as (chunk, forward, micro-batch): ``one_f_one_b`` with
    one chunk, ``interleaved`` with more."""
    if chunks == 1:
        return [(0, forward, micro) for forward, micro in one_f_one_b(stage, stages, micro_batches)]
    return interleaved(stage, stages, micro_batches, chunks)


def build_order(stages: int, micro_batches: int, chunks: int = 1) -> list[Pass]:
    """Every stage's passes (``stage_passes``) merged into one order in which each pass comes
    after the pass it waits for (``_waits_for``), each stage's in its own order: the order a
    graph that must have a task's dependencies before it can be built in."""
    programs = [stage_passes(stage, stages, micro_batches, chunks) for stage in range(stages)]
    at = [0] * stages
    built: set[Pass] = set()
    order: list[Pass] = []
    total = sum(len(program) for program in programs)
    while len(order) < total:
        before = len(order)
        for stage in range(stages):
            while at[stage] < len(programs[stage]):
                done = (stage, *programs[stage][at[stage]])
                needs = _waits_for(done, stages, chunks)
                if needs is not None and needs not in built:
                    break
                built.add(done)
                order.append(done)
                at[stage] += 1
        if len(order) == before:
            raise ModelError("the pipeline's passes wait for each other in a cycle")
    return order


def _waits_for(done: Pass, stages: int, chunks: int) -> Pass | None:
    """The pass of another stage that ``done`` waits for: the forward of the micro-batch on the
    part of the model before this one (the previous stage's, or the last stage's previous
    chunk), its backward on the part after; None for the first part's forwards and the last
    part's backwards."""
    stage, chunk, forward, micro = done
    part = chunk * stages + stage + (-1 if forward else 1)
    if not 0 <= part < stages * chunks:
        return None
    return (part % stages, part // stages, forward, micro)


def stage_link_capacity(hw: Hardware, name: str) -> float:
    """Capacity of a stage's link (``s1/hbm``): the rank's (``rank_link_capacity``); each
    stage's rank has links of its own."""
    return rank_link_capacity(hw, name.rpartition("/")[2])


def chunk_builders(stage: StepBuilder) -> list[StepBuilder]:
    """Builders of the passes of a stage's model chunks, on its rank's streams and links: the
    stage's own with one chunk; with several, one per chunk (its layers, its tasks named
    ``s1/c0/...``)."""
    step = stage.step
    chunks = step.training.virtual_pipeline
    if chunks == 1:
        return [stage]
    builders, first = [], 0
    for chunk, (begin, end) in enumerate(stage_parts(step.training, step.model.layers, step.stage)):
        layers = step.layers[first:first + end - begin]
        first += end - begin
        builders.append(StepBuilder(replace(step, layers=layers), stage.hw, stage.session, stage.stage,
                                    stage.marker_category == "marker", f"{stage.stage}c{chunk}/"))
    return builders


def schedule_pipeline(strategy: Strategy, steps: tuple[TrainingStep, ...], hw: Hardware, session: Session) -> None:
    """Each stage's rank (``steps[s]``, its tasks, streams and links prefixed ``s{s}/``) runs its
    passes in 1F1B order (``build_order``), each forward after the activations of the part of
    the model before it and every stream of its rank (as an iteration's), each backward after
    the gradient of the part after it, and sends what it made on; then the stage's optimizer
    step. The first stage's markers begin the result's phases."""
    builders = [StepBuilder(step, hw, session, f"s{stage}/", phases=stage == 0) for stage, step in enumerate(steps)]
    chunked = [chunk_builders(builder) for builder in builders]
    fetches = [strategy.param_fetch(step, hw) for step in steps]
    stages, chunks, micro_batches = len(steps), steps[0].training.virtual_pipeline, steps[0].micro_steps
    sent: dict[Pass, str] = {}
    for done in build_order(stages, micro_batches, chunks):
        stage, chunk, forward, micro = done
        builder = chunked[stage][chunk]
        waits = _waits_for(done, stages, chunks)
        received = (sent.pop(waits),) if waits is not None else ()
        if forward:
            forward_pass(builder, fetches[stage], micro, (*builder.tails(), *received))
        else:
            backward_pass(strategy, builder, fetches[stage], micro, received, reduce=micro < micro_batches - 1)
        to = _waits_for((stage, chunk, not forward, micro), stages, chunks)  # the part after (before) it
        if to is not None:
            sent[done] = send(builder, forward, micro, crosses_nodes(builder, stage, to[0]))
    if tied_copy(steps[0].model, steps[0].training):
        reduce_tied_gradients(builders[0], builders[-1])
    for builder in builders:
        reduce_gradients(strategy, builder)
        strategy.optimizer_step(builder, builder.marker("step.begin", "optimizer_step", builder.tails()))


def reduce_tied_gradients(first: StepBuilder, last: StepBuilder) -> None:
    """A head tied to the embedding: once both stages' passes are done, the gradients of the
    first stage's embedding and the last stage's copy of it are all-reduced between the two
    (DeepSpeed's ``ReduceTiedGrads``, before ``ReduceGrads``; Megatron's
    ``_allreduce_word_embedding_grads`` comes after its data-parallel reduction): a ring of
    two moves the 16-bit gradient once each way, as a send between the two stages
    (``crosses_nodes``)."""
    after = (*first.tails(), *last.tails())
    step = first.step
    num_bytes = tied_copy(step.model, step.training) * step.lp_bytes
    for builder in (first, last):
        across = crosses_nodes(builder, 0, step.training.pipeline_parallel - 1)
        kind = TaskKind("reduce_scatter", "backward", "allreduce", builder.p2p_latency(across),
                        builder.p2p_usage(across))
        builder.add(kind.task("tied_embedding.allreduce", num_bytes, after))


def reduce_gradients(strategy: Strategy, builder: StepBuilder) -> None:
    """After its last pass a stage reduces its gradients over the data-parallel ranks and
    offloads them, layer by layer in backward order (DeepSpeed's ``ReduceGrads`` after the last
    ``BackwardPass`` of ``TrainSchedule``; Megatron's ``finalize_model_grads`` after the
    pipeline's flush, without ``--overlap-grad-reduce``), where a rank without pipeline
    parallelism reduces each layer as its backward ends."""
    micro = builder.step.micro_steps - 1
    begin = builder.marker(f"m{micro}.reduce.begin", "backward", builder.tails())
    blocking: tuple[str, ...] = ()
    layers = builder.step.layers
    for j in builder.loop(builder.step.layer_shapes[::-1]):
        waits = reduce_layer(strategy, builder, micro, len(layers) - 1 - j, begin, blocking)
        blocking = (waits,) if waits is not None else ()


def crosses_nodes(builder: StepBuilder, stage: int, other: int) -> bool:
    """Whether ``stage``'s sends to ``other`` leave the node: between neighbouring stages, where
    a stage fills whole nodes (``StepBuilder.sends_cross_nodes``); between the first stage and
    the last (a tied embedding's gradient, interleaved chunks' wrap-around), on more than one
    node, as Megatron places the first stage's ranks first and the last's last."""
    if {stage, other} == {0, builder.step.training.pipeline_parallel - 1}:
        return builder.hw.nodes > 1
    return builder.sends_cross_nodes


def send(builder: StepBuilder, forward: bool, micro: int, across: bool) -> str:
    """A micro-batch's activations (``forward``) or their gradient sent to another stage after
    the pass on the compute stream: the fabric's per-call latency, then ``tokens x hidden``
    16-bit values over the GPU fabric (and, where it runs through the host bridges, the GPU's
    PCIe link), or ``across`` nodes over a NIC (``StepBuilder.p2p_usage``), the compute stream
    waiting. With sequence parallelism each tensor-parallel rank sends its ``1 / tp`` of the
    tokens (Megatron core's ``get_tensor_shapes``)."""
    phase = "forward" if forward else "backward"
    kind = builder.kinds.get(("send", phase, across))
    if kind is None:
        kind = builder.kinds[("send", phase, across)] = TaskKind("gpu", phase, "p2p", builder.p2p_latency(across),
                                                                 builder.p2p_usage(across))
    step = builder.step
    num_bytes = sequence_tokens(step.training) * step.model.hidden * step.lp_bytes
    what = "activations" if forward else "gradient"
    return builder.add(kind.task(f"m{micro}.send_{what}", num_bytes, ()))


def pipeline_tasks(training: TrainingSpec, micro_batches: int, tied: bool) -> int:
    """Tasks a pipeline adds to its stages' iterations: each micro-batch's activations sent
    forward and gradient back across each boundary between parts of the model (stages, or
    interleaved chunks), each stage's marker of its gradient reduction, the markers of each
    interleaved chunk's passes beyond a stage's one per micro-batch and, for a ``tied`` head,
    the two ranks' all-reduce of the tied gradient (none without pipeline parallelism)."""
    stages, chunks = training.pipeline_parallel, training.virtual_pipeline
    if stages == 1:
        return 0
    chunk_markers = 2 * (chunks - 1) * micro_batches * stages
    return 2 * (stages * chunks - 1) * micro_batches + stages + chunk_markers + (2 if tied else 0)
