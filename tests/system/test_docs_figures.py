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

ROOT = Path(__file__).resolve().parents[2]
MAKE = ROOT / "docs" / "figures" / "make.py"


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


def test_seed_figure_marks_the_bundled_70b_measurements() -> None:
    measured = _make_module().seed_measured(ROOT / "scenarios" / "measured")
    frame = measured.set_index(["model", "strategy", "phase"])["seconds"]
    assert frame[("70B", "dram", "backward")] == pytest.approx((31.67590 + 31.67674 + 31.68127) / 3)
    assert set(measured["strategy"]) == {"dram", "cxl", "nvme"} and set(measured["model"]) == {"70B"}


@pytest.mark.slow
def test_make_script_writes_every_figure(tmp_path: Path) -> None:
    browser_or_skip()
    make = _make_module()
    out = tmp_path / "figures"
    proc = subprocess.run([sys.executable, str(MAKE), "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in make.FIGURES:
        png = (out / name).read_bytes()
        assert png_size(png)[0] >= 800 and blank_fraction(png) < 0.9, name
        assert f"wrote {out / name}" in proc.stdout


def test_make_script_without_measured_runs_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(MAKE), "--out", str(tmp_path), "--measured", str(tmp_path / "no")],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--measured" in proc.stderr and "Traceback" not in proc.stderr
