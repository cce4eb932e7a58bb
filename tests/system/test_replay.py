"""tiersim replay: a measured run beside tiersim's prediction of it on a described node."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from clirun import ROOT, tiersim

from tiersim.config.document import load_scenario
from tiersim.errors import ConfigError
from tiersim.fitting.replay import load_node, replay
from tiersim.fitting.solver import _with_parts
from tiersim.fitting.synthetic_log import write_log
from tiersim.fitting.system import load_system
from tiersim.simulate import simulate

SYSTEM = ROOT / "systems" / "seed-node.yaml"
FITTED = ROOT / "device_profiles" / "seed-node.yaml"
SEED_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
KEYS = ("forward_s", "backward_s", "step_s", "iteration_s")


def _log_on_system(tmp_path: Path, strategy: str = "nvme") -> Path:
    """The 20B seed scenario's run of ``strategy`` on the seed system file's datasheet parts, as a log."""
    (config,) = load_scenario(ROOT / "scenarios" / "seed-20b.yaml", strategies=[strategy])
    parts = load_system(SYSTEM).parts
    truth = dataclasses.replace(config, hardware=_with_parts(config.hardware, parts))
    return write_log(simulate(truth), tmp_path / f"20B-{strategy}.log")


def test_a_run_tiersim_wrote_replays_on_its_own_node_with_no_error(tmp_path: Path) -> None:
    log = _log_on_system(tmp_path)
    run = replay(log, load_node(SYSTEM))
    assert set(run.measured) == set(run.predicted) == set(KEYS)
    for key in KEYS:
        assert run.predicted[key] == pytest.approx(run.measured[key], rel=1e-3), key
        assert abs(run.error(key) or 0.0) < 1e-3


def test_replay_json_has_measured_and_predicted_per_phase(tmp_path: Path) -> None:
    log = _log_on_system(tmp_path)
    proc = tiersim("replay", str(log), str(log), "--system", str(SYSTEM), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert len(records) == 2
    for record in records:
        assert record["log"] == str(log)
        for side in ("measured", "predicted", "error"):
            assert set(record[side]) == set(KEYS)
        assert record["predicted"]["iteration_s"] == pytest.approx(record["measured"]["iteration_s"], rel=1e-3)


def test_replay_on_the_host_profile_fit_wrote_with_its_system_settings() -> None:
    """The study's own logs on the node ``tiersim fit`` wrote from them: within the fit's 5%."""
    logs = [str(SEED_LOGS / f"70B-{name}.log") for name in ("dram", "cxl-interleave-12-5", "nvme")]
    proc = tiersim("replay", *logs, "--system", str(FITTED))  # the settings come with the fitted profile
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["log", "phase", "measured_s", "predicted_s", "error"]
    errors = [float(line.split()[-1].rstrip("%")) for line in lines[2:] if line.split()[-1].endswith("%")]
    assert len(errors) == 3 * 4 + 4  # every log's phases, then the mean of each phase
    assert all(abs(e) < 5.0 for e in errors)


@pytest.mark.parametrize(("args", "message"), [
    (["--system", "no/such/system.yaml"], "no/such/system.yaml"),
    (["--system", str(SYSTEM), "--set", "training.micro_batch=zero"], "training.micro_batch"),
    (["--system", str(SYSTEM), "--set", "hardware.gpus=64"], "hardware.gpus"),
])
def test_bad_replay_input_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    log = _log_on_system(tmp_path)
    proc = tiersim("replay", str(log), *args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_run_the_node_cannot_hold_is_refused_naming_the_log(tmp_path: Path) -> None:
    log = _log_on_system(tmp_path, "dram")
    with pytest.raises(ConfigError, match="does not fit on seed-node"):
        replay(log, load_node(SYSTEM), ["hardware.dram_capacity=1GiB"])


@pytest.mark.parametrize("kind", ["fifo", "directory", "endless"])
@pytest.mark.parametrize("command", ["replay", "import-log"])
def test_a_log_that_is_no_file_is_one_line_not_a_hang(tmp_path: Path, kind: str, command: str) -> None:
    """A named pipe is refused without waiting for a writer, /dev/zero (a device) unread."""
    path = {"fifo": tmp_path / "pipe.log", "directory": tmp_path, "endless": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    args = [command, str(path)] + (["--system", str(SYSTEM)] if command == "replay" else [])
    proc = tiersim(*args)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and str(path) in line and "Traceback" not in line
    assert {"fifo": "named pipe", "directory": "a directory", "endless": "a device"}[kind] in line


def test_a_system_that_is_a_named_pipe_is_one_line(tmp_path: Path) -> None:
    pipe = tmp_path / "system.yaml"
    os.mkfifo(pipe)
    proc = tiersim("replay", str(SEED_LOGS / "70B-dram.log"), "--system", str(pipe))
    assert proc.returncode == 2 and "named pipe" in proc.stderr and "Traceback" not in proc.stderr
