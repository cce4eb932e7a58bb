"""Validation: the real executors run at tiny sizes, update params exactly as plain torch Adam
does (so the swapping really happens), and the report's MAPE math; a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tiersim.calibration.directio import FSYNC_MODE, O_DIRECT_MODE, probe_bypass_mode
from tiersim.calibration.runner import CalibrationPlan, run_calibration
from tiersim.cli import build_parser
from tiersim.config.document import load_scenario
from tiersim.simulate import simulate
from tiersim.validation.cases import Case, quick_cases, tiny_cases
from tiersim.validation.drift import corrected_profile
from tiersim.validation.predictor import predict_case
from tiersim.validation.real_step import DRAMAdam, NVMeAdam, SwapConfig, make_initial_state, reference_adam, time_step
from tiersim.validation.report import CaseResult, mape, mape_by_strategy, render_table, to_json
from tiersim.validation.runner import run_cases

NUMELS = (40_000, 17_001, 65_536)
KiB = 1 << 10


@pytest.mark.slow
def test_dram_executor_matches_plain_adam() -> None:
    init = make_initial_state(NUMELS, seed=3)
    ref = reference_adam(init, steps=3)
    ex = DRAMAdam(init, threads=1)
    for _ in range(3):
        ex.step()
    for got, want in zip(ex.parameters(), ref):
        assert torch.equal(got, want)
    assert not torch.equal(ref[0], init[0][0])  # it did update


MODES = [O_DIRECT_MODE, FSYNC_MODE]
SWAPS = [
    SwapConfig(block_size=16 * KiB, queue_depth=2),
    SwapConfig(buffer_count=8, block_size=8 * KiB, queue_depth=3, thread_count=2, pipeline_read=True),
    SwapConfig(buffer_count=8, block_size=64 * KiB, queue_depth=1, pipeline_write=True),
    SwapConfig(buffer_count=12, block_size=32 * KiB, queue_depth=4, pipeline_read=True, pipeline_write=True),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("swap", SWAPS)
def test_nvme_executor_matches_plain_adam(tmp_path: Path, mode: str, swap: SwapConfig) -> None:
    if mode == O_DIRECT_MODE and probe_bypass_mode(tmp_path) != O_DIRECT_MODE:
        pytest.skip("filesystem refuses O_DIRECT")
    init = make_initial_state(NUMELS, seed=4)
    ref = reference_adam(init, steps=3)
    ex = NVMeAdam(init, tmp_path, swap, threads=1, mode=mode)
    try:
        # state lives in files: 4 per sub-group
        assert len(list(ex.dir.iterdir())) == 4 * len(NUMELS)
        for _ in range(3):
            ex.step()
        for got, want in zip(ex.parameters(), ref):
            assert torch.equal(got, want)
    finally:
        ex.close()
    assert list(tmp_path.iterdir()) == []


def test_nvme_executors_sharing_one_arena_each_match_plain_adam(tmp_path: Path) -> None:
    """Two executors whose swap buffers are the same memory, stepped in turn (as validation's
    rounds do), each keep their own state in their files."""
    from tiersim.calibration.directio import AlignedBuffer
    from tiersim.validation.real_step import swap_buffer_bytes

    swaps = [SwapConfig(block_size=16 * KiB, queue_depth=2),
             SwapConfig(buffer_count=8, block_size=8 * KiB, queue_depth=3, pipeline_read=True, pipeline_write=True)]
    arena = AlignedBuffer(max(swap_buffer_bytes(NUMELS, swap) for swap in swaps))
    inits = [make_initial_state(NUMELS, seed=seed) for seed in (5, 6)]
    executors = [NVMeAdam(init, tmp_path, swap, threads=1, arena=arena) for init, swap in zip(inits, swaps)]
    try:
        for _ in range(3):
            for ex in executors:
                ex.step()
        for ex, init in zip(executors, inits):
            for got, want in zip(ex.parameters(), reference_adam(init, steps=3)):
                assert torch.equal(got, want)
        with pytest.raises(ValueError, match="arena"):
            NVMeAdam(inits[0], tmp_path, SwapConfig(buffer_count=16), threads=1, arena=arena)
    finally:
        for ex in executors:
            ex.close()
        arena.close()


def test_nvme_executor_rejects_too_few_buffers(tmp_path: Path) -> None:
    from tiersim.errors import ConfigError

    init = make_initial_state((1000,))
    with pytest.raises(ConfigError):
        NVMeAdam(init, tmp_path, SwapConfig(buffer_count=4, pipeline_read=True), threads=1)


def test_real_steps_return_positive_times(tmp_path: Path) -> None:
    init = make_initial_state(NUMELS)
    for ex in (DRAMAdam(init, threads=1), NVMeAdam(init, tmp_path, SwapConfig(block_size=16 * KiB), threads=1)):
        t = time_step(ex.step, warmup=1, repeats=3)
        ex.close()
        assert t.median_s > 0 and len(t.samples) == 3 and min(t.samples) <= t.median_s <= max(t.samples)


def test_mape_math_on_hand_made_cases() -> None:
    rs = [
        CaseResult("a", "dram", predicted_s=1.1, measured_s=1.0),  # +10 %
        CaseResult("b", "dram", predicted_s=0.8, measured_s=1.0),  # -20 %
        CaseResult("c", "nvme", predicted_s=3.0, measured_s=2.0, samples_s=(1.0, 2.0, 2.0, 3.0, 9.0)),  # +50 %
    ]
    assert rs[2].spread_pct == pytest.approx(50.0)  # quartiles 2.0 and 3.0 over median 2.0
    assert rs[0].spread_pct == 0.0
    assert rs[1].error_pct == pytest.approx(-20.0)
    assert mape(rs) == pytest.approx(80.0 / 3)
    assert mape_by_strategy(rs) == pytest.approx({"dram": 15.0, "nvme": 50.0})
    assert mape([]) == 0.0
    doc = json.loads(to_json(rs))
    assert doc["mape_pct"] == pytest.approx(80.0 / 3)
    assert doc["cases"][2] == {"case": "c", "strategy": "nvme", "predicted_s": 3.0, "measured_s": 2.0,
                               "error_pct": pytest.approx(50.0)}
    text = render_table(rs)
    assert "MAPE dram: 15.0%" in text and "MAPE overall: 26.7%" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_validation_sizes_differ_from_calibration_sizes() -> None:
    from tiersim.calibration.runner import full_plan, quick_plan

    calibrated = set(quick_plan().adam_numels) | set(full_plan().adam_numels)
    for case in quick_cases():
        assert not set(case.subgroup_numels) & calibrated


def test_predicted_pipelining_never_slower() -> None:
    from tiersim.calibration.profile_writer import build_host_document
    from tiersim.config.profiles import HostProfile
    from tiersim.config.schema import build
    from tiersim.jsonout import plain

    doc = build_host_document(
        name="h", hostname="t", date="d",
        cpu={"cores_per_socket": 2, "adam_params_per_core": 1e9, "memcpy_bandwidth_per_core": 9e9},
        dram={"capacity": 1 << 34, "peak_bandwidth": 3e10, "bandwidth": 2.5e10, "latency": 1e-7},
        nvme={"capacity": 1 << 40, "read_bandwidth": 1.5e9, "write_bandwidth": 3e9,
              "read_latency": 8e-5, "write_latency": 6e-5},
        link=None, methods={}, calibration={},
    )
    host = build(HostProfile, plain(doc), "<test>")
    sg = (3_000_000,) * 4
    plain = predict_case(host, Case("plain", "nvme", sg, 1, SwapConfig()))
    piped = predict_case(host, Case("piped", "nvme", sg, 1, SwapConfig(buffer_count=12, pipeline_read=True,
                                                                        pipeline_write=True)))
    assert 0 < piped <= plain


def test_stream_rate_uses_optional_queueing() -> None:
    from dataclasses import replace

    from tiersim.config.profiles import NVMeProfile
    from tiersim.strategies.swap import SwapOptions, stream_rate

    nvme = NVMeProfile(kind="nvme", name="n", description="d", sources={}, capacity=1 << 40,
                       read_bandwidth=2e9, write_bandwidth=4e9, read_latency=1e-4, write_latency=1e-4)
    swap = SwapOptions(block_size=1 << 20, queue_depth=8)
    plain = stream_rate(nvme, swap, write=False)
    assert plain == pytest.approx(8 * (1 << 20) / (1e-4 + (1 << 20) / 2e9))
    queued = stream_rate(replace(nvme, read_queueing=1.0), swap, write=False)
    assert queued == pytest.approx(8 * (1 << 20) / (1e-4 + 8 * (1 << 20) / 2e9))
    assert stream_rate(replace(nvme, read_queueing=1.0), swap, write=True) == stream_rate(nvme, swap, write=True)


def test_interleaved_measurement_returns_samples_per_case(tmp_path: Path) -> None:
    from tiersim.validation.runner import measure_interleaved

    cases = tiny_cases()[:2]
    from types import SimpleNamespace

    host = SimpleNamespace(calibration=None)  # adam_variant falls back to fused
    samples = measure_interleaved(cases, host, tmp_path, warmup=1, repeats=3)  # type: ignore[arg-type]
    assert [len(s) for s in samples] == [3, 3] and all(t > 0 for s in samples for t in s)
    assert list(tmp_path.iterdir()) == []


def test_commands_are_registered() -> None:
    args = build_parser().parse_args(["validate", "--quick", "--format", "json"])
    assert args.quick and args.format == "json" and callable(args.func)
    args = build_parser().parse_args(["calibrate", "--quick", "--out", "x.yaml"])
    assert args.quick and str(args.out) == "x.yaml"


TINY_PLAN = CalibrationPlan(
    memcpy_sizes=(1 << 20, 4 << 20),
    memcpy_threads=(1,),
    adam_numels=(1 << 16, 1 << 17),
    adam_threads=(1,),
    io_file_size=4 << 20,
    io_block_sizes=(64 * KiB, 256 * KiB),
    io_workers=(1, 2),
    repeats=2,
    io_repeats=1,
    latency_entries=1 << 16,
    latency_steps=20_000,
    cuda_sizes=(1 << 20, 4 << 20),
    gpu_adam_numels=(1 << 16, 1 << 17),
)


@pytest.mark.slow
def test_end_to_end_tiny_calibration_then_validation(tmp_path: Path) -> None:
    ticks: list[str] = []
    result = run_calibration(TINY_PLAN, tmp_path / "host-tiny.yaml", tmp_path, on_point=ticks.append)
    assert len(ticks) == TINY_PLAN.points(False) or torch.cuda.is_available()
    host = result.profile
    assert host.calibration["page_cache_bypass"] in (O_DIRECT_MODE, FSYNC_MODE)  # type: ignore[index]
    assert host.nvme.read_bandwidth > 0 and host.cpu.adam_params_per_core > 0
    validation = run_cases(tiny_cases(), host, tmp_path, warmup=1, repeats=2)
    drift = validation.drift
    assert min(drift.adam, drift.read, drift.write) > 0 and validation.corrected
    for r in validation.results:  # both predictions; the headline one is drift-corrected
        assert r.other_s is not None and r.other_s > 0 and len(r.samples_s) == 2
    first = validation.results[0]
    assert first.other_s == pytest.approx(predict_case(host, tiny_cases()[0]))
    assert first.predicted_s == pytest.approx(predict_case(corrected_profile(host, drift), tiny_cases()[0]))
    assert first.other_s != first.predicted_s or drift.adam == 1.0
    doc = json.loads(to_json(validation.results))
    assert set(doc) == {"cases", "mape_pct"} and isinstance(doc["mape_pct"], float)
    assert len(doc["cases"]) == len(tiny_cases())
    for c in doc["cases"]:
        assert set(c) == {"case", "strategy", "predicted_s", "measured_s", "error_pct"}
        assert c["predicted_s"] > 0 and c["measured_s"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host-tiny.yaml"]
    # The calibrated profile is one `tiersim run` can use: a small model on this host's CPU,
    # DRAM and disk (the GPU side still from the scenario's profiles).
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
    configs = load_scenario(scenario, [f"hardware.host={tmp_path / 'host-tiny.yaml'}", "hardware.nvme=null",
                                       "model.layers=2",
                                       "model.hidden=1024", "model.heads=8", "model.kv_heads=8", "model.ffn=2816"],
                            ["dram", "nvme"])
    for config in configs:
        assert config.hardware.cpu.name == host.cpu.name and config.hardware.nvme == host.nvme
        run = simulate(config)
        assert run.fits and run.iteration_time_s is not None and run.iteration_time_s > 0


@pytest.mark.slow
def test_drift_correction_scales_rates_and_keeps_shape(tmp_path: Path) -> None:
    """A 2x faster CPU and a disk reading at half speed: Adam rates double, read bandwidth
    halves, every fitted shape parameter (overhead, latency, queueing) stays."""
    from tiersim.validation.drift import Drift

    host = run_calibration(TINY_PLAN, tmp_path / "host-tiny.yaml", tmp_path).profile
    fixed = corrected_profile(host, Drift(adam=2.0, read=0.5, write=1.0))
    assert fixed.cpu.adam_rate(1) == pytest.approx(2 * host.cpu.adam_rate(1))
    assert fixed.cpu.adam_step_overhead == host.cpu.adam_step_overhead
    assert fixed.nvme.read_bandwidth == pytest.approx(host.nvme.read_bandwidth / 2)
    assert fixed.nvme.write_bandwidth == host.nvme.write_bandwidth
    assert (fixed.nvme.read_latency, fixed.nvme.read_queueing) == (host.nvme.read_latency, host.nvme.read_queueing)
    assert "CPU Adam +100%" in Drift(adam=2.0, read=0.5).describe() and "disk read -50%" in Drift(read=0.5).describe()


@pytest.mark.slow
def test_drift_reference_is_the_calibration_record_at_the_probe_point(tmp_path: Path) -> None:
    """The probes compare with the calibration's raw time at their own point (scaled to the
    probe's size), so the fit's residual there is not taken for drift; without such a record,
    with the fitted model's time."""
    from dataclasses import replace

    from tiersim.validation.drift import ADAM_PROBE_NUMEL, IO_PROBE_BLOCK, IO_PROBE_BYTES, IO_PROBE_WORKERS, DriftProbes

    host = run_calibration(TINY_PLAN, tmp_path / "host-tiny.yaml", tmp_path).profile
    probes = DriftProbes.__new__(DriftProbes)  # only the reference figures, no buffers or files
    probes.host, probes.variant = host, "fused"
    assert probes.reference_seconds() == probes.model_seconds()  # the tiny plan has no such points
    records = {
        "adam": {"records": [{"variant": "fused", "numel": ADAM_PROBE_NUMEL, "threads": 1, "seconds": 0.02}]},
        "file_io": {"records": [{"op": "read", "block_size": IO_PROBE_BLOCK, "workers": IO_PROBE_WORKERS,
                                 "bytes": IO_PROBE_BYTES // 2, "seconds": 0.05}]},
    }
    probes.host = replace(host, calibration=records)
    got = probes.reference_seconds()
    assert got["adam"] == 0.02 and got["read"] == pytest.approx(0.1)
    assert got["write"] == probes.model_seconds()["write"]
    probes.samples = {"adam": [0.04, 0.01, 0.04], "read": [0.1], "write": []}
    drift = probes.drift()
    assert (drift.adam, drift.read, drift.write) == pytest.approx((0.5, 1.0, 1.0))
