"""Superchips: every system file resolves to a machine, GH200 and GB200 copy to and from host
memory over NVLink-C2C, and the bundled superchip scenario answers its question (the figures
the README quotes)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from clirun import ROOT

from tiersim.config.document import Origin, load_document, load_scenario
from tiersim.config.hardware import Hardware
from tiersim.engine import run_graph
from tiersim.fitting.replay import load_node
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.kinds import pcie_kind
from tiersim.strategies.memory import HostMemory
from tiersim.workload import ModelSpec, TrainingSpec, build_step

SYSTEMS = sorted((ROOT / "systems").glob("*.yaml"))
GH200 = ROOT / "scenarios" / "superchip-gh200.yaml"
PCIE = ROOT / "scenarios" / "superchip-h100-pcie.yaml"
GIB = 2**30


@pytest.mark.parametrize("path", SYSTEMS, ids=lambda p: p.stem)
def test_every_system_resolves_to_a_machine(path: Path) -> None:
    """A system file's parts and hardware settings make a machine: the quickstart model on
    four of its GPUs, its parts in place of the scenario's."""
    node = load_node(path)
    origin = Origin(str(path), "settings")
    doc = load_document(ROOT / "scenarios" / "quickstart.yaml")
    doc = doc.with_values({"hardware": {"host": node.name, "gpus": 4}}, origin)
    doc = doc.with_values({k: v for k, v in node.settings.items() if k.startswith("hardware.")}, origin)
    (config,) = doc.configs(["dram"], host=node.host)
    hw = config.hardware
    assert hw.cpu is node.host.cpu and hw.dram is node.host.dram and hw.nvme is node.host.nvme
    assert hw.gpu is not None and hw.gpu is (node.host.gpu or hw.gpu)
    if path.stem in ("gh200-node", "gb200-node"):
        assert hw.host_link.name == hw.gpu.host_link and hw.host_link.name.startswith("nvlink-c2c")
        assert hw.cpu.name == "grace" and hw.ranks_per_socket == {"gh200-node": 1, "gb200-node": 2}[path.stem]


def one_copy_seconds(hw: Hardware, num_bytes: int, direction: str) -> float:
    """One pinned host<->GPU copy of ``num_bytes`` alone on the machine (s)."""
    step = build_step(ModelSpec(layers=1, hidden=64, heads=1, ffn=64, vocab=64), TrainingSpec(global_batch=1))
    builder = StepBuilder(step, hw)
    builder.add(pcie_kind(builder, direction, "optimizer_step", HostMemory.dram_only()).task("copy", num_bytes, ()))
    return run_graph(builder.graph).makespan


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_a_gh200_copies_over_nvlink_c2c(direction: str) -> None:
    """Latency + bytes / the C2C's pinned rate (346 GB/s), seven times the PCIe node's 52 GB/s;
    with Grace's LPDDR5X as it is, the copy is held to the 315 GB/s the socket's memory gives."""
    (gh200,) = load_scenario(GH200, strategies=["dram"])
    (pcie,) = load_scenario(PCIE, strategies=["dram"])
    hw = gh200.hardware
    assert hw.host_link.name == "nvlink-c2c" and hw.pcie_bandwidth == pytest.approx(346e9)
    roomy = replace(hw, dram=replace(hw.dram, bandwidth=1e15))  # host memory out of the way
    assert one_copy_seconds(roomy, GIB, direction) == pytest.approx(8e-6 + GIB / 346e9, rel=1e-9)
    assert one_copy_seconds(hw, GIB, direction) == pytest.approx(8e-6 + GIB / 315e9, rel=1e-9)
    assert one_copy_seconds(pcie.hardware, GIB, direction) == pytest.approx(8e-6 + GIB / 52e9, rel=1e-9)


def test_a_gb200_gpu_copies_over_its_half_of_the_c2c() -> None:
    """Two GB200 GPUs share a Grace: each its half of the C2C (173 GB/s pinned) and of the
    LPDDR5X (157.5 GB/s), which then holds the copy."""
    (config,) = load_scenario(GH200, ["hardware.gpu=gb200", "hardware.sockets=2"], ["dram"])
    hw = config.hardware
    assert hw.host_link.name == "nvlink-c2c-gb200" and hw.ranks_per_socket == 2
    roomy = replace(hw, dram=replace(hw.dram, bandwidth=1e15))
    assert one_copy_seconds(roomy, GIB, "h2d") == pytest.approx(8e-6 + GIB / 173e9, rel=1e-9)
    assert one_copy_seconds(hw, GIB, "h2d") == pytest.approx(8e-6 + GIB / 157.5e9, rel=1e-9)


@pytest.fixture(scope="module")
def answers() -> dict[str, Result]:
    """The superchip question's runs: offloaded to host memory on each node, and GH200 with
    DeepSpeed's SVE CPU Adam."""
    return {
        "gh200": simulate(load_scenario(GH200, strategies=["dram"])[0]),
        "gh200-sve": simulate(load_scenario(GH200, ["hardware.adam_simd=sve"], ["dram"])[0]),
        "pcie": simulate(load_scenario(PCIE, strategies=["dram"])[0]),
    }


def test_the_superchip_scenario_answers_as_the_readme_says(answers: dict[str, Result]) -> None:
    """70B fits offloaded on both nodes (not in HBM alone); GH200's iteration is shorter, its
    optimizer step longer (Grace's scalar CPU Adam), and the README quotes these figures."""
    for path in (GH200, PCIE):
        gpu_only = simulate(load_scenario(path, strategies=["gpu"])[0])
        assert not gpu_only.fits and "hbm" in (gpu_only.reason or "")
    gh200, sve, pcie = answers["gh200"], answers["gh200-sve"], answers["pcie"]
    assert gh200.fits and sve.fits and pcie.fits
    assert gh200.iteration_time_s < pcie.iteration_time_s
    assert gh200.phases is not None and pcie.phases is not None and sve.phases is not None
    assert gh200.phases["optimizer_step"] > pcie.phases["optimizer_step"] > sve.phases["optimizer_step"]
    assert gh200.bottleneck() == pcie.bottleneck() == "cpu"
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    for result in (gh200, sve, pcie):
        assert result.phases is not None
        row = (f"{result.iteration_time_s:.1f} s | {result.phases['forward'] + result.phases['backward']:.1f} s "
               f"| {result.phases['optimizer_step']:.1f} s")
        assert row in readme, row
