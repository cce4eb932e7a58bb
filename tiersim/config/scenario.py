"""Scenario files -> validated ``RunConfig`` objects, one per strategy.

A scenario YAML has ``name``, ``description``, ``seed``, ``model``, ``training``,
``hardware`` and ``strategies`` (a list of names, or mappings ``{name: ..., option: ...}``
whose options are the strategy's ``Options`` fields). ``--set key=value`` overrides any field
by dotted path before validation; the value is read as YAML (``--set training.global_batch=64``).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tiersim.errors import ConfigError
from tiersim.config.hardware import Hardware, HardwareSpec, resolve_hardware
from tiersim.config.limits import MAX_WHOLE
from tiersim.config.profiles import HostProfile
from tiersim.config.schema import build, to_plain
from tiersim.strategies import STRATEGIES
from tiersim.workload import ModelSpec, TrainingSpec
from tiersim.config.worksize import check_bytes, check_run
from tiersim.config.yamlfile import parse_value, read_yaml

SECTIONS = ("name", "description", "seed", "model", "training", "hardware", "strategies")


@dataclass(frozen=True)
class RunConfig:
    """Everything one simulation needs, resolved: a pure ``simulate(config)`` reads nothing else."""

    scenario: str
    seed: int
    model: ModelSpec
    training: TrainingSpec
    hardware: Hardware
    strategy: str
    options: Any

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain data (base units), for JSON and result files."""
        return to_plain(self)


def copy_plain(value: Any) -> Any:
    """A copy of scenario data: nested dicts and lists are copied, scalars shared (three times
    faster than ``copy.deepcopy``, which anything else still goes through)."""
    if isinstance(value, dict):
        return {key: copy_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_plain(item) for item in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    return copy.deepcopy(value)


def apply_overrides(data: dict[str, Any], overrides: Sequence[str], source: str = "--set") -> dict[str, Any]:
    """Return a copy of ``data`` with each ``dotted.key=value`` applied (value parsed as YAML)."""
    result = copy_plain(data)
    for item in overrides:
        key, value = parse_assignment(item, source, item)
        assign(result, key, value, source, key)
    return result


def parse_assignment(item: str, source: str, where: str) -> tuple[str, Any]:
    """``"dotted.key=value"`` -> (key, value read as YAML, or the raw text if it is not YAML)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(source, where, "expected KEY=VALUE, e.g. training.global_batch=64")
    return key, parse_value(raw, source, where)


def assign(data: dict[str, Any], key: str, value: Any, source: str, label: str) -> None:
    """Set dotted ``key`` in a scenario mapping, creating mappings on the way.

    ``strategies.NAME.OPTION`` sets an option of the strategy entry called NAME (a plain name
    entry becomes a mapping). Errors name ``source`` and ``label`` (the key as the user wrote it).
    """
    parts = key.split(".")
    if parts[0] == "strategies" and len(parts) == 3 and isinstance(data.get("strategies"), list):
        entry = _strategy_entry(data["strategies"], parts[1], source, label)
        entry[parts[2]] = copy_plain(value)
        return
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if child is None:
            child = {}
            node[part] = child
        if not isinstance(child, dict):
            inner = ".".join(parts[: depth + 1])
            raise ConfigError(source, label, f"{inner} is not a mapping; cannot set a field inside it")
        node = child
    node[parts[-1]] = copy_plain(value)


def _strategy_entry(entries: list[Any], name: str, source: str, label: str) -> dict[str, Any]:
    """The mapping of strategy ``name`` in a ``strategies:`` list (made a mapping if a name)."""
    for i, item in enumerate(entries):
        if item == name:
            entries[i] = {"name": name}
            return entries[i]  # type: ignore[no-any-return]
        if isinstance(item, dict) and item.get("name") == name:
            return item
    names = [e if isinstance(e, str) else e.get("name") for e in entries if isinstance(e, (str, dict))]
    raise ConfigError(source, label, f"strategy {name!r} is not in this scenario (has: {', '.join(map(str, names))})")


class NotModeledWarning(UserWarning):
    """Settings of an input file that tiersim reads past because no mechanism uses them."""


def load_scenario(
    path: str | Path, overrides: Sequence[str] = (), strategies: Sequence[str] = (), force: bool = False,
    ds_config: str | Path | None = None,
) -> list[RunConfig]:
    """Read, override and validate a scenario; one ``RunConfig`` per (selected) strategy.
    ``force`` lifts the work limit (``tiersim.config.worksize``). ``ds_config``: a DeepSpeed JSON whose
    ZeRO, offload, aio, batch and precision settings replace the scenario's (``--set`` still
    wins); the keys tiersim does not model are named in one ``NotModeledWarning``."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a scenario must be a mapping")
    if ds_config is not None:
        from tiersim.ingest.ds_config import apply_ds_config, read_ds_config

        data, unmodeled = apply_ds_config(data, read_ds_config(ds_config), str(ds_config))
        if unmodeled:
            warnings.warn(NotModeledWarning(f"{ds_config}: not modeled, read past: {', '.join(unmodeled)}"),
                          stacklevel=2)
    return with_overrides(data, overrides, str(path), strategies, (path.parent,), force)[1]


def with_overrides(
    data: dict[str, Any], overrides: Sequence[str], source: str, strategies: Sequence[str] = (),
    search: tuple[Path, ...] = (), force: bool = False,
) -> tuple[dict[str, Any], list[RunConfig]]:
    """A copy of scenario mapping ``data`` with ``--set`` overrides applied, and its run
    configs; an error in a value that an override gave is blamed on that ``--set``."""
    merged = apply_overrides(data, overrides)
    try:
        return merged, scenario_from_dict(merged, source, strategies, search, force=force)
    except ConfigError as exc:
        if exc.source == source:
            field = named_field(exc.field, merged)
            for item in reversed(overrides):
                if touches(item.partition("=")[0], field):
                    raise ConfigError("--set", item, exc.message) from None
        raise


def named_field(field: str, data: dict[str, Any]) -> str:
    """An error's dotted field with ``strategies[i].x`` written ``strategies.NAME.x`` (as
    overrides and sweep factors name strategy options)."""
    if not field.startswith("strategies["):
        return field
    close = field.find("]")
    try:
        entry = data["strategies"][int(field[len("strategies["):close])]
    except (ValueError, IndexError, KeyError, TypeError):
        return field
    name = entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None
    rest = field[close + 1:].removeprefix(".")
    return f"strategies.{name}.{rest}" if isinstance(name, str) and rest and rest != "name" else field


def touches(key: str, field: str) -> bool:
    """Whether setting dotted ``key`` sets ``field`` (or a part of it, or a mapping around it)."""
    return bool(field) and (field == key or field.startswith((key + ".", key + "[")) or key.startswith(field + "."))


def scenario_from_dict(
    data: dict[str, Any], source: str, strategies: Sequence[str] = (), search: tuple[Path, ...] = (),
    resolved: dict[tuple[HardwareSpec, tuple[Path, ...]], Hardware] | None = None, force: bool = False,
    host: HostProfile | None = None,
) -> list[RunConfig]:
    """Validate a scenario mapping (as read from YAML) into run configs. ``resolved`` keeps the
    hardware already resolved from a spec (a sweep's points share a few), so that its profiles
    are looked up once; ``host`` is a host profile object to use for ``hardware.host``. A run
    over the work limit is refused unless ``force``."""
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(source, str(key), f"unknown field (known: {', '.join(SECTIONS)})")
    for key in ("model", "training", "hardware", "strategies"):
        if key not in data:
            raise ConfigError(source, key, "required field is missing")
    name = data.get("name", Path(source).stem)
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or abs(seed) > MAX_WHOLE:
        raise ConfigError(source, "seed", f"expected an integer of at most 2^53, got {seed!r}")
    model = build(ModelSpec, data["model"], source, "model")
    hardware_spec = build(HardwareSpec, data["hardware"], source, "hardware")
    training_data = dict(data["training"]) if isinstance(data["training"], dict) else data["training"]
    if isinstance(training_data, dict):
        training_data.setdefault("data_parallel", hardware_spec.gpus)
    training = build(TrainingSpec, training_data, source, "training")
    if training.data_parallel != hardware_spec.gpus:
        raise ConfigError(
            source,
            "training.data_parallel",
            f"{training.data_parallel} ranks but hardware.gpus is {hardware_spec.gpus} (one rank per GPU)",
        )
    key = (hardware_spec, search)
    hardware = resolved.get(key) if resolved is not None else None
    if hardware is None:
        hardware = resolve_hardware(hardware_spec, source, search, host)
        if resolved is not None:
            resolved[key] = hardware
    entries = _strategy_entries(data["strategies"], source)
    if strategies:
        unknown = [s for s in strategies if s not in entries]
        if unknown:
            raise ConfigError(source, "strategies",
                              f"--strategy {unknown[0]!r} is not in this scenario (has: {', '.join(entries)})")
        entries = {name: entries[name] for name in strategies}
    configs = [
        RunConfig(str(name), seed, model, training, hardware, strategy, options)
        for strategy, options in entries.items()
    ]
    for config in configs:
        check_run(config, source, force)
        check_bytes(config, source)
    return configs


def _strategy_entries(raw: object, source: str) -> dict[str, Any]:
    """Parse ``strategies:``: names or ``{name, options...}`` -> {name: Options instance}."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError(source, "strategies", "expected a non-empty list of strategy names or mappings")
    entries: dict[str, Any] = {}
    for i, item in enumerate(raw):
        where = f"strategies[{i}]"
        fields = {"name": item} if isinstance(item, str) else item
        if not isinstance(fields, dict) or "name" not in fields:
            raise ConfigError(source, where, "expected a strategy name or a mapping with 'name'")
        name = fields["name"]
        if not isinstance(name, str) or name not in STRATEGIES:
            raise ConfigError(source, f"{where}.name", f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")
        if name in entries:
            raise ConfigError(source, f"{where}.name", f"strategy {name!r} listed twice")
        options = {k: v for k, v in fields.items() if k != "name"}
        entries[name] = build(STRATEGIES[name].Options, options, source, where)
    return entries


def with_strategy(config: RunConfig, strategy: str, options: Any = None) -> RunConfig:
    """The same run under another strategy (its default options unless given)."""
    opts = options if options is not None else STRATEGIES[strategy].Options()
    return replace(config, strategy=strategy, options=opts)
