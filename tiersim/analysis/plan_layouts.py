"""The largest model over parallel layouts: ``plan --objective largest-model`` across nodes,
tensor, pipeline and data parallelism.

A layout is a number of nodes (``hardware.nodes``, each of the scenario's ``hardware.gpus``), a
tensor-parallel and a pipeline-parallel degree; data parallelism is what they leave,
``nodes x gpus / (tensor_parallel x pipeline_parallel)`` (``tiersim.config.ranks``). Every
candidate keeps the scenario's work per rank: its micro-batch and its micro-steps per optimizer
step, so its global batch is ``micro_batch x data_parallel x`` those micro-steps (with pipeline
parallelism the micro-steps are the micro-batches in flight). Its search starts from the
scenario's depth rounded down to a whole number of pipeline stages.

Each candidate is searched as ``plan.plan_largest_model`` searches one scenario, every probe
simulated. A layout the scenario's validation refuses (tensor parallelism that does not divide
a node's GPUs or the heads, ZeRO-2/3 under a pipeline, a layout tiersim does not model yet) is a
row that says why (``excluded``). Rows are ranked by model size, then iteration time, then GPUs: the first is
the layout chosen (``chosen_layout``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tiersim.analysis import plan
from tiersim.config.document import Origin
from tiersim.errors import API, ConfigError

LAYOUT = Origin("plan", "a parallel layout tried")
"""Where the planner's layouts come from (an error names the field and this)."""
LAYOUT_COLUMNS = ("nodes", "gpus", "tensor_parallel", "pipeline_parallel", "data_parallel")
"""The columns a layout adds to each row: nodes, GPUs in all, and the three degrees."""


@dataclass(frozen=True)
class Layout:
    """Nodes and the tensor- and pipeline-parallel degrees (data parallelism is what they leave)."""

    nodes: int
    tensor_parallel: int
    pipeline_parallel: int


def layouts(nodes: Sequence[int], tensor_parallel: Sequence[int], pipeline_parallel: Sequence[int]) -> list[Layout]:
    """Every combination of the degrees given, fewest GPUs and least model parallelism first."""
    for name, values in (("nodes", nodes), ("tensor_parallel", tensor_parallel),
                         ("pipeline_parallel", pipeline_parallel)):
        if not values or any(int(v) != v or v < 1 for v in values):
            raise ConfigError(API, name, f"expected whole numbers of at least 1, got {list(values)}")
    return [Layout(int(n), int(t), int(p)) for n, t, p in itertools.product(
        sorted(set(nodes)), sorted(set(tensor_parallel)), sorted(set(pipeline_parallel)))]


def laid_out(scenario: plan.Scenario, layout: Layout) -> plan.Scenario:
    """The scenario on ``layout``, with its micro-batch and micro-steps per rank; a layout that
    leaves no whole data-parallel group is a ConfigError naming the field."""
    (config,) = scenario.configs(scenario.strategies()[:1])
    training, gpus = config.training, config.hardware.gpus
    steps = training.global_batch // (training.micro_batch * training.data_parallel)
    ranks = layout.tensor_parallel * layout.pipeline_parallel
    if gpus % layout.tensor_parallel or layout.nodes * gpus % ranks:
        field = "training.tensor_parallel" if gpus % layout.tensor_parallel else "training.pipeline_parallel"
        raise ConfigError(LAYOUT.source, field, f"tensor_parallel {layout.tensor_parallel} x pipeline_parallel "
                          f"{layout.pipeline_parallel} on {layout.nodes} node(s) of {gpus} GPUs: a tensor-parallel "
                          "group stays in a node and the degrees must divide the GPUs")
    data_parallel = layout.nodes * gpus // ranks
    unit = layout.pipeline_parallel * training.virtual_pipeline
    return scenario.with_values({
        "hardware.nodes": layout.nodes, "training.tensor_parallel": layout.tensor_parallel,
        "training.pipeline_parallel": layout.pipeline_parallel, "training.data_parallel": data_parallel,
        "training.global_batch": training.micro_batch * data_parallel * steps,
        "model.layers": max(config.model.layers // unit, 1) * unit}, LAYOUT)


def plan_largest_layout(scenario: plan.Scenario, layout_list: Sequence[Layout], strategies: Sequence[str] = (),
                        scale: str = "layers", max_layers: int = plan.DEFAULT_MAX_LAYERS,
                        lifetime_years: float = plan.DEFAULT_LIFETIME_YEARS) -> pd.DataFrame:
    """Per strategy and layout, the largest model that fits (``plan.plan_largest_model``), with
    the layout's columns; ranked by size, then iteration time, then GPUs (see module doc)."""
    plan.check_search(scale, max_layers, lifetime_years)
    names = list(strategies) or scenario.strategies()
    scenario.configs(strategies=names)
    gpus = int(scenario.document.get("hardware.gpus", 1))
    frames = [_candidate(scenario, layout, gpus, names, scale, max_layers, lifetime_years) for layout in layout_list]
    frame = pd.concat(frames, ignore_index=True)
    frame["_size"] = frame["params_b"].map(lambda v: -1.0 if v is None or pd.isna(v) else -v)
    frame["_time"] = frame["iteration_time_s"].map(lambda v: float("inf") if v is None or pd.isna(v) else v)
    frame = frame.sort_values(["_size", "_time", "gpus"], kind="stable").drop(columns=["_size", "_time", "rank"])
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame.reset_index(drop=True)


def _candidate(scenario: plan.Scenario, layout: Layout, gpus: int, names: list[str], scale: str, max_layers: int,
               lifetime_years: float) -> pd.DataFrame:
    """The rows of one layout: its largest models, or one row per strategy saying why it is refused."""
    columns = {"nodes": layout.nodes, "gpus": layout.nodes * gpus, "tensor_parallel": layout.tensor_parallel,
               "pipeline_parallel": layout.pipeline_parallel}
    try:
        candidate = laid_out(scenario, layout)
        frame = plan.plan_largest_model(candidate, names, scale, max_layers, lifetime_years)
    except ConfigError as error:
        return pd.DataFrame([{"rank": None, "strategy": name, "model": "-", "layers": None, "hidden": None,
                              "params_b": None, "fits": False, "iteration_time_s": None, "binding": None, **columns,
                              "data_parallel": None, "excluded": f"layout refused: {error.field}: {error.message}"}
                             for name in names])
    for key, value in columns.items():
        frame[key] = value
    frame["data_parallel"] = candidate.document.get("training.data_parallel")
    frame["excluded"] = None
    return frame


def describe_layout(row: dict[str, Any]) -> str:
    """``2 nodes x 4 GPUs: TP 2, PP 1, DP 4`` for a row of ``plan_largest_layout``."""
    per_node = int(row["gpus"]) // int(row["nodes"])
    return (f"{row['nodes']} node{'s' if row['nodes'] != 1 else ''} x {per_node} GPUs: TP {row['tensor_parallel']}, "
            f"PP {row['pipeline_parallel']}, DP {row['data_parallel']}")


def chosen_layout(frame: pd.DataFrame) -> str | None:
    """Which layout and strategy a ``plan_largest_layout`` frame chose and why, in one line (None
    when no layout fits a model)."""
    rows = frame.to_dict(orient="records")
    fitting = [row for row in rows if row["fits"] in (True,)]
    if not fitting:
        return None
    best = fitting[0]
    refused = sum(1 for row in rows if isinstance(row["excluded"], str))
    why = (f"the largest model that fits ({best['params_b']:.1f} B parameters, {best['layers']:g} layers, "
           f"{best['iteration_time_s']:.4g} s per iteration) of {len(rows)} strategy and layout candidates")
    if refused:
        why += f"; {refused} refused (see why under each)"
    return f"chose {best['strategy']} on {describe_layout(best)}: {why}"


def chosen_rows(scenario: plan.Scenario, frame: pd.DataFrame) -> tuple[plan.Scenario, pd.DataFrame]:
    """The scenario on the layout a ``plan_largest_layout`` frame chose (its first row's where none
    fits) and that layout's rows, as ``plan.memory_by_model_size`` takes them."""
    rows = frame.to_dict(orient="records")
    best = next((row for row in rows if row["fits"] in (True,)), rows[0])
    layout = Layout(int(best["nodes"]), int(best["tensor_parallel"]), int(best["pipeline_parallel"]))
    same = (frame["nodes"] == layout.nodes) & (frame["tensor_parallel"] == layout.tensor_parallel) & (
        frame["pipeline_parallel"] == layout.pipeline_parallel)
    return laid_out(scenario, layout), frame[same & frame["layers"].notna()].reset_index(drop=True)
