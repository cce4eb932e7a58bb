"""Host memory policies as numactl sets them (``strategies.cxl.policy``, ``strategies.dram.policy``):
a bind that fits in DRAM is DRAM-only, a bind that spills puts the last-allocated tensors on CXL
and costs each access where its bytes are, an interleave is a weighted interleave of one page per
node, and the fit verdicts and refusals."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from clirun import QUICKSTART, tiersim
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.analysis import plan
from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies import STRATEGIES
from tiersim.strategies.host_layout import ADAM_STATE, FP32_PARAMS, GRAD_PARTITIONS, RUNTIME
from tiersim.strategies.memory import HostMemory, traffic
from tiersim.strategies.placement import Misfit
from tiersim.sweeping.points import load_sweep, resolve_point
from tiersim.workload import build_step

SMALL = ["model.layers=4", "training.sub_group_size=2e8"]
GB = 10**9


def config(strategy: str, *sets: str, **options: Any) -> RunConfig:
    """The quickstart's ``strategy`` with ``sets`` applied and its options replaced."""
    (found,) = [c for c in load_scenario(QUICKSTART, [*SMALL, *sets]) if c.strategy == strategy]
    return replace(found, options=replace(found.options, **options)) if options else found


def same(a: Result, b: Result) -> None:
    """Two results are the same run: times, phases, bytes per tier and every task."""
    assert a.fits and b.fits
    assert a.iteration_time_s == b.iteration_time_s
    assert a.phases == b.phases
    assert a.peak_bytes == b.peak_bytes and a.reserved_bytes == b.reserved_bytes
    assert sorted(a.placement_items) == sorted(b.placement_items)
    assert a.trace.equals(b.trace)


def layout(run: RunConfig) -> Any:
    """The host layout the run's strategy gives its tensors."""
    strategy = STRATEGIES[run.strategy](run.options)
    return strategy.layout(build_step(run.model, run.training), run.hardware)  # type: ignore[attr-defined]


def test_bind_that_fits_in_dram_equals_the_dram_strategy() -> None:
    same(simulate(config("cxl", policy="bind")), simulate(config("dram")))


@given(layers=st.integers(1, 6), sub_group=st.sampled_from(["5e7", "2e8", "1e9"]),
       batch=st.sampled_from([1, 2]), grad_accum=st.sampled_from(["bf16", "fp32"]),
       ratio=st.sampled_from([1.0, 0.5]))
@settings(max_examples=10, deadline=None)
def test_bind_with_enough_dram_equals_dram_only(layers: int, sub_group: str, batch: int, grad_accum: str,
                                                ratio: float) -> None:
    sets = (f"model.layers={layers}", f"training.sub_group_size={sub_group}", f"training.global_batch={batch}",
            f"training.grad_accum_dtype={grad_accum}")
    same(simulate(config("cxl", *sets, policy="bind", ratio=ratio)), simulate(config("dram", *sets, ratio=ratio)))
    same(simulate(config("cxl", *sets, policy="preferred", ratio=ratio)),
         simulate(config("dram", *sets, policy="preferred", ratio=ratio)))


def test_a_spilled_bind_under_partial_offload_keeps_the_gpu_groups_off_the_host() -> None:
    whole, half = simulate(spilled()), simulate(replace(spilled(), options=replace(spilled().options, ratio=0.5)))
    assert whole.fits and half.fits
    host = sum(half.reserved_bytes[t] for t in ("dram", "cxl"))
    assert host < sum(whole.reserved_bytes[t] for t in ("dram", "cxl"))
    assert half.reserved_bytes["cxl"] < whole.reserved_bytes["cxl"]


def spilled() -> RunConfig:
    """A bind whose socket DRAM holds its first tensors and not its last."""
    run = config("cxl", "training.sub_group_size=2e7", policy="bind")
    held = sum(simulate(config("dram", "training.sub_group_size=2e7")).reserved_bytes[t] for t in ("dram", "cxl"))
    hw = run.hardware
    return replace(run, hardware=replace(hw, dram_capacity_per_socket=int(0.8 * held / 0.98) // hw.sockets))


def test_a_bind_that_spills_puts_the_last_allocated_tensors_on_cxl() -> None:
    pieces = layout(spilled()).pieces
    for label in layout(spilled()).labels().values():
        fractions = [f for p in label for f in p.fractions * p.count]
        assert fractions == sorted(fractions, reverse=True)  # DRAM first, in allocation order
    assert pieces[0].fractions == (1.0,) and pieces[-1].fractions == (0.0,)
    assert pieces[0].what == RUNTIME
    assert {p.what for p in pieces if min(p.fractions) < 1} <= {ADAM_STATE, "retained after the first step",
                                                               "16-bit temporary of the H2D copy"}
    result = simulate(spilled())
    items = {(tier, what) for tier, what, _a, held in result.placement_items if held}
    assert ("cxl", ADAM_STATE) in items and ("cxl", FP32_PARAMS) not in items
    assert ("dram", FP32_PARAMS) in items and ("cxl", GRAD_PARTITIONS) not in items


def test_a_spilled_bind_costs_the_cxl_part_on_cxl() -> None:
    run = spilled()
    split = layout(run)
    adam_on_cxl = [i for i, memory in enumerate(split.subgroups(ADAM_STATE)) if memory.dram_fraction < 1]
    assert adam_on_cxl
    dram, bind = simulate(config("dram", "training.sub_group_size=2e7")), simulate(run)
    trace = bind.trace
    # the backward's copies touch only DRAM buffers: the same as DRAM-only
    assert bind.phases is not None and dram.phases is not None
    assert bind.phases["backward"] == pytest.approx(dram.phases["backward"], rel=1e-12)
    assert bind.phases["optimizer_step"] > dram.phases["optimizer_step"]
    cxl_adam = trace[trace["name"] == f"step.{adam_on_cxl[-1]}.adam"]
    dram_adam = trace[trace["name"] == "step.0.adam"]
    assert (cxl_adam["end"] - cxl_adam["start"]).iloc[0] > (dram_adam["end"] - dram_adam["start"]).iloc[0]


def test_a_split_access_costs_each_part_on_its_own_tier() -> None:
    hw = config("cxl").hardware
    assert hw.cxl is not None
    cxl = HostMemory.split_at(hw, 0.0)
    usage = dict(traffic(HostMemory.dram_only(), 3.0, cxl, 2.0))
    assert usage["dram"] == 3.0
    assert usage["cxl"] == pytest.approx(2.0 / min(hw.cxl.write_bandwidth, hw.cxl.link_bandwidth))
    quarter = HostMemory.split_at(hw, 0.75)
    assert dict(quarter.access(4.0, 0.0))["dram"] == 3.0
    assert HostMemory.split_at(hw, 1.0) == HostMemory.dram_only()
    # CPU Adam's reads of a DRAM tensor and a CXL tensor of equal bytes: half on each tier
    assert HostMemory.dram_only().blend(((cxl, 4.0),), 4.0) == HostMemory.split_at(hw, 0.5)
    assert quarter.blend(((quarter, 8.0),), 4.0) is quarter


def test_interleave_is_a_weighted_interleave_of_one_page_per_node() -> None:
    one = ("hardware.cxl.count=1",)  # quickstart: one socket, so one CXL node per DRAM node
    same(simulate(config("cxl", *one, policy="interleave")),
         simulate(config("cxl", *one, policy="weighted-interleave", dram_weight=1.0, cxl_weight=1.0)))
    two = config("cxl", "hardware.cxl.count=2", policy="interleave")
    assert layout(two).uniform.dram_fraction == pytest.approx(1 / 3)


def test_weighted_interleave_stays_the_default() -> None:
    assert STRATEGIES["cxl"].Options().policy == "weighted-interleave"
    assert STRATEGIES["dram"].Options().policy == "bind"


def test_bind_fits_what_dram_and_cxl_hold_and_dram_alone_does_not() -> None:
    need = simulate(config("dram")).reserved_bytes["dram"]
    in_use = f"hardware.host_memory_in_use={config('dram').hardware.capacity('dram') - need // 2}"
    verdict = simulate(config("dram", in_use))
    assert not verdict.fits and isinstance(verdict.misfit, Misfit) and verdict.misfit.tier == "dram"
    bind = simulate(config("cxl", in_use, policy="bind"))
    assert bind.fits and bind.reserved_bytes["cxl"] > 0
    squeezed = config("cxl", in_use, policy="bind")
    assert squeezed.hardware.cxl is not None
    tiny = replace(squeezed.hardware, cxl=replace(squeezed.hardware.cxl, capacity=GB))
    short = simulate(replace(squeezed, hardware=tiny))
    assert not short.fits and isinstance(short.misfit, Misfit) and short.misfit.tier == "cxl"


def test_memory_in_use_comes_off_usable_dram() -> None:
    base = config("dram").hardware
    used = config("dram", "hardware.host_memory_in_use=100 GB").hardware
    assert used.usable("dram") == base.capacity("dram") - 100 * GB
    small = config("dram", "hardware.host_memory_in_use=1 GB").hardware
    assert small.usable("dram") == base.usable("dram")  # within the 2% headroom


@pytest.mark.parametrize(("sets", "field"), [
    (["--strategy", "dram", "--set", "strategies.dram.policy=interleave"], "strategies.dram.policy"),
    (["--strategy", "cxl", "--set", "strategies.cxl.policy=membind"], "strategies.cxl.policy"),
    (["--strategy", "dram", "--set", "hardware.host_memory_in_use=100 TB"], "hardware.host_memory_in_use"),
    (["--strategy", "cxl", "--set", "hardware.cxl=null", "--set", "strategies.cxl.policy=bind"],
     "strategies.cxl.policy: bind places memory on CXL nodes, but hardware.cxl has no CXL devices"),
])
def test_refusals_are_one_line_and_exit_2(sets: list[str], field: str) -> None:
    done = tiersim("run", str(QUICKSTART), *sets)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and field in done.stderr


def test_without_cxl_the_default_policy_answers_the_devices_are_missing() -> None:
    """Only a policy set explicitly is refused on a node without CXL; left out, the run says it
    lacks the devices, as it always did."""
    result = simulate(config("cxl", "hardware.cxl=null"))
    assert not result.fits and "CXL devices" in str(result.misfit)
    done = tiersim("run", str(QUICKSTART), "--strategy", "cxl", "--set", "hardware.cxl=null")
    assert done.returncode == 0 and "no CXL devices" in done.stdout


def test_the_planner_tries_each_memory_policy_it_is_given() -> None:
    scenario = plan.read_scenario(QUICKSTART, SMALL)
    frame = plan.plan_sizing(scenario, "fastest", ["cxl", "dram"], dram_gib=[64], cxl_counts=[2],
                             policies=["bind", "weighted-interleave"])
    assert sorted(zip(frame["strategy"], frame["policy"])) == [
        ("cxl", "bind"), ("cxl", "weighted-interleave"), ("dram", "bind")]
    plain = plan.plan_sizing(scenario, "fastest", ["cxl"], dram_gib=[64], cxl_counts=[2])
    assert list(plain["policy"]) == ["weighted-interleave"]


def test_a_sweep_varies_the_memory_policy() -> None:
    sweep = load_sweep({"base": str(QUICKSTART), "set": SMALL,
                        "grid": {"strategy": ["cxl"], "strategies.cxl.policy": ["bind", "interleave"]}})
    assert [resolve_point(sweep, i)[0].options.policy for i in range(2)] == ["bind", "interleave"]
