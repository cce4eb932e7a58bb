"""Figures as files: format by extension, the browser search, static PNG/SVG/PDF, ``--plotlyjs``,
stacked report figures and the planner pictures (``tiersim.analysis.figure_export``, ``tiersim.analysis.plots``,
``tiersim.analysis.plan_plots``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest
from browser import blank_fraction, browser_or_skip, png_size
from clirun import QUICKSTART, ROOT, tiersim

from tiersim.analysis import plan
from tiersim.analysis.figure_export import (
    BROWSER_NAMES,
    PLOTLYJS_FILE,
    check_target,
    figure_format,
    find_browser,
    write_figure,
    write_html,
)
from tiersim.analysis.plan_plots import binding_label, largest_model_figure, pareto_front, sizing_figure
from tiersim.analysis.plots import phase_bars, stack_figures, timeline_figure, utilisation_figure
from tiersim.errors import ConfigError


def _fake_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_format_follows_the_extension() -> None:
    assert [figure_format(f"a/b.{e}") for e in ("html", "PNG", "svg", "pdf")] == ["html", "png", "svg", "pdf"]
    with pytest.raises(ConfigError, match="unknown figure format '.gif'"):
        figure_format("x.gif")
    with pytest.raises(ConfigError, match="no extension"):
        check_target("report")
    assert check_target(None) is None and check_target("x.html") == "html"


def test_browser_path_comes_first_then_names_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    chromium = _fake_executable(bin_dir / "chromium")
    shell = _fake_executable(bin_dir / "chromium-headless-shell")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    assert find_browser() == str(shell)  # Debian's headless shell before the full browser
    shell.unlink()
    assert find_browser() == str(chromium)
    chosen = _fake_executable(tmp_path / "elsewhere" / "my-chrome")
    monkeypatch.setenv("BROWSER_PATH", str(chosen))
    assert find_browser() == str(chosen)
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="BROWSER_PATH: .* is not an executable file; install one with"):
        find_browser()
    assert BROWSER_NAMES[0] == "chromium-headless-shell"


def test_static_export_without_a_browser_exits_2_with_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser on it
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    if find_browser() is not None:
        pytest.skip("a browser outside PATH is installed (kaleido_get_chrome's download)")
    env = dict(os.environ)
    out = tmp_path / "out.png"
    proc = tiersim("run", str(QUICKSTART), "--plot", str(out), env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "none was found" in lines[0] and "apt-get install chromium-headless-shell" in lines[0]
    assert proc.stdout == "" and not out.exists()  # refused before simulating anything


@pytest.mark.slow
def test_run_plot_png_is_at_least_800_by_500(tmp_path: Path) -> None:
    browser_or_skip()
    out = tmp_path / "out.png"
    proc = tiersim("run", str(QUICKSTART), "--plot", str(out))
    assert proc.returncode == 0, proc.stderr
    png = out.read_bytes()
    width, height = png_size(png)
    assert width >= 800 and height >= 500
    assert blank_fraction(png) < 0.9


@pytest.mark.slow
def test_svg_and_pdf_by_extension(tmp_path: Path, results: list) -> None:
    browser_or_skip()
    fig = stack_figures([phase_bars(results), timeline_figure(results[-1])], title="quickstart")
    svg = write_figure(fig, tmp_path / "report.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "time (s)" in svg and "seconds per iteration" in svg
    assert write_figure(fig, tmp_path / "report.pdf").read_bytes().startswith(b"%PDF")


def test_plotlyjs_directory_and_cdn(tmp_path: Path) -> None:
    fig = go.Figure(go.Bar(x=["a"], y=[1]))
    inline = write_html(tmp_path / "inline.html", [fig], "t").read_text()
    shared = write_html(tmp_path / "shared" / "a.html", [fig, "<p>x</p>", fig], "t", "directory").read_text()
    cdn = write_html(tmp_path / "cdn.html", [fig], "t", "cdn").read_text()
    assert len(inline) > 1_000_000 and 'src="https://cdn.plot.ly' not in inline
    assert f'src="{PLOTLYJS_FILE}"' in shared and shared.count("<script charset=\"utf-8\" src=") == 1
    assert len(shared) < 100_000 and (tmp_path / "shared" / PLOTLYJS_FILE).stat().st_size > 1_000_000
    assert 'src="https://cdn.plot.ly' in cdn and len(cdn) < 100_000
    with pytest.raises(ConfigError, match="x.html: plotlyjs: expected one of"):
        write_html(tmp_path / "x.html", [fig], "t", "web")


def test_stack_figures_gives_each_panel_its_own_axes(results: list) -> None:
    nvme = next(r for r in results if r.strategy == "nvme")
    panels = [phase_bars(results), timeline_figure(nvme), utilisation_figure(nvme)]
    fig = stack_figures(panels, title="t")
    assert len(fig.data) == sum(len(p.data) for p in panels)
    assert fig.layout.height == 60 + sum(p.layout.height for p in panels) + 2 * 30 + 10
    domains = [fig.layout[f"yaxis{k}" if k > 1 else "yaxis"].domain for k in (1, 2, 3)]
    assert all(lo < hi for lo, hi in domains)
    assert domains[0][0] > domains[1][1] > domains[1][0] > domains[2][1]  # top to bottom, no overlap
    start = 0
    for k, panel in enumerate(panels, start=1):
        for trace in fig.data[start:start + len(panel.data)]:
            assert trace.xaxis == ("x" if k == 1 else f"x{k}") and trace.yaxis == ("y" if k == 1 else f"y{k}")
        start += len(panel.data)
    names = [t.name for t in fig.data if t.showlegend]
    assert len(names) == len(set(names)) and set(names) == {t.name for t in fig.data}
    assert fig.layout.xaxis2.title.text == "time (s)" and fig.layout.yaxis3.title.text == "utilisation"
    vlines = [s for s in fig.layout.shapes if s.xref == "x2"]
    assert len(vlines) == len([s for s in panels[1].layout.shapes])  # the phase boundaries moved along


def test_binding_label_and_pareto_front() -> None:
    assert binding_label("bandwidth: link nvme (99% in step); optimizer_step 83% of iteration") == \
        "bandwidth: link nvme"
    assert binding_label("capacity: dram (needs 1104.4 GB on the node, has 549.8 GB)") == "capacity: dram"
    frame = pd.DataFrame({"iteration_time_s": [10.0, 12.0, 9.0, 20.0, None, 15.0],
                          "cost_usd": [100.0, 90.0, 150.0, 95.0, 10.0, 80.0]})
    front = pareto_front(frame)
    assert list(front.index) == [2, 0, 1, 5]  # 20 s / $95 is beaten by 15 s / $80; no time: not a candidate


@pytest.fixture(scope="module")
def scenario() -> plan.Scenario:
    return plan.read_scenario(ROOT / "scenarios" / "llama2-70b-offload.yaml")


def test_sizing_figure_draws_every_fitting_candidate(scenario: plan.Scenario) -> None:
    frame = plan.plan_sizing(scenario, "cheapest", ["dram", "nvme"], dram_gib=[512, 1024], nvme_counts=[2, 4],
                             max_iteration_time=100)
    fig = sizing_figure(frame, "t", max_iteration_time=100)
    points = [t for t in fig.data if t.mode == "markers"]
    fitting = frame[frame["fits"].astype(bool)]
    assert sum(len(t.x) for t in points) == len(fitting)
    assert {t.legendgrouptitle.text for t in points} == set(fitting["binding"].map(binding_label))
    for trace in points:  # open markers exactly where the target excludes a candidate
        rows = fitting[fitting["iteration_time_s"].isin(trace.x) & (fitting["strategy"] == trace.name)]
        assert sorted(s.endswith("-open") for s in trace.marker.symbol) == sorted(rows["rank"].isna())
    front = next(t for t in fig.data if t.name == "Pareto front")
    assert list(front.x) == list(pareto_front(fitting)["iteration_time_s"])
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    note = fig.layout.annotations[-1].text
    assert f"{len(fitting)} of {len(frame)} candidates drawn" in note
    assert "capacity: dram" in note  # 512 GiB per socket cannot hold the DRAM strategy's state


def test_largest_model_memory_matches_the_fit_answer(scenario: plan.Scenario) -> None:
    frame = plan.plan_largest_model(scenario, ["gpu", "nvme"])
    memory = plan.memory_by_model_size(scenario, frame, points=5)
    for (strategy, layers), rows in memory.groupby(["strategy", "layers"]):
        over = (rows["need_bytes"] > rows["capacity_bytes"]).any()
        assert bool(rows["fits"].iloc[0]) == (not over), (strategy, layers)
    for strategy, rows in memory.groupby("strategy"):
        best = frame.set_index("strategy").loc[strategy]
        assert rows.loc[rows["fits"], "layers"].max() == best["layers"]
        hbm = rows[rows["tier"] == "hbm"].sort_values("layers")
        assert hbm["need_bytes"].is_monotonic_increasing and hbm["capacity_bytes"].nunique() == 1
    fig = largest_model_figure(memory, frame, "t")
    assert [a.text for a in fig.layout.annotations[:2]] == ["gpu", "nvme"]
    assert {t.name for t in fig.data} == set(memory["tier"])
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis2.title.text == "model size (B parameters)"
    capacities = [a.text for a in fig.layout.annotations if "capacity" in a.text]
    assert len(capacities) == memory.groupby(["strategy", "tier"]).ngroups


@pytest.mark.slow
def test_plan_plot_from_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "plan.html"
    proc = tiersim("plan", str(ROOT / "scenarios" / "llama2-70b-offload.yaml"), "--objective", "fastest",
                   "--strategy", "nvme", "--nvme-counts", "2,4", "--dram-gib", "512", "--plot", str(out),
                   "--plotlyjs", "directory")
    assert proc.returncode == 0, proc.stderr
    assert "Pareto front" in out.read_text() and (tmp_path / PLOTLYJS_FILE).exists()
    bad = tiersim("plan", str(ROOT / "scenarios" / "llama2-70b-offload.yaml"), "--objective", "fastest",
                  "--plot", str(tmp_path / "plan.jpeg"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "plan.jpeg" in bad.stderr
