"""Plain-text tables and flat rows for terminal, CSV and JSON output."""

from __future__ import annotations

import csv
import io
from typing import Any, Sequence

from tiersim.hardware import TIERS
from tiersim.results import PHASES, Result


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned text columns separated by two spaces, with a rule under the header."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def seconds(value: float | None) -> str:
    """Seconds with 4 significant digits, or '-'."""
    return "-" if value is None else f"{value:.4g}"


def gigabytes(num_bytes: int) -> str:
    """Bytes as decimal GB with one decimal, '-' for zero."""
    return f"{num_bytes / 1e9:.1f}" if num_bytes else "-"


def results_table(results: Sequence[Result]) -> str:
    """One row per strategy: times (s), GB each tier holds (reserved: what decides the fit), and
    the bottleneck or why it does not fit."""
    headers = ["strategy", "fits", "iteration_s", "forward_s", "backward_s", "step_s", "exposed_s",
               *[f"{tier}_GB" for tier in TIERS], "bottleneck / reason"]
    rows = []
    for r in results:
        phases = r.phases or {}
        rows.append([r.strategy, "yes" if r.fits else "NO", seconds(r.iteration_time_s),
                     *[seconds(phases.get(p)) for p in PHASES], seconds(r.exposed_transfer_s),
                     *[gigabytes(r.reserved_bytes[t]) for t in TIERS], r.bottleneck() if r.fits else r.reason])
    return format_table(headers, rows)


def flat_row(scenario: str, result: Result) -> dict[str, Any]:
    """A result as one flat record (CSV/Parquet): seconds and bytes, None where it does not fit."""
    phases = result.phases or {}
    row: dict[str, Any] = {
        "scenario": scenario,
        "strategy": result.strategy,
        "fits": result.fits,
        "iteration_time_s": result.iteration_time_s,
        **{f"{p}_s": phases.get(p) for p in PHASES},
        "exposed_transfer_s": result.exposed_transfer_s,
        **{f"peak_{t}_bytes": result.peak_bytes[t] for t in TIERS},
        **{f"reserved_{t}_bytes": result.reserved_bytes[t] for t in TIERS},
        **{f"capacity_{t}_bytes": result.capacity_bytes[t] for t in TIERS},
        "bottleneck": result.bottleneck() if result.fits else None,
        "reason": result.reason,
    }
    return row


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """Rows (same keys) as CSV text with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else [])
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
