"""Partial optimizer offload (``strategies.dram.ratio``, DeepSpeed's ``offload_optimizer.ratio``):
``ratio: 1.0`` is today's CPU offload exactly, a lower ratio moves the state of the last
sub-groups into HBM and their update onto the GPU, and what DeepSpeed does not read is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiersim import cli
from tiersim.config.document import load_scenario
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies import STRATEGIES
from tiersim.strategies.kinds import ADAM_READ_BYTES, ADAM_WRITE_BYTES
from tiersim.strategies.partial import split
from tiersim.workload import build_step, step_shape

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
SMALL = ["model.layers=4", "training.sub_group_size=1e8"]


def run(strategy: str, *overrides: str) -> Result:
    (config,) = load_scenario(QUICKSTART, [*SMALL, *overrides], strategies=[strategy])
    return simulate(config)


@pytest.mark.parametrize("strategy", ["dram", "cxl"])
def test_ratio_one_is_todays_cpu_offload(strategy: str) -> None:
    today, whole = run(strategy), run(strategy, f"strategies.{strategy}.ratio=1.0")
    assert whole.iteration_time_s == today.iteration_time_s and whole.phases == today.phases
    assert whole.placement_items == today.placement_items and whole.peak_bytes == today.peak_bytes


def test_the_first_int_ratio_n_subgroups_go_to_the_cpu() -> None:
    (config,) = load_scenario(QUICKSTART, SMALL, strategies=["dram"])
    step = build_step(config.model, config.training)
    groups = len(step.subgroups)
    for ratio in (0.0, 0.3, 0.5, 0.99, 1.0):
        parts = split(step, ratio)
        assert parts.cpu_groups == int(ratio * groups)
        assert parts.cpu_elements == sum(g.numel for g in step.subgroups[:parts.cpu_groups])
        assert parts.cpu_elements + parts.gpu_elements == step.rank_params == sum(step.rank_partitions)
        assert sum(parts.layer_cpu) == parts.cpu_elements
        straddling = [c for c, p in zip(parts.layer_cpu, step.rank_partitions, strict=True) if 0 < c < p]
        assert len(straddling) <= 1


def test_the_gpus_share_of_the_state_is_16_bytes_per_element_in_hbm() -> None:
    whole, half = run("dram"), run("dram", "strategies.dram.ratio=0.5")
    (config,) = load_scenario(QUICKSTART, SMALL, strategies=["dram"])
    gpu = split(build_step(config.model, config.training), 0.5).gpu_elements
    assert gpu > 0
    assert half.peak_bytes["hbm"] - whole.peak_bytes["hbm"] == 16 * gpu
    assert whole.peak_bytes["dram"] - half.peak_bytes["dram"] == 16 * gpu  # fp32 param, m, v, gradient


def test_all_on_the_gpu_steps_at_hbm_bandwidth() -> None:
    """ratio 0: the step is GPU Adam over every sub-group back to back, each moving its fp32
    state and writing the 16-bit copy at the HBM bandwidth the GPU's kernels get."""
    result = run("dram", "strategies.dram.ratio=0", "hardware.gpu=h200")
    config = result.config
    step = build_step(config.model, config.training)
    gpu = config.hardware.rank_gpu
    expected = step.rank_params * (ADAM_READ_BYTES + ADAM_WRITE_BYTES + step.lp_bytes) / (
        gpu.hbm_bandwidth * gpu.memory_efficiency)
    assert result.phases is not None
    assert result.phases["optimizer_step"] == pytest.approx(expected, rel=1e-9)


def test_a_lower_ratio_moves_bytes_to_hbm_and_shortens_the_step() -> None:
    ratios = [1.0, 0.75, 0.5, 0.25, 0.0]
    results = [run("dram", f"strategies.dram.ratio={r}", "hardware.gpu=h200") for r in ratios]
    hbm = [r.peak_bytes["hbm"] for r in results]
    dram = [r.peak_bytes["dram"] for r in results]
    steps = [r.phases["optimizer_step"] for r in results if r.phases is not None]
    assert all(r.fits for r in results)
    assert hbm == sorted(hbm) and len(set(hbm)) == len(hbm)
    assert dram == sorted(dram, reverse=True) and len(set(dram)) == len(dram)
    assert steps == sorted(steps, reverse=True) and len(set(steps)) == len(steps)


def test_the_task_count_bounds_what_is_built() -> None:
    for ratio in (0.0, 0.3, 0.5, 1.0):
        (config,) = load_scenario(QUICKSTART, [*SMALL, f"strategies.dram.ratio={ratio}", "hardware.gpu=h200"],
                                  strategies=["dram"])
        built = len(simulate(config, fast_forward=False).graph.tasks)  # type: ignore[union-attr]
        strategy = STRATEGIES["dram"](config.options)
        counted = strategy.task_count(step_shape(config.model, config.training), config.hardware)
        assert built <= counted <= built + 1


@pytest.mark.parametrize(("overrides", "message"), [
    (["training.zero_stage=2"], "strategies.dram.ratio: 0.5: partial offload is ZeRO-3's"),
    (["training.deepspeed_version=0.13.3"], "strategies.dram.ratio: 0.5: tiersim models partial offload from "
                                          "DeepSpeed 0.15.4 on"),
])
def test_what_tiersim_does_not_model_is_refused_in_one_line(capsys: pytest.CaptureFixture[str],
                                                           overrides: list[str], message: str) -> None:
    sets = [a for item in ["strategies.dram.ratio=0.5", *overrides] for a in ("--set", item)]
    assert cli.main(["run", str(QUICKSTART), "--strategy", "dram", *sets]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_ds_config_ratio_becomes_the_cpu_strategies_ratio(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 4, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.4}}}))
    configs = load_scenario(QUICKSTART, SMALL, ds_config=ds)
    assert {c.strategy: c.options.ratio for c in configs} == {"dram": 0.4, "cxl": 0.4}


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.5])
def test_skipping_alike_iterations_changes_nothing(ratio: float) -> None:
    (config,) = load_scenario(QUICKSTART, ["model.layers=6", "training.sub_group_size=5e7", "training.global_batch=5",
                                           f"strategies.dram.ratio={ratio}", "hardware.gpu=h200"],
                              strategies=["dram"])
    fast, whole = simulate(config), simulate(config, fast_forward=False)
    assert fast.iteration_time_s == pytest.approx(whole.iteration_time_s, rel=1e-9)
    assert fast.phases == pytest.approx(whole.phases, rel=1e-9)


def test_ds_config_zero2_cpu_offload_runs_the_stage_1_and_2_path(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 4, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 2, "overlap_comm": True,
                                                    "offload_optimizer": {"device": "cpu"}}}))
    configs = load_scenario(QUICKSTART, SMALL, ds_config=ds)
    assert [(c.strategy, c.training.zero_stage) for c in configs] == [("dram", 2), ("cxl", 2)]
    assert all(simulate(c).fits for c in configs)
