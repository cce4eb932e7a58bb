"""Activation checkpoints in host memory (``training.cpu_checkpointing``, DeepSpeed's
``activation_checkpointing.cpu_checkpointing``): a D2H after each checkpointed layer's forward,
an H2D before its recomputation, the checkpoints counted on the host instead of in HBM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiersim import cli
from tiersim.config.document import load_scenario
from tiersim.config.worksize import run_tasks
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.workload import build_step

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
SMALL = ["model.layers=4", "training.sub_group_size=1e8", "hardware.gpu=h200"]


def run(strategy: str, *overrides: str, fast_forward: bool = True) -> Result:
    (config,) = load_scenario(QUICKSTART, [*SMALL, *overrides], strategies=[strategy])
    return simulate(config, fast_forward=fast_forward)


def test_off_is_todays_answer() -> None:
    today, off = run("dram"), run("dram", "training.cpu_checkpointing=false")
    assert off.iteration_time_s == today.iteration_time_s and off.placement_items == today.placement_items


def test_the_checkpoints_move_from_hbm_to_the_host() -> None:
    on, off = run("dram", "training.cpu_checkpointing=true"), run("dram")
    step = build_step(on.config.model, on.config.training)
    sizes = [layer.activation_bytes for layer in step.layers if layer.checkpointed]
    assert len(sizes) == 4 and tuple(sizes) == step.host_checkpoint_sizes
    assert on.peak_bytes["dram"] - off.peak_bytes["dram"] == sum(sizes)
    assert off.peak_bytes["hbm"] - on.peak_bytes["hbm"] == sum(sizes) - max(sizes)


def test_each_copy_costs_latency_and_bytes_over_the_pageable_rate_on_the_compute_stream() -> None:
    """One GPU, no offload: the forward is the layers' compute and the copies in series, so it
    grows by one pageable D2H per checkpointed layer; each backward copy is as large."""
    on, off = run("gpu", "training.cpu_checkpointing=true"), run("gpu")
    hw = on.config.hardware
    step = build_step(on.config.model, on.config.training)
    copy = sum(hw.pcie_latency + size / min(hw.pageable_bandwidth, hw.pcie_bandwidth)
               for size in step.host_checkpoint_sizes)
    assert on.phases is not None and off.phases is not None
    assert on.phases["forward"] - off.phases["forward"] == pytest.approx(copy * step.micro_steps, rel=1e-9)
    assert on.graph is not None
    h2d = [t for t in on.graph.tasks if t.name.endswith(".checkpoint_h2d")]
    assert len(h2d) == 4 * step.micro_steps and all(t.stream == "gpu" for t in h2d)
    assert sum(t.size for t in h2d) == sum(step.host_checkpoint_sizes) * step.micro_steps


@pytest.mark.parametrize("strategy", ["dram", "nvme"])
def test_counted_exactly_and_fast_forwarded_alike(strategy: str) -> None:
    overrides = ("training.cpu_checkpointing=true", "training.global_batch=5", "hardware.gpus=1")
    (config,) = load_scenario(QUICKSTART, [*SMALL, *overrides], strategies=[strategy])
    whole, fast = simulate(config, fast_forward=False), simulate(config)
    assert whole.graph is not None and run_tasks(config) == len(whole.graph.tasks)
    assert fast.iteration_time_s == pytest.approx(whole.iteration_time_s, rel=1e-9)


def test_without_checkpointing_it_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(QUICKSTART), "--set", "training.cpu_checkpointing=true",
                     "--set", "training.activation_checkpointing=false"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "training.cpu_checkpointing: true needs activation_checkpointing: true" in err


def test_the_ds_config_key_sets_it(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 4, "bf16": {"enabled": True},
                              "activation_checkpointing": {"cpu_checkpointing": True}}))
    (config,) = load_scenario(QUICKSTART, SMALL, ds_config=ds)
    assert config.training.cpu_checkpointing
