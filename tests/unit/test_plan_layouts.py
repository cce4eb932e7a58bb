"""``plan --objective largest-model`` over parallel layouts (tiersim.analysis.plan_layouts)
against brute force: each layout's answer fits and a pipeline-stage's worth of layers more does
not, the candidates keep the scenario's work per rank, refused layouts say why, and a sweep over
layouts gives the same rows in process and on a Dask cluster."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from clirun import QUICKSTART, ROOT

import tiersim
from tiersim.analysis.plan import hardware_cost, read_scenario
from tiersim.analysis.plan_layouts import Layout, chosen_layout, laid_out, layouts, plan_largest_layout
from tiersim.cli import main
from tiersim.config.scenario import scenario_from_dict
from tiersim.errors import ConfigError
from tiersim.simulate import simulate


@pytest.fixture(autouse=True)
def _bundled_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERSIM_PROFILE_PATH", raising=False)
    monkeypatch.chdir(ROOT)


def node_of_four(tmp_path: Path, **training: object) -> Path:
    """The quickstart on a node of 4 H100s, 20 layers deep, 2 micro-steps of 1 sequence per rank,
    all in HBM or the optimizer in DRAM."""
    data = yaml.safe_load(QUICKSTART.read_text())
    data["model"]["layers"] = 20
    data["hardware"]["gpus"] = 4
    data["training"].update({"global_batch": 8, **training})
    data["strategies"] = ["gpu", "dram"]
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_layouts_are_every_combination_and_refuse_nonsense() -> None:
    assert layouts([1], [1, 2], [2, 1]) == [Layout(1, 1, 1), Layout(1, 1, 2), Layout(1, 2, 1), Layout(1, 2, 2)]
    with pytest.raises(ConfigError, match="tensor_parallel: expected whole numbers of at least 1, got \\[0\\]"):
        layouts([1], [0], [1])


def test_a_candidate_keeps_the_work_per_rank(tmp_path: Path) -> None:
    """TP 2 on 4 GPUs leaves DP 2: 2 micro-steps of 1 sequence on each of 2 ranks is a batch of 4."""
    scenario = read_scenario(node_of_four(tmp_path, zero_stage=1))
    candidate = laid_out(scenario, Layout(1, 2, 2))
    (config,) = candidate.configs(["gpu"])
    assert (config.training.data_parallel, config.training.global_batch, config.training.micro_batch) == (1, 2, 1)
    assert (config.training.tensor_parallel, config.training.pipeline_parallel, config.model.layers) == (2, 2, 20)
    with pytest.raises(ConfigError, match="training.tensor_parallel: tensor_parallel 3 x pipeline_parallel 1"):
        laid_out(scenario, Layout(1, 3, 1))


@pytest.mark.slow
def test_each_layout_answer_is_the_deepest_that_fits(tmp_path: Path) -> None:
    """ZeRO-1 so that pipelines run: every layout's layers fit and one more stage's worth does
    not, simulated directly; the ranking puts the largest model first."""
    scenario = read_scenario(node_of_four(tmp_path, zero_stage=1))
    frame = plan_largest_layout(scenario, layouts([1], [1, 2, 4], [1, 2]), ["gpu"])
    assert len(frame) == 6 and list(frame["rank"]) == list(range(1, 7))
    sizes = [v for v in frame["params_b"] if not pd.isna(v)]
    assert sizes == sorted(sizes, reverse=True)
    for row in frame.to_dict(orient="records"):
        if isinstance(row["excluded"], str):
            assert (row["tensor_parallel"], row["pipeline_parallel"]) == (4, 2)
            assert "training.pipeline_parallel" in row["excluded"]
            continue
        candidate = laid_out(scenario, Layout(1, row["tensor_parallel"], row["pipeline_parallel"]))
        unit = row["pipeline_parallel"]
        for layers, fits in ((row["layers"], True), (row["layers"] + unit, False)):
            (config,) = candidate.with_values({"model.layers": int(layers)}, candidate.document.origins[
                "model.layers"]).configs(["gpu"])
            assert simulate(config).fits is fits, (row, layers)
        assert row["data_parallel"] == 4 // (row["tensor_parallel"] * row["pipeline_parallel"])


def test_zero3_under_a_pipeline_and_nodes_without_a_network_are_rows_that_say_why(tmp_path: Path) -> None:
    scenario = read_scenario(node_of_four(tmp_path, global_batch=4))
    frame = plan_largest_layout(scenario, layouts([1, 2], [2], [1, 2]), ["gpu"], max_layers=40)
    why = {(r["nodes"], r["pipeline_parallel"]): r["excluded"] for r in frame.to_dict(orient="records")}
    assert "training.zero_stage: 3 with pipeline_parallel 2" in why[(1, 2)]
    assert why[(1, 1)] is None
    assert "hardware.network: required with hardware.nodes 2" in why[(2, 1)]
    assert frame.iloc[0]["nodes"] == 1
    line = chosen_layout(frame)
    assert line is not None and line.startswith(f"chose gpu on {frame.iloc[0]['nodes']} node")


def test_the_command_names_the_layout_in_the_table_and_json(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = node_of_four(tmp_path)
    args = ["plan", str(path), "--objective", "largest-model", "--strategy", "gpu", "--tensor-parallel", "1,4",
            "--max-layers", "40"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "chose gpu on 1 node x 4 GPUs: TP " in " ".join(out.split()) and "DP" in out
    assert main([*args, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fitting = [row for row in data["rows"] if row["fits"]]
    assert data["chosen"] == fitting[0] and data["chosen"]["rank"] == 1
    assert {"nodes", "tensor_parallel", "pipeline_parallel", "data_parallel"} <= set(data["chosen"])


@pytest.mark.parametrize(("extra", "message"), [
    (["--objective", "fastest", "--nodes", "1,2"], "--nodes: searches layouts for --objective largest-model only"),
    (["--objective", "largest-model", "--tensor-parallel", "0"], "--tensor-parallel: expected whole numbers"),
    (["--objective", "largest-model", "--pipeline-parallel", "x"], "--pipeline-parallel: expected a comma-separated"),
])
def test_bad_layout_flags_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                       message: str) -> None:
    assert main(["plan", str(node_of_four(tmp_path)), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_hardware_cost_counts_every_node() -> None:
    (config,) = scenario_from_dict(yaml.safe_load(QUICKSTART.read_text()), "q", ["dram"])
    one = hardware_cost(config.hardware)
    four = hardware_cost(dataclasses.replace(config.hardware, nodes=4))
    assert one["total"] is not None and four["total"] == pytest.approx(4 * one["total"])


@pytest.mark.slow
def test_a_sweep_over_layouts_is_the_same_in_process_and_on_dask(tmp_path: Path) -> None:
    """training.tensor_parallel and pipeline_parallel are sweep factors like any other field
    (data_parallel follows them), on the Dask path too."""
    distributed = pytest.importorskip("distributed")
    sweep = tmp_path / "layouts.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "layouts", "base": str(node_of_four(tmp_path, zero_stage=1)), "set": ["model.layers=4"],
        "grid": {"strategy": ["gpu"], "training.tensor_parallel": [1, 2], "training.pipeline_parallel": [1, 2]}}))
    inline = tiersim.sweep(sweep)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask = tiersim.sweep(sweep, scheduler=cluster.scheduler_address)
    assert len(inline) == 4 and inline["fits"].all() and inline["error"].isna().all()
    assert inline["iteration_time_s"].nunique() == 4  # every layout is its own run
    pd.testing.assert_frame_equal(inline.drop(columns="runtime_s"), dask.drop(columns="runtime_s"))
