"""Work limits: a run's tasks are counted before anything is built (exactly what the strategy
then builds), a run or sweep past its limit is refused with one line naming the field, the
value and the limit unless ``--force``, and the size of large work is said before it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim import cli
from tiersim.config import limits
from tiersim.config.document import load_scenario
from tiersim.config.worksize import FAST_FORWARD_TRIES, run_tasks, simulated_tasks
from tiersim.errors import ConfigError
from tiersim.simulate import simulate
from tiersim.sweeping.points import load_sweep, plan_sweep
from tiersim.sweeping.runner import run_sweep

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SEVENTY_B = ROOT / "scenarios" / "llama2-70b-offload.yaml"


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from([QUICKSTART, SEVENTY_B]),
    layers=st.integers(1, 6),
    micro_steps=st.integers(1, 6),
    gpus=st.sampled_from([1, 2, 4]),
    zero_stage=st.integers(0, 3),
    sub_group=st.sampled_from(["1e7", "3e7", "1e8", "1e9"]),
    split=st.sampled_from([(1, False), (2, False), (2, True)]),
)
def test_task_count_is_exactly_the_graph_the_strategy_builds(scenario: Path, layers: int, micro_steps: int,
                                                             gpus: int, zero_stage: int, sub_group: str,
                                                             split: tuple[int, bool]) -> None:
    tp = split[0] if gpus % split[0] == 0 else 1
    overrides = [f"model.layers={layers}", f"hardware.gpus={gpus}", "hardware.sockets=2",
                 f"training.tensor_parallel={tp}", f"training.sequence_parallel={split[1]}",
                 "hardware.cores_per_rank=4", f"training.global_batch={gpus // tp * micro_steps}",
                 f"training.zero_stage={zero_stage}", f"training.sub_group_size={sub_group}",
                 "hardware.gpu=h200"]
    modelled = [name for name, lowest in LOWEST_STAGE.items() if zero_stage >= lowest]
    for config in load_scenario(scenario, overrides, modelled):
        result = simulate(config, fast_forward=False)
        if result.graph is not None:
            assert run_tasks(config) == len(result.graph.tasks), config.strategy
            built = len(simulate(config).built.tasks)
            assert built <= run_tasks(config)
            assert built <= simulated_tasks(config) // FAST_FORWARD_TRIES


LOWEST_STAGE = {"gpu": 0, "dram": 1, "cxl": 1, "nvme": 3}
"""The lowest ZeRO stage each strategy runs at (below it the scenario is refused)."""


def main(*args: str) -> int:
    return cli.main(list(args))


@pytest.mark.parametrize(("assignment", "field", "why", "also"), [
    ("training.global_batch=1000000", "training.global_batch", "1,000,000 micro-steps of 34 layers", ()),
    ("training.global_batch=1e12", "training.global_batch", "1,000,000,000,000 micro-steps", ()),
    # ZeRO-3 sub-groups hold whole tensors, so only the flat partition of ZeRO-1/2 splits this far
    ("training.sub_group_size=1", "training.sub_group_size", "6,738,415,616 optimizer sub-groups",
     ("training.zero_stage=2",)),
    ("model.layers=1e15", "model.layers", "1e+15 layers in each of 4 micro-steps", ()),
])
def test_a_run_past_the_task_limit_is_refused_naming_field_value_and_limit(
        capsys: pytest.CaptureFixture[str], assignment: str, field: str, why: str, also: tuple[str, ...]) -> None:
    assert main("run", str(QUICKSTART), *[a for item in also for a in ("--set", item)], "--set", assignment) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"--set: {field}:" in err and why in err
    assert f"the limit is {limits.MAX_TASKS:,} tasks" in err and "--force" in err
    assert field.split(".")[-1] in assignment


def test_force_runs_past_the_task_limit(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tiersim.config.worksize.MAX_TASKS", 100)
    assert main("run", str(QUICKSTART), "--strategy", "dram") == 2
    assert "the limit is 100 tasks" in capsys.readouterr().err
    assert main("run", str(QUICKSTART), "--strategy", "dram", "--force") == 0
    assert "dram" in capsys.readouterr().out


def test_plan_refuses_past_the_limit_and_force_lifts_it(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tiersim.config.worksize.MAX_TASKS", 100)
    assert main("plan", str(QUICKSTART), "--objective", "fastest", "--strategy", "dram") == 2
    assert "the limit is 100 tasks" in capsys.readouterr().err
    assert main("plan", str(QUICKSTART), "--objective", "fastest", "--strategy", "dram", "--dram-gib", "512",
                "--force") == 0


def test_a_fast_forwarded_run_builds_no_more_than_the_tasks_its_time_is_bounded_by() -> None:
    for config in load_scenario(QUICKSTART, ["training.global_batch=640"], ["dram", "nvme"]):
        assert simulated_tasks(config) < run_tasks(config) / 20
        assert len(simulate(config).built.tasks) <= simulated_tasks(config) // FAST_FORWARD_TRIES


def test_a_run_that_may_take_more_than_a_second_is_refused_naming_the_field(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main("run", str(QUICKSTART), "--strategy", "dram", "--set", "training.zero_stage=2",
                "--set", "training.sub_group_size=1e5") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "--set: training.sub_group_size: 100,000 gives 67,385 optimizer sub-groups" in err
    assert f"the limit is {limits.MAX_RUN_SECONDS:g} s per run" in err and "--force" in err
    (config,) = load_scenario(QUICKSTART, ["training.zero_stage=2", "training.sub_group_size=1e5"], ["dram"],
                              force=True)
    assert simulated_tasks(config) * limits.SECONDS_PER_TASK > limits.MAX_RUN_SECONDS


def test_a_traced_run_is_held_to_a_second_of_all_its_tasks(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    assert main("run", str(QUICKSTART), "--strategy", "dram", "--set", "training.global_batch=640",
                "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("tiersim: error: --out: writes a per-task trace, so simulates in full: "
                          "training.global_batch 640 gives 640 micro-steps")
    assert f"the limit is {limits.MAX_RUN_SECONDS:g} s per run" in err and "--force" in err
    assert not (tmp_path / "out").exists()


def test_force_runs_past_the_time_limit(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tiersim.config.worksize.MAX_RUN_SECONDS", 1e-3)
    assert main("run", str(QUICKSTART), "--strategy", "dram", "--set", "model.layers=2000") == 2
    assert "model.layers: 2,000 gives 2,002 layers in each of 3 micro-steps" in capsys.readouterr().err
    assert main("run", str(QUICKSTART), "--strategy", "dram", "--force") == 0
    assert "dram" in capsys.readouterr().out


def test_run_says_how_large_large_work_is_before_running() -> None:
    proc = subprocess.run([sys.executable, "-m", "tiersim", "run", str(QUICKSTART), "--strategy", "dram",
                           "--set", "training.global_batch=640", "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tiersim: quickstart: 1 run, ") and "tasks and at most" in line and "events" in line
    tasks = int(line.split("1 run, ")[1].split(" tasks")[0].replace(",", ""))
    assert tasks >= limits.NOTICE_TASKS


def test_a_huge_grid_is_refused_before_a_single_point_is_made(tmp_path: Path) -> None:
    values = list(range(100))
    spec = {"base": str(QUICKSTART), "grid": {f"model.{k}": values for k in ("layers", "hidden", "heads", "ffn",
                                                                             "vocab", "kv_heads")}}
    with pytest.raises(ConfigError, match=r"grid: 1,000,000,000,000 points x 4 strategies = 4,000,000,000,000 "
                                          r"runs; the limit is 100,000 runs per sweep \(pass force=True"):
        load_sweep(spec)


def test_a_sweep_past_its_task_limit_is_refused_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"base": str(QUICKSTART), "grid": {"strategy": ["dram"], "model.layers": [1, 2, 3, 4]}}
    monkeypatch.setattr("tiersim.sweeping.points.MAX_SWEEP_TASKS", 200)
    with pytest.raises(ConfigError, match=r"<sweep>: grid: the runs of its first \d of 4 points already have"):
        plan_sweep(load_sweep(spec))
    assert len(plan_sweep(load_sweep(spec), force=True)) == 4


@pytest.mark.slow
def test_planning_reports_progress_and_the_size_of_the_work() -> None:
    spec = {"base": str(QUICKSTART), "set": {"model.layers": 1},
            "grid": {"strategy": ["dram"], "training.seq_len": list(range(1, 2501))}}
    calls: list[tuple[int, int]] = []
    runs = plan_sweep(load_sweep(spec), on_progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1000, 2500), (2000, 2500), (2500, 2500)]
    notices: list[str] = []
    small = {**spec, "grid": {"strategy": ["dram"], "training.seq_len": [1, 2]}}
    run_sweep(small, notice=notices.append, progress=True)
    assert notices[0] == "sweep sweep: planning 2 points"
    assert notices[1].startswith("sweep sweep: 2 runs, ") and notices[1].endswith(" events")
    assert sum(r.tasks for r in runs) == 2500 * run_tasks(runs[0].config)
    lines: list[str] = []
    run_sweep(spec, notice=lines.append)  # no terminal: lines, not a bar
    assert lines[0] == "sweep sweep: planning 2,500 points"
    assert lines[1:3] == ["sweep sweep: planned 1,000 of 2,500 points", "sweep sweep: planned 2,000 of 2,500 points"]
    assert lines[3].startswith("sweep sweep: 2,500 runs, ") and len(lines) == 4


def test_out_of_memory_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(config: object, **options: object) -> None:
        raise MemoryError

    monkeypatch.setattr("tiersim.commands.run.simulate", exhausted)
    assert main("run", str(QUICKSTART)) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("tiersim: error: out of memory")


@pytest.mark.parametrize(("assignment", "message"), [
    ("hardware.cxl.count=36028798", "hardware.cxl.count: gives the cxl tier 9.22e+18 bytes, more than 2^53"),
    ("training.seq_len=1e15", "bytes of activations, more than 2^53"),
    ("model.hidden=4e9", "bytes of state, more than 2^53"),
])
def test_a_run_whose_bytes_would_pass_2_53_is_refused(capsys: pytest.CaptureFixture[str], assignment: str,
                                                     message: str) -> None:
    """Every byte count of a result stays exact and fits a 64-bit Parquet column; --force does
    not lift this (it is not work but representability)."""
    assert main("run", str(QUICKSTART), "--set", assignment, "--set", "model.heads=1", "--set", "model.kv_heads=1",
                "--force") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tiersim: error: --set: {assignment.partition('=')[0]}: ") and message.split(": ")[-1] in err
