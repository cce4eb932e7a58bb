"""Parameter offload (``offload_param``): one fetch costs latency + bytes / bandwidth on its links,
the 16-bit partition leaves HBM, the NVMe path reads the drives, and what DeepSpeed would not run
is refused in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from clirun import QUICKSTART

from tiersim.cli import main
from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies.param_offload import param_layout, prefetch_depth
from tiersim.strategies.param_options import ParamOffload
from tiersim.strategies.swap import SwapOptions, stream_rate
from tiersim.workload import build_step

TINY = ["model.layers=2", "model.hidden=1024", "model.heads=8", "model.kv_heads=8", "model.ffn=2048",
        "model.vocab=1024", "training.seq_len=16", "training.global_batch=1", "training.sub_group_size=1e5"]
"""Quickstart cut to a model whose compute is negligible beside its fetches."""


def _config(strategy: str, offload: str | None, *overrides: str) -> RunConfig:
    entry = f"{{name: {strategy}, offload_param: {offload}}}" if offload else strategy
    (config,) = load_scenario(QUICKSTART, [*TINY, *overrides, f"strategies=[{entry}]"])
    return config


def _link_units(result: Result, link: str, phase: str) -> float:
    rows = result.utilisation
    picked = rows[(rows["kind"] == "link") & (rows["resource"] == link) & (rows["phase"] == phase)]
    return float(picked["units_moved"].sum())


@pytest.mark.parametrize("strategy", ["gpu", "dram"])
def test_one_cpu_fetch_is_latency_plus_bytes_over_the_link(strategy: str) -> None:
    """Each forward pass's partition crosses PCIe from DRAM alone on its links: its copy lasts the
    link's latency plus its bytes over the slower of PCIe and the rank's DRAM bandwidth, and the
    copies run one after another on the all-gather stream, so the forward lasts at least their sum."""
    config = _config(strategy, "{device: cpu}")
    result = simulate(config, trace=True)
    step = build_step(config.model, config.training)
    hw = config.hardware
    trace = result.trace
    copies = trace[trace["name"].str.match(r"m0\.fwd\.\d+\.param_h2d$")].sort_values("start")
    assert len(copies) == len(step.layers)
    for _, row in copies.iterrows():
        index = int(row["name"].split(".")[2])
        num_bytes = step.rank_partitions[index] * step.lp_bytes
        expected = hw.pcie_latency + num_bytes / min(hw.pcie_bandwidth, hw.dram_bandwidth_per_rank)
        assert row["end"] - row["start"] == pytest.approx(expected, rel=1e-9)
    assert result.phases is not None
    assert result.phases["forward"] >= float((copies["end"] - copies["start"]).sum())


def test_one_nvme_fetch_is_a_read_then_the_copy() -> None:
    """With nothing kept in host memory, each layer's partition is read from the drives at the
    swap stream's rate (latency + bytes / rate) before its H2D copy begins."""
    config = _config("gpu", "{device: nvme, max_in_cpu: 0}")
    result = simulate(config, trace=True)
    step = build_step(config.model, config.training)
    hw = config.hardware
    assert hw.nvme is not None
    trace = result.trace.set_index("name")
    rate = min(stream_rate(hw.nvme, SwapOptions(), False), hw.nvme_drives_per_rank * hw.nvme.read_bandwidth,
               hw.dram_bandwidth_per_rank)
    layout = param_layout(step, ParamOffload("nvme", max_in_cpu=0), SwapOptions().block_size)
    read = [i for i, numel in enumerate(layout.nvme_elements) if numel]
    assert read, "the tiny model's tensors are large enough to swap"
    for i in read:
        row = trace.loc[f"m0.fwd.{i}.param_read"]
        expected = hw.nvme.read_latency + layout.nvme_elements[i] * step.lp_bytes / rate
        assert row["end"] - row["start"] == pytest.approx(expected, rel=1e-9)
        assert trace.loc[f"m0.fwd.{i}.param_h2d"]["start"] >= row["end"]


@pytest.mark.parametrize("strategy", ["gpu", "dram", "cxl", "nvme"])
def test_offload_param_changes_the_answer_and_frees_the_partition(strategy: str) -> None:
    """One rank, one layer fetched ahead: HBM loses the 16-bit partition and gains the two layers
    in flight; the iteration takes another time."""
    one = "training.prefetch_bucket_size=1"
    kept, offloaded = simulate(_config(strategy, None, one)), simulate(_config(strategy, "{device: cpu}", one))
    step = build_step(offloaded.config.model, offloaded.config.training)
    assert prefetch_depth(step) == 1
    assert kept.fits and offloaded.fits
    partition = step.rank_params * step.lp_bytes
    in_flight = 2 * step.largest_layer * step.lp_bytes
    assert kept.peak_bytes["hbm"] - offloaded.peak_bytes["hbm"] == partition - in_flight
    assert "bf16 parameters (partition)" not in {what for _tier, what, *_ in offloaded.placement_items}
    assert offloaded.iteration_time_s != kept.iteration_time_s


def test_the_update_stays_on_the_host() -> None:
    """Offloaded, the step converts the updated parameters into the host partition: no H2D."""
    kept, offloaded = simulate(_config("dram", None)), simulate(_config("dram", "{device: cpu}"))
    step = build_step(kept.config.model, kept.config.training)
    assert _link_units(kept, "pcie_h2d", "optimizer_step") == pytest.approx(step.rank_params * step.lp_bytes)
    assert _link_units(offloaded, "pcie_h2d", "optimizer_step") == 0


def test_nvme_offload_reads_and_writes_the_drives() -> None:
    """Every pass reads the layer's NVMe part (a checkpointed layer twice in backward); the step
    writes the updated 16-bit partitions back; host memory holds none of them but small tensors."""
    config = _config("dram", "{device: nvme, max_in_cpu: 0}")
    result = simulate(config)
    step = build_step(config.model, config.training)
    hw = config.hardware
    assert hw.nvme is not None and result.fits
    layout = param_layout(step, ParamOffload("nvme", max_in_cpu=0), SwapOptions().block_size)
    on_nvme = sum(layout.nvme_elements) * step.lp_bytes
    recomputed = sum(n for n, layer in zip(layout.nvme_elements, step.layers, strict=True) if layer.checkpointed)
    assert _link_units(result, "nvme", "forward") == pytest.approx(on_nvme / hw.nvme.read_bandwidth)
    backward = on_nvme + recomputed * step.lp_bytes
    assert _link_units(result, "nvme", "backward") == pytest.approx(backward / hw.nvme.read_bandwidth)
    assert _link_units(result, "nvme", "optimizer_step") == pytest.approx(
        step.rank_params * step.lp_bytes / hw.nvme.write_bandwidth)
    assert result.peak_bytes["nvme"] == on_nvme


def test_max_in_cpu_keeps_whole_sub_groups_in_host_memory() -> None:
    config = _config("dram", None)
    step = build_step(config.model, config.training)
    first = step.subgroup_sizes[0]
    layout = param_layout(step, ParamOffload("nvme", max_in_cpu=first + 1), SwapOptions().block_size)
    assert layout.nvme_groups[0] is False and all(layout.nvme_groups[1:])
    assert layout.host_elements == first + 1
    assert sum(layout.nvme_elements) <= step.rank_params - first


def test_a_larger_prefetch_bucket_fetches_further_ahead() -> None:
    config = _config("gpu", None, "training.prefetch_bucket_size=1e9")
    step = build_step(config.model, config.training)
    assert prefetch_depth(step) == len(step.layers)
    none = build_step(config.model, _config("gpu", None, "training.prefetch_bucket_size=0").training)
    assert prefetch_depth(none) == 0
    assert math.isfinite(simulate(_config("gpu", "{device: cpu}", "training.prefetch_bucket_size=0"))
                         .iteration_time_s or math.nan)


@pytest.mark.parametrize(("offload", "overrides", "field"), [
    ("{device: cpu}", ["training.zero_stage=2"], "strategies.dram.offload_param.device: parameter offload needs "
                                                  "ZeRO stage 3"),
    ("{device: nvme, buffer_size: 1000}", [], "strategies.dram.offload_param.buffer_size: 1000 elements, but a "
                                              "parameter partition has"),
    ("{device: disk}", [], "strategies.dram.offload_param.device: must be one of cpu, nvme"),
    ("{buffer_count: 5}", [], "strategies.dram.offload_param.device: required field is missing"),
    ("{device: nvme, buffer_count: 0}", [], "strategies.dram.offload_param.buffer_count: must be greater than 0"),
])
def test_refusals_are_one_line_exit_2(offload: str, overrides: list[str], field: str,
                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sets = [*TINY, *overrides, f"strategies=[{{name: dram, offload_param: {offload}}}]"]
    code = main(["run", str(QUICKSTART), *(arg for item in sets for arg in ("--set", item))])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert field in err


def test_deepspeed_estimate_follows_the_parameters() -> None:
    """DeepSpeed's estimator has parameter offload only to the CPU beside a CPU optimizer: 18 B
    per parameter of host memory (x 1.5) and the largest layer on the GPU; nothing for NVMe."""
    on_host = simulate(_config("dram", "{device: cpu}")).summary()["deepspeed_estimate"]
    assert on_host["options"] == "offload_param=cpu, offload_optimizer=cpu, zero_init=1"
    kept = simulate(_config("dram", None)).summary()["deepspeed_estimate"]
    assert on_host["gpu_bytes"] < kept["gpu_bytes"]
    assert on_host["host_bytes"] == pytest.approx(kept["host_bytes"] * 18 / 16, abs=2)
    assert simulate(_config("dram", "{device: nvme}")).summary()["deepspeed_estimate"] is None


def test_cpu_parameter_offload_needs_no_drives() -> None:
    """Parameter offload to the CPU touches no drive: a node without NVMe runs it, in the same time."""
    with_drives = simulate(_config("dram", "{device: cpu}"))
    without = simulate(_config("dram", "{device: cpu}", "hardware.nvme=null"))
    assert without.fits and without.iteration_time_s == with_drives.iteration_time_s
