"""Tests for tiersim.workload: parameter, FLOP and byte counts."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.schema import build
from tiersim.errors import ConfigError
from tiersim.workload import (
    ModelSpec,
    TrainingSpec,
    build_step,
    layer_params,
    llama2,
    parameter_count,
)


@pytest.mark.parametrize(
    ("size", "expected"),
    [("7b", 6_738_415_616), ("13b", 13_015_864_320), ("70b", 68_976_648_192)],
)
def test_llama2_parameter_counts(size: str, expected: int) -> None:
    assert parameter_count(llama2(size)) == expected  # type: ignore[arg-type]


def test_layer_params_llama2_7b() -> None:
    # 4 * 4096^2 attention + 3 * 4096 * 11008 FFN + 2 RMSNorm weights
    assert layer_params(llama2("7b")) == 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096


def test_layer_params_sum_to_total() -> None:
    step = build_step(llama2("70b"), TrainingSpec(global_batch=8))
    assert sum(layer.params for layer in step.layers) == step.total_params
    assert [layer.name for layer in step.layers][:2] == ["embedding", "layer.0"]
    assert step.layers[-1].name == "final_norm+lm_head"
    assert len(step.layers) == 80 + 2


def test_variants_change_counts() -> None:
    base = ModelSpec(layers=2, hidden=64, heads=4, ffn=256, vocab=100)
    h, f, v = 64, 256, 100
    assert parameter_count(base) == 2 * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h
    gelu = dataclasses.replace(base, activation="gelu", norm="layernorm", bias=True)
    per_layer = 4 * h * h + 2 * h * f + 2 * 2 * h + (4 * h) + (f + h)
    assert layer_params(gelu) == per_layer
    tied = dataclasses.replace(base, tied_embeddings=True)
    assert parameter_count(base) - parameter_count(tied) == v * h


def test_build_from_yaml_mapping() -> None:
    shape = {"layers": 2, "hidden": 64, "heads": 4, "ffn": 128}
    model = build(ModelSpec, {**shape, "kv_heads": 2}, "s.yaml", "model")
    assert model.kv_heads == 2 and model.vocab == 32000
    mha = build(ModelSpec, {**shape, "kv_heads": None}, "s.yaml", "model")
    assert mha.kv_heads is None and mha.kv_head_count == 4
    training = build(TrainingSpec, {"global_batch": "1k", "data_parallel": 8}, "s.yaml", "training")
    assert training.global_batch == 1000 and training.zero_stage == 3


def test_hidden_not_divisible_by_heads() -> None:
    with pytest.raises(ConfigError) as err:
        build(ModelSpec, {"layers": 2, "hidden": 5000, "heads": 64, "ffn": 128}, "s.yaml", "model")
    assert "s.yaml: model.hidden" in str(err.value)
    assert "hidden 5000 is not divisible by heads 64" in str(err.value)


def test_heads_not_divisible_by_kv_heads() -> None:
    with pytest.raises(ConfigError) as err:
        data = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3, "ffn": 128}
        build(ModelSpec, data, "s.yaml", "model")
    assert "s.yaml: model.kv_heads" in str(err.value)


def test_global_batch_not_divisible() -> None:
    with pytest.raises(ConfigError) as err:
        build(TrainingSpec, {"global_batch": 10, "micro_batch": 2, "data_parallel": 4}, "s.yaml", "training")
    assert "s.yaml: training.global_batch" in str(err.value)


def test_required_and_bounds() -> None:
    with pytest.raises(ConfigError, match="s.yaml: training.global_batch: required"):
        build(TrainingSpec, {}, "s.yaml", "training")
    with pytest.raises(ConfigError, match="training.zero_stage"):
        build(TrainingSpec, {"global_batch": 8, "zero_stage": 4}, "s.yaml", "training")


def test_build_step_validates_direct_specs() -> None:
    with pytest.raises(ConfigError, match="<api>: model.hidden"):
        build_step(ModelSpec(layers=1, hidden=10, heads=3, ffn=8), TrainingSpec(global_batch=1))


def test_six_n_tokens_approximation_7b() -> None:
    training = TrainingSpec(seq_len=2048, micro_batch=4, global_batch=64, data_parallel=8)
    step = build_step(llama2("7b"), training)
    tokens = step.micro_steps * step.tokens_per_micro_batch
    approx = 6 * step.total_params * tokens
    assert abs(step.model_flops_per_iteration() - approx) / approx < 0.15


def test_memory_helpers_7b_zero3() -> None:
    training = TrainingSpec(global_batch=64, micro_batch=4, data_parallel=8)
    step = build_step(llama2("7b"), training)
    n = step.total_params
    assert step.rank_params == math.ceil(n / 8)
    assert step.optimizer_state_bytes() == step.rank_params * 12
    assert step.fp32_grad_bytes() == step.rank_params * 4
    assert step.lp_param_bytes_on_gpu() == step.rank_params * 2
    assert step.lp_grad_bytes_on_gpu() == step.rank_params * 2
    s, b, h = 2048, 4, 4096
    kept = 32 * s * b * h * 2 + s * b * h * 2  # layer inputs (checkpointing) + LM-head input
    assert step.activation_peak_bytes == kept + 34 * s * b * h + s * b * 32000 * 4


def test_zero3_subgroups_match_deepspeed_at_70b() -> None:
    """The seed study's 70B run: Megatron counts 68,305,559,552 parameters, DeepSpeed makes 82
    sub-groups of whole tensor partitions at sub_group_size 1e8, the largest of 211,816,448
    elements (its swap buffers' num_elems), shared/reference/seed-logs/70B-nvme.log."""
    model = ModelSpec(layers=80, hidden=8192, heads=64, kv_heads=4, ffn=28672, vocab=32000)
    step = build_step(model, TrainingSpec(global_batch=4, data_parallel=4, sub_group_size=100_000_000))
    assert step.total_params == 68_305_559_552
    assert len(step.subgroups) == 82
    assert max(g.numel for g in step.subgroups) == 211_816_448


def test_memory_helpers_stage_dependence() -> None:
    model = llama2("7b")
    n = parameter_count(model)
    stage0 = build_step(model, TrainingSpec(global_batch=8, data_parallel=8, zero_stage=0))
    assert stage0.rank_params == n and stage0.lp_grad_bytes_on_gpu() == 2 * n
    stage2 = build_step(model, TrainingSpec(global_batch=8, data_parallel=8, zero_stage=2))
    assert stage2.lp_param_bytes_on_gpu() == 2 * n
    assert stage2.lp_grad_bytes_on_gpu() == 2 * math.ceil(n / 8)


def test_checkpointing_switches_recompute_and_activations() -> None:
    model = llama2("7b")
    on = build_step(model, TrainingSpec(global_batch=1))
    off = build_step(model, TrainingSpec(global_batch=1, activation_checkpointing=False))
    layer_on, layer_off = on.layers[1], off.layers[1]
    assert layer_on.recompute_flops == layer_on.forward_flops and layer_off.recompute_flops == 0
    assert layer_on.backward_flops == 2 * layer_on.forward_flops
    assert layer_off.activation_bytes == 34 * 2048 * 4096 > layer_on.activation_bytes == 2 * 2048 * 4096
    assert on.layers[0].forward_flops == 0 and on.layers[-1].recompute_flops == 0
    assert on.model_flops_per_iteration() == off.model_flops_per_iteration()


def test_decoder_layer_flops_formula() -> None:
    model = ModelSpec(layers=1, hidden=64, heads=4, kv_heads=2, ffn=256, vocab=100)
    step = build_step(model, TrainingSpec(seq_len=32, micro_batch=2, global_batch=2))
    tokens, h = 64, 64
    matmul = 2 * h * h + 2 * h * 32 + 3 * h * 256
    assert step.layers[1].forward_flops == 2 * tokens * matmul + 4 * 2 * 32**2 * h
    assert step.layers[-1].forward_flops == 2 * tokens * h * 100


# ---------------------------------------------------------------- properties


@st.composite
def models(draw: st.DrawFn, layers: int | None = None) -> ModelSpec:
    kv_heads = draw(st.integers(1, 8))
    heads = kv_heads * draw(st.integers(1, 4))
    hidden = heads * draw(st.integers(1, 64))
    return ModelSpec(
        layers=layers if layers is not None else draw(st.integers(1, 8)),
        hidden=hidden,
        heads=heads,
        kv_heads=draw(st.sampled_from([None, kv_heads])),
        ffn=draw(st.integers(1, 1024)),
        vocab=draw(st.integers(1, 5000)),
        activation=draw(st.sampled_from(["swiglu", "gelu"])),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        bias=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()),
    )


@st.composite
def trainings(draw: st.DrawFn, micro_batch: int | None = None) -> TrainingSpec:
    mb = micro_batch if micro_batch is not None else draw(st.integers(1, 8))
    dp = draw(st.integers(1, 64))
    stage = draw(st.integers(0, 3))
    # ZeRO-3 sub-groups hold whole tensors at any size; a flat ZeRO-0/1/2 partition in chunks of a
    # few elements would list millions of them (tiersim's work limit refuses that before building)
    smallest = 1 if stage == 3 else 10**4
    return TrainingSpec(
        seq_len=draw(st.integers(1, 4096)),
        micro_batch=mb,
        global_batch=mb * dp * draw(st.integers(1, 16)),
        data_parallel=dp,
        zero_stage=stage,
        sub_group_size=draw(st.integers(smallest, 10**6)),
        activation_checkpointing=draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None)
@given(models(), trainings())
def test_step_invariants(model: ModelSpec, training: TrainingSpec) -> None:
    step = build_step(model, training)
    dp = training.data_parallel
    sizes = [g.numel for g in step.subgroups]
    assert sum(sizes) == step.rank_params
    assert all(n > 0 for n in sizes)
    if training.zero_stage >= 3:  # whole tensor partitions until a sub-group reaches the size
        assert all(n >= training.sub_group_size for n in sizes[:-1])
        tensors = [numel for layer in step.layers for numel in layer.tensors]
        assert step.rank_params == sum(math.ceil(n / dp) for n in tensors)
        assert len(sizes) <= len(tensors)
    else:
        assert all(n <= training.sub_group_size for n in sizes)
        assert len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]
    assert [g.index for g in step.subgroups] == list(range(len(sizes)))
    if training.zero_stage >= 3:  # every tensor padded to a multiple of dp on its own
        padding = sum(1 for layer in step.layers for _ in layer.tensors)
        assert step.rank_params * dp >= step.total_params > (step.rank_params - padding) * dp
    elif training.zero_stage >= 1:
        assert step.rank_params * dp >= step.total_params > (step.rank_params - 1) * dp
    else:
        assert step.rank_params == step.total_params
    assert step.micro_steps * training.micro_batch * dp == training.global_batch
    assert sum(layer.params for layer in step.layers) == step.total_params
    assert step.activation_peak_bytes > 0


@settings(max_examples=100, deadline=None)
@given(models(), trainings(micro_batch=1), st.integers(2, 16))
def test_forward_flops_linear_in_micro_batch(model: ModelSpec, training: TrainingSpec, k: int) -> None:
    one = build_step(model, training)
    scaled = dataclasses.replace(training, micro_batch=k, global_batch=training.global_batch * k)
    many = build_step(model, scaled)
    for a, b in zip(one.layers, many.layers, strict=True):
        assert b.forward_flops == pytest.approx(k * a.forward_flops, rel=1e-12)
        assert b.activation_bytes == k * a.activation_bytes


@settings(max_examples=100, deadline=None)
@given(models(layers=1), st.integers(1, 64), st.integers(0, 64))
def test_more_layers_never_fewer_params(base: ModelSpec, layers: int, extra: int) -> None:
    fewer = dataclasses.replace(base, layers=layers)
    more = dataclasses.replace(base, layers=layers + extra)
    assert parameter_count(more) >= parameter_count(fewer)
    assert parameter_count(more) - parameter_count(fewer) == extra * layer_params(base)
