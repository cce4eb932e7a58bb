"""The CLI as a user runs it: a subprocess, its stdout, stderr and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clirun import QUICKSTART, ROOT, tiersim


def test_run_json_has_the_documented_shape() -> None:
    proc = tiersim("run", str(QUICKSTART), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["scenario"] == "quickstart"
    names = [r["strategy"] for r in data["results"]]
    assert names == ["gpu", "dram", "cxl", "nvme"]
    for result in data["results"]:
        assert set(result["peak_bytes"]) == {"hbm", "dram", "cxl", "nvme"}
        assert all(isinstance(v, int) for v in result["peak_bytes"].values())
        if result["fits"]:
            assert isinstance(result["iteration_time_s"], float)
            phases = result["phases"]
            assert set(phases) == {"forward_s", "backward_s", "optimizer_step_s"}
            assert sum(phases.values()) == pytest.approx(result["iteration_time_s"], rel=1e-9)
        else:
            assert result["iteration_time_s"] is None and result["phases"] is None
            assert "hbm" in result["reason"]


def test_run_table_csv_and_strategy_filter() -> None:
    table = tiersim("run", str(QUICKSTART), "--strategy", "dram", "--strategy", "nvme")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "scenario: quickstart"
    assert [line.split()[0] for line in lines[3:] if not line.startswith(" ")] == ["dram", "nvme"]
    assert [line.strip() for line in lines[3:] if line.startswith(" ")] == ["bottleneck / reason: cpu",
                                                                             "bottleneck / reason: nvme"]
    csv_out = tiersim("run", str(QUICKSTART), "--format", "csv", "--strategy", "cxl")
    header, row = csv_out.stdout.strip().splitlines()
    assert header.startswith("scenario,strategy,fits,iteration_time_s")
    assert row.startswith("quickstart,cxl,True,")


def test_run_out_dir_writes_summary_config_and_trace(tmp_path: Path) -> None:
    proc = tiersim("run", str(QUICKSTART), "--strategy", "dram", "--out", str(tmp_path / "out"),
                   "--trace-format", "parquet")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config-dram.json").read_text())
    assert summary["results"][0]["strategy"] == "dram"
    assert config["hardware"]["gpu"]["name"] == "h100-sxm"
    assert config["training"]["sub_group_size"] == 100_000_000
    import pandas as pd

    trace = pd.read_parquet(out / "trace-dram.parquet")
    assert {"name", "stream", "phase", "start", "end"} <= set(trace.columns)
    assert trace["end"].max() == pytest.approx(summary["results"][0]["iteration_time_s"])


def test_out_and_plot_say_what_they_wrote(tmp_path: Path) -> None:
    out, plot = tmp_path / "out", tmp_path / "report.html"
    proc = tiersim("run", str(QUICKSTART), "--strategy", "gpu", "--strategy", "dram", "--out", str(out),
                   "--plot", str(plot), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # stdout stays the JSON; the notes go to stderr
    wrote_out, wrote_plot = proc.stderr.strip().splitlines()
    files = sorted(p.name for p in out.iterdir())
    assert wrote_out.startswith(f"tiersim: wrote {len(files)} files to {out}: ")
    assert sorted(wrote_out.split(": ", 2)[2].split(", ")) == files
    assert wrote_plot == (f"tiersim: wrote {plot} (phase bars; critical path, timeline and utilisation of dram)")
    assert plot.stat().st_size > 0


@pytest.mark.slow
def test_set_override_changes_the_run() -> None:
    base = json.loads(tiersim("run", str(QUICKSTART), "--strategy", "dram", "--format", "json").stdout)
    more = json.loads(tiersim("run", str(QUICKSTART), "--strategy", "dram", "--format", "json",
                              "--set", "training.global_batch=8").stdout)
    base_r, more_r = base["results"][0], more["results"][0]
    assert more_r["phases"]["forward_s"] == pytest.approx(2 * base_r["phases"]["forward_s"])
    assert more_r["phases"]["optimizer_step_s"] == pytest.approx(base_r["phases"]["optimizer_step_s"])


@pytest.mark.slow
def test_profiles_lists_and_shows() -> None:
    listing = tiersim("profiles", "--kind", "gpu")
    assert listing.returncode == 0
    assert {"a100-80gb", "h100-sxm", "h200"} <= {line.split()[1] for line in listing.stdout.splitlines()[2:]}
    shown = tiersim("profiles", "h200", "--format", "json")
    assert json.loads(shown.stdout)["hbm_capacity"] == 143_771 * 2**20


def _scenario(tmp_path: Path, edit: dict[str, object] | None = None, text: str | None = None) -> Path:
    path = tmp_path / "bad.yaml"
    if text is not None:
        path.write_text(text)
        return path
    data = yaml.safe_load(QUICKSTART.read_text())
    for dotted, value in (edit or {}).items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("edit", "text", "expected"),
    [
        (None, "model: [1, 2\n", "bad.yaml: line"),
        ({"model.colour": "red"}, None, "bad.yaml: model.colour: unknown field"),
        ({"hardware.gpu": "h900"}, None, "bad.yaml: hardware.gpu: unknown gpu profile 'h900'"),
        ({"model.hidden": 4100}, None, "bad.yaml: model.hidden: hidden 4100 is not divisible by heads 32"),
        ({"training.global_batch": -4}, None, "bad.yaml: training.global_batch: must be greater than 0"),
        ({"strategies": ["gpu", "warp"]}, None, "bad.yaml: strategies: unknown strategy 'warp'"),
    ],
)
def test_bad_scenarios_exit_2_with_one_line(tmp_path: Path, edit: dict[str, object] | None, text: str | None,
                                            expected: str) -> None:
    proc = tiersim("run", str(_scenario(tmp_path, edit, text)))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert expected in lines[0]


@pytest.mark.parametrize("bandwidth", ["0 GB/s", "-5 GB/s"])
def test_bad_bandwidth_in_a_profile_names_file_and_field(tmp_path: Path, bandwidth: str) -> None:
    profile = yaml.safe_load((ROOT / "device_profiles" / "samsung-pm9a3.yaml").read_text())
    profile["name"] = "slow-drive"
    profile["read_bandwidth"] = bandwidth
    (tmp_path / "slow-drive.yaml").write_text(yaml.safe_dump(profile))
    scenario = _scenario(tmp_path, {"hardware.nvme.device": "slow-drive"})
    proc = tiersim("run", str(scenario), "--profile-path", str(tmp_path))
    assert proc.returncode == 2
    assert "slow-drive.yaml: read_bandwidth: must be greater than 0" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_file_and_bad_set(tmp_path: Path) -> None:
    missing = tiersim("run", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "nope.yaml: cannot read file" in missing.stderr
    bad_set = tiersim("run", str(QUICKSTART), "--set", "training.global_batch")
    assert bad_set.returncode == 2 and "expected KEY=VALUE" in bad_set.stderr


@pytest.mark.slow
def test_set_strategy_option_by_name() -> None:
    base = json.loads(tiersim("run", str(QUICKSTART), "--strategy", "nvme", "--format", "json").stdout)
    piped = json.loads(tiersim("run", str(QUICKSTART), "--strategy", "nvme", "--format", "json",
                               "--set", "strategies.nvme.pipeline_read=true",
                               "--set", "strategies.nvme.pipeline_write=true").stdout)
    assert piped["results"][0]["phases"]["optimizer_step_s"] < base["results"][0]["phases"]["optimizer_step_s"]
    unknown = tiersim("run", str(QUICKSTART), "--set", "strategies.warp.buffer_count=8")
    assert unknown.returncode == 2 and "strategy 'warp' is not in this scenario" in unknown.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "device_profiles/h200.yaml"], "expected a host profile"),
    (["--threads", "0"], "must be at least 1"),
    (["--nvme-dir", "/nonexistent-dir"], "is not a directory"),
])
def test_validate_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    proc = tiersim("validate", "--quick", "--as-calibrated", *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["calibrate", "validate"])
def test_calibrate_and_validate_without_torch_name_the_extra(command: str, tmp_path: Path) -> None:
    code = ("import sys; sys.modules['torch'] = None; from tiersim.cli import main; "
            f"sys.exit(main(['{command}', '--quick']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"tiersim: error: tiersim {command}: needs PyTorch") and "tiersim[torch]" in line
    assert not list(tmp_path.iterdir())  # nothing was measured or written


def test_an_output_folder_that_cannot_be_made_is_one_line_naming_it_and_the_flag(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "sub"
    proc = tiersim("run", str(QUICKSTART), "--strategy", "dram", "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr == f"tiersim: error: {out}: --out: cannot create directory (Not a directory)\n"
