"""Critical path, figures, ``run --plot`` and ``compare``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest
from clirun import QUICKSTART, ROOT, SMALL, tiersim

from tiersim.analysis.explain import critical_path, explain, task_graph
from tiersim.analysis.plots import phase_bars, timeline_bars, timeline_figure, utilisation_figure
from tiersim.config.document import load_scenario
from tiersim.simulate import simulate

MULTI = ROOT / "scenarios" / "llama2-70b-offload.yaml"
MULTI_SMALL = ["model.layers=4", "training.global_batch=8"]


@pytest.fixture(scope="module")
def multi_gpu() -> list:
    return [simulate(c) for c in load_scenario(MULTI, MULTI_SMALL)]


def _check_path(result) -> None:
    path = critical_path(result)
    total = result.iteration_time_s
    assert path["seconds"].sum() == pytest.approx(total, rel=1e-9)
    assert path["start"].iloc[0] == 0.0
    assert path["end"].iloc[-1] == pytest.approx(total, rel=1e-12)
    # contiguous: each segment starts where the previous one ended
    gaps = (path["start"].to_numpy()[1:] - path["end"].to_numpy()[:-1])
    assert abs(gaps).max() <= 1e-12 * total
    assert (path["seconds"] >= 0).all()
    assert set(path["via"]) <= {"start", "stream", "dep"}


def test_critical_path_covers_the_iteration(results: list, multi_gpu: list) -> None:
    fitted = [r for r in results + multi_gpu if r.fits]
    assert len(fitted) >= 5
    for result in fitted:
        _check_path(result)


def test_chain_follows_real_dependencies(results: list) -> None:
    result = next(r for r in results if r.strategy == "nvme")
    graph = task_graph(result)
    deps = {t.name: set(t.deps) for t in graph.tasks}
    stream_prev = {}
    for tasks in graph.streams().values():
        for a, b in zip(tasks, tasks[1:]):
            stream_prev[b.name] = a.name
    path = critical_path(result)
    names = list(path["name"])
    for prev, (name, via) in zip(names, list(zip(names, path["via"]))[1:]):
        if via == "dep":
            assert prev in deps[name]
        else:
            assert stream_prev[name] == prev


def test_explain_names_the_bounding_resource(results: list) -> None:
    by = {r.strategy: explain(r) for r in results if r.fits}
    assert by["nvme"].bound in ("nvme_read", "nvme_write")
    assert by["nvme"].bound_limit == "nvme"
    for e in by.values():
        assert 0 < e.bound_share <= 1
        text = "\n".join(e.lines())
        assert e.bound in text and "optimizer_step" in text
        shares = e.breakdown.groupby("phase")["share_of_phase"].sum()
        assert all(s == pytest.approx(1.0) for s in shares)
        json.dumps(e.to_dict())


def test_figures(results: list) -> None:
    result = next(r for r in results if r.strategy == "nvme")
    fig = timeline_figure(result)
    assert isinstance(fig, go.Figure)
    rows = {y for trace in fig.data for y in trace.y}
    assert {"gpu", "cpu", "partition_grads", "h2d", "aio_read", "aio_write", "link nvme"} <= rows
    assert {t.name for t in fig.data} >= {"compute", "adam", "nvme_read", "nvme_write", "link"}
    merged = timeline_bars(result, max_bars=10, links=False)
    full = timeline_bars(result, links=False)
    assert len(merged) < len(full)
    assert merged["size"].sum() == pytest.approx(full["size"].sum())
    assert merged["tasks"].sum() == full["tasks"].sum()
    util = utilisation_figure(result)
    assert len(util.data) == 4
    bars = phase_bars(results)
    assert len(bars.data) == 3 and list(bars.data[0].y) == [r.strategy for r in results if r.fits]


def test_run_plot_writes_offline_html(tmp_path: Path) -> None:
    out = tmp_path / "report" / "out.html"
    args = [a for s in SMALL for a in ("--set", s)]
    proc = tiersim("run", str(QUICKSTART), *args, "--plot", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("scenario: quickstart")
    text = out.read_text()
    assert "plotly" in text and "<script" in text
    assert text.count("bounded by") == 4      # every strategy fits this small model; each explained
    assert "cdn.plot.ly" not in text.split("</script>")[0][:2000]


def test_run_plot_with_nothing_fitting_exits_2(tmp_path: Path) -> None:
    proc = tiersim("run", str(QUICKSTART), "--strategy", "gpu", "--plot", str(tmp_path / "x.html"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "nothing to plot" in proc.stderr


def _sweep_frame(times: dict[tuple[int, str], float | None], extra: dict[str, object] | None = None) -> pd.DataFrame:
    rows = []
    for (batch, strategy), t in times.items():
        row = {"training.global_batch": batch, "strategy": strategy, "fits": t is not None, "iteration_time_s": t,
               "forward_s": None if t is None else 0.1 * t, "backward_s": None if t is None else 0.3 * t,
               "optimizer_step_s": None if t is None else 0.6 * t, "peak_dram_bytes": 1, "capacity_dram_bytes": 2}
        row.update(extra or {})
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_compare_two_sweeps(tmp_path: Path) -> None:
    a = _sweep_frame({(4, "dram"): 1.0, (4, "nvme"): 10.0, (8, "dram"): 2.0, (8, "nvme"): None, (16, "dram"): 4.0})
    b = _sweep_frame({(4, "dram"): 1.0, (4, "nvme"): 5.0, (8, "dram"): 2.0, (8, "nvme"): 12.0, (32, "dram"): 8.0},
                     {"hardware.nvme.count": 2})
    a.to_parquet(tmp_path / "a.parquet", index=False)
    b.to_parquet(tmp_path / "b.parquet", index=False)
    proc = tiersim("compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    summary = data["summary"]
    assert summary["keys"] == ["training.global_batch", "strategy"]
    assert summary["only_in_b_factors"] == ["hardware.nvme.count"]
    assert (summary["matched_rows"], summary["only_in_a_rows"], summary["only_in_b_rows"]) == (4, 1, 1)
    assert summary["both_fit"] == 3 and summary["fits_changed"] == 1
    assert summary["geomean_ratio"] == pytest.approx(0.5 ** (1 / 3))
    nvme4 = next(r for r in data["rows"] if r["strategy"] == "nvme" and r["training.global_batch"] == 4)
    assert nvme4["ratio"] == pytest.approx(0.5) and nvme4["delta_s"] == pytest.approx(-5.0)
    table = tiersim("compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"))
    assert table.returncode == 0, table.stderr
    assert "matched on: training.global_batch, strategy" in table.stdout
    assert "4 matched" in table.stdout.splitlines()[-1]


@pytest.mark.parametrize("second", ["missing.parquet", "README.md", "bad-columns.parquet"])
def test_compare_bad_inputs_exit_2(tmp_path: Path, second: str) -> None:
    a = _sweep_frame({(4, "dram"): 1.0})
    a.to_parquet(tmp_path / "a.parquet", index=False)
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "bad-columns.parquet", index=False)
    other = ROOT / second if second == "README.md" else tmp_path / second
    proc = tiersim("compare", str(tmp_path / "a.parquet"), str(other))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("tiersim: error: ")
