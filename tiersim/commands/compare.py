"""``tiersim compare A.parquet B.parquet``: two sweeps' results side by side.

Each file has one row per run as ``tiersim sweep`` writes it: factor columns named by dotted
path (``training.global_batch``, ``hardware.nvme.count``), ``strategy``, ``fits``,
``iteration_time_s``, phase seconds and peak/capacity bytes per tier. Rows are matched on the
factor columns both files share plus ``strategy`` (or on ``--on`` columns); factors only one
file has are shown beside. Each matched row gives both iteration times, B - A and B / A (and,
in JSON and CSV, both times of each phase); the summary counts matched and unmatched rows and
the geometric mean of B / A where both fit.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tiersim.analysis.report import TABLE_WIDTH, format_table
from tiersim.commands.options import add_format
from tiersim.errors import ConfigError
from tiersim.jsonout import plain, plain_records

METRICS = ("fits", "iteration_time_s", "forward_s", "backward_s", "optimizer_step_s")


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``compare``'s arguments to its parser."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("a", type=Path, help="first results.parquet (the baseline)")
    parser.add_argument("b", type=Path, help="second results.parquet")
    parser.add_argument("--on", action="append", default=[], metavar="COLUMN",
                        help="match on this column (repeatable); default: shared factor columns + strategy")
    add_format(parser, "table", "json", "csv")
    parser.set_defaults(func=compare_command)


def read_results(path: Path) -> pd.DataFrame:
    """A sweep's results.parquet; a missing or malformed file is a ConfigError."""
    if not path.is_file():
        raise ConfigError(str(path), "", "no such file")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        raise ConfigError(str(path), "", f"cannot read as parquet ({type(exc).__name__})") from None
    for column in ("strategy", "fits", "iteration_time_s"):
        if column not in frame.columns:
            raise ConfigError(str(path), column, "required column is missing (expected a tiersim sweep result)")
    return frame


def factor_columns(frame: pd.DataFrame) -> list[str]:
    """Columns named by dotted path (the sweep's factors), in file order."""
    return [c for c in frame.columns if "." in str(c)]


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, on: Sequence[str] = (), names: tuple[str, str] = ("A", "B"),
                   ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Matched rows (keys, A and B metrics, delta and ratio) and a summary dict."""
    keys = _match_keys(a, b, on, names)
    only_a = [c for c in factor_columns(a) if c not in keys]
    only_b = [c for c in factor_columns(b) if c not in keys]
    metrics = [m for m in METRICS if m in a.columns and m in b.columns]
    left = a[keys + only_a + metrics].copy()
    right = b[keys + only_b + metrics].copy()
    left["_a"] = True
    right["_b"] = True
    merged = left.merge(right, on=keys, how="outer", suffixes=(f" {names[0]}", f" {names[1]}"))
    both = merged[merged["_a"].eq(True) & merged["_b"].eq(True)].copy()
    fits_a, fits_b = _add_changes(both, names)
    summary = {"keys": keys, "only_in_a_factors": only_a, "only_in_b_factors": only_b,
               **_counts(merged, both, fits_a, fits_b)}
    columns = keys + only_a + only_b + _metric_columns(metrics, names)
    both = both[[c for c in columns if c in both.columns]].reset_index(drop=True)
    return both, summary


def _add_changes(both: pd.DataFrame, names: tuple[str, str]) -> tuple[pd.Series, pd.Series]:
    """Add ``delta_s`` (B - A, s) and ``ratio`` (B / A) of the iteration times where both runs
    fit (None elsewhere) to the matched rows; returns whether each file's run fits."""
    fits_a, fits_b = (both[f"fits {n}"].fillna(False).astype(bool) for n in names)
    ta, tb = (both[f"iteration_time_s {n}"] for n in names)
    both_fit = fits_a & fits_b
    both["delta_s"] = [tb_ - ta_ if ok else None for ok, ta_, tb_ in zip(both_fit, ta, tb)]
    both["ratio"] = [tb_ / ta_ if ok and ta_ else None for ok, ta_, tb_ in zip(both_fit, ta, tb)]
    return fits_a, fits_b


def _counts(merged: pd.DataFrame, both: pd.DataFrame, fits_a: pd.Series, fits_b: pd.Series) -> dict[str, Any]:
    """The summary's counts: rows matched, in one file only, fitting in both, changing fit;
    and the geometric mean of B / A where both fit (None without one)."""
    ratios = [r for r in both["ratio"] if r is not None and r > 0]
    return {
        "matched_rows": int(len(both)),
        "only_in_a_rows": int((merged["_a"].eq(True) & ~merged["_b"].eq(True)).sum()),
        "only_in_b_rows": int((merged["_b"].eq(True) & ~merged["_a"].eq(True)).sum()),
        "both_fit": int((fits_a & fits_b).sum()),
        "fits_changed": int((fits_a != fits_b).sum()),
        "geomean_ratio": math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None,
    }


def _match_keys(a: pd.DataFrame, b: pd.DataFrame, on: Sequence[str], names: tuple[str, str]) -> list[str]:
    """The columns rows are matched on: ``on`` (each in both files), else the factor columns
    both files share and ``strategy``."""
    if not on:
        return [c for c in factor_columns(a) if c in set(factor_columns(b))] + ["strategy"]
    for label, frame in zip(names, (a, b)):
        missing = [k for k in on if k not in frame.columns]
        if missing:
            raise ConfigError(label, "--on", f"column {missing[0]!r} is not in this file")
    return list(on)


def _metric_columns(metrics: Sequence[str], names: tuple[str, str]) -> list[str]:
    """The compared columns after the keys and factors: fits and iteration time of each file,
    delta and ratio, then each phase both files have, A's then B's."""
    first, second = names
    columns = [f"fits {first}", f"fits {second}", f"iteration_time_s {first}", f"iteration_time_s {second}",
               "delta_s", "ratio"]
    for phase in ("forward_s", "backward_s", "optimizer_step_s"):
        if phase in metrics:
            columns += [f"{phase} {first}", f"{phase} {second}"]
    return columns


def compare_command(args: argparse.Namespace) -> int:
    """Read both tables, match, print the comparison."""
    a, b = read_results(args.a), read_results(args.b)
    frame, summary = compare_frames(a, b, args.on)
    summary = {"a": str(args.a), "b": str(args.b), **summary}
    if args.format == "json":
        print(json.dumps(plain({"summary": summary, "rows": plain_records(frame)}), indent=2))
        return 0
    if args.format == "csv":
        print(frame.to_csv(index=False), end="")
        return 0
    print(f"A: {args.a}\nB: {args.b}\nmatched on: {', '.join(summary['keys'])}")
    phase_columns = [f"{p} {n}" for p in ("forward_s", "backward_s", "optimizer_step_s") for n in ("A", "B")]
    table = frame.drop(columns=[c for c in phase_columns if c in frame.columns])  # in --format json/csv
    short = [h.replace("iteration_time_s", "iter_s") for h in table.columns]
    print(format_table(short, [[_cell(v) for v in row] for row in table.itertuples(index=False)]))
    geo = summary["geomean_ratio"]
    print(textwrap.fill(f"{summary['matched_rows']} matched ({summary['both_fit']} fit in both, "
                        f"{summary['fits_changed']} change fit), {summary['only_in_a_rows']} only in A, "
                        f"{summary['only_in_b_rows']} only in B; geometric mean B/A "
                        f"{'-' if geo is None else f'{geo:.4g}'}", TABLE_WIDTH))
    return 0


def _cell(value: Any) -> str:
    value = plain(value)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
