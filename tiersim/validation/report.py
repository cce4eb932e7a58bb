"""Validation results: per-case error, MAPE per strategy and overall, as a table or JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class CaseResult:
    case: str
    strategy: str
    predicted_s: float
    measured_s: float

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured, in percent."""
        return (self.predicted_s - self.measured_s) / self.measured_s * 100.0


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
    """``{"cases": [{case, strategy, predicted_s, measured_s, error_pct}], "mape_pct": float}``."""
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


def render_table(results: Sequence[CaseResult], title: str = "tiersim validate") -> str:
    """A plain-text table: case, strategy, predicted, measured, error %; then MAPE lines."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col, justify in (("case", "left"), ("strategy", "left"), ("predicted", "right"),
                         ("measured", "right"), ("error %", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(r.case, r.strategy, f"{r.predicted_s * 1e3:.1f} ms", f"{r.measured_s * 1e3:.1f} ms",
                      f"{r.error_pct:+.1f}")
    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    lines = [console.export_text()]
    for strategy, value in mape_by_strategy(results).items():
        lines.append(f"MAPE {strategy}: {value:.1f}%")
    lines.append(f"MAPE overall: {mape(results):.1f}%")
    worst = max(results, key=lambda r: abs(r.error_pct), default=None)
    if worst is not None:
        lines.append(f"worst case: {worst.case} ({worst.error_pct:+.1f}%)")
    return "\n".join(lines)
