"""Validation results: per-case error, MAPE per strategy and overall, as a table or JSON."""

from __future__ import annotations

import io
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiersim.analysis.report import TABLE_WIDTH

if TYPE_CHECKING:
    from rich.table import Table


@dataclass(frozen=True)
class CaseResult:
    case: str
    strategy: str
    predicted_s: float
    measured_s: float
    samples_s: tuple[float, ...] = ()
    """Every timed step (s); ``measured_s`` is their median."""
    other_s: float | None = None
    """The other prediction (drift-corrected when ``predicted_s`` is from the profile as
    calibrated, and the reverse), when the drift probes ran."""

    @property
    def spread_pct(self) -> float:
        """Interquartile range of the samples over their median, in percent (0 with < 2)."""
        if len(self.samples_s) < 2:
            return 0.0
        q1, _q2, q3 = statistics.quantiles(self.samples_s, n=4, method="inclusive")
        return (q3 - q1) / self.measured_s * 100.0

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured, in percent."""
        return (self.predicted_s - self.measured_s) / self.measured_s * 100.0

    @property
    def other_error_pct(self) -> float | None:
        """The error of the other prediction, in percent."""
        if self.other_s is None:
            return None
        return (self.other_s - self.measured_s) / self.measured_s * 100.0


def mape(results: Sequence[CaseResult]) -> float:
    """Mean absolute percentage error; 0 for no cases."""
    if not results:
        return 0.0
    return sum(abs(r.error_pct) for r in results) / len(results)


def mape_by_strategy(results: Sequence[CaseResult]) -> dict[str, float]:
    strategies: dict[str, list[CaseResult]] = {}
    for r in results:
        strategies.setdefault(r.strategy, []).append(r)
    return {s: mape(rs) for s, rs in strategies.items()}


def to_json(results: Sequence[CaseResult]) -> str:
    """``{"cases": [{case, strategy, predicted_s, measured_s, error_pct}], "mape_pct": float}``,
    exactly the documented schema (the spread is in the table)."""
    doc = {
        "cases": [
            {
                "case": r.case,
                "strategy": r.strategy,
                "predicted_s": float(r.predicted_s),
                "measured_s": float(r.measured_s),
                "error_pct": float(r.error_pct),
            }
            for r in results
        ],
        "mape_pct": float(mape(results)),
    }
    return json.dumps(doc, indent=2)


def render_table(results: Sequence[CaseResult], title: str = "tiersim validate", note: str | None = None,
                 other: str = "drift-corrected") -> str:
    """A plain-text table: case, strategy, predicted, measured (median), error %, spread
    (interquartile range of the samples, % of the median) and, when there is one, the
    ``other`` prediction and its error; then MAPE lines and ``note``."""
    from rich.console import Console

    shown = other if any(r.other_s is not None for r in results) else None
    console = Console(width=TABLE_WIDTH, record=True, file=io.StringIO())
    console.print(_case_table(results, title, shown))
    lines = [console.export_text(), *_mape_lines(results, shown)]
    if note:
        lines.append(note)
    return "\n".join(lines)


def _case_table(results: Sequence[CaseResult], title: str, other: str | None) -> Table:
    """The rich ``Table`` of ``render_table``, with the ``other`` columns when it is named."""
    from rich.table import Table

    columns = ["case", "strategy", "predicted", "measured", "error %", "spread %"]
    if other is not None:
        columns += [other, "its error %"]
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in ("case", "strategy") else "right")
    for r in results:
        row = [r.case, r.strategy, f"{r.predicted_s * 1e3:.1f} ms", f"{r.measured_s * 1e3:.1f} ms",
               f"{r.error_pct:+.1f}", f"{r.spread_pct:.0f}"]
        if other is not None:
            err = r.other_error_pct
            row += [f"{r.other_s * 1e3:.1f} ms" if r.other_s is not None else "-",
                    f"{err:+.1f}" if err is not None else "-"]
        table.add_row(*row)
    return table


def _mape_lines(results: Sequence[CaseResult], other: str | None) -> list[str]:
    """MAPE per strategy and overall, the worst case and, when ``other`` is named, its MAPE."""
    lines = [f"MAPE {strategy}: {value:.1f}%" for strategy, value in mape_by_strategy(results).items()]
    lines.append(f"MAPE overall: {mape(results):.1f}%")
    worst = max(results, key=lambda r: abs(r.error_pct), default=None)
    if worst is not None:
        lines.append(f"worst case: {worst.case} ({worst.error_pct:+.1f}%)")
    if other is not None:
        errors = [abs(e) for e in (r.other_error_pct for r in results) if e is not None]
        lines.append(f"MAPE overall, {other}: {sum(errors) / len(errors):.1f}%")
    return lines
