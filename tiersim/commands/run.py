"""``tiersim run SCENARIO.yaml``: simulate one iteration under each strategy and report it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tiersim.analysis.figure_export import add_plot_arguments, check_target
from tiersim.analysis.report import csv_text, flat_row, results_table
from tiersim.commands.options import add_format, add_model, add_overrides, add_strategy, flags, output_folder
from tiersim.config.bundled import resolve
from tiersim.config.document import load_scenario
from tiersim.config.limits import MAX_RUN_SECONDS, MAX_TASKS, NOTICE_TASKS
from tiersim.config.scenario import RunConfig
from tiersim.config.worksize import check_traced, describe, run_tasks
from tiersim.errors import ConfigError
from tiersim.results import Result
from tiersim.simulate import simulate

DEFAULT_SCENARIO = "quickstart"
"""The bundled scenario ``run --model NAME`` runs the model in when no scenario is named."""


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``run``'s arguments to its parser."""
    parser.add_argument("scenario", nargs="?", default=None,
                        help="scenario YAML file (or the name of a bundled one, e.g. quickstart); with --model "
                             f"alone, the {DEFAULT_SCENARIO} scenario's training and hardware")
    add_model(parser)
    add_strategy(parser)
    add_overrides(parser)
    parser.add_argument("--ds-config", type=Path, metavar="ds_config.json",
                        help="take the ZeRO, offload, aio, batch and precision settings from this DeepSpeed "
                             "config, read as DeepSpeed reads it (--set still wins); \"auto\" is filled from the "
                             "scenario as the Hugging Face Trainer fills it, and a key tiersim does not model is "
                             "refused by name (docs/guide/deepspeed-config.md)")
    add_format(parser, "table", "json", "csv")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write summary, resolved configs and traces to DIR")
    parser.add_argument("--trace-format", choices=("csv", "parquet"), default="csv",
                        help="file format of traces written with --out")
    add_plot_arguments(parser, "a report: phase bars, and per fitted strategy its critical path (HTML only), "
                               "timeline (Gantt) and utilisation")
    parser.add_argument("--force", action="store_true",
                        help=f"run past the limits of {MAX_TASKS:,} tasks and {MAX_RUN_SECONDS:g} s per run "
                             "(see tiersim.config.limits)")
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Load, simulate each strategy, print in the chosen format, optionally write files."""
    configs = load_scenario(resolve(scenario_argument(args), "scenarios"), args.overrides, args.strategy,
                            args.force, args.ds_config, args.model)
    with flags(path="--plot"):
        check_target(args.plot)
    scenario = configs[0].scenario
    check_traces(args, configs)
    tasks = sum(run_tasks(config) for config in configs)
    if tasks >= NOTICE_TASKS:
        print(f"tiersim: {scenario}: {describe(len(configs), tasks)}", file=sys.stderr)
    traced = args.out is not None or args.plot is not None  # both write the per-task trace
    results = [simulate(config, trace=traced) for config in configs]
    if args.out is not None:
        written = write_outputs(args.out, scenario, results, args.trace_format)
        print(f"tiersim: wrote {len(written)} files to {args.out}: {', '.join(p.name for p in written)}",
              file=sys.stderr)
    if args.plot is not None:
        from tiersim.analysis.plots import write_report

        fitted = [r.strategy for r in results if r.fits]
        with flags(path="--plot", results="--plot"):
            path = write_report(results, args.plot, plotlyjs=args.plotlyjs)
        print(f"tiersim: wrote {path} (phase bars; critical path, timeline and utilisation of "
              f"{', '.join(fitted)})", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({"scenario": scenario, "results": [r.summary() for r in results]}, indent=2))
    elif args.format == "csv":
        print(csv_text([flat_row(scenario, r) for r in results]), end="")
    else:
        print(f"scenario: {scenario}")
        print(results_table(results))
    return 0


def check_traces(args: argparse.Namespace, configs: list[RunConfig]) -> None:
    """Unless ``--force``, refuse (naming ``--out`` or ``--plot``) runs too long to simulate in
    full for the per-task trace those write."""
    if args.force or (args.out is None and args.plot is None):
        return
    flag = "--out" if args.out is not None else "--plot"
    for config in configs:
        check_traced(config, flag)


def scenario_argument(args: argparse.Namespace) -> str:
    """The scenario named on the command line, or with ``--model`` alone the bundled
    ``DEFAULT_SCENARIO`` (its training, hardware and strategies)."""
    if args.scenario is not None:
        return str(args.scenario)
    if args.model is None:
        raise ConfigError("run", "scenario", "give a scenario file (or a bundled one's name, e.g. quickstart), "
                                             "or --model NAME to run a model on the quickstart's hardware")
    return DEFAULT_SCENARIO


def write_outputs(out: Path, scenario: str, results: list[Result], trace_format: str) -> list[Path]:
    """summary.json, summary.csv, and per strategy config, trace, utilisation and placement;
    returns the files written."""
    output_folder(out)
    written = [out / "summary.json", out / "summary.csv"]
    written[0].write_text(json.dumps({"scenario": scenario, "results": [r.summary() for r in results]}, indent=2))
    written[1].write_text(csv_text([flat_row(scenario, r) for r in results]))
    for r in results:
        stem = r.strategy
        written.append(out / f"config-{stem}.json")
        written[-1].write_text(json.dumps(r.config.to_dict(), indent=2))
        written.append(out / f"placement-{stem}.csv")
        r.placement.to_csv(written[-1], index=False)
        if not r.fits:
            continue
        written.append(out / f"utilisation-{stem}.csv")
        r.utilisation.to_csv(written[-1], index=False)
        written.append(out / f"trace-{stem}.{trace_format}")
        if trace_format == "parquet":
            r.trace.to_parquet(written[-1], index=False)
        else:
            r.trace.to_csv(written[-1], index=False)
    return written
