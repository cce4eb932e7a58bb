"""Mixture of experts in the workload: parameters and optimizer state count every expert, compute
the top-k ones (analytic cases), the expert GEMMs see their share of the tokens, and the optimizer
sub-groups counted without listing them match the listed ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.catalogue import lookup
from tiersim.commands.models import spec
from tiersim.layer_kernels import decoder_passes
from tiersim.projections import is_moe_layer
from tiersim.workload import (
    ModelSpec,
    TrainingSpec,
    build_step,
    layer_params,
    moe_layer_count,
    parameter_count,
    subgroup_count,
)

TRAINING = TrainingSpec(seq_len=2048, micro_batch=1, global_batch=1, zero_stage=3, sub_group_size=100_000_000)


def _mixtral() -> ModelSpec:
    entry = lookup("mistralai/Mixtral-8x7B-v0.1")
    assert entry is not None
    return spec(entry)


def test_mixtral_forward_flops_per_token_are_those_of_two_of_its_eight_experts() -> None:
    model = _mixtral()
    h, f, kv, t, s = 4096, 14336, 1024, 2048, 2048
    step = build_step(model, TRAINING)
    layer = step.layers[1]
    attention = 2 * (h * (h + 2 * kv) + h * h)  # QKV and output projections, per token
    experts = 2 * 2 * 3 * h * f  # two experts of three h x f matrices, per token
    router = 2 * h * 8
    scores = 2 * 2 * s * h  # QK^T and PV, per token of a 2048-token sequence
    assert layer.forward_flops == t * (attention + experts + router + scores)
    dense = replace(model, experts=0, experts_per_token=0)
    dense_layer = build_step(dense, TRAINING).layers[1]
    assert layer.forward_flops - dense_layer.forward_flops == t * (2 * 3 * h * f + router)  # one more expert


def test_parameters_and_optimizer_state_count_every_expert() -> None:
    model = _mixtral()
    h, f = 4096, 14336
    assert layer_params(model, True) - layer_params(model) == 7 * 3 * h * f + h * 8  # 7 more experts, the router
    step = build_step(model, TRAINING)
    assert step.total_params == parameter_count(model) == step.rank_params
    assert step.optimizer_state_bytes() == 12 * parameter_count(model)


def test_expert_gemms_run_on_each_experts_share_of_the_tokens() -> None:
    model = _mixtral()
    forward, backward = decoder_passes(model, TRAINING, moe=True)
    experts = [g for g in forward.gemms if g.batch == 8]
    assert [(g.m, g.n, g.k) for g in experts] == [(512, 2 * 14336, 4096), (512, 4096, 14336)]  # 2048 * 2 / 8
    assert sum(g.flops for g in experts) == 2048 * 2 * 2 * 3 * 4096 * 14336
    assert [g for g in backward.gemms if g.batch == 8][-1].k == 512  # a weight gradient sums over its tokens
    assert sum(g.flops for g in backward.gemms if g.batch == 8) == 2 * sum(g.flops for g in experts)
    dense_forward, _ = decoder_passes(model, TRAINING)
    assert forward.module_calls - dense_forward.module_calls == 5 + 8 * 3 - 3  # ZeRO-3 hooks on every expert


def test_deepseek_v3_has_three_dense_layers_then_experts_with_a_shared_one() -> None:
    entry = lookup("deepseek-ai/DeepSeek-V3")
    assert entry is not None
    model = spec(entry)
    assert [is_moe_layer(model, i) for i in range(5)] == [False, False, False, True, True]
    step = build_step(replace(model, layers=5), TRAINING)
    dense, moe = step.layers[1], step.layers[4]
    assert moe.params - dense.params == 256 * 3 * 7168 * 2048 + 7168 * 256 + 3 * 7168 * (2048 - 18432)
    per_token = 2 * 3 * 7168 * 2048 * (8 + 1) + 2 * 7168 * 256 - 2 * 3 * 7168 * 18432
    assert moe.forward_flops - dense.forward_flops == pytest.approx(2048 * per_token)


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(1, 9), dense=st.integers(0, 3), interval=st.integers(1, 3), experts=st.integers(1, 6),
       size=st.integers(1, 40_000), dp=st.sampled_from([1, 2, 3, 4]), stage=st.integers(0, 3),
       ep=st.sampled_from([1, 2, 4]))
def test_subgroup_count_matches_the_listed_subgroups(layers: int, dense: int, interval: int, experts: int, size: int,
                                                     dp: int, stage: int, ep: int) -> None:
    model = ModelSpec(layers=layers + dense, hidden=16, heads=2, ffn=24, vocab=50, experts=experts,
                      experts_per_token=1, expert_ffn=8, dense_layers=dense, moe_interval=interval,
                      shared_experts=1)
    fits = stage < 3 and dp % ep == 0 and experts % ep == 0  # where expert parallelism runs
    training = TrainingSpec(seq_len=8, global_batch=dp, data_parallel=dp, sub_group_size=size, zero_stage=stage,
                            expert_parallel=ep if fits else 1)
    step = build_step(model, training)
    assert moe_layer_count(model) == sum(is_moe_layer(model, i) for i in range(model.layers))
    assert subgroup_count(model, training) == len(step.subgroups)
    assert sum(step.subgroup_sizes) == step.rank_params


@settings(max_examples=30, deadline=None)
@given(experts=st.integers(1, 8), width=st.integers(1, 16), shared=st.integers(0, 2), seq=st.sampled_from([8, 16]))
def test_every_token_through_every_expert_costs_a_dense_ffn_as_wide(experts: int, width: int, shared: int,
                                                                     seq: int) -> None:
    """With top-k = experts, the experts are one FFN ``(experts + shared) * expert_ffn`` wide plus
    the router: the same FLOPs, and the GEMMs' FLOPs are the layer's."""
    moe = ModelSpec(layers=2, hidden=16, heads=2, ffn=24, vocab=50, experts=experts, experts_per_token=experts,
                    expert_ffn=width, shared_experts=shared)
    dense = ModelSpec(layers=2, hidden=16, heads=2, ffn=(experts + shared) * width, vocab=50)
    training = TrainingSpec(seq_len=seq, global_batch=1)
    layer, plain = build_step(moe, training).layers[1], build_step(dense, training).layers[1]
    assert layer.forward_flops == plain.forward_flops + 2 * seq * 16 * experts
    assert layer.forward_kernels.flops == pytest.approx(layer.forward_flops)
    assert sum(x.params for x in build_step(moe, training).layers) == parameter_count(moe)
