"""Tensor parallelism (Megatron's column and row split) and sequence parallelism: each rank's
share of the work, parameters and activations, and the collectives among the tensor-parallel
ranks on the compute stream."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from clirun import refused_in_process
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.config.worksize import run_tasks
from tiersim.layer_kernels import decoder_passes
from tiersim.simulate import simulate
from tiersim.workload import ModelSpec, TrainingSpec, build_step, parameter_count, stage_steps, subgroup_count

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SEVENTY_B = ROOT / "scenarios" / "seed-70b.yaml"

GEMM_MODEL = ["model.layers=2", "model.hidden=4096", "model.heads=32", "model.kv_heads=32", "model.ffn=16384",
              "model.vocab=32768", "training.seq_len=2048", "training.global_batch=1",
              "training.activation_checkpointing=false", "hardware.fabric=pcie-p2p-gen5"]
"""A model whose every GEMM dimension tensor parallelism splits is a multiple of two tiles."""


def gemm_bound(tp: int) -> RunConfig:
    """The model above on ``tp`` GPUs of one tensor-parallel group (no data parallelism, so no
    ZeRO collective), with square tiles on one SM (a GEMM's time is its tiles), HBM too fast to
    matter and no hook time: every pass is its GEMMs."""
    (config,) = load_scenario(QUICKSTART, [*GEMM_MODEL, f"hardware.gpus={tp}", f"training.tensor_parallel={tp}"],
                              strategies=["gpu"])
    gpu = dataclasses.replace(config.hardware.rank_gpu, sm_count=1, gemm_tile_m=128, gemm_tile_n=128,
                              hbm_bandwidth=1e21, zero3_hook_latency=0.0)
    return dataclasses.replace(config, hardware=dataclasses.replace(config.hardware, gpu=gpu))


def durations(config: RunConfig) -> dict[str, float]:
    """Seconds of each task of the run, by name."""
    trace = simulate(config, trace=True).trace
    return dict(zip(trace["name"], trace["end"] - trace["start"], strict=True))


def test_tensor_parallel_2_halves_each_layers_compute_and_adds_its_all_reduces() -> None:
    one, two = gemm_bound(1), gemm_bound(2)
    hw = two.hardware
    tokens, hidden = 2048, 4096
    all_reduce = hw.fabric_latency + 2 * (2 - 1) / 2 * (2 * tokens * hidden) / hw.fabric_bandwidth
    full, split = durations(one), durations(two)
    for name in ("m0.fwd.1", "m0.fwd.2", "m0.bwd.1", "m0.bwd.2"):  # the decoder layers' passes
        assert split[name] == pytest.approx(full[name] / 2, rel=1e-9)
        assert split[f"{name}.tp"] == pytest.approx(2 * all_reduce, rel=1e-12)  # after attention and the MLP
        assert f"{name}.tp" not in full
    forward = simulate(two).phases
    assert forward is not None and simulate(one).phases is not None
    layers = sum(split[f"m0.fwd.{i}"] + split.get(f"m0.fwd.{i}.tp", 0.0) for i in range(4))
    assert forward["forward"] == pytest.approx(layers, rel=1e-9)


def test_sequence_parallelism_turns_each_all_reduce_into_a_reduce_scatter_and_an_all_gather() -> None:
    training = TrainingSpec(global_batch=1, tensor_parallel=4)
    model = ModelSpec(layers=1, hidden=1024, heads=16, ffn=4096)
    plain, _ = decoder_passes(model, training)
    sequence, _ = decoder_passes(model, dataclasses.replace(training, sequence_parallel=True))
    assert (plain.tp_calls, sequence.tp_calls) == (2, 4)
    assert plain.tp_bytes == sequence.tp_bytes == 2 * 2 * 3 / 4 * (2 * 2048 * 1024)
    assert sequence.memory_bytes < plain.memory_bytes  # the norms and residual adds are split too
    assert decoder_passes(model, TrainingSpec(global_batch=1))[0].tp_calls == 0


@pytest.mark.parametrize("tp, sequence, per_element", [(1, False, 34), (2, False, 10 + 24 / 2), (4, False, 10 + 24 / 4),
                                                       (4, True, 34 / 4)])
def test_activations_per_rank_follow_korthikanti(tp: int, sequence: bool, per_element: float) -> None:
    model = ModelSpec(layers=2, hidden=1024, heads=16, ffn=4096)
    tokens_hidden = 2048 * 1024
    training = TrainingSpec(global_batch=1, tensor_parallel=tp, sequence_parallel=sequence)
    kept = build_step(model, training).layers[1]
    assert kept.working_bytes == per_element * tokens_hidden
    assert kept.activation_bytes == 2 * tokens_hidden / (tp if sequence else 1)  # the checkpointed input
    plain = build_step(model, dataclasses.replace(training, activation_checkpointing=False)).layers[1]
    assert plain.activation_bytes == kept.working_bytes


@st.composite
def layouts(draw: st.DrawFn) -> tuple[ModelSpec, TrainingSpec]:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    heads = tp * draw(st.integers(1, 4))
    experts = draw(st.sampled_from([0, 4]))
    model = ModelSpec(layers=draw(st.integers(1, 4)), hidden=heads * 8 * draw(st.integers(1, 4)), heads=heads,
                      kv_heads=tp, ffn=tp * draw(st.integers(1, 64)), vocab=draw(st.integers(100, 5000)),
                      bias=draw(st.booleans()), norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
                      tied_embeddings=draw(st.booleans()), experts=experts, experts_per_token=min(experts, 2))
    dp = draw(st.integers(1, 5))
    training = TrainingSpec(global_batch=dp, data_parallel=dp, tensor_parallel=tp, seq_len=64,
                            zero_stage=draw(st.integers(0, 3)),
                            sub_group_size=draw(st.sampled_from([100, 5000, 10**6])))
    return model, training


@settings(max_examples=200, deadline=None)
@given(layout=layouts())
def test_parameters_per_rank_times_tp_times_dp_cover_the_model(layout: tuple[ModelSpec, TrainingSpec]) -> None:
    model, training = layout
    tp, dp = training.tensor_parallel, training.data_parallel
    step = build_step(model, training)
    assert step.total_params == parameter_count(model)
    assert step.rank_params * tp * dp >= step.total_params
    h, norm, moe = model.hidden, (1 if model.norm == "rmsnorm" else 2) * model.hidden, model.experts > 0
    biases = h * (1 + (model.experts if moe else 1)) if model.bias else 0
    whole = 2 * norm + biases + (h * model.experts if moe else 0)
    padding = (-(-model.vocab // tp) * tp - model.vocab) * h * (1 if model.tied_embeddings else 2)
    # every rank holds the norms, the row-parallel biases and the router whole, and pads the vocabulary
    assert step.shard_params * tp - step.total_params == (tp - 1) * (model.layers * whole + norm) + padding
    owned = step.rank_params * (dp if training.zero_stage else 1)
    assert owned >= step.shard_params
    assert owned - step.shard_params < dp * sum(len(layer.tensors) for layer in step.layers)  # ZeRO's padding
    assert len(step.subgroups) == subgroup_count(model, training)
    assert sum(layer.forward_flops for layer in step.layers) * tp >= sum(
        layer.forward_flops for layer in build_step(model, dataclasses.replace(training, tensor_parallel=1)).layers)


def refusal(capsys: pytest.CaptureFixture[str], *overrides: str) -> str:
    return refused_in_process(capsys, ["run", str(QUICKSTART)], *overrides)


def test_a_split_that_does_not_divide_the_heads_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.gpus=8", "training.tensor_parallel=8", "model.kv_heads=4", "model.heads=32")
    assert "training.tensor_parallel: 8 does not divide model.kv_heads 4" in err


def test_sequence_parallelism_needs_whole_sequences_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.gpus=4", "training.tensor_parallel=4", "training.sequence_parallel=true",
                  "training.seq_len=2050")
    assert "training.seq_len: 2050 is not a multiple of tensor_parallel 4" in err


def test_tensor_parallelism_divides_the_optimizer_state_and_keeps_the_node_total() -> None:
    """ZeRO partitions each rank's share over what data parallelism is left: at TP 2 x DP 2 a
    rank holds about what it does at DP 4, and a node's four ranks hold the model's state once."""
    configs = {tp: load_scenario(SEVENTY_B, [f"training.tensor_parallel={tp}", f"training.data_parallel={4 // tp}"],
                                 strategies=["dram"])[0] for tp in (1, 2)}
    steps = {tp: build_step(c.model, c.training) for tp, c in configs.items()}
    assert steps[2].shard_params == pytest.approx(steps[1].total_params / 2, rel=1e-4)
    assert steps[2].rank_params == pytest.approx(steps[1].rank_params, rel=1e-4)
    assert steps[2].micro_steps == 2 * steps[1].micro_steps


@pytest.mark.parametrize("sequence, tied", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("stages", [1, 2])
def test_the_task_count_is_the_graph_with_tensor_and_pipeline_parallelism(sequence: bool, tied: bool,
                                                                          stages: int) -> None:
    overrides = ["model.layers=4", "hardware.gpus=4", "training.tensor_parallel=2",
                 f"training.pipeline_parallel={stages}", f"training.sequence_parallel={sequence}",
                 "training.zero_stage=1", "training.global_batch=4", f"model.tied_embeddings={tied}"]
    for config in load_scenario(QUICKSTART, overrides, strategies=["gpu", "dram"]):
        result = simulate(config, fast_forward=False)
        assert result.graph is not None
        assert run_tasks(config) == len(result.graph.tasks), config.strategy
        sends = [task for task in result.graph.tasks if "send_" in task.name]
        assert len(sends) == 2 * (stages - 1) * config.training.global_batch // config.training.data_parallel
        assert all(task.size == 2048 * 4096 * 2 / (2 if sequence else 1) for task in sends)  # a rank's tokens
        step = build_step(config.model, config.training)
        copy = 16000 * 4096 if tied and stages > 1 else 0  # the last stage's half of the tied embedding
        assert sum(stage.shard_params for stage in stage_steps(step)) == step.shard_params + copy
