"""``tiersim fit SYSTEM.yaml --log A --log B ... --out PROFILE.yaml``: infer a node's unknown
figures from measured training runs, by least squares of tiersim's own predictions."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import yaml

from tiersim.commands.options import add_format
from tiersim.config.profiles import load_profile_file
from tiersim.errors import ConfigError
from tiersim.fitting.report import fit_data, fit_markdown, fit_table, profile_document
from tiersim.fitting.solver import fit_system
from tiersim.fitting.system import load_system


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``fit``'s arguments to its parser."""
    parser.add_argument("system", help="system YAML: the node's parts, settings and the figures to fit")
    parser.add_argument("--log", action="append", default=[], required=True, metavar="LOG", dest="logs",
                        help="a Megatron-DeepSpeed training log (repeatable)")
    parser.add_argument("--out", type=Path, metavar="PROFILE.yaml", help="write the fitted host profile here")
    parser.add_argument("--report", type=Path, metavar="REPORT.md", help="write the fit report as Markdown")
    add_format(parser, "table", "json")
    parser.set_defaults(func=fit_command)


def fit_command(args: argparse.Namespace) -> int:
    """Fit, print the figures and residuals, write the profile (checked by loading it back)."""
    system = load_system(args.system)
    fit = fit_system(system, args.logs)
    if args.out is not None:
        if args.out.stem != system.name:
            raise ConfigError(str(args.out), "--out", f"a profile file must be named after its profile: "
                              f"{system.name}.yaml")
        _write(args.out, yaml.safe_dump(profile_document(fit), sort_keys=False, width=100))
        load_profile_file(args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    if args.report is not None:
        command = "tiersim fit " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["fit"] else (
            f"tiersim fit {args.system} " + " ".join(f"--log {p}" for p in args.logs))
        _write(args.report, fit_markdown(fit, command))
        print(f"wrote {args.report}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(fit_data(fit), indent=2))
    else:
        print(fit_table(fit))
    return 0


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot write file ({exc.strerror})") from None
