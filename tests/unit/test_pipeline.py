"""Pipeline parallelism (tiersim.strategies.pipeline): 1F1B over the stages' ranks, the bubble
coming out of the task graph's dependencies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.config.worksize import run_tasks
from tiersim.engine import Task
from tiersim.engine.schedule import Session, run_whole
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies.gpu_kernels import pass_seconds
from tiersim.strategies.pipeline import build_order, interleaved, one_f_one_b
from tiersim.workload import build_step, stage_parts, stage_steps

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


Seconds = dict[tuple[int, int, bool], float]
"""A pass's seconds by (stage, chunk, forward)."""


def _passes_graph(stages: int, micro: int, seconds: Seconds, chunks: int = 1) -> float:
    """The makespan of the pipeline's passes alone: each a delay on its stage's stream, waiting
    for the pass of the part of the model it needs, as ``schedule_pipeline`` lays them out."""
    def name(stage: int, chunk: int, is_forward: bool, m: int) -> str:
        return f"{stage}.{chunk}.{'F' if is_forward else 'B'}{m}"

    def schedule(session: Session) -> None:
        for stage, chunk, is_forward, m in build_order(stages, micro, chunks):
            part = chunk * stages + stage + (-1 if is_forward else 1)
            needs = (name(part % stages, part // stages, is_forward, m),) if 0 <= part < stages * chunks else ()
            session.add(Task(name(stage, chunk, is_forward, m), f"s{stage}", "forward", "compute",
                             seconds[(stage, chunk, is_forward)], deps=needs))
    run, _graph = run_whole(schedule, lambda _link: 1.0)
    return run.makespan


def _equal(stages: int, chunks: int, forward: float, backward: float) -> Seconds:
    """Equal stages: each chunk's passes ``1 / chunks`` of a stage's."""
    return {(s, c, f): (forward if f else backward) / chunks for s in range(stages) for c in range(chunks)
            for f in (True, False)}


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.floats(0.1, 3.0), st.floats(0.1, 3.0))
def test_1f1b_on_equal_stages_takes_m_plus_p_minus_1_slots(stages: int, micro: int, forward: float,
                                                           backward: float) -> None:
    assert _passes_graph(stages, micro, _equal(stages, 1, forward, backward)) == pytest.approx(
        (micro + stages - 1) * (forward + backward), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(2, 4), st.integers(1, 4), st.floats(0.1, 3.0), st.floats(0.1, 3.0))
def test_interleaving_divides_the_bubble_by_the_chunks(stages: int, chunks: int, groups: int, forward: float,
                                                       backward: float) -> None:
    """Megatron's interleaved 1F1B on equal stages: m slots of t_f + t_b and a bubble of
    (p - 1) / v of them (Narayanan et al. 2021, section 2.2.2)."""
    micro = groups * stages
    assert _passes_graph(stages, micro, _equal(stages, chunks, forward, backward), chunks) == pytest.approx(
        (micro + (stages - 1) / chunks) * (forward + backward), rel=1e-9)


@pytest.mark.parametrize("stages, chunks, micro", [(2, 2, 2), (2, 3, 4), (4, 2, 4), (4, 2, 12), (3, 4, 6)])
def test_interleaved_stages_keep_megatrons_warm_up_in_flight(stages: int, chunks: int, micro: int) -> None:
    for stage in range(stages):
        passes = interleaved(stage, stages, micro, chunks)
        assert sorted(passes) == sorted((c, f, m) for c in range(chunks) for f in (True, False) for m in range(micro))
        for chunk in range(chunks):  # each chunk runs its micro-batches in order, forward and backward
            for forward in (True, False):
                assert [m for c, f, m in passes if c == chunk and f == forward] == list(range(micro))
        in_flight = max(sum(1 if f else -1 for _c, f, _m in passes[:k + 1]) for k in range(len(passes)))
        assert in_flight == min(2 * (stages - stage - 1) + (chunks - 1) * stages + 1, chunks * micro)


@pytest.mark.parametrize("stages, micro", [(1, 1), (2, 1), (2, 5), (4, 3), (4, 8), (5, 2)])
def test_each_stage_runs_warm_up_forwards_then_alternates(stages: int, micro: int) -> None:
    for stage in range(stages):
        passes = one_f_one_b(stage, stages, micro)
        warmup = min(stages - stage - 1, micro)
        assert passes[:warmup] == [(True, i) for i in range(warmup)]
        assert sorted(passes) == sorted([(True, i) for i in range(micro)] + [(False, i) for i in range(micro)])
        assert [m for forward, m in passes if not forward] == list(range(micro))
        in_flight = max(sum(1 if f else -1 for f, _m in passes[:k + 1]) for k in range(len(passes)))
        assert in_flight == min(stages - stage, micro)  # DeepSpeed's num_pipe_buffers


def _config(stages: int, micro: int, *overrides: str) -> RunConfig:
    """A small model whose embedding and head cost next to nothing, on ``stages`` GPUs, one
    stage each (data parallelism 1), ZeRO-1, all state in HBM."""
    (config,) = load_scenario(QUICKSTART, [
        "model.layers=8", "model.hidden=2048", "model.heads=16", "model.kv_heads=16", "model.ffn=5504",
        "model.vocab=128", "training.zero_stage=1", f"training.global_batch={micro}", f"hardware.gpus={stages}",
        f"training.pipeline_parallel={stages}", *overrides], strategies=["gpu"])
    return config


def _compute_only(config: RunConfig) -> RunConfig:
    """``config`` with sends that cost nothing: a fabric of no latency and all but infinite bandwidth."""
    (fabric,) = load_scenario(QUICKSTART, ["hardware.fabric=pcie-p2p-gen5"], strategies=["gpu"])
    assert fabric.hardware.fabric is not None
    free = replace(fabric.hardware.fabric, bus_bandwidth=1e30, latency=0.0, via_host_link=False)
    return replace(config, hardware=replace(config.hardware, fabric=free))


def _passes(result: Result) -> float:
    """Seconds of forward and backward: until the first stage, which ends the last backward,
    begins its optimizer step."""
    return result.phases["forward"] + result.phases["backward"]


def _part_seconds(config: RunConfig) -> Seconds:
    """Each stage's chunks' forward and backward (with recompute) seconds on the config's GPU."""
    gpu, zero, training = config.hardware.rank_gpu, config.training.zero_stage, config.training
    step = build_step(config.model, training)
    seconds: Seconds = {}
    for stage in range(training.pipeline_parallel):
        for chunk, (first, end) in enumerate(stage_parts(training, config.model.layers, stage)):
            layers = step.layers[first:end]
            seconds[(stage, chunk, True)] = sum(pass_seconds(layer.forward_kernels, gpu, zero) for layer in layers)
            seconds[(stage, chunk, False)] = sum(
                pass_seconds(layer.backward_kernels, gpu, zero)
                + (pass_seconds(layer.forward_kernels, gpu, zero) if layer.checkpointed else 0.0) for layer in layers)
    return seconds


@pytest.mark.parametrize("stages, micro, chunks", [(2, 4, 1), (4, 4, 1), (4, 16, 1), (2, 4, 2), (4, 8, 2)])
def test_the_bubble_comes_out_of_the_passes(stages: int, micro: int, chunks: int) -> None:
    """Compute only, forward and backward take what the stages' passes take in their order (on
    equal stages (m + p - 1) slots of t_f + t_b, interleaved m + (p - 1) / v: the tests above),
    here between those slots of the fastest stage and of the slowest (the embedding and the
    head make the first and last a little slower); with p = 1, m slots of the whole model's."""
    config = _compute_only(_config(stages, micro, f"training.virtual_pipeline={chunks}"))
    piped = _passes(simulate(config))
    seconds = _part_seconds(config)
    assert piped == pytest.approx(_passes_graph(stages, micro, seconds, chunks), rel=1e-9)
    slots = [sum(t for (s, _c, _f), t in seconds.items() if s == stage) for stage in range(stages)]
    assert (micro + (stages - 1) / chunks) * min(slots) < piped < (micro + (stages - 1) / chunks) * max(slots)
    whole = _config(1, micro)
    assert _passes(simulate(_compute_only(whole))) == pytest.approx(micro * sum(_part_seconds(whole).values()),
                                                                    rel=1e-9)


def test_sends_cost_latency_and_bytes_over_the_fabric() -> None:
    config = _config(2, 4, "hardware.fabric=pcie-p2p-gen5")
    result = simulate(config, trace=True)
    sends = result.trace[result.trace["category"] == "p2p"]
    assert len(sends) == 2 * 4  # activations forward and gradients back, per micro-batch
    fabric = config.hardware.fabric
    assert fabric is not None
    seconds = fabric.latency + 2048 * 2048 * 2 / fabric.bus_bandwidth
    assert (sends["end"] - sends["start"]).min() == pytest.approx(seconds, rel=1e-9)
    assert set(sends["stream"]) == {"s0/gpu", "s1/gpu"}


def test_one_stage_is_todays_answer() -> None:
    (config,) = load_scenario(QUICKSTART, ["training.zero_stage=1", "hardware.gpus=2"], strategies=["dram"])
    (explicit,) = load_scenario(QUICKSTART, ["training.zero_stage=1", "hardware.gpus=2",
                                             "training.pipeline_parallel=1"], strategies=["dram"])
    assert simulate(config).summary() == simulate(explicit).summary()


def test_stages_hold_their_own_layers_and_in_flight_checkpoints() -> None:
    config = _config(4, 8)
    step = build_step(config.model, config.training)
    stages = stage_steps(step)
    assert [len(s.layers) for s in stages] == [3, 2, 2, 3]
    assert stages[0].layers[0].name == "embedding" and stages[-1].layers[-1].name == "final_norm+lm_head"
    assert sum(s.total_params for s in stages) == step.total_params
    assert [s.in_flight for s in stages] == [4, 3, 2, 1]
    assert [s.logits_bytes() > 0 for s in stages] == [False, False, False, True]
    kept = [sum(layer.activation_bytes for layer in s.layers) for s in stages]
    assert stages[1].activation_peak_bytes == 3 * kept[1] + max(layer.working_bytes for layer in stages[1].layers)


def test_the_fit_is_the_fullest_stages() -> None:
    config = _config(2, 4)
    result = simulate(config)
    stages = stage_steps(build_step(config.model, config.training))
    assert result.fits
    hbm = {what: num for tier, what, num, _held in result.placement_items if tier == "hbm"}
    assert hbm["activations"] == stages[0].activation_peak_bytes  # two micro-batches in flight on stage 0


@pytest.mark.parametrize("strategy, chunks", [("gpu", 1), ("dram", 1), ("dram", 2)])
def test_tasks_are_counted_before_they_are_built(strategy: str, chunks: int) -> None:
    config = _config(4, 8, "hardware.gpus=8", f"training.virtual_pipeline={chunks}")  # data parallelism 2
    for each in load_scenario(QUICKSTART, [], strategies=[strategy]):
        config = replace(config, strategy=each.strategy, options=each.options)
    result = simulate(config, trace=True)
    assert len(result.trace) == run_tasks(config)


def test_a_tied_head_keeps_a_copy_of_the_embedding_on_the_last_stage() -> None:
    """Megatron's shared_embedding_or_output_weight: the last stage holds vocab x hidden more,
    and the first and last stages all-reduce its 16-bit gradient before their optimizer steps."""
    untied, tied = _config(2, 4), _config(2, 4, "model.tied_embeddings=true")
    last = [stage_steps(build_step(c.model, c.training))[-1].total_params for c in (untied, tied)]
    assert last[0] == last[1]  # the copy stands where an untied head's own weight is
    trace = simulate(tied, trace=True).trace
    assert len(trace) == run_tasks(tied)
    tied_reduce = trace[trace["name"].str.endswith("tied_embedding.allreduce")]
    assert sorted(tied_reduce["stream"]) == ["s0/reduce_scatter", "s1/reduce_scatter"]
    steps = trace[trace["name"].str.endswith("step.begin")]
    assert steps["start"].min() >= tied_reduce["end"].max()


def test_a_stage_reduces_its_gradients_after_its_last_backward() -> None:
    """DeepSpeed's ReduceGrads follows the stage's last BackwardPass (Megatron's
    finalize_model_grads the flush): no layer's all-reduce overlaps the stage's backward."""
    config = _config(2, 4, "hardware.gpus=4")
    trace = simulate(config, trace=True).trace
    for stage, layers in ((0, 5), (1, 5)):
        mine = trace[trace["stream"].str.startswith(f"s{stage}/")]
        reduces = mine[mine["name"].str.endswith(".reduce")]
        computed = mine[(mine["category"] == "compute") & (mine["phase"] == "backward")]
        assert len(reduces) == layers
        assert reduces["start"].min() >= computed["end"].max()


@pytest.mark.parametrize("stages, micro, overrides, message", [
    (3, 3, (), r"training.pipeline_parallel: 3 does not divide model.layers 8"),
    (2, 4, ("training.virtual_pipeline=3",), r"training.virtual_pipeline: 2 x virtual_pipeline 3 = 6 does not "
                                              r"divide model.layers 8"),
    (2, 3, ("training.virtual_pipeline=2",), r"training.virtual_pipeline: 2 needs the micro-batches .* = 3\) a "
                                              r"multiple of pipeline_parallel 2"),
    (1, 2, ("training.virtual_pipeline=2",), r"training.virtual_pipeline: 2 needs pipeline_parallel above 1"),
])
def test_layouts_megatron_refuses_are_refused(stages: int, micro: int, overrides: tuple[str, ...],
                                              message: str) -> None:
    from tiersim.errors import ConfigError
    with pytest.raises(ConfigError, match=message):
        _config(stages, micro, *overrides)


def test_interleaved_stages_hold_every_pth_chunk_and_megatrons_warm_up() -> None:
    """Stage s holds chunks s, s + p, ... of the model; in flight, Megatron's warm-up forwards
    and one, each a chunk's checkpoints (1 / v of a micro-batch's on the stage)."""
    config = _config(2, 4, "training.virtual_pipeline=2")
    step = build_step(config.model, config.training)
    stages = stage_steps(step)
    names = [[layer.name for layer in s.layers] for s in stages]
    assert names == [["embedding", "layer.0", "layer.1", "layer.4", "layer.5"],
                     ["layer.2", "layer.3", "layer.6", "layer.7", "final_norm+lm_head"]]
    assert [s.in_flight for s in stages] == [5, 3]  # 2 (p - s - 1) + (v - 1) p + 1 chunks
    kept = sum(layer.activation_bytes for layer in stages[0].layers)
    working = max(layer.working_bytes for layer in stages[0].layers)
    assert stages[0].activation_peak_bytes == 5 * kept // 2 + working


def test_pipelines_run_on_the_plain_session_where_the_lazy_one_would_start_late() -> None:
    """docs/design/fast-forward.md: the lazy session would start a later-built stage's task
    late (LateTask), so a pipeline's plan asks for the whole graph, and results match a full run."""
    from tiersim.fastforward.session import FastForwardSession, LateTask
    from tiersim.strategies import STRATEGIES

    config = _config(2, 4)
    plan = STRATEGIES[config.strategy](config.options).plan(build_step(config.model, config.training), config.hardware)
    assert plan.whole and plan.schedule is not None and plan.capacity_of is not None
    with pytest.raises(LateTask):
        plan.schedule(FastForwardSession(plan.capacity_of, None, True, True))
    assert simulate(config).summary() == simulate(config, fast_forward=False).summary()


def test_the_first_and_last_stages_talk_across_nodes() -> None:
    """2 nodes of 4 GPUs, 4 stages of 2 ranks: neighbours share a node (as the nodes' model takes
    them), but Megatron puts the first stage on the first node and the last on the last, so the
    interleaved chunks' wrap-around sends and the tied embedding's all-reduce go through a NIC."""
    config = _config(4, 8, "hardware.gpus=4", "hardware.nodes=2", "hardware.network={device: ib-hdr200-cx6, count: 1}",
                     "training.virtual_pipeline=2", "model.tied_embeddings=true")  # data parallelism 2
    trace = simulate(config, trace=True).trace
    graph = simulate(config, fast_forward=False).graph
    assert graph is not None
    usage = {task.name: {link.rpartition("/")[2] for link, _units in task.usage} for task in graph.tasks}
    sends = trace[trace["category"] == "p2p"]
    wraps = [n for n in sends["name"] if n.startswith(("s3/c0/", "s0/c1/")) and
             ("send_activations" in n if n.startswith("s3/") else "send_gradient" in n)]
    assert len(wraps) == 2 * 4 and all(usage[n] == {"network", "pcie_d2h"} for n in wraps)  # 4 micro-batches
    assert all("network" not in usage[n] for n in sends["name"] if n not in wraps)
    tied = [n for n in usage if n.endswith("tied_embedding.allreduce")]
    assert len(tied) == 2 and all(usage[n] == {"network", "pcie_d2h"} for n in tied)
