"""Every kind of HTML report, opened in a real headless Chromium: ``run --plot`` (plotly.js inline
and in a shared directory), ``reproduce`` and ``plan`` (both objectives' pictures).

Each page must load without a JavaScript error in the console, every plot element must render
with a non-zero size and show a legend and its axis titles, and a screenshot must not be blank.
Skipped without a browser, except under ``TIERSIM_REQUIRE_BROWSER=1`` (``.ci/run``), where a
missing browser fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from browser import PageReport, blank_fraction, browser_or_skip, inspect_pages, png_size

ROOT = Path(__file__).resolve().parents[2]
SEVENTY_B = str(ROOT / "scenarios" / "llama2-70b-offload.yaml")
SMALL = ["--set", "model.layers=6", "--set", "training.global_batch=2"]
VIEWPORT = (1280, 900)
pytestmark = pytest.mark.slow  # the pages fixture runs five commands and a browser

PAGES = {
    # kind: (command line, plots the page must hold)
    "run": (["run", str(ROOT / "scenarios" / "quickstart.yaml"), *SMALL], 1 + 2 * 4),
    "run-directory": (["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--strategy", "nvme", *SMALL,
                       "--plotlyjs", "directory"], 3),
    "reproduce": (["reproduce", "whatif", "--out", "{dir}"], 1),
    "plan-cheapest": (["plan", SEVENTY_B, "--objective", "cheapest", "--max-iteration-time", "30"], 1),
    "plan-largest-model": (["plan", SEVENTY_B, "--objective", "largest-model", "--scale", "ladder"], 1),
}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PageReport]:
    browser = browser_or_skip()
    paths = {}
    for kind, (argv, _plots) in PAGES.items():
        folder = tmp_path_factory.mktemp(kind)
        paths[kind] = folder / f"{kind}.html"
        args = [a.replace("{dir}", str(folder)) for a in argv] + ["--plot", str(paths[kind])]
        proc = subprocess.run(
            [sys.executable, "-m", "tiersim", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=300
        )
        assert proc.returncode == 0, (kind, proc.stderr)
    reports = inspect_pages(browser, list(paths.values()), *VIEWPORT)
    return dict(zip(paths, reports))


@pytest.mark.parametrize("kind", list(PAGES))
def test_page_loads_without_javascript_errors(pages: dict[str, PageReport], kind: str) -> None:
    assert pages[kind].errors == []


@pytest.mark.parametrize("kind", list(PAGES))
def test_every_plot_renders_with_legend_and_axis_titles(pages: dict[str, PageReport], kind: str) -> None:
    plots = pages[kind].plots
    assert len(plots) == PAGES[kind][1]
    for plot in plots:
        assert plot["rendered"] and plot["traces"] > 0
        assert plot["width"] > 0 and plot["height"] > 0 and plot["svg_width"] > 0 and plot["svg_height"] > 0
        assert plot["legend_items"], plot
        assert plot["x_titles"] and plot["y_titles"], plot


@pytest.mark.parametrize("kind", list(PAGES))
def test_screenshot_is_not_blank(pages: dict[str, PageReport], kind: str) -> None:
    shot = pages[kind].screenshot
    assert png_size(shot) == VIEWPORT
    assert blank_fraction(shot) < 0.9  # the background colour covers less than 90% of the view


def test_report_legends_name_what_each_plot_draws(pages: dict[str, PageReport]) -> None:
    first, timeline, utilisation = pages["run-directory"].plots
    assert first["legend_items"] == ["forward", "backward", "optimizer_step"]
    assert {"compute", "adam", "nvme_read", "nvme_write"} <= set(timeline["legend_items"])
    assert timeline["x_titles"] == ["time (s)"] and utilisation["y_titles"] == ["utilisation"]
    (picture,) = pages["plan-cheapest"].plots
    assert "Pareto front" in picture["legend_items"]
    assert picture["x_titles"] == ["iteration time (s)"] and picture["y_titles"] == ["hardware cost (USD)"]
    (memory,) = pages["plan-largest-model"].plots
    assert {"hbm", "dram"} <= set(memory["legend_items"])
