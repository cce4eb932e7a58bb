"""Plain-text tables and flat rows for terminal, CSV and JSON output."""

from __future__ import annotations

import csv
import io
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from tiersim.config.hardware import TIERS
from tiersim.results import PHASES, Result

TABLE_WIDTH = 100
"""Columns a table may take (``format_table``)."""
_NARROWEST = 6
"""A wrapped column keeps at least this many characters."""
_TEXT = 24
"""A column of text (cells with spaces) wider than this may go under its row (as may the last)."""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int = TABLE_WIDTH) -> str:
    """Left-aligned text columns separated by two spaces, with a rule under the header, at most
    ``width`` characters wide. A table too wide moves its last column and its text columns,
    rightmost first, onto indented ``header: value`` lines under each row when that is enough;
    otherwise its headers wrap (after a space, dot, underscore or slash), then, if need be,
    those columns move and the widest column is narrowed and its cells wrap too."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    kept, shown, below = _columns(cells, width)
    indent = " " * (shown[0] + 2 if shown else 0)
    lines = _row_lines(cells[0], kept, shown)
    lines.append("  ".join("-" * w for w in shown))
    for row in cells[1:]:
        lines += _row_lines(row, kept, shown)
        lines += [textwrap.fill(f"{cells[0][i]}: {row[i]}", width, initial_indent=indent,
                                subsequent_indent=indent + "  ")
                  for i in sorted(below) if row[i] not in ("", "-")]
    return "\n".join(lines)


def _columns(cells: list[list[str]], width: int) -> tuple[list[int], list[int], list[int]]:
    """How ``format_table`` lays out ``cells`` (the header row first): the columns kept in the
    row, their widths, and the columns moved under each row."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    floors = [max([len(row[i]) for row in cells[1:]] + [len(p) for p in _pieces(cells[0][i])])
              for i in range(len(widths))]
    movable = _movable(cells, widths)
    below = _moved(widths, movable, width)
    if _total(widths, below) > width:
        below = [] if _total(floors, []) <= width else _moved(floors, movable, width)
    kept = [i for i in range(len(widths)) if i not in below]
    shown = _capped([widths[i] for i in kept], [floors[i] for i in kept], width)  # wrap headers first
    shown = _capped(shown, [_NARROWEST] * len(shown), width)  # then cells
    return kept, shown, below


def _movable(cells: list[list[str]], widths: Sequence[int]) -> list[int]:
    """The columns that may go under their rows, rightmost first: the last, and text columns
    (cells with spaces) wider than ``_TEXT``; never the first."""
    last = len(widths) - 1
    return [i for i in range(last, 0, -1)
            if i == last or (widths[i] > _TEXT and any(" " in row[i] for row in cells[1:]))]


def _row_lines(row: Sequence[str], kept: Sequence[int], shown: Sequence[int]) -> list[str]:
    """The lines of one row: its ``kept`` cells wrapped to the ``shown`` widths, side by side."""
    wrapped = [_wrap(row[i], w) for i, w in zip(kept, shown)]
    lines = []
    for depth in range(max(len(parts) for parts in wrapped)):
        parts = [p[depth] if depth < len(p) else "" for p in wrapped]
        lines.append("  ".join(c.ljust(w) for c, w in zip(parts, shown)).rstrip())
    return lines


def _capped(widths: list[int], floors: Sequence[int], width: int) -> list[int]:
    """Column widths capped at the largest common cap that makes the table fit ``width``; no
    column goes below its floor (or grows), so a table may stay too wide."""
    least = [min(w, f) for w, f in zip(widths, floors)]
    capped = list(widths)
    cap = max(widths, default=0)
    while _total(capped, []) > width and capped != least:
        cap -= 1
        capped = [min(w, max(f, cap)) for w, f in zip(widths, floors)]
    return capped


def _moved(widths: Sequence[int], movable: Sequence[int], width: int) -> list[int]:
    """The fewest of ``movable`` (in order) to take out so that the rest fit in ``width``."""
    below: list[int] = []
    for i in movable:
        if _total(widths, below) <= width:
            break
        below.append(i)
    return below


def _total(widths: Sequence[int], left_out: Sequence[int]) -> int:
    """Characters of a table row with these column widths (but those left out)."""
    kept = [w for i, w in enumerate(widths) if i not in left_out]
    return sum(kept) + 2 * max(0, len(kept) - 1)


def _pieces(text: str) -> list[str]:
    """``text`` cut after each space, dot, underscore or slash (where a line may break)."""
    return [p for p in re.split(r"(?<=[ ._/])", text) if p]


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after a space, dot, underscore
    or slash where it can be (one empty line for no text)."""
    lines = [""]
    for piece in _pieces(text):
        while len(piece) > width:  # a piece longer than a line is cut
            room = width - len(lines[-1])
            lines[-1] += piece[:room]
            lines.append("")
            piece = piece[room:]
        if len((lines[-1] + piece).rstrip()) > width:
            lines.append("")
        lines[-1] += piece if lines[-1] or not piece.isspace() else ""
    return [line.rstrip() for line in lines if line.strip()] or [""]


def seconds(value: float | None) -> str:
    """Seconds with 4 significant digits, or '-'."""
    return "-" if value is None else f"{value:.4g}"


def gigabytes(num_bytes: int) -> str:
    """Bytes as decimal GB with one decimal, '-' for zero."""
    return f"{num_bytes / 1e9:.1f}" if num_bytes else "-"


def results_table(results: Sequence[Result]) -> str:
    """One row per strategy: times (s), GB each tier holds (reserved: what decides the fit), and
    the bottleneck or why it does not fit."""
    headers = ["strategy", "fits", "iter_s", "forward_s", "backward_s", "step_s", "exposed_s",
               *[f"{tier}_GB" for tier in TIERS], "bottleneck / reason"]
    rows = []
    for r in results:
        phases = r.phases or {}
        rows.append([r.strategy, "yes" if r.fits else "NO", seconds(r.iteration_time_s),
                     *[seconds(phases.get(p)) for p in PHASES], seconds(r.exposed_transfer_s),
                     *[gigabytes(r.reserved_bytes[t]) for t in TIERS], r.bottleneck() if r.fits else r.reason])
    return format_table(headers, rows)


_PHASE_COLUMNS = tuple(f"{phase}_s" for phase in PHASES)
_TIER_COLUMNS = tuple(tuple(f"{prefix}_{tier}_bytes" for tier in TIERS) for prefix in ("peak", "reserved", "capacity"))
"""``flat_row``'s column names, formatted once (a sweep makes a row of every run)."""


def flat_row(scenario: str, result: Result) -> dict[str, Any]:
    """A result as one flat record (CSV/Parquet): seconds and bytes, None where it does not fit."""
    phases = result.phases or {}
    row: dict[str, Any] = {"scenario": scenario, "strategy": result.strategy, "fits": result.fits,
                           "iteration_time_s": result.iteration_time_s}
    for column, phase in zip(_PHASE_COLUMNS, PHASES):
        row[column] = phases.get(phase)
    row["exposed_transfer_s"] = result.exposed_transfer_s
    # one loop per column group (the columns' order), each mapping read once
    for columns, by_tier in zip(_TIER_COLUMNS, (result.peak_bytes, result.reserved_bytes, result.capacity_bytes)):
        for column, tier in zip(columns, TIERS):
            row[column] = by_tier[tier]
    row["bottleneck"] = result.bottleneck() if result.fits else None
    row["reason"] = result.reason
    return row


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """Rows (same keys) as CSV text with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else [])
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
