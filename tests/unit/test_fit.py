"""tiersim fit: a loop of least squares around simulate, on logs tiersim writes and on the study's."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tiersim.config.document import load_scenario
from tiersim.config.profiles import HostProfile, load_profile_file
from tiersim.errors import ConfigError
from tiersim.fitting.replay import log_config, system_node
from tiersim.fitting.solver import _with_parts, fit_system
from tiersim.fitting.synthetic_log import write_log
from tiersim.fitting.system import load_system
from tiersim.ingest.training_log import read_log
from tiersim.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = ROOT / "systems" / "seed-node.yaml"
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
SEED_LOGS = [LOGS / f"70B-{name}.log" for name in ("dram", "cxl-interleave-12-5", "nvme")]

TRUTH = {
    "fabric.bus_bandwidth": 12e9,
    "cpu.adam_simd_efficiency": 0.008,
    "cpu.memcpy_bandwidth_per_core": 5e9,
    "cxl.read_bandwidth": 20e9,
    "cxl.write_bandwidth": 9e9,
    "nvme.read_bandwidth": 30e9,
    "nvme.write_bandwidth": 20e9,
}
"""A synthetic node: every figure the seed system file fits, away from its starting value."""


def synthetic_logs(tmp_path: Path) -> list[Path]:
    """The 30B seed scenario's three strategies on the TRUTH node, as training logs."""
    system = load_system(SYSTEM)
    parts = dict(system.parts)
    for key, value in TRUTH.items():
        part, figure = key.split(".")
        parts[part] = dataclasses.replace(parts[part], **{figure: value})
    logs = []
    for config in load_scenario(ROOT / "scenarios" / "seed-30b.yaml"):
        truth = dataclasses.replace(config, hardware=_with_parts(config.hardware, parts))
        logs.append(write_log(simulate(truth), tmp_path / f"30B-{config.strategy}.log"))
    return logs


@pytest.mark.slow
def test_fit_recovers_a_known_machine_from_logs_tiersim_wrote(tmp_path: Path) -> None:
    fit = fit_system(load_system(SYSTEM), synthetic_logs(tmp_path))
    assert {f.unknown.key for f in fit.figures} == set(TRUTH)
    for f in fit.figures:
        assert f.value == pytest.approx(TRUTH[f.unknown.key], rel=0.02), f.unknown.key
        assert f.start != pytest.approx(TRUTH[f.unknown.key], rel=0.05)  # it had to move there
    assert all(abs(r.relative) < 1e-3 for r in fit.residuals)
    assert len(fit.residuals) == 11 > len(fit.figures)


@pytest.mark.slow
def test_seed_fit_reproduces_every_measured_phase_within_5_percent() -> None:
    fit = fit_system(load_system(SYSTEM), SEED_LOGS)
    phases = [r for r in fit.residuals if r.measured.quantity in ("forward", "backward", "optimizer_step")]
    assert len(phases) == 9
    assert all(abs(r.relative) < 0.05 for r in fit.residuals), [(r.measured, r.relative) for r in fit.residuals]
    for f in fit.figures:
        assert f.unknown.low < f.value < f.unknown.high and f.interval is not None
        assert f.interval[0] <= f.value <= f.interval[1]


@pytest.mark.slow
def test_committed_seed_node_is_this_fit() -> None:
    """device_profiles/seed-node.yaml holds the figures this fit finds (to 0.5%)."""
    node = load_profile_file(ROOT / "device_profiles" / "seed-node.yaml")
    assert isinstance(node, HostProfile)
    fit = fit_system(load_system(SYSTEM), SEED_LOGS)
    for f in fit.figures:
        assert getattr(getattr(node, f.unknown.part), f.unknown.figure) == pytest.approx(f.value, rel=5e-3)


@pytest.mark.slow
def test_fit_command_writes_a_profile_run_uses(tmp_path: Path) -> None:
    logs = synthetic_logs(tmp_path)
    out = tmp_path / "profiles" / "seed-node.yaml"
    args = [sys.executable, "-m", "tiersim", "fit", str(SYSTEM), *[a for log in logs for a in ("--log", str(log))],
            "--out", str(out), "--report", str(tmp_path / "fit.md")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "fabric.bus_bandwidth" in proc.stdout and "95% interval" in proc.stdout
    assert "| 30B-nvme.log | ds:optimizer_swap_in_state |" in (tmp_path / "fit.md").read_text()
    node = load_profile_file(out)
    assert isinstance(node, HostProfile) and node.fabric is not None
    assert node.fabric.bus_bandwidth == pytest.approx(12e9, rel=0.02)
    assert node.fabric.sources["bus_bandwidth"].startswith("fitted by tiersim fit to 30B-")
    run = subprocess.run([sys.executable, "-m", "tiersim", "run", str(ROOT / "scenarios" / "seed-30b.yaml")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={"TIERSIM_PROFILE_PATH": str(out.parent), "PATH": ""})
    assert run.returncode == 0, run.stderr


def _system(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(SYSTEM.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "system.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("changes", "message"), [
    ({"fit": {"cpu.turbo": {"min": 1, "max": 2}}}, "fit.cpu.turbo: not a numeric figure of the cpu profile"),
    ({"fit": {"tape.bandwidth": {"min": 1, "max": 2}}}, "fit.tape.bandwidth: no part 'tape'"),
    ({"fit": {"fabric.bus_bandwidth": {"min": "64 GB/s", "max": "4 GB/s"}}}, "bounds must satisfy 0 < min < max"),
    ({"fit": {"fabric.bus_bandwidth": {"min": "1 GB/s", "max": "2 GB/s"}}}, "lies outside the bounds"),
    ({"fit": {"fabric.bus_bandwidth": {"min": "fast", "max": "2 GB/s"}}}, "fit.fabric.bus_bandwidth.min"),
    ({"parts": {"cpu": "xeon-8480", "dram": "ddr5-4800-8ch"}}, "parts.nvme: required field is missing"),
    ({"parts": {"gpu": "no-such-gpu"}}, "parts.gpu: unknown gpu profile 'no-such-gpu'"),
    ({"name": None}, "name: required field is missing"),
    ({"colour": "red"}, "colour: unknown field"),
])
def test_bad_system_file_is_one_line(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    path = _system(tmp_path, **changes)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_system(path)
    proc = subprocess.run([sys.executable, "-m", "tiersim", "fit", str(path), "--log", str(SEED_LOGS[0])],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_more_figures_than_measured_values_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="7 figures need more measured values than the 3"):
        fit_system(load_system(SYSTEM), SEED_LOGS[:1])


POLARIS = ROOT / "systems" / "polaris.yaml"
POLARIS_TRUTH = {"cpu.adam_simd_efficiency": 0.02, "cpu.memcpy_bandwidth_per_core": 9e9,
                 "gpu.compute_efficiency": 0.7}
"""A synthetic Polaris: every figure its system file fits, away from the datasheet start."""
POLARIS_RUNS = (
    (),
    ("hardware.gpus=1", "training.data_parallel=1", "training.global_batch=4"),
    ("model.layers=32", "model.hidden=4096", "model.heads=32", "model.ffn=10880", "hardware.gpus=1",
     "training.data_parallel=1", "training.global_batch=16"),
)
"""The shared Polaris runs' shapes (13B on 4 and 1 GPUs, 7B with 4 micro-steps), from one log excerpt."""


@pytest.mark.slow
def test_fit_recovers_a_synthetic_polaris_from_logs_tiersim_wrote(tmp_path: Path) -> None:
    """The round trip on a node tiersim writes: unbound ranks, no flash attention, DeepSpeed 0.13."""
    system = load_system(POLARIS)
    node = system_node(system)
    parts = dict(system.parts)
    for key, value in POLARIS_TRUTH.items():
        part, figure = key.split(".")
        parts[part] = dataclasses.replace(parts[part], **{figure: value})
    excerpt = read_log(LOGS / "polaris-13B-dp4-mb4.log")
    logs = []
    for i, overrides in enumerate(POLARIS_RUNS):
        config = log_config(excerpt, node, overrides)
        assert not config.hardware.numa_bound and not config.training.flash_attention
        truth = dataclasses.replace(config, hardware=_with_parts(config.hardware, parts))
        logs.append(write_log(simulate(truth), tmp_path / f"polaris-{i}.log"))
    fit = fit_system(system, logs)
    for f in fit.figures:
        assert f.value == pytest.approx(POLARIS_TRUTH[f.unknown.key], rel=0.02), f.unknown.key
        assert f.start != pytest.approx(POLARIS_TRUTH[f.unknown.key], rel=0.05)
    assert all(abs(r.relative) < 1e-3 for r in fit.residuals)
