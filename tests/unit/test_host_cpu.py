"""The host CPU as mechanisms: CPU Adam on physical cores and SMT siblings, its SIMD width, the
socket's DRAM bandwidth shared by the ranks on it, bound against unbound ranks, and pinned
against pageable copies; every expected figure worked out by hand from the profiles."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tiersim.config.hardware import Hardware, HardwareSpec, resolve_hardware
from tiersim.config.profiles import DEFAULT_PROFILE_DIR, load_profile_file
from tiersim.engine import Task, run_graph
from tiersim.errors import ConfigError
from tiersim.strategies import STRATEGIES
from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.kinds import ADAM_READ_BYTES, ADAM_WRITE_BYTES
from tiersim.workload import ModelSpec, SubGroup, TrainingSpec, build_step

SPR_CORE = 16 * 2 * 2.0e9 / 10 * 0.011
"""xeon-8480 Adam params/s per core: 16 fp32 lanes x 2 FMA units x 2.0 GHz / 10 vector ops x 0.011."""
MILAN_CORE = 8 * 2 * 2.8e9 / 10 * 0.011
"""epyc-7543p: 8 lanes (AVX2) x 2 FMA units x 2.8 GHz / 10 vector ops x 0.011."""
GRACE_CORE = 4 * 4 * 3.1e9 / 10 * 0.011
"""grace with an SVE build: 4 fp32 lanes (128-bit SVE) x 4 FMA pipes x 3.1 GHz / 10 vector ops x 0.011."""


def hardware(cpu: str = "xeon-8480", **spec: object) -> Hardware:
    settings: dict[str, object] = {"gpu": "a100-80gb", "cpu": cpu, "dram": "ddr4-3200-8ch", **spec}
    return resolve_hardware(HardwareSpec(**settings), "test.yaml")  # type: ignore[arg-type]


def adam_seconds(hw: Hardware, numel: int) -> float:
    """The dram strategy's optimizer step over one sub-group of ``numel`` on a host-only rank
    (CPU Adam alone: no GPU to copy the parameters back to)."""
    step = build_step(ModelSpec(layers=1, hidden=64, heads=1, ffn=64, vocab=64), TrainingSpec(global_batch=1))
    step = replace(step, subgroups=(SubGroup(0, numel),), rank_params=numel)
    builder = StepBuilder(step, replace(hw, gpu=None))
    STRATEGIES["dram"]().optimizer_step(builder, builder.add(Task("step.begin", "cpu", "optimizer_step", "marker")))
    return run_graph(builder.graph).makespan


def test_smt_siblings_give_one_core_of_simd_units() -> None:
    own = hardware(gpus=2, cores_per_rank=28)  # two ranks on 28 cores each of a 56-core socket
    siblings = hardware(gpus=2, cores_per_rank=56)  # two ranks on the two hardware threads of 56 cores
    assert own.rank_cores == siblings.rank_cores == 28
    assert own.adam_rate == siblings.adam_rate == pytest.approx(28 * SPR_CORE)
    alone = hardware(gpus=1, cores_per_rank=112)  # one rank on every hardware thread of the socket
    assert alone.rank_cores == 56 and alone.adam_rate == pytest.approx(56 * SPR_CORE)
    with pytest.raises(ConfigError, match="hardware.cores_per_rank: 57 logical CPUs"):
        hardware(gpus=2, cores_per_rank=57)  # 114 > 56 cores x 2 threads


def test_simd_width_sets_the_rate_by_its_lanes() -> None:
    spr = load_profile_file(DEFAULT_PROFILE_DIR / "xeon-8480.yaml")
    assert spr.adam_core_rate() == pytest.approx(SPR_CORE)
    assert spr.adam_core_rate("avx2") / spr.adam_core_rate("avx512") == pytest.approx(8 / 16)
    genoa = load_profile_file(DEFAULT_PROFILE_DIR / "epyc-9654.yaml")  # AVX-512 on 256-bit pipes
    assert genoa.adam_core_rate("avx2") == pytest.approx(genoa.adam_core_rate("avx512"))
    milan = hardware("epyc-7543p", gpus=1)
    assert milan.rank_cores == 32 and milan.adam_rate == pytest.approx(32 * MILAN_CORE)
    assert hardware(gpus=1, adam_simd="avx2").adam_rate == pytest.approx(hardware(gpus=1).adam_rate / 2)
    with pytest.raises(ConfigError, match="hardware.adam_simd: epyc-7543p has no avx512"):
        hardware("epyc-7543p", adam_simd="avx512")


def test_grace_runs_sve_or_scalar_builds_and_no_x86_one() -> None:
    """Grace's four 128-bit pipes: an SVE build runs 4 lanes on each, DeepSpeed's scalar build
    (0.10-0.16 on Arm) one; an x86 build is refused on Grace, an SVE build on a Xeon."""
    grace = hardware("grace", gpus=1, dram="grace-lpddr5x-480gb")
    assert grace.rank_cores == 72 and grace.adam_rate == pytest.approx(72 * GRACE_CORE)
    scalar = hardware("grace", gpus=1, dram="grace-lpddr5x-480gb", adam_simd="scalar")
    assert scalar.adam_rate == pytest.approx(72 * GRACE_CORE / 4)
    with pytest.raises(ConfigError, match="hardware.adam_simd: grace has no avx2"):
        hardware("grace", adam_simd="avx2")
    with pytest.raises(ConfigError, match="hardware.adam_simd: xeon-8480 has no sve"):
        hardware(adam_simd="sve")


def test_a_fitted_rate_per_core_overrides_and_scales_by_lanes() -> None:
    spr = replace(load_profile_file(DEFAULT_PROFILE_DIR / "xeon-8480.yaml"), adam_params_per_core=5e7)
    assert spr.adam_core_rate() == 5e7 and spr.adam_core_rate("avx2") == 2.5e7


def test_adam_is_bound_by_the_socket_bandwidth_its_ranks_share() -> None:
    numel = 10**8
    one = hardware(gpus=1, sockets=1, cores_per_rank=14)  # 14 x 7.04e7 x 28 B = 27.6 GB/s < 160 GB/s
    assert adam_seconds(one, numel) == pytest.approx(numel / (14 * SPR_CORE), rel=1e-6)
    four = hardware(gpus=4, sockets=1, cores_per_rank=14)  # 4 ranks x 27.6 GB/s < 160: still compute
    assert adam_seconds(four, numel) == pytest.approx(numel / (14 * SPR_CORE), rel=1e-6)
    slow = replace(four, dram=replace(four.dram, bandwidth=80e9))  # 4 x 27.6 GB/s > 80 GB/s: memory
    per_element = ADAM_READ_BYTES + ADAM_WRITE_BYTES
    assert slow.dram_bandwidth_per_rank == 20e9
    assert adam_seconds(slow, numel) == pytest.approx(numel * per_element / 20e9, rel=1e-6)


def test_unbound_ranks_share_the_node_through_the_scheduler() -> None:
    bound = hardware("epyc-7543p", gpus=4, cores_per_rank=8)  # numactl: 8 cores each, OMP_NUM_THREADS=8
    unbound = hardware("epyc-7543p", gpus=4, numa_bound=False)  # torch's default: 32 threads each
    assert (bound.rank_threads, unbound.rank_threads) == (8, 32)
    assert bound.rank_cores == 8 and unbound.rank_cores == pytest.approx(32 * 32 / 128)  # 128 threads, 32 cores
    narrow = hardware("epyc-7543p", gpus=4, cores_per_rank=4)
    assert narrow.adam_rate == pytest.approx(unbound.adam_rate / 2)
    assert hardware("epyc-7543p", gpus=1, numa_bound=False).rank_cores == 32
    two = hardware(gpus=1, sockets=2, numa_bound=False)  # one unbound rank: threads and pages on both sockets
    assert two.rank_cores == 112 and two.dram_bandwidth_per_rank == 2 * 160e9
    assert hardware(gpus=1, sockets=2).dram_bandwidth_per_rank == 160e9


def test_pageable_copies_go_through_one_host_memcpy_then_the_dma() -> None:
    milan = hardware("epyc-7543p", gpus=1)  # PCIe Gen4 x16: 25 GB/s pinned; one Zen 3 core copies 15 GB/s
    assert milan.pcie_bandwidth == 25e9
    assert milan.pageable_bandwidth == pytest.approx(1 / (1 / 25e9 + 1 / 15e9))
    assert 1e9 / milan.pageable_bandwidth == pytest.approx(1e9 / 25e9 + 1e9 / 15e9)  # 40 ms + 66.7 ms
    assert hardware("epyc-7543p", gpus=1, pinned=False).pcie_bandwidth == milan.pageable_bandwidth
    assert milan.host_link.raw_bandwidth == 32e9 and milan.pcie_bandwidth / 31.5e9 == pytest.approx(0.79, abs=0.01)
    measured = replace(milan, link=replace(milan.host_link, pageable_bandwidth=11e9))
    assert measured.pageable_bandwidth == 11e9


def test_a_cpu_profile_needs_a_rate_or_its_simd_figures(tmp_path: Path) -> None:
    data = yaml.safe_load((DEFAULT_PROFILE_DIR / "epyc-7543p.yaml").read_text())
    del data["simd_clock"], data["sources"]["simd_clock"]
    path = tmp_path / "epyc-7543p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"adam_params_per_core: required without the SIMD figures \(missing: simd_c"):
        load_profile_file(path)
