"""Will it fit: what a run holds per tier (reserved) beside what its tensors take (allocated),
against the seed study's 70B memory reports, and DeepSpeed's own estimator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tiersim.config.document import load_scenario
from tiersim.fitting.footprint import calibrate
from tiersim.fitting.system import load_system
from tiersim.simulate import simulate
from tiersim.strategies import footprint
from tiersim.strategies.estimator import largest_module_params, zero3_estimate
from tiersim.strategies.footprint import pinned

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "scenarios" / "measured"
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
RUNS = {"dram": "70B-dram", "cxl": "70B-cxl-interleave-12-5", "nvme": "70B-nvme"}


def steady(strategy: str) -> dict[str, float]:
    table = pd.read_csv(MEASURED / f"{RUNS[strategy]}.measured.csv")
    rows = table[table["iteration"] == "steady"]
    return dict(zip(rows["quantity"], rows["value"].astype(float)))


def test_pinned_memory_is_rounded_to_a_power_of_two() -> None:
    assert [pinned(n) for n in (0, 1, 2, 3, 1000, 1024, 1025)] == [0, 1, 2, 4, 1024, 1024, 2048]
    assert pinned(34_152_779_776) == 32 * 2**30  # the 70B run's 16-bit gradient partition: 32 GiB


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_70b_footprint_within_5_percent_of_the_logs(strategy: str) -> None:
    """Host in use less the pre-launch baseline, and rank 0's Max_MA, CA and Max_CA."""
    (config,) = load_scenario(ROOT / "scenarios" / "seed-70b.yaml", strategies=[strategy])
    result = simulate(config)
    measured = steady(strategy)
    context = config.hardware.gpu.reserved_memory
    host = result.reserved_bytes["dram"] + result.reserved_bytes["cxl"]
    assert host == pytest.approx(measured["memory:host_used"], rel=0.05)
    assert result.peak_bytes["hbm"] == pytest.approx(measured["memory:gpu_max_allocated"], rel=0.05)
    assert result.reserved_bytes["hbm"] - context == pytest.approx(measured["memory:gpu_reserved"], rel=0.05)
    assert result.reserved_bytes["hbm"] - context == pytest.approx(measured["memory:gpu_max_reserved"], rel=0.05)
    assert result.peak_bytes["nvme"] == (result.reserved_bytes["nvme"])
    if strategy == "dram":  # the allocated tensors alone fall well short of what the run holds
        assert result.peak_bytes["dram"] < 0.8 * measured["memory:host_used"]


def test_the_two_calibrated_constants_come_from_the_70b_logs() -> None:
    system = load_system(ROOT / "systems" / "seed-node.yaml")
    found = calibrate(system, [LOGS / f"{name}.log" for name in RUNS.values()])
    assert found["process_host_bytes"] == pytest.approx(footprint.PROCESS_HOST_BYTES, rel=0.01)
    assert found["allocator_reserve"] == pytest.approx(footprint.ALLOCATOR_RESERVE, rel=0.01)


def test_fit_verdicts_on_a_1_tib_host() -> None:
    """The study's sizes with DRAM offload on 2 x 512 GiB: 20B and 30B fit, the others need more."""
    verdicts = {}
    for size in ("20b", "30b", "40b", "52b", "70b"):
        (config,) = load_scenario(ROOT / "scenarios" / f"seed-{size}.yaml", ["hardware.dram_capacity=512 GiB"],
                                  ["dram"])
        result = simulate(config)
        verdicts[size] = result.fits
        if not result.fits:
            assert result.reason is not None and result.reason.startswith("dram needs")
    assert verdicts == {"20b": True, "30b": True, "40b": False, "52b": False, "70b": False}


def test_every_item_holds_at_least_what_it_allocates() -> None:
    for config in load_scenario(ROOT / "scenarios" / "seed-52b.yaml"):
        for _tier, what, allocated, held in simulate(config).placement_items:
            assert held >= allocated, what


def test_pageable_buffers_are_not_rounded() -> None:
    (pinned_run,) = load_scenario(ROOT / "scenarios" / "seed-52b.yaml", strategies=["dram"])
    (pageable,) = load_scenario(ROOT / "scenarios" / "seed-52b.yaml", ["hardware.pinned=false"], ["dram"])
    held = {what: h for _t, what, _a, h in simulate(pinned_run).placement_items}
    plain = {what: (a, h) for _t, what, a, h in simulate(pageable).placement_items}
    what = "fp32 gradients (per sub-group)"
    assert plain[what][0] == plain[what][1] < held[what]


def test_deepspeed_estimator_formula_at_70b() -> None:
    (config,) = load_scenario(ROOT / "scenarios" / "seed-70b.yaml", strategies=["dram"])
    total = 68_305_559_552
    assert largest_module_params(config.model) == 8192 * 57344  # the fused SwiGLU input projection
    estimate = zero3_estimate(config.model, 4, "dram")
    assert estimate is not None
    assert estimate["host_bytes"] == int(total * 16 * 1.5)
    assert estimate["gpu_bytes"] == 4 * 8192 * 57344 + int(2 * total / 4)
    assert zero3_estimate(config.model, 4, "nvme") is None


def test_run_json_reports_reserved_bytes_and_the_deepspeed_estimate() -> None:
    proc = subprocess.run([sys.executable, "-m", "tiersim", "run", str(ROOT / "scenarios" / "seed-70b.yaml"),
                           "--format", "json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    results = {r["strategy"]: r for r in json.loads(proc.stdout)["results"]}
    dram = results["dram"]
    assert dram["reserved_bytes"]["dram"] > dram["peak_bytes"]["dram"]
    assert dram["deepspeed_estimate"]["host_bytes"] == int(68_305_559_552 * 24)
    assert results["nvme"]["deepspeed_estimate"] is None
