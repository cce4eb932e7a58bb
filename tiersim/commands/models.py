"""``tiersim models [NAME]``: list the bundled catalogue of models (Hugging Face ``config.json``
fields of popular open models), or show one as tiersim's ``model:`` fields with its sources."""

from __future__ import annotations

import argparse
import json

from tiersim.analysis.report import format_table
from tiersim.catalogue import CatalogueModel, lookup, models
from tiersim.commands.options import add_format
from tiersim.config.hf_config import HINT, model_fields
from tiersim.config.schema import build
from tiersim.errors import ConfigError
from tiersim.workload import ModelSpec, active_parameter_count, parameter_count


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``models``'s arguments to its parser."""
    parser.add_argument("name", nargs="?", help="show this model (e.g. meta-llama/Llama-3.1-8B)")
    add_format(parser, "table", "json")
    parser.set_defaults(func=models_command)


def spec(entry: CatalogueModel) -> ModelSpec:
    """The catalogue entry as a ``ModelSpec``."""
    source = f"catalogue {entry.name}"
    return build(ModelSpec, {"name": entry.name, **model_fields(entry.config, source)}, source, "model")


def summary(entry: CatalogueModel) -> dict[str, object]:
    """Name, parameters (all, and those a token runs through), layers, experts and sources."""
    model = spec(entry)
    return {"name": entry.name, "params_b": round(parameter_count(model) / 1e9, 3),
            "active_params_b": round(active_parameter_count(model) / 1e9, 3), "layers": model.layers,
            "hidden": model.hidden, "experts": f"{model.experts_per_token}/{model.experts}" if model.experts else "-",
            "source": entry.source, "read_from": entry.read_from}


def models_command(args: argparse.Namespace) -> int:
    """List the catalogue, or show one model's fields and sources."""
    if args.name:
        entry = lookup(args.name)
        if entry is None:
            raise ConfigError("tiersim models", "NAME", f"{args.name!r} is not in the bundled catalogue; {HINT}")
        shown = {**summary(entry), "model": {k: v for k, v in vars(spec(entry)).items() if v is not None}}
        print(json.dumps(shown, indent=2) if args.format == "json" else
              "\n".join(f"{key}: {value}" for key, value in shown.items()))
        return 0
    rows = [summary(entry) for entry in models()]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(format_table(["name", "params_B", "active_B", "layers", "hidden", "experts"],
                           [[r["name"], r["params_b"], r["active_params_b"], r["layers"], r["hidden"], r["experts"]]
                            for r in rows]))
    return 0
