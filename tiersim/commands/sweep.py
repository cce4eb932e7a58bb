"""``tiersim sweep SWEEP.yaml``: run a base scenario over a grid or list of factor values.

Runs on a local process pool (``--jobs N``; 1 = in this process) or on an existing Dask
cluster (``--scheduler tcp://HOST:8786``). Rows stream into DIR/parts/*.parquet as runs finish
and end up, in point order, in DIR/results.parquet; after Ctrl-C (exit 130), SIGTERM (exit
143) or a crash, ``--resume`` runs only what is missing. DIR/sweep.json names the sweep the
folder belongs to: another sweep is never resumed there. A run that fails is a row with its
``error`` and the sweep carries on (exit 1 at the end). See ``tiersim.sweeping.points`` for the
sweep file format and ``tiersim.config.limits`` for the limits ``--force`` lifts.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.analysis.report import format_table, seconds
from tiersim.commands.options import add_format, add_overrides, flags
from tiersim.jsonout import plain, plain_records

if TYPE_CHECKING:
    from tiersim.sweeping.runner import SweepOutcome

TABLE_ROWS = 40


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``sweep``'s arguments to its parser."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("sweep_file", metavar="SWEEP.yaml",
                        help="sweep file: base scenario plus grid or points (or the name of a bundled one)")
    parser.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="local worker processes (default: one per CPU; 1 runs in this process)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run on this Dask distributed scheduler (e.g. tcp://10.0.0.5:8786) instead")
    parser.add_argument("--out", type=Path, metavar="DIR", default=None,
                        help="where parts/ and results.parquet go (default: out/sweep-NAME)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already stored in DIR and run only the rest")
    add_overrides(parser, "a base scenario field")
    add_format(
        parser, "table", "csv", "json", "none", help="what to print when done (the Parquet file is always written)"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        metavar="RUNS",
        help="runs per worker task and per part file (default: automatic, at most 128)",
    )
    parser.add_argument(
        "--force", action="store_true",
        help="run past the limits on runs per sweep, tasks and engine seconds per run, and tasks per sweep"
    )
    parser.set_defaults(func=sweep_command)


def sweep_command(args: argparse.Namespace) -> int:
    """Plan (validating every point), run, store, print a summary."""
    from tiersim.config.bundled import resolve
    from tiersim.sweeping.points import load_sweep

    args.sweep_file = resolve(args.sweep_file, "sweeps")
    out = args.out
    if out is None:
        out = Path("out") / f"sweep-{load_sweep(args.sweep_file, args.overrides, args.force).name}"
    outcome = _run(args, out)
    if isinstance(outcome, int):
        return outcome
    _print_outcome(outcome, args.format)
    if outcome.failed:
        print(
            f"tiersim: {outcome.failed} of {outcome.total} runs failed (their error column says why); "
            f"--resume reruns them",
            file=sys.stderr,
        )
        return 1
    return 0


def _run(args: argparse.Namespace, out: Path) -> SweepOutcome | int:
    """``run_sweep`` as the options say, storing in ``out``; or, when the sweep stopped, the
    exit status, having said how to continue it (a folder another sweep holds is an error)."""
    from tiersim.errors import ConfigError
    from tiersim.sweeping.runner import SweepAborted, SweepInterrupted, run_sweep
    from tiersim.sweeping.store import FolderInUse

    progress = not args.quiet and sys.stderr.isatty()
    with flags(jobs="--jobs", chunk_size="--chunk-size", scheduler="--scheduler", out="--out"):
        try:
            return run_sweep(
                args.sweep_file,
                jobs=args.jobs,
                scheduler=args.scheduler,
                out=out,
                resume=args.resume,
                overrides=args.overrides,
                progress=progress,
                chunk_size=args.chunk_size,
                force=args.force,
                notice=lambda line: print(f"tiersim: {line}", file=sys.stderr),
            )
        except FolderInUse as exc:
            what = "read its results again (nothing is rerun)" if exc.stored == exc.total else "continue it"
            raise ConfigError(
                exc.source,
                exc.field,
                f"{exc.message}; to {what}: {_again(args, out)}; to run it afresh: another --out, or delete {out}",
            ) from None
        except SweepInterrupted as exc:
            how = "terminated" if exc.signum == signal.SIGTERM else "interrupted"
            print(
                f"tiersim: {how}: {exc.saved} of {exc.total} runs saved in {out / 'parts'}; "
                f"continue with: {_again(args, out)}",
                file=sys.stderr,
            )
            return 128 + int(exc.signum)
        except SweepAborted as exc:
            print(
                f"tiersim: error: sweep stopped: {exc.reason}; {exc.saved} of {exc.total} runs saved in "
                f"{out / 'parts'}; continue with: {_again(args, out)}",
                file=sys.stderr,
            )
            return 1


def _print_outcome(outcome: SweepOutcome, form: str) -> None:
    """The rows in ``form`` (csv, json, none, table) and a line saying what ran (on stderr
    beside csv and none)."""
    frame = outcome.frame
    line = (
        f"sweep: {outcome.sweep.name}: {outcome.total} runs ({outcome.resumed} resumed, "
        f"{outcome.computed} computed {outcome.where}) in {outcome.seconds:.1f} s -> {outcome.results}"
    )
    if form == "csv":
        print(frame.to_csv(index=False), end="")
        print(line, file=sys.stderr)
    elif form == "json":
        print(
            json.dumps(
                {
                    "sweep": outcome.sweep.name,
                    "results": str(outcome.results),
                    "runs": outcome.total,
                    "resumed": outcome.resumed,
                    "rows": plain_records(frame),
                },
                indent=2,
            )
        )
    elif form == "none":
        print(line, file=sys.stderr)
    else:
        print(line)
        print(_rows_table(outcome))
        if len(frame) > TABLE_ROWS:
            print(f"... {len(frame) - TABLE_ROWS} more rows in {outcome.results}")


def _rows_table(outcome: SweepOutcome) -> str:
    """The first ``TABLE_ROWS`` rows as a table: point, strategy, factors, fits, iteration
    time (s), and the bottleneck, the reason it does not fit, or the error."""
    frame = outcome.frame
    factors = [k for k in outcome.sweep.factors if k in frame.columns and k != "strategy"]
    headers = ["point", "strategy", *factors, "fits", "iteration_s", "bottleneck / reason"]
    rows = []
    for rec in frame.head(TABLE_ROWS).to_dict(orient="records"):
        error = plain(rec.get("error"))
        fits = bool(plain(rec.get("fits")))
        verdict = "ERROR" if error else "yes" if fits else "NO"
        why = error or (rec.get("bottleneck") if fits else rec.get("reason"))
        rows.append(
            [
                rec["point"],
                rec["strategy"],
                *[_cell(rec[k]) for k in factors],
                verdict,
                seconds(plain(rec.get("iteration_time_s"))),
                why,
            ]
        )
    return format_table(headers, rows)


def _again(args: argparse.Namespace, out: Path) -> str:
    """The command that resumes this sweep in ``out``."""
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    return " ".join(
        [
            "tiersim",
            "sweep",
            args.sweep_file,
            "--out",
            str(out),
            *jobs,
            "--resume",
            *[f"--set {o}" for o in args.overrides],
            *(["--force"] if args.force else []),
        ]
    )


def _cell(value: object) -> object:
    """A factor value for the table: integral floats (ints next to missing values) as ints."""
    value = plain(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
