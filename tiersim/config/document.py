"""A scenario document: the raw scenario data, addressed by canonical field paths, with the
variants derived from it and where each of their values came from.

Every scenario field has one spelling, its dotted path: ``training.global_batch``,
``hardware.nvme.count``, and for a strategy's option ``strategies.NAME.OPTION`` (a strategy by
its name, never by its place in the list). A document is immutable: ``with_values`` returns a
new one that shares every branch it does not touch (copy on write) and records the ``Origin``
of each value it sets (``--set``, a sweep factor, a planner candidate). ``configs`` validates
into ``RunConfig`` objects and blames an invalid value on the origin that wrote it, under the
same path: ``--set: strategies.nvme.buffer_count: ...``, ``sweep.yaml: strategies.nvme.buffer_count:
... (value 0, from grid)``, ``scenario.yaml: strategies.nvme.buffer_count: ...``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tiersim.config.ds_config import DeepSpeedAutoFilled, apply_ds_config, read_ds_config
from tiersim.config.hf_config import expand_model
from tiersim.config.profiles import HostProfile
from tiersim.config.scenario import (
    STRATEGY_SECTION,
    RunConfig,
    copy_plain,
    parse_assignment,
    scenario_from_dict,
    strategy_entries,
)
from tiersim.config.yamlfile import read_yaml
from tiersim.errors import ConfigError


@dataclass(frozen=True)
class Origin:
    """Where a value was written: ``source`` (a file, ``--set``, ``plan``) and, inside it,
    ``where`` (``grid``, ``points[3]``, ``set``, a planner candidate; "" for all of it)."""

    source: str
    where: str = ""

    def error(self, path: str, message: str, value: Any) -> ConfigError:
        """The error for ``value``, which this origin gave at canonical ``path`` (the value and
        the place are added where the source holds many: a sweep's grid or points)."""
        note = f" (value {show_value(value)}, from {self.where})" if self.where else ""
        return ConfigError(self.source, path, message + note)


SET = Origin("--set")
"""A value given on the command line by ``--set KEY=VALUE``."""


def show_value(value: Any) -> str:
    """A value as the user wrote it (strings bare, the rest as JSON)."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


@dataclass(frozen=True, eq=False)
class ScenarioDocument:
    """A scenario mapping with its source file, the folders its profiles are looked up in and
    the origin of every value set since it was loaded."""

    data: dict[str, Any]
    """The scenario as plain data; never changed in place (variants share its branches)."""
    source: str
    """The file it was read from (or what made it), blamed for values no origin set."""
    search: tuple[Path, ...] = ()
    """Folders device and host profiles are looked up in, before the bundled ones."""
    origins: Mapping[str, Origin] = field(default_factory=dict)
    """Origin of each value set since loading, by canonical path, oldest first."""
    resolved: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Hardware resolved from each spec, shared by this document and all its variants (so that
    a sweep's points and a planner's probes look their profiles up once)."""
    validated: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Sections validated from each distinct mapping, shared likewise (``scenario_from_dict``)."""

    def get(self, path: str, default: Any = None) -> Any:
        """The value at canonical ``path`` (``default`` where there is none)."""
        parts = path.split(".")
        node: Any = self.data
        if parts[0] == STRATEGY_SECTION and len(parts) > 1:
            node = self.strategy_entries().get(parts[1])
            parts = parts[2:]
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def strategy_entries(self, data: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """The ``strategies`` list of ``data`` (default: this document's) by name: each entry
        as a mapping with ``name``."""
        raw = (self.data if data is None else data).get(STRATEGY_SECTION)
        try:
            return strategy_entries(raw, self.source)
        except ConfigError as exc:
            raise self._blamed(exc) from None

    def strategy_names(self) -> list[str]:
        """Strategy names in scenario order."""
        return list(self.strategy_entries())

    def with_values(self, values: Mapping[str, Any], origin: Origin) -> ScenarioDocument:
        """A variant with each canonical path set to its value (given by ``origin``); mappings on
        the way are made where missing. This document is left as it is."""
        data = self.data
        origins = dict(self.origins)
        for given, raw in values.items():
            path, value = _model_path(given, copy_plain(raw), origin)
            data = self._put(data, path, value, origin)
            for older in [p for p in origins if p == path or p.startswith(path + ".")]:
                del origins[older]
            origins[path] = origin
        return replace(self, data=data, origins=origins)

    def with_overrides(self, items: Sequence[str]) -> ScenarioDocument:
        """A variant with ``--set`` style ``KEY=VALUE`` items applied in turn (values read as YAML)."""
        doc = self
        for item in items:
            key, value = parse_assignment(item, SET.source)
            doc = doc.with_values({key: value}, SET)
        return doc

    def with_strategy(self, name: str) -> ScenarioDocument:
        """A variant running only strategy ``name``: its entry here, or its default options."""
        entry = self.strategy_entries().get(name, {"name": name})
        others = tuple(f"{STRATEGY_SECTION}.{other}." for other in self.strategy_entries() if other != name)
        origins = {p: o for p, o in self.origins.items() if not p.startswith(others)}
        return replace(self, data={**self.data, STRATEGY_SECTION: [entry]}, origins=origins)

    def origin(self, path: str) -> tuple[str, Origin] | None:
        """The path set and the origin of the value an error at canonical ``path`` is about:
        the latest that set that path, a mapping around it or a field inside it (None: the
        document's own file)."""
        for key in reversed(list(self.origins)):
            if key == path or path.startswith(key + ".") or key.startswith(path + "."):
                return key, self.origins[key]
        return None

    def configs(self, strategies: Sequence[str] = (), force: bool = False,
                host: HostProfile | None = None) -> list[RunConfig]:
        """Validate into one ``RunConfig`` per (selected) strategy; an error names the canonical
        path and the origin of its value. ``force`` lifts the work limit (``worksize``);
        ``host``: a host profile object to use for ``hardware.host``."""
        try:
            return scenario_from_dict(self.data, self.source, strategies, self.search, self.resolved, force, host,
                                      self.validated)
        except ConfigError as exc:
            raise self._blamed(exc) from None

    def _blamed(self, exc: ConfigError) -> ConfigError:
        """``exc`` (about this document's data) blamed on the origin of the value at its path."""
        setter = self.origin(exc.field) if exc.source == self.source and exc.field else None
        if setter is None:
            return exc
        key, origin = setter
        return origin.error(exc.field, exc.message, self.get(key))

    def _put(self, data: dict[str, Any], path: str, value: Any, origin: Origin) -> dict[str, Any]:
        """``data`` with ``value`` at ``path``: the mappings on the way copied, the rest shared."""
        parts = path.split(".")
        if any(not part for part in parts):
            raise origin.error(path, "expected a dotted field path", value)
        if parts[0] == STRATEGY_SECTION and len(parts) > 1:
            if len(parts) < 3:
                raise origin.error(path, "strategy options are written strategies.NAME.OPTION (or OPTION.FIELD "
                                         "of a block), e.g. strategies.nvme.buffer_count", value)
            name = parts[1]
            entries = self.strategy_entries(data)
            if name not in entries:
                raise origin.error(path, f"strategy {name!r} is not in this scenario (has: {', '.join(entries)})",
                                   value)
            listed = [_put_mapping(entry, parts, value, origin, path, 2) if entry_name == name else raw
                      for (entry_name, entry), raw in zip(entries.items(), data[STRATEGY_SECTION])]
            return {**data, STRATEGY_SECTION: listed}
        return _put_mapping(data, parts, value, origin, path)


def _model_path(path: str, value: Any, origin: Origin) -> tuple[str, Any]:
    """(path, value) to set: a model given by name or ``hf_config`` (at ``model`` or
    ``model.hf_config``) turned into tiersim's fields (``tiersim.config.hf_config``; relative
    paths from the current folder), so that later values can set single fields of it."""
    if path not in ("model", "model.hf_config"):
        return path, value
    given = {"hf_config": value} if path == "model.hf_config" else value
    try:
        return "model", expand_model(given, origin.source, Path.cwd())
    except ConfigError as exc:
        if exc.source != origin.source:
            raise
        raise origin.error(exc.field, exc.message, value) from None


def _put_mapping(node: dict[str, Any], parts: list[str], value: Any, origin: Origin, path: str,
                 depth: int = 0) -> dict[str, Any]:
    """A copy of mapping ``node`` with ``value`` at ``parts[depth:]`` (children copied on the way)."""
    key = parts[depth]
    if depth == len(parts) - 1:
        return {**node, key: value}
    child = node.get(key)
    if child is None:
        child = {}
    if not isinstance(child, dict):
        inner = ".".join(parts[: depth + 1])
        raise origin.error(path, f"{inner} is not a mapping; cannot set a field inside it", value)
    return {**node, key: _put_mapping(child, parts, value, origin, path, depth + 1)}


def load_document(path: str | Path) -> ScenarioDocument:
    """Read a scenario file into a document (profiles looked up next to it first)."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a scenario must be a mapping")
    if "model" in data:
        data = {**data, "model": expand_model(data["model"], str(path), path.parent)}
    return ScenarioDocument(data, str(path), (path.parent,))


def with_ds_config(document: ScenarioDocument, ds_config: str | Path | None) -> ScenarioDocument:
    """``document`` with the ZeRO, offload, aio, batch and precision settings of a DeepSpeed
    config, read as DeepSpeed reads it (``tiersim.config.ds_config``; None: as it is). Its
    ``"auto"`` values are filled from the document (the model ``--model`` set included) and
    named in one ``DeepSpeedAutoFilled`` warning."""
    if ds_config is None:
        return document
    data, filled = apply_ds_config(document.data, read_ds_config(ds_config), str(ds_config))
    if filled is not None:
        warnings.warn(DeepSpeedAutoFilled(f"{ds_config}: {filled}"), stacklevel=3)
    return replace(document, data=data)


MODEL_FLAG = Origin("--model")
"""A model named on the command line by ``--model NAME`` (a catalogue name, or a config.json)."""


def with_model(document: ScenarioDocument, model: str | None) -> ScenarioDocument:
    """``document`` with its model replaced by ``--model``'s: a catalogue (or Hub) name, or the
    path of a ``config.json`` (None: as it is)."""
    if model is None:
        return document
    value: object = {"hf_config": model} if model.endswith(".json") else model
    return document.with_values({"model": value}, MODEL_FLAG)


def load_scenario(
    path: str | Path, overrides: Sequence[str] = (), strategies: Sequence[str] = (), force: bool = False,
    ds_config: str | Path | None = None, model: str | None = None,
) -> list[RunConfig]:
    """Read, override and validate a scenario; one ``RunConfig`` per (selected) strategy.
    ``force`` lifts the work limit (``tiersim.config.worksize``). ``ds_config``: a DeepSpeed config whose
    ZeRO, offload, aio, batch and precision settings replace the scenario's (``--set`` still
    wins; see ``with_ds_config``). ``model``: ``--model``'s name or config.json, set before
    ``ds_config`` and ``--set``."""
    document = with_ds_config(with_model(load_document(path), model), ds_config)
    return document.with_overrides(overrides).configs(strategies, force)
