"""Tests for tiersim.layer_kernels (shapes, bytes) and tiersim.strategies.gpu_kernels (seconds)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.profiles import GPUProfile, find_profile
from tiersim.layer_kernels import (
    RMSNORM_BYTES,
    PassKernels,
    decoder_passes,
    gemm,
    linear,
    linear_backward,
    norm_bytes,
    score_bytes_kept,
    score_matrix_bytes,
)
from tiersim.strategies.gpu_kernels import gemm_seconds, gemm_tiles, gemm_waves, hook_seconds, pass_seconds
from tiersim.workload import ModelSpec, TrainingSpec, build_step


def _a100(tile_m: int = 128, tile_n: int = 128) -> GPUProfile:
    gpu = find_profile("a100-sxm4-40gb", GPUProfile, "<test>", "gpu")
    return dataclasses.replace(gpu, gemm_tile_m=tile_m, gemm_tile_n=tile_n)


def test_a100_sxm4_40gb_datasheet_figures() -> None:
    gpu = find_profile("a100-sxm4-40gb", GPUProfile, "<test>", "gpu")
    assert (gpu.sm_count, gpu.bf16_flops, gpu.hbm_bandwidth) == (108, 312e12, 1555e9)
    assert gpu.nvlink_bandwidth == 300e9 and gpu.hbm_capacity == 40 * 2**30 and gpu.host_link == "pcie-gen4-x16"


def test_gemm_4096_cubed_with_128_tiles_takes_10_waves_on_108_sms() -> None:
    gpu = _a100()
    square = gemm(4096, 4096, 4096)
    assert gemm_tiles(square, gpu) == 32 * 32 == 1024
    assert gemm_waves(square, gpu) == 10  # 1024 / 108 = 9.48
    per_sm = 312e12 / 108 * gpu.compute_efficiency
    assert gemm_seconds(square, gpu) == pytest.approx(10 * 2 * 128 * 128 * 4096 / per_sm, rel=1e-12)


def test_one_row_past_a_tile_multiple_adds_a_partial_tile_row() -> None:
    gpu = _a100()
    taller = gemm(4097, 4096, 4096)
    assert gemm_tiles(taller, gpu) == 33 * 32 == 1056
    assert gemm_waves(taller, gpu) == 10  # 1056 / 108 = 9.78
    assert gemm_waves(gemm(128 * 27 + 1, 128 * 4, 64), gpu) == 2  # 108 tiles fill a wave, 4 more start another


def test_tile_laid_the_way_that_needs_fewer() -> None:
    gpu = _a100(128, 256)
    # 4096 x 128: 32 tiles of 128 x 256 (half empty) one way, 16 full ones the other
    assert gemm_tiles(gemm(4096, 128, 4096), gpu) == 16
    assert gemm_tiles(gemm(128, 4096, 4096), gpu) == 16
    assert gemm_tiles(gemm(4096, 128, 4096, batch=3), gpu) == 48


def test_thin_gemm_is_bound_by_its_bytes_over_hbm() -> None:
    gpu = _a100()
    outer = gemm(8192, 8192, 1)  # writes 128 MiB of output for 134 MFLOP
    assert outer.hbm_bytes == 2 * (8192 + 8192 + 8192 * 8192)
    assert gemm_seconds(outer, gpu) == pytest.approx(outer.hbm_bytes / (1555e9 * gpu.memory_efficiency), rel=1e-12)


def test_linear_backward_is_input_and_weight_gradient() -> None:
    forward = linear(tokens=10, inputs=3, outputs=7)
    assert (forward.m, forward.n, forward.k) == (10, 7, 3)
    dgrad, wgrad = linear_backward(forward)
    assert (dgrad.m, dgrad.n, dgrad.k) == (10, 3, 7) and (wgrad.m, wgrad.n, wgrad.k) == (3, 7, 10)
    assert dgrad.flops + wgrad.flops == 2 * forward.flops


def _model(**changes: object) -> ModelSpec:
    base = ModelSpec(layers=2, hidden=64, heads=8, kv_heads=2, ffn=160, vocab=100)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_rmsnorm_bytes_by_hand() -> None:
    # Megatron-DeepSpeed's RMSNorm over 2 x 8 tokens of hidden 4: float 2+4, pow 4+4, mean 4,
    # x*rsqrt 4+4, type_as 4+2, *weight 2+2 = 36 bytes per element, 64 elements
    assert RMSNORM_BYTES == 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2 + 2 + 2
    assert norm_bytes(_model(hidden=4, heads=1, kv_heads=1), tokens=16) == 36 * 64
    assert norm_bytes(_model(hidden=4, heads=1, kv_heads=1, norm="layernorm"), tokens=16) == 4 * 64


def test_score_matrix_traffic_grows_with_seq_squared_without_flash() -> None:
    model = _model()
    short = TrainingSpec(seq_len=512, micro_batch=2, global_batch=2, flash_attention=False)
    long = dataclasses.replace(short, seq_len=1024)
    assert score_matrix_bytes(model, short) == 2 * 2 * 8 * 512**2
    assert score_matrix_bytes(model, long) == 4 * score_matrix_bytes(model, short)
    assert score_matrix_bytes(model, dataclasses.replace(long, flash_attention=True)) == 0
    # the softmax reads and writes it in the forward; QK^T writes it and PV reads it (their bytes)
    fwd_short, _ = decoder_passes(model, short)
    fwd_flash, _ = decoder_passes(model, dataclasses.replace(short, flash_attention=True))
    qk, pv = fwd_short.gemms[-2:]
    scores = 2 * 512**2 * 16  # 16 heads over the micro-batch
    assert qk.hbm_bytes - fwd_flash.gemms[-2].hbm_bytes == pv.hbm_bytes - fwd_flash.gemms[-1].hbm_bytes == scores


def test_hook_latency_times_module_calls_for_zero3_only() -> None:
    gpu = dataclasses.replace(_a100(), zero3_hook_latency=1e-3)
    work = PassKernels((), 0.0, 12)
    assert hook_seconds(work, gpu, 3) == pytest.approx(12e-3)
    assert hook_seconds(work, gpu, 2) == 0.0
    assert pass_seconds(work, gpu, 3) == pytest.approx(12e-3)  # no kernels: the host sets the time
    busy = PassKernels((gemm(16384, 16384, 16384),), 0.0, 12)  # ~35 ms of kernels
    assert pass_seconds(busy, gpu, 3) == pytest.approx(gemm_seconds(busy.gemms[0], gpu))  # hooks overlap
    flash, _ = decoder_passes(_model(), TrainingSpec(global_batch=1))
    plain, _ = decoder_passes(_model(), TrainingSpec(global_batch=1, flash_attention=False))
    assert (flash.module_calls, plain.module_calls) == (10, 12)  # softmax and dropout modules


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.sampled_from([1, 2, 4]), st.integers(1, 3), st.sampled_from([64, 512, 2048]),
       st.booleans(), st.integers(0, 3))
def test_layer_gpu_time_monotone_in_micro_batch(width: int, kv: int, mb: int, seq: int, flash: bool,
                                                stage: int) -> None:
    model = ModelSpec(layers=1, hidden=256 * width, heads=4, kv_heads=kv, ffn=688 * width, vocab=1000)
    gpu = find_profile("a100-sxm4-40gb", GPUProfile, "<test>", "gpu")
    times = []
    for micro in (mb, mb + 1):
        training = TrainingSpec(seq_len=seq, micro_batch=micro, global_batch=micro, flash_attention=flash,
                                zero_stage=stage)
        step = build_step(model, training)
        times.append([pass_seconds(layer.forward_kernels, gpu, stage) + pass_seconds(layer.backward_kernels, gpu, stage)
                      for layer in step.layers])
    assert all(b >= a for a, b in zip(*times, strict=True))
    if stage < 3:  # under ZeRO-3 a small layer's time is its hooks' host time, the same at any batch
        assert times[1][1] > times[0][1]


def test_without_flash_a_layer_keeps_its_softmax_output_and_the_dropouts_mask_and_output() -> None:
    """Korthikanti et al. 2022: ``34 s b h`` plus, per element of the ``b a s^2`` scores, the
    16-bit softmax output, and with an attention dropout its 1-byte mask and 16-bit output (5 in
    all); with flash attention none of it."""
    model = _model()  # 8 heads, hidden 64
    s, b, heads, h = 512, 2, 8, 64
    base = TrainingSpec(seq_len=s, micro_batch=b, global_batch=b, activation_checkpointing=False,
                        flash_attention=False)
    kept = {}
    for name, training in (("flash", dataclasses.replace(base, flash_attention=True)), ("softmax", base),
                           ("dropout", dataclasses.replace(base, attention_dropout=0.1))):
        kept[name] = build_step(model, training).layers[1].working_bytes
    assert kept["flash"] == 34 * s * b * h
    assert kept["softmax"] - kept["flash"] == score_bytes_kept(model, base) == 2 * heads * s * s * b
    assert kept["dropout"] - kept["flash"] == 5 * heads * s * s * b


def test_the_attention_dropout_and_the_unfused_mask_pass_over_the_scores() -> None:
    """Per score element: the dropout moves 5 B forward (2 read, 2 written, a 1-byte mask) and
    5 B backward; the unfused scale, mask multiply and subtract 12 B forward (2+2 each) and 8 B
    backward (the multiply's and the scale's); flash attention keeps both on chip."""
    model = _model()
    base = TrainingSpec(seq_len=512, micro_batch=2, global_batch=2, flash_attention=False)
    elements = 2 * 8 * 512**2  # micro-batch 2, 8 heads
    fwd, bwd = decoder_passes(model, base)
    fwd_d, bwd_d = decoder_passes(model, dataclasses.replace(base, attention_dropout=0.1))
    fwd_u, bwd_u = decoder_passes(model, dataclasses.replace(base, masked_softmax_fusion=False))
    assert (fwd_d.memory_bytes - fwd.memory_bytes, bwd_d.memory_bytes - bwd.memory_bytes) == (5 * elements,) * 2
    assert (fwd_u.memory_bytes - fwd.memory_bytes, bwd_u.memory_bytes - bwd.memory_bytes) == (12 * elements,
                                                                                             8 * elements)
    flash = dataclasses.replace(base, flash_attention=True)
    extra = dataclasses.replace(flash, attention_dropout=0.1, masked_softmax_fusion=False)
    assert decoder_passes(model, extra) == decoder_passes(model, flash)
