"""Reproduce a multi-scenario study (the seed experiment): run, tabulate, plot.

Pure functions over scenario files: ``run_study`` simulates every strategy of every scenario
into one DataFrame (one row per model x strategy), ``speedup_table`` compares strategies per
model, ``phase_figure`` draws stacked forward/backward/step bars. ``study_scenarios`` finds a
bundled study's files (``seed``: ``scenarios/seed-*.yaml``; ``whatif``: ``scenarios/whatif-*.yaml``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from tiersim.bundled import bundled_dir
from tiersim.scenario import load_scenario
from tiersim.simulate import simulate
from tiersim.workload import build_step

STUDIES = {
    "seed": "seed-*.yaml",
    "whatif": "whatif-*.yaml",
}
"""Bundled studies: name -> glob of their scenario files in ``scenarios/``."""

SCENARIO_DIR = bundled_dir("scenarios")
"""The bundled scenarios (the checkout's ``scenarios/`` in an editable install)."""

PHASE_COLUMNS = {"forward": "forward_s", "backward": "backward_s", "optimizer_step": "step_s"}
STRATEGY_ORDER = ("gpu", "dram", "cxl", "nvme")
COLUMNS = ["scenario", "model", "params_b", "strategy", "global_batch", "fits", "reason", "forward_s",
           "backward_s", "step_s", "iteration_s", "step_cpu_utilisation", "bottleneck", "peak_dram_gb",
           "peak_cxl_gb", "peak_nvme_gb"]


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
            })
    return pd.DataFrame(rows, columns=COLUMNS)


def speedup_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: iteration time per strategy, CXL-vs-NVMe speedup and reduction, ordering.

    ``cxl_vs_nvme_reduction_pct`` = 100 * (1 - t_cxl / t_nvme) (the study's "x% faster");
    ``cxl_closer_to_dram`` is whether t_cxl - t_dram < t_nvme - t_cxl; ``ordering`` lists the
    strategies that fit from fastest to slowest.
    """
    out = []
    for model, group in df.groupby("model", sort=False):
        times = {r.strategy: (r.iteration_s if r.fits else None) for r in group.itertuples()}
        dram, cxl, nvme = times.get("dram"), times.get("cxl"), times.get("nvme")
        fitting = sorted((t, s) for s, t in times.items() if t is not None)
        row = {
            "model": model,
            "dram_s": dram,
            "cxl_s": cxl,
            "nvme_s": nvme,
            "cxl_vs_nvme_speedup": nvme / cxl if cxl and nvme else None,
            "cxl_vs_nvme_reduction_pct": 100.0 * (1 - cxl / nvme) if cxl and nvme else None,
            "cxl_vs_dram_slowdown_pct": 100.0 * (cxl / dram - 1) if cxl and dram else None,
            "ordering": " < ".join(s for _, s in fitting),
            "cxl_closer_to_dram": (cxl - dram < nvme - cxl) if None not in (dram, cxl, nvme) else None,
        }
        out.append(row)
    return pd.DataFrame(out)


def _fmt(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def study_table(df: pd.DataFrame) -> str:
    """The study as one text table: model, strategy, phases, iteration, CXL-vs-NVMe speedup."""
    from tiersim.report import format_table

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


def phase_figure(df: pd.DataFrame, title: str = "Iteration time by phase"):  # -> go.Figure
    """Stacked forward/backward/step bars, grouped by model, one bar per strategy."""
    import plotly.graph_objects as go

    data = df[df["fits"]]
    x = [list(data["model"]), list(data["strategy"])]
    fig = go.Figure()
    for label, column in (("forward", "forward_s"), ("backward", "backward_s"), ("optimizer step", "step_s")):
        fig.add_trace(go.Bar(name=label, x=x, y=list(data[column]),
                             hovertemplate="%{x}<br>" + label + ": %{y:.3g} s<extra></extra>"))
    fig.update_layout(barmode="stack", title=title, yaxis_title="seconds per iteration",
                      xaxis_title="model / strategy", legend_title="phase")
    return fig
