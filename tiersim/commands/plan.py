"""``tiersim plan SCENARIO.yaml --objective fastest|cheapest|largest-model``: capacity planning.

largest-model: per strategy, the largest model that fits the scenario's hardware (deepening the
scenario's model at fixed width, or ``--scale ladder``: Llama-2-style 7B/13B/20B/30B/34B/52B/
70B/100B/175B), with the tier that stops the next step. ``--nodes``, ``--tensor-parallel`` and
``--pipeline-parallel`` search those layouts too (data parallelism is what they leave; each keeps
the scenario's micro-batch and micro-steps per rank), and the answer names the layout chosen.
fastest: strategies x tier sizing (DRAM GiB per socket, CXL devices, NVMe drives) ranked by
iteration time. cheapest: those that
meet ``--max-iteration-time`` (and ``--budget``) ranked by hardware cost; ``--policies``,
``--ratios`` and ``--offload-param`` try those strategy options too, and the table ends with the
candidate chosen and why. Prices are the profiles' ``price_usd`` (edit them; each is cited).
Cost per iteration amortises the hardware over ``--lifetime-years`` of continuous use. Each row
names its binding constraint.

--plot FILE draws the answer (.html, .png, .svg, .pdf by extension): for fastest and cheapest,
hardware cost against iteration time of every candidate, the Pareto front marked and the binding
constraint as colour; for largest-model, the memory each tier holds against model size per
strategy, with each tier's capacity.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pandas as pd

from tiersim.analysis import plan, plan_layouts
from tiersim.analysis.figure_export import add_plot_arguments, check_target, write_figure
from tiersim.analysis.report import TABLE_WIDTH, format_table
from tiersim.commands.options import add_format, add_model, add_overrides, add_strategy, flags
from tiersim.config.bundled import resolve
from tiersim.errors import ConfigError
from tiersim.jsonout import plain_records

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

SIZING_COLUMNS = [("rank", "rank"), ("strategy", "strategy"), ("dram_gib_per_socket", "dram_GiB/socket"),
                  ("cxl_devices", "cxl"), ("nvme_drives", "nvme"), ("iteration_time_s", "iteration_s"),
                  ("optimizer_step_s", "step_s"), ("cost_usd", "cost_usd"),
                  ("cost_per_iteration_usd", "usd/iter"), ("binding", "binding constraint"),
                  ("excluded", "excluded")]
MODEL_COLUMNS = [("rank", "rank"), ("strategy", "strategy"), ("model", "model"), ("layers", "layers"),
                 ("hidden", "hidden"), ("params_b", "params_B"), ("iteration_time_s", "iteration_s"),
                 ("cost_per_iteration_usd", "usd/iter"), ("next_step", "next step"),
                 ("next_binding", "next step binding constraint")]


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``plan``'s arguments to its parser."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("scenario", help="scenario YAML file (or the name of a bundled one)")
    add_model(parser)
    parser.add_argument("--objective", choices=plan.OBJECTIVES, required=True)
    add_strategy(parser)
    add_overrides(parser)
    parser.add_argument("--budget", type=float, metavar="USD", help="hardware cost limit (fastest, cheapest)")
    parser.add_argument("--max-iteration-time", type=float, metavar="S",
                        help="iteration-time target in seconds (cheapest; also filters fastest)")
    parser.add_argument("--dram-gib", default=",".join(str(g) for g in plan.DEFAULT_DRAM_GIB), metavar="LIST",
                        help="DRAM GiB per socket to try (default %(default)s)")
    parser.add_argument("--cxl-counts", default=",".join(str(c) for c in plan.DEFAULT_CXL_COUNTS), metavar="LIST",
                        help="CXL device counts to try for the cxl strategy (default %(default)s)")
    parser.add_argument("--policies", default="", metavar="LIST",
                        help="host memory policies to try for the cxl strategy (bind, preferred, interleave, "
                             "weighted-interleave: numactl -m, -p, -i, -w; default: the scenario's)")
    parser.add_argument("--ratios", default="", metavar="LIST",
                        help="partial-offload ratios to try for dram and cxl (offload_optimizer.ratio, 0 to 1; "
                             "default: the scenario's)")
    parser.add_argument("--offload-param", default="", metavar="LIST",
                        help="parameter offload to try for every strategy: none, cpu, nvme (offload_param.device; "
                             "default: the scenario's)")
    parser.add_argument("--nvme-counts", default=",".join(str(c) for c in plan.DEFAULT_NVME_COUNTS),
                        metavar="LIST", help="NVMe drive counts to try for the nvme strategy (default %(default)s)")
    parser.add_argument("--scale", choices=("layers", "ladder"), default="layers",
                        help="largest-model: deepen the scenario's model, or try the standard ladder")
    for flag, what in (("--nodes", "node counts"), ("--tensor-parallel", "tensor-parallel degrees"),
                       ("--pipeline-parallel", "pipeline-parallel degrees")):
        parser.add_argument(flag, default="", metavar="LIST",
                            help=f"largest-model: {what} to search (default: the scenario's)")
    parser.add_argument("--max-layers", type=int, default=plan.DEFAULT_MAX_LAYERS,
                        help="largest-model --scale layers: stop searching here (default %(default)s)")
    parser.add_argument("--lifetime-years", type=float, default=plan.DEFAULT_LIFETIME_YEARS,
                        help="amortisation period for cost per iteration (default %(default)s)")
    parser.add_argument("--top", type=int, default=None, metavar="N", help="table: only the first N rows")
    add_format(parser, "table", "json")
    add_plot_arguments(parser, "a picture of the answer (see above)")
    parser.add_argument("--force", action="store_true",
                        help="simulate candidates past the limits of tasks and engine seconds per run")
    parser.set_defaults(func=plan_command)


PLANNER_FLAGS = {name: "--" + name.replace("_", "-") for name in (
    "dram_gib", "cxl_counts", "nvme_counts", "policies", "ratios", "offload_param", "budget", "max_iteration_time",
    "lifetime_years", "objective", "scale", "max_layers", "nodes", "tensor_parallel", "pipeline_parallel")}
"""The planner's parameters by the flags that give them."""


def plan_command(args: argparse.Namespace) -> int:
    """Read the scenario, run the chosen planner, print a ranked table or JSON (and the picture
    with --plot); exit 1 (naming the nearest miss) when no candidate meets the constraints."""
    if args.top is not None and args.top < 1:
        raise ConfigError("plan", "--top", f"must be at least 1, got {args.top}")
    scenario = plan.read_scenario(resolve(args.scenario, "scenarios"), args.overrides, args.force, args.model)
    with flags(path="--plot"):
        check_target(args.plot)
    if args.objective == "largest-model":
        frame, columns = _largest(scenario, args)
        varied = list[str]()
    else:
        _check_layout_flags(args)
        frame, columns, varied = _sizing(scenario, args)
    name = str(scenario.data.get("name", scenario.source))
    if args.plot is not None:
        with flags(path="--plot", frame="--plot"):
            path = write_figure(plan_figure(scenario, frame, args), args.plot, args.plotlyjs)
        print(f"tiersim: wrote {path}", file=sys.stderr)
    answered = not frame["fits"].eq(False).all() if args.objective == "largest-model" else \
        not frame["rank"].isna().all()
    _print_answer(frame, columns, varied, name, args)
    if answered:
        return 0
    if args.objective == "largest-model":
        print("tiersim: no answer: no strategy fits even one layer on this hardware", file=sys.stderr)
    else:
        miss = plan.nearest_miss(frame, args.budget, args.max_iteration_time)
        print(f"tiersim: no answer: no candidate meets the constraints; {miss}", file=sys.stderr)
    return 1


def _print_answer(frame: pd.DataFrame, columns: list[tuple[str, str]], varied: list[str], name: str,
                  args: argparse.Namespace) -> None:
    """The answer as JSON, or as a table followed, for fastest and cheapest, by the line saying
    which candidate was chosen and why (``varied``: the options named in it)."""
    if args.format == "json":
        print(json.dumps({"scenario": name, "objective": args.objective, "lifetime_years": args.lifetime_years,
                          "budget_usd": args.budget, "max_iteration_time_s": args.max_iteration_time,
                          **_chosen_json(frame), "rows": plain_records(frame)}, indent=2))
        return
    shown = frame.head(args.top) if args.top is not None else frame
    print(f"scenario: {name}  objective: {args.objective}")
    print(format_table([h for _c, h in columns], [[_cell(c, row[c]) for c, _h in columns]
                                                  for row in shown.to_dict(orient="records")]))
    choice = _choice(frame, args.objective, varied)
    if choice is not None:
        print(textwrap.fill(choice, TABLE_WIDTH, subsequent_indent="  ", break_long_words=False))


LAYOUT_FLAGS = {"nodes": "--nodes", "tensor_parallel": "--tensor-parallel", "pipeline_parallel": "--pipeline-parallel"}
"""The layout flags of largest-model, by the training or hardware field each varies."""
LAYOUT_COLUMNS = [("nodes", "nodes"), ("tensor_parallel", "TP"), ("pipeline_parallel", "PP"), ("data_parallel", "DP")]


def _largest(scenario: plan.Scenario, args: argparse.Namespace) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The ``largest-model`` answer and its table's columns: over the layouts the flags give, or
    on the scenario's own layout when none does."""
    if args.budget is not None or args.max_iteration_time is not None:
        raise ConfigError("plan", "--budget/--max-iteration-time",
                          "apply to --objective fastest or cheapest, not largest-model")
    with flags(**PLANNER_FLAGS):
        if not any(getattr(args, key).strip() for key in LAYOUT_FLAGS):
            frame = plan.plan_largest_model(scenario, args.strategy, args.scale, args.max_layers, args.lifetime_years)
            return frame, MODEL_COLUMNS
        given = {key: plan.parse_list(getattr(args, key), flag, int) if getattr(args, key).strip() else
                 [int(scenario.document.get(_LAYOUT_PATHS[key], 1))] for key, flag in LAYOUT_FLAGS.items()}
        candidates = plan_layouts.layouts(given["nodes"], given["tensor_parallel"], given["pipeline_parallel"])
        frame = plan_layouts.plan_largest_layout(scenario, candidates, args.strategy, args.scale, args.max_layers,
                                                 args.lifetime_years)
    shown = [column for column in MODEL_COLUMNS[2:] if column[0] not in ("hidden", "cost_per_iteration_usd")]
    return frame, [*MODEL_COLUMNS[:2], *LAYOUT_COLUMNS, *shown, ("excluded", "excluded")]


_LAYOUT_PATHS = {"nodes": "hardware.nodes", "tensor_parallel": "training.tensor_parallel",
                 "pipeline_parallel": "training.pipeline_parallel"}


def _check_layout_flags(args: argparse.Namespace) -> None:
    """The layout flags search the largest model only."""
    given = [flag for key, flag in LAYOUT_FLAGS.items() if getattr(args, key).strip()]
    if given:
        raise ConfigError("plan", given[0], "searches layouts for --objective largest-model only (for fastest "
                                            "or cheapest, set the layout with --set)")


def _choice(frame: pd.DataFrame, objective: str, varied: list[str]) -> str | None:
    """The line saying which candidate was chosen and why (largest-model: only over layouts)."""
    if objective != "largest-model":
        return plan.chosen(frame, objective, varied)
    return plan_layouts.chosen_layout(frame) if "tensor_parallel" in frame.columns else None


def _chosen_json(frame: pd.DataFrame) -> dict[str, Any]:
    """``{"chosen": row}``: the layout a largest-model search over layouts chose (None: none fits)."""
    if "tensor_parallel" not in frame.columns:
        return {}
    fitting = [row for row in plain_records(frame) if row["fits"] is True]
    return {"chosen": fitting[0] if fitting else None}


def _sizing(scenario: plan.Scenario,
            args: argparse.Namespace) -> tuple[pd.DataFrame, list[tuple[str, str]], list[str]]:
    """The ``fastest``/``cheapest`` answer, its table's columns (an option's where ``--policies``,
    ``--ratios`` or ``--offload-param`` varies it) and the options varied."""
    with flags(**PLANNER_FLAGS):
        options = plan.Options(_names(args.policies), tuple(plan.parse_list(args.ratios, "--ratios"))
                               if args.ratios.strip() else (), _names(args.offload_param))
        frame = plan.plan_sizing(
            scenario, args.objective, args.strategy,
            dram_gib=plan.parse_list(args.dram_gib, "--dram-gib"),
            cxl_counts=plan.parse_list(args.cxl_counts, "--cxl-counts", int),
            nvme_counts=plan.parse_list(args.nvme_counts, "--nvme-counts", int),
            budget=args.budget, max_iteration_time=args.max_iteration_time, lifetime_years=args.lifetime_years,
            policies=options.policies, ratios=options.ratios, offload_param=options.offload_param)
    varied = options.varied()
    shown = [(c, c) for c in varied] + ([("param_buffer_size", "buffer_size")] if "nvme" in options.offload_param
                                        else [])
    return frame, [*SIZING_COLUMNS[:2], *shown, *SIZING_COLUMNS[2:]], varied


def _names(text: str) -> tuple[str, ...]:
    """'bind, interleave' -> ('bind', 'interleave')."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def plan_figure(scenario: plan.Scenario, frame: pd.DataFrame, args: argparse.Namespace) -> go.Figure:
    """The picture of a planner answer (``tiersim.analysis.plan_plots``)."""
    from tiersim.analysis import plan_plots

    name = str(scenario.data.get("name", scenario.source))
    if args.objective == "largest-model":
        if "tensor_parallel" in frame.columns:
            scenario, frame = plan_layouts.chosen_rows(scenario, frame)
            name = f"{name} on {plan_layouts.describe_layout(frame.iloc[0].to_dict())}" if len(frame) else name
        memory = plan.memory_by_model_size(scenario, frame, args.scale)
        return plan_plots.largest_model_figure(
            memory, frame, f"{name}: memory per tier against model size (--scale {args.scale})"
        )
    return plan_plots.sizing_figure(
        frame, f"{name}: {args.objective}, hardware cost against iteration time", args.max_iteration_time, args.budget
    )


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if column in ("iteration_time_s", "optimizer_step_s"):
        return f"{value:.4g}"
    if column in ("cost_usd", "param_buffer_size"):
        return f"{value:,.0f}"
    if column == "cost_per_iteration_usd":
        return f"{value:.3g}"
    if column == "params_b":
        return f"{value:.1f}"
    if column in ("dram_gib_per_socket", "ratio", "layers", "hidden"):
        return f"{value:g}"
    return str(value)
