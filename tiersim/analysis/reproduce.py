"""Reproduce a multi-scenario study (the seed experiment): run, tabulate, plot.

Pure functions over scenario files: ``run_study`` simulates every strategy of every scenario
into one DataFrame (one row per model x strategy), ``speedup_table`` compares strategies per
model, ``phase_figure`` draws stacked forward/backward/step bars. ``study_scenarios`` finds a
bundled study's files (``seed``: ``scenarios/seed-*.yaml``; ``whatif``: ``scenarios/whatif-*.yaml``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tiersim.config.bundled import bundled_dir
from tiersim.config.document import load_scenario
from tiersim.simulate import simulate
from tiersim.workload import build_step

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

STUDIES = {
    "seed": "seed-*.yaml",
    "whatif": "whatif-*.yaml",
}
"""Bundled studies: name -> glob of their scenario files in ``scenarios/``."""

SCENARIO_DIR = bundled_dir("scenarios")
"""The bundled scenarios (the checkout's ``scenarios/`` in an editable install)."""
MEASURED_DIR = SCENARIO_DIR / "measured"
"""Measured runs as ``tiersim import-log --out`` writes them (NAME.yaml, NAME.measured.csv):
the seed study's own 70B logs."""
PHASE_COLUMNS = {"forward": "forward_s", "backward": "backward_s", "optimizer_step": "step_s"}
STRATEGY_ORDER = ("gpu", "dram", "cxl", "nvme")
COLUMNS = ["scenario", "model", "params_b", "strategy", "global_batch", "fits", "reason", "forward_s",
           "backward_s", "step_s", "iteration_s", "step_cpu_utilisation", "bottleneck", "peak_dram_gb",
           "peak_cxl_gb", "peak_nvme_gb", "reserved_hbm_gb", "reserved_dram_gb", "reserved_cxl_gb"]


def _size_key(path: Path) -> tuple[float, str]:
    """Sort scenario files by the model size in their name (``seed-52b`` -> 52)."""
    match = re.search(r"(\d+(?:\.\d+)?)b", path.stem.lower())
    return (float(match.group(1)) if match else math.inf, path.stem)


def study_scenarios(study: str, directory: str | Path | None = None) -> list[Path]:
    """The scenario files of a bundled study, smallest model first."""
    if study not in STUDIES:
        raise KeyError(f"unknown study {study!r} (known: {', '.join(STUDIES)})")
    root = Path(directory) if directory is not None else SCENARIO_DIR
    return sorted(root.glob(STUDIES[study]), key=_size_key)


def model_label(scenario: str) -> str:
    """``seed-20b`` -> ``20B`` (the scenario name when it carries no size)."""
    match = re.search(r"(\d+(?:\.\d+)?)b$", scenario.lower())
    return f"{match.group(1)}B" if match else scenario


def run_study(scenario_paths: Sequence[str | Path], overrides: Sequence[str] = ()) -> pd.DataFrame:
    """Simulate every strategy of every scenario; one row per model x strategy.

    ``step_cpu_utilisation`` is the busy fraction of the rank's CPU (Adam) stream during the
    optimizer step, from ``result.utilisation`` (resource ``cpu``, phase ``optimizer_step``).
    Times are None for a run that does not fit (``reason`` says why).
    """
    rows = []
    for path in scenario_paths:
        for config in load_scenario(path, overrides):
            result = simulate(config)
            phases = result.phases or {}
            cpu = None
            if result.fits and not result.utilisation.empty:
                util = result.utilisation
                sel = util[(util["resource"] == "cpu") & (util["phase"] == "optimizer_step")]
                cpu = float(sel["utilisation"].iloc[0]) if len(sel) else 0.0
            params = build_step(config.model, config.training).total_params
            rows.append({
                "scenario": config.scenario,
                "model": model_label(config.scenario),
                "params_b": params / 1e9,
                "strategy": config.strategy,
                "global_batch": config.training.global_batch,
                "fits": result.fits,
                "reason": result.reason,
                **{column: phases.get(phase) for phase, column in PHASE_COLUMNS.items()},
                "iteration_s": result.iteration_time_s,
                "step_cpu_utilisation": cpu,
                "bottleneck": result.bottleneck() if result.fits else None,
                "peak_dram_gb": result.peak_bytes["dram"] / 1e9,
                "peak_cxl_gb": result.peak_bytes["cxl"] / 1e9,
                "peak_nvme_gb": result.peak_bytes["nvme"] / 1e9,
                **{f"reserved_{tier}_gb": result.reserved_bytes[tier] / 1e9 for tier in ("hbm", "dram", "cxl")},
            })
    return pd.DataFrame(rows, columns=COLUMNS)


def speedup_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: iteration time per strategy, CXL-vs-NVMe speedup and reduction, ordering.

    ``cxl_vs_nvme_reduction_pct`` = 100 * (1 - t_cxl / t_nvme) (the study's "x% faster");
    ``cxl_closer_to_dram`` is whether t_cxl - t_dram < t_nvme - t_cxl; ``ordering`` lists the
    strategies that fit from fastest to slowest.
    """
    return pd.DataFrame([_speedup_row(model, group) for model, group in df.groupby("model", sort=False)])


def _speedup_row(model: object, group: pd.DataFrame) -> dict[str, object]:
    """One model's row of ``speedup_table`` from its rows of the study (times in s)."""
    times = {r.strategy: (r.iteration_s if r.fits else None) for r in group.itertuples()}
    dram, cxl, nvme = times.get("dram"), times.get("cxl"), times.get("nvme")
    fitting = sorted((t, s) for s, t in times.items() if t is not None)
    return {
        "model": model,
        "dram_s": dram,
        "cxl_s": cxl,
        "nvme_s": nvme,
        "cxl_vs_nvme_speedup": nvme / cxl if cxl and nvme else None,
        "cxl_vs_nvme_reduction_pct": 100.0 * (1 - cxl / nvme) if cxl and nvme else None,
        "cxl_vs_dram_slowdown_pct": 100.0 * (cxl / dram - 1) if cxl and dram else None,
        "ordering": " < ".join(s for _, s in fitting),
        "cxl_closer_to_dram": (cxl - dram < nvme - cxl) if dram is not None and cxl is not None and nvme is not None
        else None,
    }


def _fmt(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def study_table(df: pd.DataFrame) -> str:
    """The study as one text table: model, strategy, phases, iteration, CXL-vs-NVMe speedup."""
    from tiersim.analysis.report import format_table

    speed = speedup_table(df).set_index("model")
    headers = ["model", "strategy", "forward_s", "backward_s", "step_s", "iteration_s", "step_cpu_util",
               "cxl_vs_nvme"]
    rows = []
    for r in df.itertuples():
        note = ""
        if r.strategy == "cxl" and r.model in speed.index:
            s = speed.loc[r.model]
            if s["cxl_vs_nvme_speedup"] is not None and not pd.isna(s["cxl_vs_nvme_speedup"]):
                note = f"{s['cxl_vs_nvme_speedup']:.3g}x faster (-{s['cxl_vs_nvme_reduction_pct']:.1f}% time)"
        if not r.fits:
            note = f"does not fit: {r.reason}"
        rows.append([r.model, r.strategy, _fmt(r.forward_s), _fmt(r.backward_s), _fmt(r.step_s),
                     _fmt(r.iteration_s), _fmt(r.step_cpu_utilisation, 2), note])
    return format_table(headers, rows)


def measured_runs(scenario_paths: Sequence[str | Path], overrides: Sequence[str] = (),
                  directory: str | Path = MEASURED_DIR) -> pd.DataFrame:
    """The steady-state phases (and iteration) of the imported runs in ``directory`` that ran a
    study scenario's model at its global batch (after ``overrides``): columns model, strategy,
    phase, seconds."""
    from tiersim.config.document import ScenarioDocument
    from tiersim.config.profiles import read_yaml
    from tiersim.config.schema import build
    from tiersim.ingest.log_scenario import PHASES
    from tiersim.workload import ModelSpec

    def shape(data: object, source: str) -> tuple[ModelSpec, object] | None:
        if not isinstance(data, dict) or not isinstance(data.get("training"), dict):
            return None
        model = build(ModelSpec, {**data["model"], "name": "-"}, source, "model")
        return model, data["training"].get("global_batch")

    study = {}
    for path in scenario_paths:
        config = load_scenario(path, overrides)[0]
        study[(dataclasses.replace(config.model, name="-"), config.training.global_batch)] = model_label(
            config.scenario)
    rows = []
    for imported in sorted(Path(directory).glob("*.yaml")):
        data = read_yaml(imported)
        key = shape(data, str(imported))
        table = imported.with_suffix(".measured.csv")
        if key is None or key not in study or not table.is_file():
            continue
        assert isinstance(data, dict)
        strategy = ScenarioDocument(data, str(imported)).strategy_names()[0]
        measured = pd.read_csv(table)
        steady = measured[measured["iteration"] == "steady"].set_index("quantity")["value"]
        for phase in (*PHASES, "iteration"):
            if phase in steady.index:
                rows.append({"model": study[key], "strategy": strategy, "phase": phase,
                             "seconds": float(steady[phase])})
    return pd.DataFrame(rows, columns=MEASURED_COLUMNS)


def measured_comparison(df: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Every measured value beside the prediction of the same model, strategy and phase:
    columns model, strategy, phase, measured_s, predicted_s, error (predicted / measured - 1)."""
    columns = {**PHASE_COLUMNS, "iteration": "iteration_s"}
    predicted = df.set_index(["model", "strategy"])
    rows = []
    for r in measured.itertuples():
        key = (r.model, r.strategy)
        if key not in predicted.index or not bool(predicted.loc[key, "fits"]):
            continue
        value = float(predicted.loc[key, columns[str(r.phase)]])
        rows.append({"model": r.model, "strategy": r.strategy, "phase": r.phase, "measured_s": r.seconds,
                     "predicted_s": value, "error": value / r.seconds - 1.0})
    return pd.DataFrame(rows, columns=["model", "strategy", "phase", "measured_s", "predicted_s", "error"])


def comparison_table(comparison: pd.DataFrame) -> str:
    """The measured-against-predicted comparison as text."""
    from tiersim.analysis.report import format_table

    rows = [[r.model, r.strategy, r.phase, f"{r.measured_s:.3f}", f"{r.predicted_s:.3f}", f"{100 * r.error:+.1f}%"]
            for r in comparison.itertuples()]
    return format_table(["model", "strategy", "phase", "measured_s", "predicted_s", "error"], rows)


MEASURED_COLUMNS = ["model", "strategy", "phase", "seconds"]
"""Columns of the measured values ``phase_figure`` marks; ``phase`` is forward, backward or
optimizer_step (one row per model, strategy and phase, seconds per iteration)."""

_PHASE_LABELS = {"forward": "forward", "backward": "backward", "optimizer_step": "optimizer step"}


def phase_figure(df: pd.DataFrame, measured: pd.DataFrame | None = None,
                 title: str = "Iteration time by phase") -> go.Figure:
    """Stacked forward/backward/step bars: one panel per strategy (each with its own seconds
    axis), one bar per model; with ``measured`` (``MEASURED_COLUMNS``), a hatched ``measured``
    bar stands beside the predicted (``tiersim``) one of each model and strategy it has values for."""
    from plotly.subplots import make_subplots

    data = df[df["fits"].astype(bool)]
    strategies = [s for s in STRATEGY_ORDER if s in set(data["strategy"])]
    strategies += sorted(set(data["strategy"]) - set(strategies))
    seen = _measured_phases(measured) if measured is not None else {}
    fig = make_subplots(rows=1, cols=max(len(strategies), 1), subplot_titles=strategies, horizontal_spacing=0.06)
    for col, strategy in enumerate(strategies, start=1):
        _add_phase_bars(fig, data[data["strategy"] == strategy], strategy, col, seen)
        fig.update_yaxes(title_text="seconds per iteration" if col == 1 else None, row=1, col=col)
        fig.update_xaxes(title_text="model", tickangle=0, tickfont={"size": 10}, row=1, col=col)
    fig.update_layout(barmode="stack", title=title, legend_title="phase", height=520,
                      width=max(700, 420 * len(strategies)))
    return fig


def _measured_phases(measured: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """{(model, strategy, phase): seconds} of the measured values (``MEASURED_COLUMNS``)."""
    missing = [c for c in MEASURED_COLUMNS if c not in measured.columns]
    if missing:
        raise ValueError(f"measured values need columns {MEASURED_COLUMNS}; missing {missing}")
    return {(str(r.model), str(r.strategy), str(r.phase)): float(r.seconds) for r in measured.itertuples()
            if r.phase in PHASE_COLUMNS}


def _add_phase_bars(fig: go.Figure, part: pd.DataFrame, strategy: str, col: int,
                    seen: dict[tuple[str, str, str], float]) -> None:
    """Panel ``col``: a strategy's stacked phase bars per model (its rows ``part``) and, where
    ``seen`` has every phase of a model, a hatched measured bar beside it."""
    import plotly.graph_objects as go

    from tiersim.analysis.plots import PHASE_COLOURS

    models = list(part["model"])
    marked = [m for m in models if all((m, strategy, p) in seen for p in PHASE_COLUMNS)]
    for phase, column in PHASE_COLUMNS.items():
        label = _PHASE_LABELS[phase]
        kinds = [("tiersim", models, list(part[column]))]
        if marked:
            kinds.append(("measured", marked, [seen[(m, strategy, phase)] for m in marked]))
        for kind, names, values in kinds:
            hatched = kind == "measured"
            fig.add_trace(go.Bar(
                name=f"{label} ({kind})" if seen else label, y=values,
                x=[names, [kind] * len(names)] if seen else names,
                marker={"color": PHASE_COLOURS[phase], "pattern": {"shape": "/" if hatched else ""}},
                legendgroup=f"{phase} {kind}", showlegend=col == 1,
                hovertemplate=f"{strategy} %{{x}}<br>{label} ({kind}): %{{y:.3g}} s<extra></extra>",
            ), row=1, col=col)
