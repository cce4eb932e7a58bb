"""ZeRO-1/2 with CPU offload (DeepSpeed's ``stage_1_and_2.py``, the original ZeRO-Offload): the
16-bit model whole in HBM, the fp32 state of the rank's flat partition on the host, the gradient
copies of each micro-step, the step's copy back and all-gather, and the refusals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from tiersim import cli
from tiersim.config.document import load_scenario
from tiersim.engine import Task
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies import zero12_hbm
from tiersim.strategies.footprint import ALLOCATOR_RESERVE, pinned, zero_one_two_reserve_bounds
from tiersim.workload import build_step

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
SMALL = ["model.layers=4", "training.sub_group_size=1e8", "hardware.gpu=h200"]


def run(*overrides: str, strategy: str = "dram") -> Result:
    (config,) = load_scenario(QUICKSTART, [*SMALL, *overrides], strategies=[strategy])
    return simulate(config, fast_forward=False)


def tasks(result: Result, phase: str | None = None) -> list[Task]:
    assert result.graph is not None
    return [t for t in result.graph.tasks if phase is None or t.phase == phase]


def hbm(result: Result, what: str) -> int:
    return sum(allocated for tier, name, allocated, _held in result.placement_items if tier == "hbm" and what in name)


def held(result: Result, tier: str, what: str) -> int:
    return sum(h for t, name, _allocated, h in result.placement_items if t == tier and name == what)


RESERVE = "caching-allocator reserve (freed blocks kept)"


def test_zero1_keeps_the_whole_16_bit_gradients_in_hbm_and_zero2_does_not() -> None:
    one, two = run("training.zero_stage=1"), run("training.zero_stage=2")
    step = build_step(one.config.model, one.config.training)
    assert hbm(one, "bf16 parameters") == hbm(two, "bf16 parameters") == 2 * step.total_params
    assert one.peak_bytes["hbm"] - two.peak_bytes["hbm"] == 2 * step.total_params


def test_the_host_holds_16_bytes_per_element_of_the_partition() -> None:
    result = run("training.zero_stage=2", "hardware.gpus=2", "training.global_batch=2")
    step = build_step(result.config.model, result.config.training)
    host = {name: allocated for tier, name, allocated, _held in result.placement_items if tier == "dram"}
    state = host["fp32 params"] + host["Adam m, v"] + host["fp32 gradients"]
    assert state == 16 * step.rank_params * 2  # two ranks
    assert step.rank_params == -(-step.total_params // 2)


@pytest.mark.parametrize(("version", "step_copy_bytes"), [("0.16.2", 4), ("0.13.3", 2)])
def test_the_step_copies_back_then_all_gathers(version: str, step_copy_bytes: int) -> None:
    """From 0.14.1 the fp32 partition goes H2D whole (and 4 B per element sit in HBM meanwhile);
    before, the CPU converts it and copies 2 B per element. Then one all-gather of the model."""
    result = run("training.zero_stage=2", "hardware.gpus=2", "training.global_batch=2",
                 f"training.deepspeed_version={version}")
    step = build_step(result.config.model, result.config.training)
    h2d = [t for t in tasks(result, "optimizer_step") if t.name.endswith(".h2d")]
    assert sum(t.size for t in h2d) == step_copy_bytes * step.rank_params
    (gather,) = [t for t in tasks(result, "optimizer_step") if t.stream == "allgather"]
    assert gather.size == pytest.approx(2 * step.total_params / 2)
    transient = hbm(result, "optimizer step's temporary")
    assert (transient > 0) == (version == "0.16.2")


def test_zero2_copies_every_micro_step_and_zero1_at_the_boundary() -> None:
    """Three micro-steps: ZeRO-2 copies each layer's 16-bit gradient D2H in the first and H2D in
    the others, ZeRO-1 only H2D at the boundary; both copy the fp32 partition D2H at the
    boundary. ZeRO-1 reduces at the boundary only."""
    for stage, lp_copies in ((2, 3), (1, 1)):
        result = run(f"training.zero_stage={stage}", "hardware.gpus=2", "training.global_batch=6")
        step = build_step(result.config.model, result.config.training)
        backward = tasks(result, "backward")
        lp = [t for t in backward if t.name.endswith((".grad_d2h", ".grad_h2d"))]
        fp32 = [t for t in backward if t.name.endswith(".fp32_grad_d2h")]
        assert sum(t.size for t in lp) == lp_copies * 2 * sum(step.rank_partitions)
        assert sum(t.size for t in fp32) == 4 * sum(step.rank_partitions)
        reduces = [t for t in backward if t.stream == "reduce_scatter"]
        assert len(reduces) == len(step.layers) * (3 if stage == 2 else 1)


@pytest.mark.parametrize(("strategy", "policy"), [("dram", []), ("cxl", ["strategies.cxl.policy=bind",
                                                                          "hardware.dram_capacity=12GiB"])])
def test_fast_forward_agrees_at_zero_1_and_2(strategy: str, policy: list[str]) -> None:
    """Also where a bind spills the partition's tail to CXL, each chunk and layer costed where it
    is, and without ``overlap_comm`` (the copies on the compute stream)."""
    for stage, overlap in ((1, "true"), (2, "true"), (2, "false")):
        (config,) = load_scenario(QUICKSTART, [*SMALL, f"training.zero_stage={stage}", "hardware.gpus=2",
                                               "training.global_batch=10", f"training.overlap_comm={overlap}",
                                               *policy], strategies=[strategy])
        fast, whole = simulate(config), simulate(config, fast_forward=False)
        assert whole.fits and fast.iteration_time_s == pytest.approx(whole.iteration_time_s, rel=1e-9)
        if policy:
            assert 0 < whole.peak_bytes["cxl"] < whole.peak_bytes["dram"]


@pytest.mark.parametrize(("strategy", "stage", "message"), [
    ("nvme", 2, "training.zero_stage: 2: DeepSpeed offloads the optimizer state to NVMe under ZeRO-3 only"),
    ("dram", 0, "training.zero_stage: 0: DeepSpeed offloads the optimizer state of a ZeRO optimizer only"),
])
def test_offload_deepspeed_does_not_run_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], strategy: str,
                                                               stage: int, message: str) -> None:
    assert cli.main(["run", str(QUICKSTART), "--strategy", strategy, "--set", f"training.zero_stage={stage}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_the_zero_offload_tutorial_setting_runs() -> None:
    """The bundled ZeRO-Offload tutorial scenario (ZeRO-2, 10B GPT-2, one V100-SXM3 32GB): the
    whole 16-bit model in HBM, the rank's fp32 state (16 B per parameter) in DRAM, and the
    tensors allocated in HBM within its 32,480 MiB."""
    (config,) = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "zero-offload-10b-v100.yaml")
    result = simulate(config)
    step = build_step(config.model, config.training)
    assert 10.0e9 < step.total_params < 10.5e9
    assert hbm(result, "parameters") == 2 * step.total_params
    assert result.peak_bytes["hbm"] < result.capacity_bytes["hbm"] == 32_480 * 2**20
    assert result.peak_bytes["dram"] > 16 * step.total_params


def test_the_zero_offload_tutorials_hbm_item_by_item() -> None:
    """The tutorial's setting in bytes, from its shape alone (s 1024, b 10, h 4096, 32 heads, f
    16384, vocabulary 50,304, tied): the 16-bit model, one ipg bucket of 5e7 elements
    (``overlap_comm`` unset), ``temp_grad_buffer_for_gpu_offload`` (2 B per element of the
    embedding, the largest parameter); at the peak, a decoder layer's backward: the checkpoint
    being recomputed and the head's input (2sbh each), the recomputed layer's 34sbh and
    5 a s^2 b (softmax output, dropout mask and output), the largest layer weight's 16-bit
    gradient and its fp64 copy for the norm (f x h at 2 + 8 B), the tied embedding's gradient from
    the head (2 V h); the allocator reserve, one score matrix (2 a s^2 b); the CUDA context."""
    (config,) = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "zero-offload-10b-v100.yaml")
    result = simulate(config)
    step, gpu = build_step(config.model, config.training), config.hardware.gpu
    assert gpu is not None and config.training.deepspeed_version == "0.10"
    s, b, h, a, f, v = 1024, 10, 4096, 32, 16384, 50304
    persistent = 2 * step.total_params + 2 * 50_000_000 + 2 * v * h
    layer = 2 * (2 * s * b * h) + 34 * s * b * h + 5 * a * s * s * b + (2 + 8) * f * h + 2 * v * h
    expected = persistent + layer + 2 * a * s * s * b + gpu.reserved_memory
    assert sum(h for tier, _what, _a, h in result.placement_items if tier == "hbm") == expected
    assert result.fits and expected < result.capacity_bytes["hbm"]


def test_the_zero_one_two_peak_is_the_largest_moment_not_a_sum_of_maxima() -> None:
    """The three moments of a ZeRO-1/2 offload backward, each the sum of what is live then: a
    decoder layer's, the LM head's (fp32 logits 4 t V, their 16-bit gradient 2 t V, the head
    weight's gradient), the embedding's gradient and its fp64 copy (10 B per element)."""
    (config,) = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "zero-offload-10b-v100.yaml")
    step = build_step(config.model, config.training)
    t, v, h = step.tokens_per_micro_batch, config.model.vocab, config.model.hidden
    head = step.kept_activation_bytes + 6 * t * v + 2 * v * h
    embedding = 10 * v * h
    peak = zero12_hbm.transient_peak(step)
    assert all(what.startswith("layer backward: ") for what in peak)
    assert sum(peak.values()) > max(head, embedding)
    short = build_step(config.model, dataclasses.replace(config.training, seq_len=128, micro_batch=1))
    moment = zero12_hbm.transient_peak(short)
    assert all(what.startswith("embedding gradient: ") for what in moment)
    assert sum(moment.values()) == embedding
    whole = build_step(config.model, dataclasses.replace(config.training, activation_checkpointing=False,
                                                         cpu_checkpointing=False))
    assert zero12_hbm._layer_moment(whole)["recomputed layer's activations"] == 0  # among those kept
    wide = dataclasses.replace(config.model, vocab=256_000)
    big = build_step(wide, config.training)
    moment = zero12_hbm.transient_peak(big)
    assert all(what.startswith("LM head backward: ") for what in moment)
    assert sum(moment.values()) == big.kept_activation_bytes + 6 * t * 256_000 + 2 * 256_000 * h


def test_the_allocator_reserve_at_zero_1_and_2_is_a_layers_largest_block() -> None:
    """No parameter gather churns the allocator below ZeRO-3: what it holds beyond the transient
    peak is the point estimate ``largest_block`` (here, with flash attention, the SwiGLU
    intermediate ``2 x t x f``), between 0 and one layer's working set; ZeRO-3 keeps its
    calibrated ``ALLOCATOR_RESERVE`` per transient byte."""
    for stage in (1, 2):
        result = run(f"training.zero_stage={stage}")
        step = build_step(result.config.model, result.config.training)
        low, high = zero_one_two_reserve_bounds(step)
        assert held(result, "hbm", RESERVE) == 2 * step.tokens_per_micro_batch * result.config.model.ffn
        assert low < held(result, "hbm", RESERVE) < high
    three = run("training.zero_stage=3", "hardware.gpus=2", "training.global_batch=2")
    parts = ("activations", "gradient of the largest", "fp32 gradient", "gathered")
    transient = sum(hbm(three, what) for what in parts)
    assert held(three, "hbm", RESERVE) == round(ALLOCATOR_RESERVE * transient) - transient


def test_without_overlap_comm_the_copies_block_the_backward() -> None:
    """``overlap_comm: false`` (DeepSpeed's default below ZeRO-3): one ipg bucket, and every
    layer's boundary checks (34 B per element) and fp32 D2H on the compute stream, so the
    backward lasts its compute plus the copies; with it they run on their own stream."""
    off, on = run("training.zero_stage=2", "training.overlap_comm=false"), run("training.zero_stage=2")
    step = build_step(off.config.model, off.config.training)
    assert hbm(on, "second reduce bucket") == 2 * off.config.training.reduce_bucket_size
    assert hbm(off, "second reduce bucket") == 0
    moved = [t for t in tasks(off, "backward") if t.name.endswith((".grad_checks", ".fp32_grad_d2h"))]
    assert {t.stream for t in moved} == {"gpu"}
    assert {t.stream for t in tasks(on, "backward") if t.name.endswith(".fp32_grad_d2h")} == {"partition_grads"}
    checks = [t for t in moved if t.name.endswith(".grad_checks")]
    assert sum(t.size for t in checks) == 34 * sum(step.rank_partitions)
    assert off.phases["backward"] > on.phases["backward"]
    busy = sum(r.end - r.start for r in off.run.records if r.phase == "backward" and r.stream == "gpu")
    assert off.phases["backward"] == pytest.approx(busy, rel=1e-6)


def test_the_step_unscales_the_fp32_gradients_on_the_cpu_first() -> None:
    """``unscale_and_clip_grads``: one CPU pass over the partition's fp32 gradients (4 B read,
    4 B written per element) before the first CPU Adam."""
    result = run("training.zero_stage=2")
    step = build_step(result.config.model, result.config.training)
    (unscale,) = [t for t in tasks(result, "optimizer_step") if t.name == "step.unscale"]
    assert unscale.size == 4 * step.rank_params and unscale.stream == "cpu"  # bytes written
    (first,) = [t for t in tasks(result, "optimizer_step") if t.name == "step.0.adam"]
    assert unscale.name in first.deps


@pytest.mark.parametrize(("version", "pin", "held_bytes"), [
    ("0.16.2", "true", pinned), ("0.16.2", "false", int), ("0.10.0", "false", pinned)])
def test_the_host_keeps_the_largest_parameters_16_bit_gradient_buffer(version: str, pin: str,
                                                                     held_bytes: Callable[[int], int]) -> None:
    """``temp_grad_buffer_for_cpu_offload``: 2 B per element of the largest parameter, pinned as
    ``pin_memory`` says from 0.10.1 and always before."""
    result = run("training.zero_stage=2", f"training.deepspeed_version={version}", f"hardware.pinned={pin}")
    step = build_step(result.config.model, result.config.training)
    host = {name: (a, h) for tier, name, a, h in result.placement_items if tier == "dram"}
    size = 2 * step.largest_tensor
    assert host["16-bit gradient buffer of the offload (host)"] == (size, held_bytes(size))


def test_overlap_comm_false_at_zero3_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(QUICKSTART), "--strategy", "dram", "--set", "training.overlap_comm=false"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "training.overlap_comm: false is modelled at ZeRO stage 1 and 2 only" in err
