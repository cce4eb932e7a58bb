"""``tiersim reproduce seed|whatif``: run a bundled study, print one table, write a figure.

``seed`` is the seed experiment (scenarios/seed-*.yaml: 20B-70B on 4 GPUs, optimizer state
offloaded to DRAM, DRAM+CXL or NVMe); ``whatif`` the same study on H100 + Gen5 NVMe + a
hypothetical faster CXL device (scenarios/whatif-*.yaml). Writes DIR/<study>.csv and a figure
(stacked phase bars per model, a panel per strategy): DIR/<study>.html, or --plot FILE in the
format of its extension (.html, .png, .svg, .pdf).
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from pathlib import Path

from tiersim.analysis.figure_export import add_plot_arguments, check_target, write_figure
from tiersim.analysis.report import TABLE_WIDTH
from tiersim.analysis.reproduce import (
    MEASURED_DIR,
    STUDIES,
    comparison_table,
    measured_comparison,
    measured_runs,
    phase_figure,
    run_study,
    speedup_table,
    study_scenarios,
    study_table,
)
from tiersim.commands.options import add_format, add_overrides, flags, output_folder
from tiersim.errors import ConfigError
from tiersim.jsonout import plain_records


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``reproduce``'s arguments to its parser."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("study", choices=sorted(STUDIES), help="which study")
    parser.add_argument("--out", type=Path, default=Path("out"), metavar="DIR",
                        help="where to write <study>.html and <study>.csv (default: out/)")
    add_format(parser, "table", "json")
    add_overrides(parser, "a field of every scenario")
    parser.add_argument("--scenarios", type=Path, default=None, metavar="DIR",
                        help="directory holding the study's scenario files (default: the bundled scenarios/)")
    parser.add_argument("--measured", type=Path, default=MEASURED_DIR, metavar="DIR",
                        help="measured runs as `tiersim import-log --out DIR` writes them, compared where they "
                             "ran a study scenario (default: the bundled scenarios/measured/, the study's 70B logs)")
    add_plot_arguments(parser, "the phase-bar figure", default="DIR/<study>.html")
    parser.add_argument("--no-figure", action="store_true", help="do not write the figure")
    parser.set_defaults(func=reproduce_command)


def reproduce_command(args: argparse.Namespace) -> int:
    """Run the study, print it, write the figure and CSV."""
    paths = study_scenarios(args.study, args.scenarios)
    if not paths:
        where = args.scenarios or "scenarios/"
        raise ConfigError(str(where), "--scenarios", f"no {STUDIES[args.study]} scenario files found")
    figure = None if args.no_figure else (args.plot or args.out / f"{args.study}.html")
    with flags(path="--plot"):
        check_target(figure)
    df = run_study(paths, args.overrides)
    speed = speedup_table(df)
    measured = measured_runs(paths, args.overrides, args.measured)
    comparison = measured_comparison(df, measured)
    output_folder(args.out)
    df.to_csv(args.out / f"{args.study}.csv", index=False)
    if figure is not None:
        fig = phase_figure(df, measured if len(measured) else None,
                           title=f"tiersim reproduce {args.study}: iteration time by phase")
        with flags(path="--plot"):
            write_figure(fig, figure, args.plotlyjs)
    if args.format == "json":
        print(json.dumps({"study": args.study, "scenarios": [str(p) for p in paths], "rows": plain_records(df),
                          "speedup": plain_records(speed), "measured": plain_records(comparison)}, indent=2))
    else:
        print(f"study: {args.study} ({len(paths)} scenarios)")
        print(study_table(df))
        if len(comparison):
            print()
            print(f"measured (steady state, {args.measured}) against predicted:")
            print(comparison_table(comparison))
        print()
        print(textwrap.fill("CXL vs NVMe per model: " + "; ".join(
            f"{r.model} {r.cxl_vs_nvme_reduction_pct:.1f}% faster, {r.ordering}"
            for r in speed.itertuples() if r.cxl_vs_nvme_reduction_pct is not None
            and not math.isnan(r.cxl_vs_nvme_reduction_pct)), TABLE_WIDTH))
        if figure is not None:
            print(f"figure: {figure}")
    return 0
