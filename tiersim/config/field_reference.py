"""The field reference pages, generated from the config schema.

``docs/reference/fields.md`` lists every scenario field, ``docs/reference/profiles.md`` every
device profile field: per section a table of the dotted path, the type, the unit a value is read
in (from the field helper: ``size`` bytes, ``rate`` bytes/s, ``flops`` FLOP/s, ``duration`` s),
the default, the bounds and the meaning (the field's ``doc`` metadata, else the docstring that
follows it in the class body). ``python -m tiersim.config.field_reference --write`` rewrites both
pages; ``tests/system/test_field_reference.py`` checks that the committed ones match.

The strategies' ``Options`` come from ``tiersim.strategies``, whose package imports the engine
(and with it SimPy); nothing here imports pandas.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tiersim.config.hardware import HardwareSpec
from tiersim.config.profiles import PROFILE_KINDS
from tiersim.config.scenario import SECTIONS, STRATEGY_SECTION
from tiersim.config.units import parse_bytes, parse_flops, parse_rate, parse_time
from tiersim.strategies import STRATEGIES
from tiersim.workload import ModelSpec, TrainingSpec

COMMAND = "python -m tiersim.config.field_reference --write"
"""The command that regenerates both pages (from the repository root)."""
PAGES_DIR = Path("docs") / "reference"
"""Where ``--write`` puts the pages, relative to the current directory."""
UNITS: dict[Callable[..., Any], str] = {parse_bytes: "bytes", parse_rate: "bytes/s", parse_flops: "FLOP/s",
                                        parse_time: "s"}
"""The unit of a field by the parser its helper (``size``, ``rate``, ``flops``, ``duration``) sets."""
SCENARIO_SECTIONS: dict[str, type] = {"model": ModelSpec, "training": TrainingSpec, "hardware": HardwareSpec}
"""The scenario sections that are one config class each (``strategies`` is a list)."""
TOP_LEVEL: dict[str, tuple[str, str, str]] = {
    "name": ("str", "the file name without `.yaml`", "The scenario's name, shown in results."),
    "description": ("str", "`\"\"`", "Free text about the scenario; not read by the simulator."),
    "seed": ("int", "`0`", "Recorded with each run's results; the simulation is deterministic and does not use it."),
    "model": ("mapping", "required", "The transformer's shape: the `model.*` fields below."),
    "training": ("mapping", "required", "Batch, parallelism and ZeRO settings: the `training.*` fields below."),
    "hardware": ("mapping", "required", "The machine, by device profile names and counts: the `hardware.*` fields."),
    STRATEGY_SECTION: ("list", "required", "The strategies to run, each a name or a mapping of `name` and the "
                       "strategy's options (`strategies.NAME.OPTION` below)."),
}
"""Type, default and meaning of each top-level key of a scenario (``scenario.SECTIONS``)."""
SCENARIO_DEFAULTS = {
    "training.data_parallel": "`hardware.nodes x hardware.gpus / (tensor_parallel x pipeline_parallel)`"}
"""Defaults a scenario sets in place of the class's own (``scenario_from_dict``)."""
HEADER = ("| Field | Type | Unit | Default | Bounds | Meaning |", "|---|---|---|---|---|---|")
_DECIMAL = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))
_BINARY = (("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))
_TIMES = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


@dataclasses.dataclass(frozen=True)
class Row:
    """One field of a table: its dotted path and the rendered cells."""

    path: str
    type: str
    unit: str
    default: str
    bounds: str
    meaning: str

    def markdown(self) -> str:
        """The table row (empty unit and bounds shown as a dash)."""
        cells = (f"`{self.path}`", f"`{self.type}`", self.unit or "—", self.default, self.bounds or "—", self.meaning)
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def type_text(tp: Any) -> str:
    """An annotation as written in the code: ``int | None``, ``"bf16" | "fp16"``, ``dict[str, str]``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(f'"{choice}"' for choice in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in typing.get_args(tp))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_text(arg) for arg in typing.get_args(tp))}]"
    return "None" if tp is type(None) else str(tp.__name__)


def _scaled(value: float, scales: Sequence[tuple[str, float]]) -> str:
    """``value`` in the largest unit of ``scales`` it reaches ("1.5 ms", "25 GB/s"), else the last."""
    suffix, factor = next(((s, f) for s, f in scales if abs(value) >= f), scales[-1])
    return f"{value / factor:g} {suffix}"


def _decimal(unit: str) -> list[tuple[str, float]]:
    """Decimal prefixes of ``unit``, largest first, down to the bare unit."""
    return [(prefix + unit, factor) for prefix, factor in _DECIMAL]


def _size_text(value: int) -> str:
    """Bytes in the largest binary unit that divides them ("1 MiB"), else decimal ("1.5 GB")."""
    for prefix, factor in _BINARY:
        if value and value % factor == 0:
            return f"{value // factor} {prefix}B"
    return _scaled(value, _decimal("B"))


def _number_text(value: float) -> str:
    """A plain number; a large round one as ``1e9`` (the integer and number fields read it)."""
    short = f"{value:g}".replace("e+0", "e").replace("e+", "e")
    if abs(value) >= 1e6 and float(short) == value:
        return short
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def value_text(value: object, parser: Callable[..., Any] | None) -> str:
    """A default as it would be written in a scenario file, in readable units."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if not isinstance(value, (int, float)):
        return repr(value)
    if parser is parse_bytes:
        return _size_text(int(value))
    if parser is parse_time:
        return _scaled(value, _TIMES) if value else "0 s"
    if parser is parse_rate:
        return _scaled(value, _decimal("B/s"))
    if parser is parse_flops:
        return _scaled(value, _decimal("FLOP/s"))
    return _number_text(value)


def prose(text: str) -> str:
    """A docstring as one Markdown line: whitespace collapsed, ````code```` as ```code```."""
    return " ".join(text.split()).replace("``", "`")


def sentence(text: str) -> str:
    """``prose(text)`` begun with a capital and ended with a full stop."""
    line = prose(text)
    return line[:1].upper() + line[1:] + ("" if line.endswith(".") else ".")


def paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs as Markdown: each on one line, a blank line after each."""
    parts = [prose(part) for part in re.split(r"\n\s*\n", inspect.cleandoc(text)) if part.strip()]
    return [line for part in parts for line in (part, "")]


_TOP = Path(__file__).resolve().parent.parent.parent
"""The folder holding the ``tiersim`` package, whose ``.py`` sources sit beside any compiled module."""


def _class_node(klass: type) -> ast.ClassDef:
    """The class statement of ``klass``, parsed from its module's ``.py`` source (read from the
    file, not through ``inspect``: a class compiled by mypyc has no source for ``inspect``, and
    its module's file is the extension)."""
    path = Path(getattr(sys.modules.get(klass.__module__), "__file__", None) or "")
    if path.suffix != ".py":  # compiled: the source beside it, by the module's dotted name
        path = _TOP.joinpath(*klass.__module__.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == klass.__name__:
            return node
    raise ValueError(f"no class {klass.__name__} in {path}")


def class_doc(cls: type) -> str:
    """The docstring of ``cls`` as written in its source (a compiled class's ``__doc__`` may be
    empty, depending on import order)."""
    return ast.get_docstring(_class_node(cls)) or ""


@functools.cache
def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings that follow fields in the bodies of ``cls`` and its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        node = _class_node(klass)
        for stmt, after in zip(node.body, node.body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[stmt.target.id] = after.value.value
    return docs


def meaning(cls: type, fld: dataclasses.Field[Any]) -> str:
    """The field's ``doc`` metadata, else its attribute docstring (a ``ValueError`` for neither:
    every field says what it is)."""
    text = fld.metadata.get("doc") or attribute_docs(cls).get(fld.name)
    if not text:
        raise ValueError(f"{cls.__name__}.{fld.name} has neither doc= nor a docstring")
    return sentence(text)


def default_text(fld: dataclasses.Field[Any], tp: Any) -> str:
    """"required", or the default in readable units; a ``None`` default of a field whose type
    does not allow None stands for a part ``validate`` requires."""
    value = fld.default
    if value is dataclasses.MISSING and fld.default_factory is not dataclasses.MISSING:
        value = fld.default_factory()
    if value is dataclasses.MISSING or (value is None and type(None) not in typing.get_args(tp)):
        return "required"
    return f"`{value_text(value, fld.metadata.get('parser'))}`"


def bounds_text(metadata: typing.Mapping[str, Any]) -> str:
    """The bounds the schema enforces: "> 0", "≥ 0, ≤ 1" (a lower bound ``ge`` that ``gt``
    already implies left out)."""
    bounds = {key: metadata.get(key) for key in ("gt", "ge", "le")}
    if bounds["gt"] is not None and bounds["ge"] is not None and bounds["gt"] >= bounds["ge"]:
        bounds["ge"] = None
    marks = {"gt": ">", "ge": "≥", "le": "≤"}
    return ", ".join(f"{marks[key]} {value:g}" for key, value in bounds.items() if value is not None)


def field_rows(cls: type, prefix: str = "", nested: bool = True) -> list[Row]:
    """A row per field of ``cls`` (paths under ``prefix``); with ``nested``, the fields of a
    config class it holds follow its row (``hardware.cxl.count``)."""
    hints = typing.get_type_hints(cls)
    rows: list[Row] = []
    for fld in dataclasses.fields(cls):
        path = f"{prefix}.{fld.name}" if prefix else fld.name
        tp = hints[fld.name]
        default = SCENARIO_DEFAULTS.get(path) or default_text(fld, tp)
        parser = fld.metadata.get("parser")
        unit = UNITS.get(parser, "") if parser is not None else ""
        rows.append(Row(path, type_text(tp), unit, default, bounds_text(fld.metadata), meaning(cls, fld)))
        inner = [arg for arg in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(arg)]
        if nested and inner:
            rows += field_rows(typing.cast(type, inner[0]), path)
    return rows


def table(rows: Sequence[Row]) -> list[str]:
    """A Markdown table of ``rows``."""
    return [*HEADER, *(row.markdown() for row in rows)]


def _preamble(title: str, intro: str) -> list[str]:
    return [f"# {title}", "", f"Generated from the schema by `{COMMAND}`; do not edit.", "", intro, "",
            "Types are the Python annotations (`None` is `null` in YAML). A value with a unit may be "
            "written with one (`80 GiB`, `25 GB/s`, `989 TFLOP/s`, `250 ns`; k, M, G, T are powers of "
            "1000, Ki, Mi, Gi, Ti of 1024) or as a plain number in the base unit; whole numbers and "
            "plain numbers may be written `1e8`.", ""]


def fields_page() -> str:
    """``docs/reference/fields.md``: every field of a scenario file."""
    lines = _preamble("Scenario fields", "A scenario file (YAML) has the top-level keys below; a field is "
                      "addressed by its dotted path, as in `--set training.global_batch=64` and in error "
                      "messages. The device profiles that `hardware` names are described in "
                      "[profiles.md](profiles.md).")
    top = [Row(name, TOP_LEVEL[name][0], "", TOP_LEVEL[name][1], "", TOP_LEVEL[name][2]) for name in SECTIONS]
    lines += ["## Top level", "", *table(top), ""]
    for section, cls in SCENARIO_SECTIONS.items():
        lines += [f"## {section}", "", *paragraphs(class_doc(cls)), *table(field_rows(cls, section)), ""]
    lines += [f"## {STRATEGY_SECTION}", "", TOP_LEVEL[STRATEGY_SECTION][2], ""]
    for name, strategy in STRATEGIES.items():
        lines += [f"### {name}", "", sentence(strategy.summary), ""]
        rows = field_rows(strategy.Options, f"{STRATEGY_SECTION}.{name}")
        lines += [*paragraphs(class_doc(strategy.Options)), *table(rows), ""] if rows else ["No options.", ""]
    return "\n".join(lines[:-1]) + "\n"


def common_profile_fields() -> list[str]:
    """The fields every profile kind has (``kind``, ``name``, ``description``, ``sources``, ...)."""
    kinds = list(PROFILE_KINDS.values())
    names = [f.name for f in dataclasses.fields(kinds[0])]
    return [name for name in names if all(name in {f.name for f in dataclasses.fields(k)} for k in kinds)]


def profiles_page() -> str:
    """``docs/reference/profiles.md``: every field of a device profile file, by kind."""
    lines = _preamble("Device profile fields", "A device profile is a YAML file in a profile folder "
                      "(`device_profiles/`, `--profile-path`, `TIERSIM_PROFILE_PATH`) that a scenario's "
                      "[`hardware` section](fields.md#hardware) names. Every figure is cited in `sources`.")
    common = common_profile_fields()
    first = next(iter(PROFILE_KINDS.values()))
    lines += ["## Every kind", "", *table([r for r in field_rows(first, nested=False) if r.path in common]), ""]
    for kind, cls in PROFILE_KINDS.items():
        rows = [row for row in field_rows(cls, nested=False) if row.path not in common]
        lines += [f"## {kind}", "", *paragraphs(class_doc(cls)), *table(rows), ""]
    return "\n".join(lines[:-1]) + "\n"


PAGES: dict[str, Callable[[], str]] = {"fields.md": fields_page, "profiles.md": profiles_page}
"""Each generated page by file name."""


def main(argv: Sequence[str] | None = None) -> int:
    """Print the fields page (``--profiles``: the profiles page), or ``--write`` both pages."""
    parser = argparse.ArgumentParser(prog="python -m tiersim.config.field_reference", description=__doc__)
    parser.add_argument("--profiles", action="store_true", help="print the device profile page")
    parser.add_argument("--write", nargs="?", const=str(PAGES_DIR), metavar="DIR",
                        help=f"write {' and '.join(PAGES)} into DIR (default {PAGES_DIR})")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(PAGES["profiles.md" if args.profiles else "fields.md"]())
        return 0
    folder = Path(args.write)
    folder.mkdir(parents=True, exist_ok=True)
    for name, page in PAGES.items():
        (folder / name).write_text(page(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
