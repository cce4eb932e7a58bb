"""DeepSpeed releases select code paths: the gradient swapper the boundary backward waits for
(``tiersim.strategies.gradient_swapper``) on tiersim's 0.13 path, the background writes of its
0.16 path, and versions outside the modelled range refused."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies.gradient_swapper import drains
from tiersim.strategies.nvme import NVMeSwap
from tiersim.strategies.swap import stream_rate
from tiersim.workload import build_step

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_session import assert_agrees, assert_same, generated  # noqa: E402  (the fast-forward checks)

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
M = 1 << 20
"""Elements of a 1024 x 1024 tensor."""
ONE_LAYER = ["model.layers=1", "model.hidden=1024", "model.heads=16", "model.kv_heads=16", "model.ffn=3072",
             "model.vocab=4096", "model.activation=gelu", "hardware.gpus=1", "training.global_batch=1",
             "training.activation_checkpointing=false", "training.sub_group_size=1e6",
             "strategies.nvme.buffer_count=4", "strategies.nvme.thread_count=1", "strategies.nvme.block_size=1 MiB"]
"""One decoder layer on one GPU: the embedding and the untied head 4M elements each, the layer's
fused QKV 3M, attention output 1M, FFN in and out 3M each (norms of 1024 elements stay unswapped).
Sub-groups of 1e6 make the largest the head with its final norm (4M + 1024 elements): four swap
buffers of that."""


def one_layer(version: str) -> RunConfig:
    """The one-layer model on NVMe under DeepSpeed ``version``, its drive writing with no latency
    (so one rank's aio writes run at the drive's write bandwidth)."""
    config = load_scenario(QUICKSTART, [*ONE_LAYER, f"training.deepspeed_version=\"{version}\""], ["nvme"])[0]
    hw = config.hardware
    assert hw.nvme is not None
    return replace(config, hardware=replace(hw, nvme=replace(hw.nvme, write_latency=0.0)))


def span(trace: pd.DataFrame, name: str) -> tuple[float, float]:
    """Start and end of the task ``name`` (s)."""
    row = trace[trace["name"] == name].iloc[0]
    return float(row["start"]), float(row["end"])


def test_the_swapper_runs_out_of_buffers_at_the_embedding_by_hand() -> None:
    """Backward order: head (4M: buffer 1), layer (QKV 3M: buffer 2, output 1M fills it; FFN in
    3M: buffer 3; FFN out 3M: buffer 4), embedding (4M: no buffer left, so it waits)."""
    config = one_layer("0.13.3")
    step = build_step(config.model, config.training)
    assert step.largest_subgroup == 4 * M + 1024
    head, layer, embedding = ((1024, 4 * M), (1024, 3 * M, M, 1024, 3 * M, 3 * M), (4 * M,))
    assert drains((head, layer, embedding), 4 * M + 1024, 4, 256, M // 4) == (False, False, True)
    assert drains((head, layer, embedding), 4 * M + 1024, 5, 256, M // 4) == (False, False, False)


def test_the_013_backward_ends_when_the_drive_has_written_the_head_and_layer() -> None:
    """DeepSpeed 0.13 (the swapper as its code runs): the embedding's gradients wait until the
    drive has written the head's and the layer's fp32 gradients, one after the other at its write
    bandwidth from the head's copy into the swapper on; the backward ends with the embedding's
    copy. Under 0.16 the writes run on into the step and the backward ends sooner."""
    old = simulate(one_layer("0.13.3"), trace=True)
    config = one_layer("0.13.3")
    hw, step = config.hardware, build_step(config.model, config.training)
    assert hw.nvme is not None
    bandwidth = hw.nvme.write_bandwidth
    assert stream_rate(hw.nvme, config.options, True) > bandwidth  # the drive, not the aio queue, sets the rate
    written = 4 * (step.rank_partitions[2] + step.rank_partitions[1])  # head and layer, fp32 bytes
    trace = old.trace
    _, head_copied = span(trace, "m0.bwd.2.fp32_grad_d2h")
    start, end = span(trace, "m0.bwd.0.fp32_grad_d2h")
    assert start == pytest.approx(head_copied + written / bandwidth, rel=1e-9)
    backward_begin, _ = span(trace, "m0.backward.begin")
    step_begin, _ = span(trace, "step.begin")
    assert step_begin == pytest.approx(end, rel=1e-12)
    assert old.phases["backward"] == pytest.approx(end - backward_begin, rel=1e-9)
    new = simulate(one_layer("0.16"))
    assert new.phases["backward"] < written / bandwidth < old.phases["backward"]


def test_the_013_step_does_the_same_work() -> None:
    """The version moves the gradient writes from the step into the backward, nothing else: the
    same bytes cross each link over the iteration."""
    old, new = simulate(one_layer("0.13")), simulate(one_layer("0.16"))

    def moved(result: Result) -> dict[str, float]:
        rows = [r for r in result._utilisation if r["phase"] == "iteration"]
        return {r["resource"]: r["units_moved"] for r in rows}

    assert moved(old).keys() == moved(new).keys()
    for resource, units in moved(new).items():
        assert moved(old)[resource] == pytest.approx(units, rel=1e-9), resource


def _assert_fast_is_full(config: RunConfig) -> None:
    """The swapper waits somewhere in the backward, and the fast-forward gives the full run."""
    assert any(NVMeSwap(config.options)._drains(build_step(config.model, config.training)))
    assert_same(simulate(config), simulate(config, fast_forward=False))


@pytest.mark.parametrize("overrides", [
    [],
    ["training.global_batch=3"],
    ["model.layers=12", "hardware.gpus=4", "training.global_batch=8", "hardware.nvme.count=1",
     "training.sub_group_size=3e7", "strategies.nvme.buffer_count=4"],
    ["model.layers=12", "training.sub_group_size=3e7", "strategies.nvme.pipeline_read=true",
     "strategies.nvme.pipeline_write=true"],
])
def test_the_013_path_is_the_same_with_and_without_fast_forward(overrides: list[str]) -> None:
    """The boundary layers where the swapper waits build otherwise (``backward_keys``): the
    fast-forward over the alike ones between gives the full simulation's results."""
    base = ["model.layers=8", "strategies.nvme.buffer_count=5", "training.deepspeed_version=0.13.3"]
    config = load_scenario(QUICKSTART, [*base, *overrides], ["nvme"])[0]
    _assert_fast_is_full(config)


def test_the_70b_nvme_node_shape_on_the_013_path_is_the_same_with_and_without_fast_forward() -> None:
    """70B on 4 GPUs, one drive, 50 swap buffers, pipelined (the NVMe node's settings): the
    swapper runs out of buffers once in the backward."""
    overrides = ["training.deepspeed_version=0.13.3", "hardware.nvme.count=1", "strategies.nvme.buffer_count=50",
                 "strategies.nvme.pipeline_read=true", "strategies.nvme.pipeline_write=true",
                 "strategies.nvme.thread_count=4", "strategies.nvme.block_size=2 MiB"]
    config = load_scenario(ROOT / "scenarios" / "llama2-70b-offload.yaml", overrides, ["nvme"])[0]
    _assert_fast_is_full(config)


@pytest.mark.parametrize("version", ["0.9.5", "0.17.0", "1.0", "latest"])
def test_a_version_outside_the_modelled_range_is_refused(version: str) -> None:
    run = subprocess.run([sys.executable, "-m", "tiersim", "run", str(QUICKSTART), "--set",
                          f"training.deepspeed_version={version}"], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "training.deepspeed_version" in lines[0] and "Traceback" not in run.stderr


def _dram(version: str, overrides: tuple[str, ...] = ()) -> RunConfig:
    """The one-layer model (``ONE_LAYER``) offloaded to DRAM under DeepSpeed ``version``."""
    options = [o for o in ONE_LAYER if not o.startswith("strategies.")]
    return load_scenario(QUICKSTART, [*options, *overrides, f"training.deepspeed_version=\"{version}\""],
                         ["dram"])[0]


def test_before_0_15_4_the_boundary_copies_16_bit_gradients_at_the_pageable_rate() -> None:
    """Before DeepSpeed 0.15.4 ``partition_grads`` copies each boundary partition D2H in 16 bits
    into a pageable temporary and converts it on the CPU: the backward moves 2 + 2 bytes per
    element over PCIe D2H (the kept partition, then the copy) instead of 2 + 4, and a layer's
    copy alone on its link takes the latency plus its bytes at the pageable rate."""
    old, new = simulate(_dram("0.13.3"), trace=True), simulate(_dram("0.16"))
    config = _dram("0.13.3")
    hw, step = config.hardware, build_step(config.model, config.training)
    elements = sum(step.rank_partitions)
    assert step.grad_accum_bytes == 2

    def d2h_bytes(result: Result) -> float:
        return next(r["units_moved"] for r in result._utilisation
                    if r["resource"] == "pcie_d2h" and r["phase"] == "backward")

    assert d2h_bytes(old) == pytest.approx((2 + 2) * elements, rel=1e-12)
    assert d2h_bytes(new) == pytest.approx((2 + 4) * elements, rel=1e-12)
    start, end = span(old.trace, "m0.bwd.1.grad_d2h_pageable")
    assert end - start == pytest.approx(hw.pcie_latency + 2 * step.rank_partitions[1] / hw.pageable_bandwidth,
                                        rel=1e-9)
    assert "m0.bwd.1.grad_convert" in set(old.trace["name"])


@pytest.mark.parametrize("version", ["0.15.3", "0.15.4", "0.15", "0.16.2"])
def test_the_host_conversion_path_changes_at_0_15_4(version: str) -> None:
    names = set(simulate(_dram(version), trace=True).trace["name"])
    assert ("m0.bwd.1.grad_convert" in names) == (version in ("0.15.3", "0.15"))


@pytest.mark.parametrize(("strategy", "overrides"), [
    ("dram", ["model.layers=8"]),
    ("dram", ["model.layers=8", "training.global_batch=12", "hardware.gpus=4"]),
    ("cxl", ["model.layers=6", "training.global_batch=3"]),
])
def test_the_0_13_host_path_is_the_same_with_and_without_fast_forward(strategy: str, overrides: list[str]) -> None:
    config = load_scenario(QUICKSTART, [*overrides, "training.deepspeed_version=0.13.3"], [strategy])[0]
    assert_same(simulate(config), simulate(config, fast_forward=False))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_0_13_scenarios_are_the_same_with_and_without_fast_forward(data: st.DataObject) -> None:
    """``test_session``'s generated scenarios (every strategy, the settings that shape loops)
    under DeepSpeed 0.13.3."""
    drawn = data.draw(generated())
    config = replace(drawn, training=replace(drawn.training, deepspeed_version="0.13.3"))
    assert_agrees(config, simulate(config), simulate(config, fast_forward=False))
