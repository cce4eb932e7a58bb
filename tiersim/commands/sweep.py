"""``tiersim sweep SWEEP.yaml``: run a base scenario over a grid or list of factor values.

Runs on a local process pool (``--jobs N``; 1 = in this process) or on an existing Dask
cluster (``--scheduler tcp://HOST:8786``). Rows stream into DIR/parts/*.parquet as runs finish
and end up, in point order, in DIR/results.parquet; after Ctrl-C (exit 130) or a crash,
``--resume`` runs only what is missing. See ``tiersim.sweep_points`` for the sweep file format.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tiersim.report import format_table, seconds

TABLE_ROWS = 40


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``sweep`` to the CLI."""
    parser = subparsers.add_parser("sweep", help="run a scenario over a grid or list of factor values",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_file", metavar="SWEEP.yaml", help="sweep file: base scenario plus grid or points")
    parser.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="local worker processes (default: one per CPU; 1 runs in this process)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run on this Dask distributed scheduler (e.g. tcp://10.0.0.5:8786) instead")
    parser.add_argument("--out", type=Path, metavar="DIR", default=None,
                        help="where parts/ and results.parquet go (default: out/sweep-NAME)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already stored in DIR and run only the rest")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a base scenario field by dotted path, e.g. training.global_batch=64")
    parser.add_argument("--format", choices=("table", "csv", "json", "none"), default="table",
                        help="what to print when done (the Parquet file is always written)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.add_argument("--chunk-size", type=int, default=None, metavar="RUNS",
                        help="runs per worker task and per part file (default: automatic, at most 32)")
    parser.set_defaults(func=sweep_command)


def sweep_command(args: argparse.Namespace) -> int:
    """Plan (validating every point), run, store, print a summary."""
    from tiersim.sweep_points import load_sweep
    from tiersim.sweeper import SweepInterrupted, run_sweep

    out = args.out
    if out is None:
        out = Path("out") / f"sweep-{load_sweep(args.sweep_file, args.overrides).name}"
    progress = not args.quiet and sys.stderr.isatty()
    try:
        outcome = run_sweep(args.sweep_file, jobs=args.jobs, scheduler=args.scheduler, out=out,
                            resume=args.resume, overrides=args.overrides, progress=progress,
                            chunk_size=args.chunk_size)
    except SweepInterrupted as exc:
        again = " ".join(["tiersim", "sweep", args.sweep_file, "--out", str(out), "--resume",
                          *[f"--set {o}" for o in args.overrides]])
        print(f"tiersim: interrupted: {exc.saved} of {exc.total} runs saved in {out / 'parts'}; "
              f"continue with: {again}", file=sys.stderr)
        return 130
    frame = outcome.frame
    line = (f"sweep: {outcome.sweep.name}: {outcome.total} runs ({outcome.resumed} resumed, "
            f"{outcome.computed} computed {outcome.where}) in {outcome.seconds:.1f} s -> {outcome.results}")
    if args.format == "csv":
        print(frame.to_csv(index=False), end="")
        print(line, file=sys.stderr)
    elif args.format == "json":
        rows = [{k: _clean(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
        print(json.dumps({"sweep": outcome.sweep.name, "results": str(outcome.results), "runs": outcome.total,
                          "resumed": outcome.resumed, "rows": rows}, indent=2))
    elif args.format == "none":
        print(line, file=sys.stderr)
    else:
        print(line)
        factors = [k for k in outcome.sweep.factors if k in frame.columns and k != "strategy"]
        headers = ["point", "strategy", *factors, "fits", "iteration_s", "bottleneck / reason"]
        rows = []
        for rec in frame.head(TABLE_ROWS).to_dict(orient="records"):
            fits = bool(rec["fits"])
            rows.append([rec["point"], rec["strategy"], *[_cell(rec[k]) for k in factors], "yes" if fits else "NO",
                         seconds(_clean(rec["iteration_time_s"])), rec["bottleneck"] if fits else rec["reason"]])
        print(format_table(headers, rows))
        if len(frame) > TABLE_ROWS:
            print(f"... {len(frame) - TABLE_ROWS} more rows in {outcome.results}")
    return 0


def _clean(value: object) -> object:
    if hasattr(value, "item"):
        value = value.item()  # numpy scalar -> Python
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _cell(value: object) -> object:
    """A factor value for the table: integral floats (ints next to missing values) as ints."""
    value = _clean(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
