"""Model invariants of the offload strategies on the quickstart scenario: monotonicity in
bandwidth and swap settings, bytes moved by the update, phase accounting, fit verdicts,
determinism and the DRAM < CXL < NVMe ordering."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.analysis.plan import binding_constraint, binding_tier
from tiersim.config.document import load_scenario
from tiersim.config.hardware import Hardware
from tiersim.config.scenario import RunConfig
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies.builder import Names, joined
from tiersim.strategies.gradients import PARTITION_STREAM
from tiersim.strategies.placement import Misfit, MissingDevice
from tiersim.workload import build_step

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
SMALL = ["model.layers=4", "training.sub_group_size=2e8"]
VARIANTS: dict[str, list[str]] = {
    "small": SMALL,
    "small-dp2": [*SMALL, "hardware.gpus=2"],  # exercises NVLink collectives
    "quickstart": [],
}
SLACK = 1e-9

_configs: dict[str, dict[str, RunConfig]] = {}
_baseline: dict[tuple[str, str], Result] = {}


def configs(variant: str) -> dict[str, RunConfig]:
    if variant not in _configs:
        _configs[variant] = {c.strategy: c for c in load_scenario(QUICKSTART, VARIANTS[variant])}
    return _configs[variant]


def baseline(variant: str, strategy: str) -> Result:
    key = (variant, strategy)
    if key not in _baseline:
        _baseline[key] = simulate(configs(variant)[strategy])
    return _baseline[key]


def scaled(hw: Hardware, knob: str, factor: float) -> Hardware:
    """``hw`` with one bandwidth multiplied by ``factor``."""
    if knob == "pcie":
        assert hw.link is not None
        return replace(hw, link=replace(hw.link, pinned_bandwidth=hw.link.pinned_bandwidth * factor))
    if knob == "dram":
        return replace(hw, dram=replace(hw.dram, bandwidth=hw.dram.bandwidth * factor))
    if knob in ("cxl_read", "cxl_write", "cxl_both"):
        assert hw.cxl is not None
        cxl = hw.cxl
        if knob != "cxl_write":
            cxl = replace(cxl, read_bandwidth=cxl.read_bandwidth * factor)
        if knob != "cxl_read":
            cxl = replace(cxl, write_bandwidth=cxl.write_bandwidth * factor)
        return replace(hw, cxl=cxl)
    if knob in ("nvme_read", "nvme_write", "nvme_both"):
        assert hw.nvme is not None
        nvme = hw.nvme
        if knob != "nvme_write":
            nvme = replace(nvme, read_bandwidth=nvme.read_bandwidth * factor)
        if knob != "nvme_read":
            nvme = replace(nvme, write_bandwidth=nvme.write_bandwidth * factor)
        return replace(hw, nvme=nvme)
    assert hw.gpu is not None
    if knob == "nvlink":
        return replace(hw, gpu=replace(hw.gpu, nvlink_bandwidth=hw.gpu.nvlink_bandwidth * factor))
    if knob == "hbm":
        return replace(hw, gpu=replace(hw.gpu, hbm_bandwidth=hw.gpu.hbm_bandwidth * factor))
    raise KeyError(knob)


KNOBS = ["pcie", "dram", "cxl_read", "cxl_write", "cxl_both", "nvme_read", "nvme_write", "nvme_both",
         "nvlink", "hbm"]


# --- monotonicity ------------------------------------------------------------------------


@given(
    variant=st.sampled_from(sorted(VARIANTS)),
    strategy=st.sampled_from(["gpu", "dram", "cxl", "nvme"]),
    knob=st.sampled_from(KNOBS),
    factor=st.floats(1.0, 8.0),
)
@settings(max_examples=25, deadline=None)
def test_more_bandwidth_is_never_slower(variant: str, strategy: str, knob: str, factor: float) -> None:
    base = baseline(variant, strategy)
    config = configs(variant)[strategy]
    faster = simulate(replace(config, hardware=scaled(config.hardware, knob, factor)))
    assert faster.fits == base.fits
    if not base.fits:
        return
    assert faster.iteration_time_s <= base.iteration_time_s * (1 + SLACK)


@pytest.mark.parametrize("knob", KNOBS)
@pytest.mark.parametrize("strategy", ["gpu", "dram", "cxl", "nvme"])
def test_each_bandwidth_doubled_is_never_slower(strategy: str, knob: str) -> None:
    # The deterministic companion of the property above: every knob, every strategy, dp=2.
    base = baseline("small-dp2", strategy)
    config = configs("small-dp2")[strategy]
    assert base.fits
    faster = simulate(replace(config, hardware=scaled(config.hardware, knob, 2.0)))
    assert faster.iteration_time_s <= base.iteration_time_s * (1 + SLACK)


def _nvme(variant: str, **options: object) -> Result:
    config = configs(variant)["nvme"]
    return simulate(replace(config, options=replace(config.options, **options)))


@given(
    variant=st.sampled_from(["small", "quickstart"]),
    counts=st.lists(st.integers(4, 40), min_size=2, max_size=2).map(sorted),
    pipeline_read=st.booleans(),
    pipeline_write=st.booleans(),
)
@settings(max_examples=20, deadline=None)
def test_more_swap_buffers_never_slower(variant: str, counts: list[int], pipeline_read: bool,
                                        pipeline_write: bool) -> None:
    few, many = (_nvme(variant, buffer_count=n, pipeline_read=pipeline_read, pipeline_write=pipeline_write)
                 for n in counts)
    assert few.fits and many.fits
    assert many.iteration_time_s <= few.iteration_time_s * (1 + SLACK)


@given(
    variant=st.sampled_from(["small", "quickstart"]),
    depths=st.lists(st.integers(1, 64), min_size=2, max_size=2).map(sorted),
    pipeline_read=st.booleans(),
    pipeline_write=st.booleans(),
)
@settings(max_examples=20, deadline=None)
def test_more_queue_depth_never_slower(variant: str, depths: list[int], pipeline_read: bool,
                                       pipeline_write: bool) -> None:
    shallow, deep = (_nvme(variant, queue_depth=q, pipeline_read=pipeline_read, pipeline_write=pipeline_write)
                     for q in depths)
    assert deep.iteration_time_s <= shallow.iteration_time_s * (1 + SLACK)


# --- bytes moved -------------------------------------------------------------------------


def link_units(result: Result, link: str, phase: str) -> float:
    rows = result.utilisation
    picked = rows[(rows["kind"] == "link") & (rows["resource"] == link) & (rows["phase"] == phase)]
    assert len(picked) == 1, f"no utilisation row for link {link!r} in phase {phase!r}"
    return float(picked["units_moved"].iloc[0])


@st.composite
def small_configs(draw: st.DrawFn, strategy: str, micro_steps: int | None = None) -> RunConfig:
    dp = draw(st.sampled_from([1, 2, 4]))
    layers = draw(st.integers(1, 6))
    sub_group = draw(st.sampled_from(["5e7", "1e8", "2e8", "1e9"]))
    micro = micro_steps if micro_steps is not None else draw(st.integers(1, 3))
    overrides = [f"model.layers={layers}", f"training.sub_group_size={sub_group}", f"hardware.gpus={dp}",
                 f"training.global_batch={dp * micro}"]
    return load_scenario(QUICKSTART, overrides, [strategy])[0]


@given(config=small_configs("nvme"))
@settings(max_examples=20, deadline=None)
def test_nvme_update_moves_seven_fp32_tensors(config: RunConfig) -> None:
    """Over the iteration: four fp32 tensors read and three written per element in the step,
    and the fp32 gradient written at the accumulation boundary (whose last writes the step's
    first swap-in waits for)."""
    result = simulate(config)
    assert result.fits
    rank_params = build_step(config.model, config.training).rank_params
    nvme = config.hardware.nvme
    assert nvme is not None
    read, written = 4 * 4 * rank_params, (3 + 1) * 4 * rank_params
    expected = read / nvme.read_bandwidth + written / nvme.write_bandwidth
    assert link_units(result, "nvme", "iteration") == pytest.approx(expected, rel=1e-9)


@given(config=small_configs("dram"))
@settings(max_examples=20, deadline=None)
def test_dram_update_sends_bf16_params_back(config: RunConfig) -> None:
    result = simulate(config)
    rank_params = build_step(config.model, config.training).rank_params
    assert link_units(result, "pcie_h2d", "optimizer_step") == pytest.approx(rank_params * 2, rel=1e-9)


@given(config=small_configs("dram", micro_steps=1))
@settings(max_examples=20, deadline=None)
def test_dram_backward_sends_gradient_partition(config: RunConfig) -> None:
    """One micro-step: the 16-bit partition D2H and back H2D, then the fp32 copy D2H."""
    result = simulate(config)
    step = build_step(config.model, config.training)
    fabric = 0.0 if config.hardware.fabric is None or not config.hardware.fabric.via_host_link else None
    assert fabric == 0.0, "the quickstart's collectives run on NVLink, not on PCIe"
    assert link_units(result, "pcie_d2h", "backward") == pytest.approx(step.rank_params * (2 + 4), rel=1e-9)
    assert link_units(result, "pcie_h2d", "backward") == pytest.approx(step.rank_params * 2, rel=1e-9)


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_a_forward_waits_for_the_backward_before_it(strategy: str) -> None:
    """DeepSpeed ends every backward by synchronizing the stream of its reductions and offload
    copies: nothing of the next micro-step (quickstart: 4 per rank) starts before the last of
    the previous micro-step's tasks ends, although its copies outlast its compute."""
    trace = simulate(configs("quickstart")[strategy], trace=True).trace
    for micro in range(1, 4):
        before = trace[trace["name"].str.startswith(f"m{micro - 1}.bwd.")]
        after = trace[trace["name"].str.startswith(f"m{micro}.")]
        copies = before[before["category"].isin(["d2h", "h2d"])]
        assert copies["end"].max() > before[before["category"] == "compute"]["end"].max()
        assert after["start"].min() >= before["end"].max()


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_gradient_copies_run_one_at_a_time_in_order(strategy: str) -> None:
    """``partition_grads`` issues a layer's gradient copies, D2H and H2D, and at the boundary
    its fp32 D2H, on one CUDA stream, after those of the layer before: none overlaps another,
    also where a D2H and an H2D could run at once on their own links (the 70B node, 4 micro-
    steps per rank)."""
    path = QUICKSTART.parent / "llama2-70b-offload.yaml"
    config = load_scenario(path, strategies=[strategy])[0]
    trace = simulate(config, trace=True).trace
    copies = trace[trace["stream"] == PARTITION_STREAM].sort_values("start")
    assert set(copies["category"]) == {"d2h", "h2d"}
    assert len(copies) == (2 * 4 + 1) * len(build_step(config.model, config.training).layers)
    assert (copies["start"].to_numpy()[1:] >= copies["end"].to_numpy()[:-1]).all()


# --- phases ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("strategy", ["gpu", "dram", "cxl", "nvme"])
def test_phase_spans_sum_to_iteration_time(variant: str, strategy: str) -> None:
    result = baseline(variant, strategy)
    if not result.fits:
        pytest.skip(f"{strategy} does not fit in {variant}: {result.reason}")
    assert set(result.phases) == {"forward", "backward", "optimizer_step"}
    assert all(span >= 0 for span in result.phases.values())
    assert math.fsum(result.phases.values()) == pytest.approx(result.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_is_the_same_for_every_offload(variant: str) -> None:
    """The offloads differ in backward and step only. A later micro-step's forward starts when
    its backward ends, which differs, so the phase's seconds may differ by float residue."""
    forwards = {s: baseline(variant, s).phases["forward"] for s in ("dram", "cxl", "nvme")}
    assert forwards["dram"] > 0
    assert forwards["cxl"] == pytest.approx(forwards["dram"], rel=1e-12)
    assert forwards["nvme"] == pytest.approx(forwards["dram"], rel=1e-12)


# --- fit verdicts ------------------------------------------------------------------------


def test_quickstart_gpu_strategy_does_not_fit_in_hbm() -> None:
    result = baseline("quickstart", "gpu")
    assert result.fits is False
    assert result.iteration_time_s is None
    assert result.phases is None
    assert result.reason is not None and "hbm" in result.reason
    assert result.peak_bytes["hbm"] > result.capacity_bytes["hbm"]


@pytest.mark.parametrize(
    ("strategy", "overrides", "tier"),
    [
        ("dram", ["hardware.dram_capacity=1 GiB"], "dram"),
        ("cxl", ["hardware.dram_capacity=1 GiB"], "dram"),
        ("nvme", ["hardware.nvme=null"], "nvme"),
        ("cxl", ["hardware.cxl=null"], "cxl"),
    ],
)
def test_misfit_reason_names_the_tier(strategy: str, overrides: list[str], tier: str) -> None:
    (config,) = load_scenario(QUICKSTART, [*SMALL, *overrides], [strategy])
    result = simulate(config)
    assert result.fits is False
    assert result.iteration_time_s is None
    assert result.reason is not None and tier in result.reason.lower()


def test_misfit_is_typed_and_renders_the_reason() -> None:
    """The verdict's fields are read as they are (no text parsed); the sentence comes from them."""
    (config,) = load_scenario(QUICKSTART, [*SMALL, "hardware.dram_capacity=1 GiB"], ["dram"])
    result = simulate(config)
    misfit = result.misfit
    assert isinstance(misfit, Misfit)
    assert (misfit.tier, misfit.scope) == ("dram", "on the node")
    assert misfit.need_bytes == result.reserved_bytes["dram"] > misfit.have_bytes == config.hardware.usable("dram")
    assert result.reason == (f"dram needs {misfit.need_bytes / 1e9:.1f} GB on the node "
                             f"but has {misfit.have_bytes / 1e9:.1f} GB")
    assert binding_tier(result) == "dram"
    assert binding_constraint(result) == (f"capacity: dram (needs {misfit.need_bytes / 1e9:.1f} GB on the node, "
                                          f"has {misfit.have_bytes / 1e9:.1f} GB)")
    assert str(Misfit("hbm", 2_500_000_000, 1_000_000_000)) == "hbm needs 2.5 GB per GPU but has 1.0 GB"


def test_missing_device_is_typed() -> None:
    (config,) = load_scenario(QUICKSTART, [*SMALL, "hardware.nvme=null"], ["nvme"])
    result = simulate(config)
    assert result.misfit == MissingDevice("nvme", "NVMe drives")
    assert result.reason == "no NVMe drives in hardware.nvme"
    assert binding_tier(result) is None
    assert binding_constraint(result) == "missing: no NVMe drives in hardware.nvme"


# --- determinism and ordering ------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_simulate_is_deterministic(strategy: str) -> None:
    config = configs("quickstart")[strategy]
    first, second = simulate(config), simulate(config)
    pd.testing.assert_frame_equal(first.trace, second.trace)
    pd.testing.assert_frame_equal(first.utilisation, second.utilisation)
    assert first.iteration_time_s == second.iteration_time_s
    assert first.events == second.events


def test_quickstart_ordering_dram_cxl_nvme() -> None:
    times = {s: baseline("quickstart", s).iteration_time_s for s in ("dram", "cxl", "nvme")}
    assert times["dram"] < times["cxl"] < times["nvme"], times


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_step_only_utilisation_rows_equal_the_full_table(strategy: str) -> None:
    """The bottleneck is found from the optimizer step's rows alone (cheap, for sweeps): they
    are exactly the step rows of the full utilisation table, and so is the answer."""
    from tiersim.results import utilisation_rows

    result = simulate(configs("quickstart")[strategy])
    assert result.run is not None and result.graph is not None and result.phases is not None
    only = utilisation_rows(result.engine, result.phases, only="optimizer_step")
    full = [row for row in utilisation_rows(result.engine, result.phases)
            if row["phase"] == "optimizer_step"]
    assert only
    pd.testing.assert_frame_equal(pd.DataFrame(only), pd.DataFrame(full))
    fresh = simulate(configs("quickstart")[strategy])
    cheap = fresh.bottleneck()  # before the full table exists
    assert "_utilisation" not in fresh.__dict__
    assert cheap == result.bottleneck() == max(full, key=lambda row: row["utilisation"])["resource"]


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_engine_shortcuts_change_no_strategy_result(strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quickstart's schedules, with and without the engine's skipped re-allocations."""
    from tiersim.engine import run_graph

    result = simulate(configs("quickstart")[strategy])
    assert result.graph is not None and result.run is not None
    monkeypatch.setattr("tiersim.engine.flows.SHORTCUTS", False)
    full = run_graph(result.graph)
    assert full.makespan == pytest.approx(result.run.makespan, rel=1e-9)
    assert [r.end for r in full.records] == pytest.approx([r.end for r in result.run.records], rel=1e-9)


def test_task_names_are_made_once() -> None:
    """``Names`` and ``joined`` give the same string object each time they give a name."""
    names = Names("m{}.bwd.{}")
    assert names.of(1, 3) == "m1.bwd.3"
    assert names.of(1, 3) is names.of(1, 3)
    assert Names("step.{}.adam").of(2) == "step.2.adam"
    assert joined(names.of(0, 0), ".reduce") == "m0.bwd.0.reduce"
    assert joined(names.of(0, 0), ".reduce") is joined(names.of(0, 0), ".reduce")
