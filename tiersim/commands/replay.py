"""``tiersim replay LOG... --system SYSTEM``: measured runs against tiersim's prediction.

Each log is imported as ``import-log`` reads it, completed with the node SYSTEM describes (a
``systems/*.yaml`` file of datasheet parts, or a host profile ``tiersim fit`` wrote), simulated,
and printed beside its steady-state measurement (the mean of iterations 3..N): forward,
backward, optimizer step and iteration, with the error of each ((predicted - measured) /
measured). ``--format json`` prints one object per log with ``measured``, ``predicted`` and
``error``, each holding ``forward_s``, ``backward_s``, ``step_s`` and ``iteration_s``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from tiersim.analysis.report import format_table
from tiersim.commands.options import add_format, add_overrides
from tiersim.fitting.replay import PHASES, Replay, load_node, replay


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``replay``'s arguments to its parser."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("logs", nargs="+", metavar="LOG", help="Megatron-DeepSpeed training log")
    parser.add_argument("--system", required=True, metavar="SYSTEM",
                        help="the node: a system YAML (systems/*.yaml) or a host profile written by tiersim fit")
    add_overrides(parser)
    add_format(parser, "table", "json")
    parser.set_defaults(func=replay_command)


def replay_command(args: argparse.Namespace) -> int:
    """Replay every log (a bad one stops before anything is printed), then print them."""
    node = load_node(args.system)
    replays = [replay(path, node, args.overrides) for path in args.logs]
    if args.format == "json":
        print(json.dumps([_record(r) for r in replays], indent=2))
        return 0
    print(replay_table(replays))
    return 0


def _record(run: Replay) -> dict[str, object]:
    keys = [key for _quantity, key in PHASES]
    return {"log": run.log, "measured": {k: run.measured.get(k) for k in keys},
            "predicted": {k: run.predicted.get(k) for k in keys}, "error": {k: run.error(k) for k in keys}}


def replay_table(replays: Sequence[Replay]) -> str:
    """A row per log and phase: measured and predicted seconds and the error in percent; then the
    mean absolute error of each phase over the logs."""
    rows: list[list[object]] = []
    for run in replays:
        for _quantity, key in PHASES:
            error = run.error(key)
            rows.append([Path(run.log).name if key == PHASES[0][1] else "", key, _seconds(run.measured.get(key)),
                         _seconds(run.predicted.get(key)), "-" if error is None else f"{100 * error:+.1f}%"])
    for _quantity, key in PHASES:
        errors = [abs(e) for run in replays if (e := run.error(key)) is not None]
        if errors:
            rows.append(["mean |error|" if key == PHASES[0][1] else "", key, "", "",
                         f"{100 * sum(errors) / len(errors):.1f}%"])
    return format_table(["log", "phase", "measured_s", "predicted_s", "error"], rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
