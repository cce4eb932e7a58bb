"""The README's pictures: every image it links exists, and ``docs/figures/make.py`` (the one
script that regenerates them) runs and writes each of them."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import blank_fraction, browser_or_skip, png_size

ROOT = Path(__file__).resolve().parent.parent
MAKE = ROOT / "docs" / "figures" / "make.py"
SEED_LOGS = ROOT.parent / "shared" / "reference" / "seed-logs"


def _make_module():
    spec = importlib.util.spec_from_file_location("make_figures", MAKE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _images(markdown: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", markdown) + re.findall(r"<img [^>]*src=\"([^\"]+)\"", markdown)


def test_every_image_the_readme_links_exists() -> None:
    images = _images((ROOT / "README.md").read_text())
    make = _make_module()
    assert sorted(Path(i).name for i in images if i.startswith("docs/figures/")) == sorted(make.FIGURES)
    for image in images:
        path = ROOT / image
        assert path.is_file(), image
        if path.suffix == ".png":
            width, height = png_size(path.read_bytes())
            assert width >= 800 and height >= 400, image


def _synthetic_logs(folder: Path, steps: dict[str, list[tuple[float, float, float]]]) -> Path:
    make = _make_module()
    folder.mkdir(parents=True, exist_ok=True)
    for strategy, name in make.SEED_70B_LOGS.items():
        lines = ["[INFO] time (ms) | init_optimizer_state: 4000.0"]
        for fwd, bwd, step in steps[strategy]:
            lines.append(f"[INFO] [Rank 0] time (ms) | fwd_microstep: {fwd} | bwd_microstep: {bwd} | step_microstep: "
                         f"{step}")
            lines.append(f"[INFO] [Rank 0] time (ms) | fwd: {fwd} | bwd: {bwd} | bwd_inner: {bwd - 1} | "
                         f"bwd_allreduce: 1.0 | step: {step}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def test_measured_70b_phases_are_the_mean_of_iterations_3_to_n(tmp_path: Path) -> None:
    make = _make_module()
    warm = [(9000.0, 40000.0, 30000.0), (7000.0, 35000.0, 20000.0)]
    steady = [(6000.0, 30000.0, 10000.0), (6200.0, 31000.0, 11000.0), (6400.0, 32000.0, 12000.0)]
    logs = _synthetic_logs(tmp_path, {s: warm + steady for s in make.SEED_70B_LOGS})
    frame = make.seed_70b_measured(logs).set_index(["strategy", "phase"])["seconds"]
    for strategy in make.SEED_70B_LOGS:
        assert frame[(strategy, "forward")] == pytest.approx(6.2)
        assert frame[(strategy, "backward")] == pytest.approx(31.0)
        assert frame[(strategy, "optimizer_step")] == pytest.approx(11.0)
    _synthetic_logs(tmp_path / "short", {s: warm for s in make.SEED_70B_LOGS})
    with pytest.raises(make.ConfigError, match="need at least 3"):
        make.seed_70b_measured(tmp_path / "short")


def test_make_script_writes_every_figure(tmp_path: Path) -> None:
    browser_or_skip()
    make = _make_module()
    logs = SEED_LOGS if SEED_LOGS.is_dir() else _synthetic_logs(
        tmp_path / "logs", {s: [(6000.0, 30000.0, 10000.0)] * 5 for s in make.SEED_70B_LOGS})
    out = tmp_path / "figures"
    proc = subprocess.run([sys.executable, str(MAKE), "--out", str(out), "--seed-logs", str(logs)], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in make.FIGURES:
        png = (out / name).read_bytes()
        assert png_size(png)[0] >= 800 and blank_fraction(png) < 0.9, name
        assert f"wrote {out / name}" in proc.stdout


def test_make_script_without_logs_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(MAKE), "--out", str(tmp_path), "--seed-logs", str(tmp_path / "no")],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--seed-logs" in proc.stderr and "Traceback" not in proc.stderr
