"""The planner and sweeps over the strategy options of issue 37: parameter offload
(``offload_param``), partial offload (``ratio``) and the host memory ``policy``. Each planner
row is checked against the same candidate simulated directly."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from clirun import QUICKSTART, tiersim

from tiersim.analysis import plan
from tiersim.config.document import load_scenario
from tiersim.errors import ConfigError
from tiersim.simulate import simulate
from tiersim.sweeping.runner import sweep

SMALL = ["model.layers=4", "training.sub_group_size=2e8"]
WIDE = ["model.layers=48", "model.hidden=8192", "model.heads=64", "model.kv_heads=8", "model.ffn=28672",
        "training.global_batch=1", "training.sub_group_size=1e9"]
"""quickstart's H100 with a 47B model: its 16-bit parameters alone (94 GB) exceed HBM."""


def test_the_planner_chooses_parameter_offload_when_only_it_fits() -> None:
    scenario = plan.read_scenario(QUICKSTART, WIDE)
    frame = plan.plan_sizing(scenario, "fastest", ["gpu", "dram"], dram_gib=[2048], offload_param=["none", "cpu"])
    rows = frame.to_dict(orient="records")
    assert sorted((r["strategy"], r["offload_param"]) for r in rows) == [
        ("dram", "cpu"), ("dram", "none"), ("gpu", "cpu"), ("gpu", "none")]
    (fitting,) = [r for r in rows if r["fits"]]
    assert (fitting["strategy"], fitting["offload_param"], fitting["rank"]) == ("dram", "cpu", 1)
    assert all(r["binding"].startswith("capacity: hbm") for r in rows if not r["fits"])
    alone = ["hardware.dram_capacity=2 TiB", "hardware.cxl=null", "hardware.nvme=null"]
    (config,) = load_scenario(QUICKSTART, [*WIDE, *alone, "strategies=[{name: dram, offload_param: {device: cpu}}]"])
    assert fitting["iteration_time_s"] == simulate(config).iteration_time_s
    line = plan.chosen(frame, "fastest", ["offload_param"])
    assert line is not None and line.startswith("chose dram (offload_param cpu) with 2048 GiB DRAM per socket: ")
    assert line.endswith("of 1 eligible; 3 of 4 do not fit")


def test_the_planner_chooses_the_smallest_ratio_that_fits() -> None:
    """The 7B's GPU share of the optimizer state fits HBM from ratio 0.5 up; updating more of
    it on the GPU is faster, so 0.5 wins, and each row is its own run."""
    scenario = plan.read_scenario(QUICKSTART)
    ratios = [0.0, 0.25, 0.5, 0.75, 1.0]
    frame = plan.plan_sizing(scenario, "fastest", ["dram"], dram_gib=[256], ratios=ratios)
    by_ratio = {r["ratio"]: r for r in frame.to_dict(orient="records")}
    assert sorted(by_ratio) == ratios
    assert [by_ratio[r]["fits"] for r in ratios] == [False, False, True, True, True]
    assert by_ratio[0.5]["rank"] == 1
    times = [by_ratio[r]["iteration_time_s"] for r in (0.5, 0.75, 1.0)]
    assert times == sorted(times)
    (config,) = load_scenario(QUICKSTART, ["hardware.dram_capacity=256 GiB", "hardware.cxl=null", "hardware.nvme=null",
                                           "strategies=[{name: dram, ratio: 0.75}]"])
    assert by_ratio[0.75]["iteration_time_s"] == simulate(config).iteration_time_s


def test_each_strategy_gets_the_options_it_has() -> None:
    """Ratios vary dram and cxl only, policies cxl only; a ratio below 1 beside parameter offload
    (not modelled) is not tried; parameter offload to nvme keeps the drives (a small vocabulary:
    DeepSpeed's swapper takes no partition as large as its default buffer)."""
    scenario = plan.read_scenario(QUICKSTART, [*SMALL, "model.vocab=1024"])
    options = plan.Options(("bind", "interleave"), (0.5, 1.0), ("none", "cpu", "nvme"))
    seen = [(config.strategy, plan.option_values(config.options), sizing.nvme_count)
            for sizing, config in plan.candidate_configs(scenario, ["gpu", "dram", "cxl"], [64], [2], [1], options)]
    assert [(s, o["offload_param"]) for s, o, _n in seen if s == "gpu"] == [("gpu", "none"), ("gpu", "cpu"),
                                                                              ("gpu", "nvme")]
    assert [(o["ratio"], o["offload_param"]) for s, o, _n in seen if s == "dram"] == [
        (0.5, "none"), (1.0, "none"), (1.0, "cpu"), (1.0, "nvme")]
    assert len([s for s, _o, _n in seen if s == "cxl"]) == 2 * 4
    assert all(n == (1 if o["offload_param"] == "nvme" else 0) for _s, o, n in seen)


def test_nvme_parameter_offload_sizes_the_swap_buffer_to_the_embedding() -> None:
    """quickstart's embedding partition (32000 x 4096 elements on one rank) exceeds DeepSpeed's
    default ``buffer_size`` (1e8): the planner raises it to one element more, as a user must
    write it, shows it in the row, and the row is that run's answer; a small vocabulary keeps
    the default."""
    frame = plan.plan_sizing(plan.read_scenario(QUICKSTART, SMALL), "fastest", ["dram"], dram_gib=[256],
                             nvme_counts=[1], offload_param=["none", "nvme"])
    by_device = {r["offload_param"]: r for r in frame.to_dict(orient="records")}
    assert pd.isna(by_device["none"]["param_buffer_size"])
    nvme = by_device["nvme"]
    assert nvme["param_buffer_size"] == 32000 * 4096 + 1 and nvme["fits"]
    alone = ["hardware.dram_capacity=256 GiB", "hardware.cxl=null", "hardware.nvme.count=1",
             "strategies=[{name: dram, offload_param: {device: nvme, buffer_size: 131072001}}]"]
    (config,) = load_scenario(QUICKSTART, [*SMALL, *alone])
    assert nvme["iteration_time_s"] == simulate(config).iteration_time_s
    small = plan.candidate_configs(plan.read_scenario(QUICKSTART, [*SMALL, "model.vocab=1024"]), ["dram"], [64],
                                   nvme_counts=[1], options=plan.Options(offload_param=("nvme",)))
    assert [plan.option_values(c.options)["param_buffer_size"] for _s, c in small] == [100_000_000]
    proc = tiersim("plan", str(QUICKSTART), *[a for s in SMALL for a in ("--set", s)], "--objective", "fastest",
                   "--strategy", "dram", "--dram-gib", "256", "--nvme-counts", "1", "--offload-param", "nvme")
    assert proc.returncode == 0, proc.stderr
    assert "buffer_size" in proc.stdout.splitlines()[1] and "131,072,001" in proc.stdout


@pytest.mark.parametrize(("options", "field"), [
    (plan.Options(ratios=(1.5,)), "ratios"),
    (plan.Options(offload_param=("disk",)), "offload_param"),
])
def test_bad_options_are_refused_by_name(options: plan.Options, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        plan.candidate_configs(plan.read_scenario(QUICKSTART, SMALL), ["dram"], [64], options=options)


def test_nvme_parameter_offload_needs_drives() -> None:
    scenario = plan.read_scenario(QUICKSTART, [*SMALL, "hardware.nvme=null"])
    with pytest.raises(ConfigError, match="offload_param: nvme needs drives"):
        plan.candidate_configs(scenario, ["dram"], [64], options=plan.Options(offload_param=("cpu", "nvme")))


@pytest.mark.slow
def test_plan_cli_shows_the_options_it_varied_and_its_choice() -> None:
    proc = tiersim("plan", str(QUICKSTART), *[a for s in WIDE for a in ("--set", s)], "--objective", "fastest",
                   "--strategy", "dram", "--dram-gib", "2048", "--offload-param", "none,cpu")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "offload_param" in lines[1].split()
    first = next(k for k, line in enumerate(lines) if line.startswith("chose "))
    choice = " ".join(line.strip() for line in lines[first:])
    assert choice.startswith("chose dram (offload_param cpu) with 2048 GiB DRAM per socket: it fits")
    bad = tiersim("plan", str(QUICKSTART), "--objective", "fastest", "--ratios", "0.5,x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--ratios" in bad.stderr


@pytest.mark.parametrize(("factor", "values"), [
    ("strategies.dram.ratio", [0.5, 1.0]),
    ("strategies.dram.offload_param.device", ["cpu", "nvme"]),
    ("strategies.cxl.policy", ["bind", "interleave"]),
])
def test_a_sweep_varies_each_option(tmp_path: Path, factor: str, values: list[object]) -> None:
    """A sweep over each option by its dotted path runs, one row per value, each value its own
    answer (with nothing kept in host memory, nvme parameter offload reads the drives)."""
    strategy = factor.split(".")[1]
    keep = ["strategies.dram.offload_param.max_in_cpu=0"] if "offload_param" in factor else []
    frame = sweep({"name": "options", "base": str(QUICKSTART), "set": [*SMALL, "model.vocab=1024", *keep],
                   "grid": {"strategy": [strategy], factor: values}}, out=tmp_path / "out")
    assert len(frame) == len(values) and frame["fits"].all()
    assert list(frame[factor]) == values
    times = set(frame["iteration_time_s"])
    assert len(times) == len(values), "each value changes the answer"
