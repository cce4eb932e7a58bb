"""A fit as text (table, Markdown), as JSON-ready data, and as the host profile it writes."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

from tiersim.analysis.report import format_table
from tiersim.config.schema import to_plain
from tiersim.fitting.solver import FitResult, FittedFigure
from tiersim.fitting.system import PART_KINDS


def figure_rows(fit: FitResult) -> list[list[str]]:
    """One row per fitted figure: value, bounds, 95% interval, start, why."""
    rows = []
    for f in fit.figures:
        u = f.unknown
        ci = "not determined" if f.interval is None else f"[{f.interval[0]:.4g}, {f.interval[1]:.4g}]"
        rows.append([u.key, f"{f.value:.4g}", f"[{u.low:.4g}, {u.high:.4g}]", ci, f"{f.start:.4g}",
                     "at bound" if f.at_bound else ""])
    return rows


def residual_rows(fit: FitResult) -> list[list[str]]:
    """One row per measured value: log, quantity, measured and predicted seconds, error."""
    return [[Path(r.measured.log).name, r.measured.quantity, f"{r.measured.seconds:.3f}", f"{r.predicted:.3f}",
             f"{100 * r.relative:+.2f}%"] for r in fit.residuals]


FIGURE_HEADERS = ["figure", "fitted (base units)", "bounds", "95% interval", "start", ""]
RESIDUAL_HEADERS = ["log", "quantity", "measured_s", "predicted_s", "error"]


def fit_table(fit: FitResult) -> str:
    """The fit as plain text: figures, then the residual of every measured value."""
    worst = max(abs(r.relative) for r in fit.residuals)
    return "\n".join([
        f"fitted {len(fit.figures)} figures to {len(fit.residuals)} measured values of {len(fit.logs)} logs "
        f"({fit.evaluations} simulations); worst residual {100 * worst:.2f}%",
        format_table(FIGURE_HEADERS, figure_rows(fit)),
        "",
        format_table(RESIDUAL_HEADERS, residual_rows(fit)),
    ])


def fit_markdown(fit: FitResult, command: str) -> str:
    """The fit report as Markdown (what the repository commits beside the profile)."""
    def table(headers: list[str], rows: list[list[str]]) -> str:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)

    why = [[f.unknown.key, f.unknown.why] for f in fit.figures]
    return "\n\n".join([
        f"# Fit report: {fit.system.name}",
        f"Made by `{command}` on {datetime.date.today().isoformat()}: {len(fit.figures)} figures fitted to "
        f"{len(fit.residuals)} measured values (steady state: mean of iterations 3..N) by least squares "
        f"of ln(predicted/measured), {fit.evaluations} simulations. Intervals are 95%, from the Jacobian "
        "at the solution and the residual variance; they say how well these logs pin a figure down "
        "within this model, not how right the model is.",
        "## Fitted figures",
        table(FIGURE_HEADERS, figure_rows(fit)),
        "## Bounds",
        table(["figure", "why"], why),
        "## Residuals",
        table(RESIDUAL_HEADERS, residual_rows(fit)),
    ]) + "\n"


def fit_data(fit: FitResult) -> dict[str, Any]:
    """The fit as JSON-ready data."""
    return {
        "system": fit.system.name,
        "logs": list(fit.logs),
        "evaluations": fit.evaluations,
        "figures": [_figure_data(f) for f in fit.figures],
        "residuals": [{"log": r.measured.log, "quantity": r.measured.quantity, "measured_s": r.measured.seconds,
                       "predicted_s": r.predicted, "relative_error": r.relative} for r in fit.residuals],
    }


def _figure_data(f: FittedFigure) -> dict[str, Any]:
    return {"figure": f.unknown.key, "value": f.value, "start": f.start, "bounds": [f.unknown.low, f.unknown.high],
            "interval_95": list(f.interval) if f.interval else None, "at_bound": f.at_bound, "why": f.unknown.why}


def profile_document(fit: FitResult) -> dict[str, Any]:
    """The ``kind: host`` profile of the fitted node: every part inlined, each fitted figure's
    source saying how it was fitted, the fit itself and the system file's scenario settings
    (which ``tiersim replay`` applies) under ``calibration``."""
    logs = ", ".join(Path(p).name for p in fit.logs)
    parts: dict[str, Any] = {}
    for part in PART_KINDS:
        profile = fit.parts.get(part)
        if profile is None:
            continue
        sources = dict(profile.sources)
        for f in fit.figures:
            if f.unknown.part == part:
                ci = "not determined" if f.interval is None else f"[{f.interval[0]:.4g}, {f.interval[1]:.4g}]"
                sources[f.unknown.figure] = (
                    f"fitted by tiersim fit to {logs}: {f.value:.4g} (base units), 95% interval {ci}, "
                    f"bounds [{f.unknown.low:.4g}, {f.unknown.high:.4g}] ({f.unknown.why}); started from "
                    f"{f.start:.4g}: {profile.sources.get(f.unknown.figure, 'no source')}")
        parts[part] = to_plain(dataclasses.replace(profile, sources=sources))
    return {
        "kind": "host",
        "name": fit.system.name,
        "description": fit.system.description,
        **parts,
        "sources": {},
        "calibration": {"fit": fit_data(fit), "settings": dict(fit.system.settings)},
    }
