"""Which streams a schedule says carry copies in the background (``Session.background_copies``):
the host copies of ``PARTITION_STREAM`` only where the micro-step's collectives do not cross the
PCIe links the copies cross (a GPU fabric through the host bridges, or a NIC across nodes)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tiersim.config.document import load_scenario
from tiersim.fastforward import FastForwardSession
from tiersim.fastforward.deferred import DeferredFlowContended
from tiersim.strategies import STRATEGIES
from tiersim.strategies.gradients import PARTITION_STREAM
from tiersim.workload import build_step

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
SMALL = ["model.layers=4", "training.sub_group_size=2e8", "hardware.gpus=2", "training.global_batch=6"]
PCIE_FABRIC = "hardware.fabric=pcie-p2p-gen5"
NIC = "hardware.network={device: ib-hdr200-cx6, count: 1}"


def _said(strategy: str, overrides: list[str]) -> set[frozenset[str]]:
    """The sets of background streams the backwards built say (none: left out), as the
    fast-forward's run took them (``DeferringRun.changes``)."""
    config = load_scenario(QUICKSTART, [*SMALL, *overrides], [strategy])[0]
    plan = STRATEGIES[strategy](config.options).plan(build_step(config.model, config.training), config.hardware)
    assert plan.schedule is not None and plan.capacity_of is not None
    session = FastForwardSession(plan.capacity_of)
    with contextlib.suppress(DeferredFlowContended):  # the session's check may refuse what was said
        plan.schedule(session)
    return {streams for _position, streams in session.run.changes if streams}


@pytest.mark.parametrize("strategy", ["dram", "cxl"])
def test_host_copies_run_in_the_background_beside_nvlink_collectives(strategy: str) -> None:
    assert _said(strategy, []) == {frozenset({PARTITION_STREAM})}  # in the micro-steps before the boundary


@pytest.mark.parametrize("stage", [2, 3])
def test_host_copies_are_not_background_where_collectives_cross_pcie(stage: int) -> None:
    assert _said("dram", [PCIE_FABRIC, f"training.zero_stage={stage}"]) == set()


def test_zero1_host_copies_stay_background_on_pcie_before_the_boundary() -> None:
    """Below ZeRO-2 gradients reduce at the boundary only: a micro-step before it has no collective."""
    assert _said("dram", [PCIE_FABRIC, "training.zero_stage=1"]) == {frozenset({PARTITION_STREAM})}


def test_nvme_writes_stay_background_where_collectives_cross_pcie() -> None:
    """The boundary's NVMe writes cross the drives and DRAM, not PCIe: only they stay."""
    assert _said("nvme", [PCIE_FABRIC]) == {frozenset({"aio_write"})}
    assert _said("nvme", []) == {frozenset({PARTITION_STREAM}), frozenset({PARTITION_STREAM, "aio_write"})}


def test_host_copies_are_not_background_beside_a_nodes_nic_bytes() -> None:
    """Over several nodes a collective's NIC share crosses PCIe too; the NVMe writes stay."""
    nodes = ["hardware.nodes=2", "training.global_batch=12", NIC]
    assert _said("dram", nodes) == set()
    assert _said("nvme", nodes) == {frozenset({"aio_write"})}
