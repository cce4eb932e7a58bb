"""The system file ``tiersim fit`` starts from: a node's parts, its settings, the unknown figures.

```yaml
name: seed-node              # the host profile the fit writes
description: ...
parts:                       # profile names (device_profiles/, TIERSIM_PROFILE_PATH) or inline mappings
  gpu: h100-pcie
  link: pcie-gen5-x16
  fabric: pcie-p2p-gen5
  cpu: xeon-8480
  dram: ddr5-4800-8ch
  cxl: micron-cz120
  nvme: seed-nvme-pool
settings:                    # scenario fields the logs cannot give (set on every log's scenario)
  strategies.cxl.dram_weight: 12
fit:                         # PART.FIGURE: bounds (in the figure's units) and why
  fabric.bus_bandwidth: {min: 4 GB/s, max: 64 GB/s, why: PCIe Gen5 x16 raw is 64 GB/s}
measure: [forward, backward, optimizer_step]   # measured quantities fitted (default: these)
```

A fitted figure must be one the simulator's mechanisms use, so only profile fields are
allowed; a bound is parsed with that field's own unit parser.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiersim.config.profiles import PROFILE_KINDS, HostProfile, find_profile, kind_name, read_yaml
from tiersim.config.schema import build
from tiersim.errors import ConfigError

PART_KINDS: dict[str, type] = {kind: cls for kind, cls in PROFILE_KINDS.items() if cls is not HostProfile}
"""The parts of a node a system file names, by the field of ``Hardware`` (and of a host profile)
that holds each."""
REQUIRED_PARTS = ("cpu", "dram", "nvme")
DEFAULT_MEASURES = ("forward", "backward", "optimizer_step")
_SECTIONS = ("name", "description", "parts", "settings", "fit", "measure")


@dataclass(frozen=True)
class Unknown:
    """A figure to fit: ``part.figure``, its bounds (base units) and why they hold."""

    part: str
    figure: str
    low: float
    high: float
    why: str

    @property
    def key(self) -> str:
        """``part.figure``."""
        return f"{self.part}.{self.figure}"


@dataclass(frozen=True)
class System:
    """A parsed system file."""

    source: str
    name: str
    description: str
    parts: dict[str, Any]
    settings: dict[str, Any]
    unknowns: tuple[Unknown, ...]
    measures: tuple[str, ...]


def load_system(path: str | Path) -> System:
    """Read and check a system file; errors name the file and field."""
    source = str(path)
    data = read_yaml(Path(path))
    if not isinstance(data, dict):
        raise ConfigError(source, "", "a system file must be a mapping")
    for key in data:
        if key not in _SECTIONS:
            raise ConfigError(source, str(key), f"unknown field (known: {', '.join(_SECTIONS)})")
    for key in ("name", "parts", "fit"):
        if key not in data:
            raise ConfigError(source, key, "required field is missing")
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise ConfigError(source, "name", f"expected a profile name, got {name!r}")
    parts = _parts(data["parts"], source, (Path(path).parent,))
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError(source, "settings", "expected a mapping of dotted scenario fields to values")
    unknowns = _unknowns(data["fit"], parts, source)
    measures = data.get("measure", list(DEFAULT_MEASURES))
    if not isinstance(measures, list) or not measures or not all(isinstance(m, str) for m in measures):
        raise ConfigError(source, "measure", "expected a non-empty list of measured quantities")
    if len(unknowns) == 0:
        raise ConfigError(source, "fit", "names no figure to fit")
    return System(source, name, str(data.get("description", "")), parts, dict(settings), unknowns,
                  tuple(measures))


def _parts(raw: object, source: str, search: tuple[Path, ...]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(source, "parts", "expected a mapping of part -> profile name or mapping")
    parts: dict[str, Any] = {}
    for part, value in raw.items():
        kind = PART_KINDS.get(str(part))
        where = f"parts.{part}"
        if kind is None:
            raise ConfigError(source, where, f"unknown part (known: {', '.join(PART_KINDS)})")
        if isinstance(value, str):
            parts[part] = find_profile(value, kind, source, where, search)
        elif isinstance(value, dict):
            parts[part] = build(kind, {"kind": kind_name(kind), **value}, source, where)
        else:
            raise ConfigError(source, where, f"expected a profile name or mapping, got {value!r}")
    for part in REQUIRED_PARTS:
        if part not in parts:
            raise ConfigError(source, f"parts.{part}", "required field is missing")
    return parts


def _unknowns(raw: object, parts: dict[str, Any], source: str) -> tuple[Unknown, ...]:
    if not isinstance(raw, dict):
        raise ConfigError(source, "fit", "expected a mapping PART.FIGURE -> {min, max, why}")
    out: list[Unknown] = []
    for key, spec in raw.items():
        where = f"fit.{key}"
        part, _, figure = str(key).partition(".")
        if part not in parts:
            raise ConfigError(source, where, f"no part {part!r} in parts (has: {', '.join(parts)})")
        field = {f.name: f for f in dataclasses.fields(parts[part])}.get(figure)
        parser = field.metadata.get("parser") if field is not None else None
        if field is None or parser is None or not isinstance(getattr(parts[part], figure), (int, float)):
            raise ConfigError(source, where, f"not a numeric figure of the {part} profile")
        if not isinstance(spec, dict) or set(spec) - {"min", "max", "why"} or not {"min", "max"} <= set(spec):
            raise ConfigError(source, where, "expected {min: ..., max: ..., why: ...}")
        low = parser(spec["min"], (source, f"{where}.min"))
        high = parser(spec["max"], (source, f"{where}.max"))
        if not 0 < low < high:
            raise ConfigError(source, where, f"bounds must satisfy 0 < min < max, got {low:g} and {high:g}")
        start = getattr(parts[part], figure)
        if not low <= start <= high:
            raise ConfigError(source, where, f"the {part} profile's value {start:g} lies outside the bounds")
        out.append(Unknown(part, figure, float(low), float(high), str(spec.get("why", ""))))
    return tuple(out)
