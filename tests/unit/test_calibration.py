"""Calibration: fits recover known parameters from synthetic data; the writer's profile loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiersim.calibration import fit
from tiersim.calibration.directio import FSYNC_MODE, O_DIRECT_MODE, probe_bypass_mode
from tiersim.calibration.profile_writer import build_host_document, write_host_profile
from tiersim.config.profiles import HostProfile, load_profile_file

MiB = 1 << 20


def test_latency_bandwidth_fit_recovers_parameters() -> None:
    rng = np.random.default_rng(1)
    sizes = np.array([1, 4, 16, 64, 256, 512]) * MiB
    latency, bandwidth = 7e-6, 9.5e9
    seconds = (latency + sizes / bandwidth) * (1 + rng.normal(0, 0.001, sizes.size))
    f = fit.fit_latency_bandwidth(sizes, seconds)
    assert f.rate == pytest.approx(bandwidth, rel=0.01)
    assert f.intercept == pytest.approx(latency, rel=0.05)
    assert f.max_abs_residual < 0.01
    assert len(f.residuals) == sizes.size


def test_overhead_rate_fits_recover_adam_parameters() -> None:
    rng = np.random.default_rng(2)
    numels = np.array([1 << 21, 1 << 22, 1 << 23, 1 << 24], dtype=float)
    overhead, rate = 120e-6, 1.2e9
    seconds = (overhead + numels / rate) * (1 + rng.normal(0, 0.002, numels.size))
    free = fit.fit_overhead_rate(numels, seconds)
    assert free.rate == pytest.approx(rate, rel=0.01)
    fixed = fit.fit_rate_given_intercept(numels, seconds, overhead)
    assert fixed.rate == pytest.approx(rate, rel=0.01)
    assert fixed.intercept == overhead


def test_queue_model_fit_recovers_latency_and_bandwidth() -> None:
    rng = np.random.default_rng(3)
    blocks, workers = np.meshgrid([128 << 10, 256 << 10, 1 << 20, 4 << 20], [1, 2, 4, 8, 16])
    blocks, workers = blocks.ravel().astype(float), workers.ravel().astype(float)
    latency, bandwidth = 90e-6, 2.2e9
    thr = fit.queue_throughput(blocks, workers, latency, bandwidth) * (1 + rng.normal(0, 0.002, blocks.size))
    f = fit.fit_queue_model(blocks, workers, thr)
    assert f.bandwidth == pytest.approx(bandwidth, rel=0.01)
    assert f.latency == pytest.approx(latency, rel=0.01)
    assert f.max_abs_residual < 0.02


def test_queue_model_fit_recovers_transfer_queueing() -> None:
    rng = np.random.default_rng(4)
    blocks, workers = np.meshgrid([256 << 10, 512 << 10, 1 << 20, 2 << 20], [1, 2, 4, 8])
    blocks, workers = blocks.ravel().astype(float), workers.ravel().astype(float)
    latency, bandwidth, q = 100e-6, 2.0e9, 0.9
    thr = fit.queue_throughput(blocks, workers, latency, bandwidth, q) * (1 + rng.normal(0, 0.002, blocks.size))
    f = fit.fit_queue_model(blocks, workers, thr)
    assert f.queueing == pytest.approx(q, abs=0.05)
    assert f.bandwidth == pytest.approx(bandwidth, rel=0.03)
    assert f.latency == pytest.approx(latency, rel=0.1)
    assert f.max_abs_residual < 0.02
    plain = fit.fit_queue_model(blocks, workers, thr, fit_queueing=False)
    assert plain.queueing == 0.0 and plain.max_abs_residual > f.max_abs_residual


def test_queueing_slows_queued_requests_only() -> None:
    one = fit.queue_throughput(1 << 20, 1, 1e-4, 2e9, 1.0)
    assert one == pytest.approx(fit.queue_throughput(1 << 20, 1, 1e-4, 2e9, 0.0))
    assert fit.queue_throughput(1 << 20, 8, 1e-4, 2e9, 1.0) < fit.queue_throughput(1 << 20, 8, 1e-4, 2e9, 0.0)
    assert fit.queue_throughput(1 << 20, 8, 1e-4, 2e9, 1.0) < 2e9


def test_file_io_spreads_over_fresh_files(tmp_path: Path) -> None:
    from tiersim.calibration.microbench import file_io

    mode, records = file_io(tmp_path, 1 << 20, (64 << 10,), (1, 2), ("write", "read"), repeats=2, files=4)
    assert mode in (O_DIRECT_MODE, FSYNC_MODE)
    assert len(records) == 4 and all(r["files"] == 4 and len(r["samples"]) == 2 for r in records)
    assert list(tmp_path.iterdir()) == []


def test_plan_sizes_are_not_powers_of_two() -> None:
    from tiersim.calibration.runner import full_plan, quick_plan

    for plan in (quick_plan(), full_plan()):
        for n in plan.adam_numels + plan.memcpy_sizes:
            assert n & (n - 1) != 0


def test_queue_throughput_is_capped_by_bandwidth() -> None:
    assert fit.queue_throughput(1 << 20, 1, 1e-4, 1e9) < 1e9
    assert fit.queue_throughput(1 << 20, 64, 1e-4, 1e9) == pytest.approx(1e9)


def test_fits_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        fit.fit_latency_bandwidth([1.0], [1.0])
    with pytest.raises(ValueError):
        fit.fit_queue_model([1.0, 2.0], [1.0, 1.0], [0.0, 1.0])


def _document(name: str, link: bool = False) -> dict:
    return build_host_document(
        name=name,
        hostname="testhost",
        date="2026-01-01 00:00 UTC",
        cpu={"cores_per_socket": 2, "adam_params_per_core": np.float64(1.1e9), "memcpy_bandwidth_per_core": 9e9},
        dram={"capacity": 24 << 30, "peak_bandwidth": 30e9, "bandwidth": 25e9, "latency": 1.2e-7},
        nvme={"capacity": 1 << 40, "read_bandwidth": 1.5e9, "write_bandwidth": 3e9,
              "read_latency": 8e-5, "write_latency": 6e-5},
        link={"raw_bandwidth": 26e9, "pinned_bandwidth": 25e9, "pageable_bandwidth": 10e9, "latency": 1e-5}
        if link else None,
        methods={"cpu": {"adam_params_per_core": "synthetic"}},
        calibration={"adam": {"records": [{"numel": np.int64(5), "seconds": np.float32(0.5)}]},
                     "residuals": np.array([0.01, -0.02])},
    )


@pytest.mark.parametrize("link", [False, True])
def test_profile_writer_output_loads_as_host_profile(tmp_path: Path, link: bool) -> None:
    path = tmp_path / "host-testhost.yaml"
    profile = write_host_profile(path, _document("host-testhost", link))
    again = load_profile_file(path)
    assert isinstance(again, HostProfile) and again == profile
    assert again.cpu.adam_params_per_core == pytest.approx(1.1e9)
    assert again.nvme.read_latency == pytest.approx(8e-5)
    assert (again.link is not None) == link
    assert again.cpu.sources["adam_params_per_core"].startswith("measured by tiersim calibrate on 2026-01-01")
    assert "on testhost: synthetic" in again.cpu.sources["adam_params_per_core"]
    assert again.calibration is not None and again.calibration["residuals"] == [0.01, -0.02]
    assert list(tmp_path.iterdir()) == [path]  # no scratch files left


def test_bypass_probe_names_a_mode(tmp_path: Path) -> None:
    assert probe_bypass_mode(tmp_path) in (O_DIRECT_MODE, FSYNC_MODE)
