"""``tiersim import-log LOG... [--out DIR]``: read Megatron-DeepSpeed training logs into a
scenario (what ran; hardware the log does not name left ``unknown``) and a measured table
(every iteration's phases and DeepSpeed timers, and the steady state: mean of iterations 3..N).

It reads DeepSpeed 0.10 to 0.16 (its version goes into ``training.deepspeed_version``), forks'
iteration lines, Megatron's own FFN default, ``--use-flash-attn``, CPU Adam's SIMD width and
every numactl binding (``hardware.numa_bound``). A value it cannot read, a DeepSpeed release
tiersim does not model, or a header that disagrees with the iterations is exit 2, naming it."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tiersim.analysis.report import TABLE_WIDTH, format_table
from tiersim.commands.options import add_format, output_folder
from tiersim.config.document import ScenarioDocument
from tiersim.ingest.log_scenario import PHASES, log_document, measured_table
from tiersim.ingest.training_log import read_log
from tiersim.jsonout import plain_records

_HEADER = """\
# Imported by `tiersim import-log` from {log}.
# Fields marked `unknown` are not in the log (the device models, the interleave weights numactl
# reads from sysfs, the sockets of ranks numactl did not bind): fill them in, pass --set, or
# name a host profile or system (tiersim fit makes one).
"""


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``import-log``'s arguments to its parser."""
    parser.add_argument("logs", nargs="+", metavar="LOG", help="Megatron-DeepSpeed training log")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write DIR/NAME.yaml (scenario) and DIR/NAME.measured.csv per log")
    add_format(parser, "table", "json")
    parser.set_defaults(func=import_log_command)


def import_log_command(args: argparse.Namespace) -> int:
    """Parse every log first (a bad one stops before anything is written), then report/write."""
    imported = []
    for path in args.logs:
        log = read_log(path)
        imported.append((log, log_document(log), measured_table(log)))
    if args.out is not None:
        output_folder(args.out)
        for log, scenario, table in imported:
            stem = scenario.data["name"]
            text = _HEADER.format(log=log.path) + yaml.safe_dump(scenario.data, sort_keys=False)
            (args.out / f"{stem}.yaml").write_text(text)
            table.to_csv(args.out / f"{stem}.measured.csv", index=False)
            print(f"wrote {args.out / f'{stem}.yaml'} and {args.out / f'{stem}.measured.csv'}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps([{"log": log.path, "scenario": scenario.data, "measured": plain_records(table)}
                          for log, scenario, table in imported], indent=2))
        return 0
    for log, scenario, table in imported:
        print(f"log: {log.path}")
        print(textwrap.fill(_summary(scenario), TABLE_WIDTH))
        print(_phase_table(table))
        print(_memory_line(table))
        print()
    return 0


def _summary(scenario: ScenarioDocument) -> str:
    model, training, hardware = scenario.data["model"], scenario.data["training"], scenario.data["hardware"]
    name = scenario.strategy_names()[0]
    experts = f", {model['experts']} experts (top {model['experts_per_token']})" if model.get("experts") else ""
    return (f"model: {model['layers']} layers, hidden {model['hidden']}, {model['heads']} heads "
            f"({model['kv_heads']} KV), FFN {model['ffn']}, vocab {model['vocab']}{experts}; training: seq "
            f"{training['seq_len']}, micro-batch {training['micro_batch']}, global batch {training['global_batch']}, "
            f"ZeRO-{training['zero_stage']}; ranks: {hardware['nodes']} node(s) x {hardware['gpus']} GPUs, "
            f"{_layout(training)}; strategy: {name}")


def _layout(training: dict[str, Any]) -> str:
    """``TP 2, PP 1, DP 4`` (and ``EP``, where above 1)."""
    degrees = [("TP", "tensor_parallel"), ("PP", "pipeline_parallel"), ("DP", "data_parallel"),
               ("EP", "expert_parallel")]
    return ", ".join(f"{label} {training[key]}" for label, key in degrees if key in training)


def _phase_table(table: object) -> str:
    """A row per timed quantity (the phases first), a column per iteration and the steady state."""
    import pandas as pd

    assert isinstance(table, pd.DataFrame)
    times = table[table["unit"] == "s"]
    wide = times.pivot_table(index="quantity", columns="iteration", values="value", aggfunc="first", sort=False)
    order = [q for q in ("iteration", *PHASES) if q in wide.index] + [q for q in wide.index
                                                                        if q not in ("iteration", *PHASES)]
    labels = {"iteration": "iteration_s", **{p: f"{p}_s" for p in PHASES}}
    rows = [[labels.get(q, q), *[_seconds(wide.loc[q].get(c)) for c in wide.columns]] for q in order]
    return format_table(["seconds", *[str(c) for c in wide.columns]], rows)


def _memory_line(table: object) -> str:
    """The steady state's memory peaks in GiB (DeepSpeed prints GiB, labelled GB)."""
    import pandas as pd

    assert isinstance(table, pd.DataFrame)
    steady = table[(table["iteration"] == "steady") & (table["unit"] == "B")]
    if steady.empty:
        return "memory: no see_memory_usage reports"
    return "memory (steady, GiB): " + ", ".join(f"{q.removeprefix('memory:')} {v / 2**30:.2f}"
                                               for q, v in zip(steady["quantity"], steady["value"]))


def _seconds(value: object) -> str:
    return "-" if value is None or value != value else f"{float(value):.3f}"  # type: ignore[arg-type]
