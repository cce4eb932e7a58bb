"""Scenario files -> validated ``RunConfig`` objects, one per strategy.

A scenario YAML has ``name``, ``description``, ``seed``, ``model`` (tiersim's fields, a
catalogue name or ``{hf_config: config.json}``: ``tiersim.config.hf_config``), ``training``,
``hardware`` and ``strategies`` (a list of names, or mappings ``{name: ..., option: ...}``
whose options are the strategy's ``Options`` fields). ``scenario_from_dict`` validates such a
mapping; errors name the field by its canonical dotted path (``strategies.nvme.buffer_count``).
Reading a file, ``--set key=value`` overrides (values read as YAML) and other variants go
through ``tiersim.config.document``.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from tiersim.config.hardware import Hardware, HardwareSpec, resolve_hardware
from tiersim.config.hf_config import expand_model
from tiersim.config.limits import MAX_WHOLE
from tiersim.config.profiles import HostProfile
from tiersim.config.ranks import check_data_parallel, check_expert_group, default_data_parallel
from tiersim.config.schema import build, to_plain
from tiersim.config.worksize import check_bytes, check_run
from tiersim.config.yamlfile import parse_value
from tiersim.errors import ConfigError
from tiersim.strategies import STRATEGIES
from tiersim.strategies.param_offload import refuse_offload
from tiersim.strategies.param_options import ParamOffload
from tiersim.workload import (
    ModelSpec,
    TrainingSpec,
    build_step,
    check_expert_parallel,
    check_stages,
    check_tensor_split,
)

T = TypeVar("T")

SECTIONS = ("name", "description", "seed", "model", "training", "hardware", "strategies")
STRATEGY_SECTION = "strategies"
"""The section listing the strategies; an option is addressed ``strategies.NAME.OPTION``."""


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


def parse_assignment(item: str, source: str, where: str | None = None) -> tuple[str, Any]:
    """``"dotted.key=value"`` -> (key, value read as YAML, or the raw text if it is not YAML).
    Errors name ``where`` (default: the item when it is malformed, else the key)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(source, where or item, "expected KEY=VALUE, e.g. training.global_batch=64")
    return key, parse_value(raw, source, where or key)


def scenario_from_dict(
    data: dict[str, Any], source: str, strategies: Sequence[str] = (), search: tuple[Path, ...] = (),
    resolved: dict[tuple[HardwareSpec, tuple[Path, ...]], Hardware] | None = None, force: bool = False,
    host: HostProfile | None = None, validated: dict[Any, Any] | None = None,
) -> list[RunConfig]:
    """Validate a scenario mapping (as read from YAML) into run configs. ``resolved`` keeps the
    hardware already resolved from a spec (a sweep's points share a few), so that its profiles
    are looked up once, and ``validated`` each section already validated from an equal mapping
    (``_section``); ``host`` is a host profile object to use for ``hardware.host``. A run over
    the work limit is refused unless ``force``."""
    _check_sections(data, source)
    name = data.get("name", Path(source).stem)
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or abs(seed) > MAX_WHOLE:
        raise ConfigError(source, "seed", f"expected an integer of at most 2^53, got {seed!r}")
    refuse_expert_parallelism(data, source)
    folder = search[0] if search else Path(".")
    model = _section(ModelSpec, expand_model(data["model"], source, folder), source, "model", validated)
    hardware_spec = _section(HardwareSpec, data["hardware"], source, "hardware", validated)
    training = _training(data["training"], hardware_spec, source, validated)
    check_stages(model, training, source)
    check_tensor_split(model, training, source)
    check_expert_parallel(model, training, source)
    hardware = _hardware(hardware_spec, source, search, host, resolved)
    entries = _chosen(_strategy_options(data[STRATEGY_SECTION], source, validated), strategies, source)
    refuse_policy_without_cxl(data[STRATEGY_SECTION], entries, hardware, source)
    configs = [
        RunConfig(str(name), seed, model, training, hardware, strategy, options)
        for strategy, options in entries.items()
    ]
    for config in configs:
        refuse_unmodelled(config, source)
        check_run(config, source, force)
        check_bytes(config, source)
        _check_param_offload(config, source)
    return configs


def refuse_unmodelled(config: RunConfig, source: str) -> None:
    """A ConfigError for a run whose strategy refuses its settings (``Strategy.refusal``)."""
    refused = STRATEGIES[config.strategy](config.options).refusal(config.training)
    if refused is not None:
        raise ConfigError(source, *refused)


def refuse_policy_without_cxl(raw: object, entries: dict[str, Any], hardware: Hardware, source: str) -> None:
    """A ConfigError at ``strategies.cxl.policy`` where a chosen ``cxl`` strategy sets a memory
    policy (every one places pages on CXL nodes) on a node without CXL devices. Left at its
    default, the run answers that it lacks the devices (``MissingDevice``), as before."""
    if "cxl" not in entries or hardware.cxl is not None:
        return
    fields = strategy_entries(raw, source)["cxl"]
    if "policy" in fields:
        raise ConfigError(source, f"{STRATEGY_SECTION}.cxl.policy",
                          f"{fields['policy']} places memory on CXL nodes, but hardware.cxl has no CXL devices "
                          "(add hardware.cxl, or leave the policy out)")


def _check_param_offload(config: RunConfig, source: str) -> None:
    """Refuse parameter offload where DeepSpeed would not run it (``refuse_offload``)."""
    offload = getattr(config.options, "offload_param", None)
    if isinstance(offload, ParamOffload):
        refuse_offload(offload, config.options, build_step(config.model, config.training), config.hardware, source,
                       f"{STRATEGY_SECTION}.{config.strategy}.offload_param")


def _check_sections(data: dict[str, Any], source: str) -> None:
    """Refuse an unknown top-level field or a missing required section."""
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(source, str(key), f"unknown field (known: {', '.join(SECTIONS)})")
    for key in ("model", "training", "hardware", "strategies"):
        if key not in data:
            raise ConfigError(source, key, "required field is missing")


def _training(raw: object, hardware: HardwareSpec, source: str, validated: dict[Any, Any] | None) -> TrainingSpec:
    """The ``training`` section, ``data_parallel`` defaulting to (and required to equal) what the
    ranks' layout leaves (``tiersim.config.ranks``)."""
    training_data = dict(raw) if isinstance(raw, dict) else raw
    if isinstance(training_data, dict):
        training_data.setdefault("data_parallel",
                                 default_data_parallel(training_data, hardware.nodes, hardware.gpus, source))
    training = _section(TrainingSpec, training_data, source, "training", validated)
    check_data_parallel(training, hardware, source)
    check_expert_group(training, hardware, source)
    return training


def _hardware(
    spec: HardwareSpec, source: str, search: tuple[Path, ...], host: HostProfile | None,
    resolved: dict[tuple[HardwareSpec, tuple[Path, ...]], Hardware] | None,
) -> Hardware:
    """``resolve_hardware``, through the cache ``resolved`` when one is given."""
    spec_key = (spec, search)
    hardware = resolved.get(spec_key) if resolved is not None else None
    if hardware is None:
        hardware = resolve_hardware(spec, source, search, host)
        if resolved is not None:
            resolved[spec_key] = hardware
    return hardware


def _chosen(entries: dict[str, Any], strategies: Sequence[str], source: str) -> dict[str, Any]:
    """The entries named in ``strategies``, in that order (all of them when none are named)."""
    if not strategies:
        return entries
    unknown = [s for s in strategies if s not in entries]
    if unknown:
        raise ConfigError(source, "strategies",
                          f"strategy {unknown[0]!r} is not in this scenario (has: {', '.join(entries)})")
    return {name: entries[name] for name in strategies}


EXPERT_PARALLEL_FIELDS = ("expert_parallel", "expert_parallel_size", "expert_model_parallel_size", "ep_size",
                          "moe_expert_parallel_size")
"""Other tools' names of expert parallelism, refused by name with a pointer to
``training.expert_parallel`` (its own name too, in ``model``)."""


def refuse_expert_parallelism(data: dict[str, Any], source: str) -> None:
    """A ConfigError naming an expert-parallelism field that is not ``training.expert_parallel``."""
    for section in ("training", "model"):
        fields = data.get(section)
        found = [key for key in EXPERT_PARALLEL_FIELDS if isinstance(fields, dict) and key in fields
                 and (section, key) != ("training", "expert_parallel")]
        if found:
            raise ConfigError(source, f"{section}.{found[0]}", "expert parallelism is training.expert_parallel "
                                                               "(DeepSpeed-MoE's ep_size); write it there")


def strategy_entries(raw: object, source: str) -> dict[str, dict[str, Any]]:
    """Parse ``strategies:``, names or ``{name, options...}`` mappings, into {name: mapping with
    ``name``} in list order (a mapping entry is the list's own, not a copy)."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError(source, STRATEGY_SECTION, "expected a non-empty list of strategy names or mappings")
    entries: dict[str, dict[str, Any]] = {}
    for item in raw:
        fields = {"name": item} if isinstance(item, str) else item
        if not isinstance(fields, dict) or "name" not in fields:
            raise ConfigError(source, STRATEGY_SECTION,
                              f"expected a strategy name or a mapping with 'name', got {item!r}")
        name = fields["name"]
        if not isinstance(name, str) or name not in STRATEGIES:
            raise ConfigError(source, STRATEGY_SECTION, f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")
        if name in entries:
            raise ConfigError(source, STRATEGY_SECTION, f"strategy {name!r} listed twice")
        entries[name] = fields
    return entries


def _strategy_options(raw: object, source: str, validated: dict[Any, Any] | None = None) -> dict[str, Any]:
    """{name: its ``Options`` instance} for the ``strategies:`` list (errors at ``strategies.NAME.OPTION``)."""
    return {
        name: _section(
            STRATEGIES[name].Options,
            {k: v for k, v in fields.items() if k != "name"},
            source,
            f"{STRATEGY_SECTION}.{name}",
            validated,
        )
        for name, fields in strategy_entries(raw, source).items()
    }


def _section(cls: type[T], data: object, source: str, path: str, validated: dict[Any, Any] | None) -> T:
    """``build(cls, data, ...)``, or the object ``validated`` holds for an equal mapping (the
    config objects are immutable; a sweep's points and a planner's probes differ in a few
    fields, so most of their sections are validated once). Errors are never kept."""
    if validated is None:
        return build(cls, data, source, path)
    key = (cls, _frozen(data))
    try:
        found = validated.get(key)
    except TypeError:  # a value that is not plain data (unhashable): validated each time
        return build(cls, data, source, path)
    if found is None:
        found = validated[key] = build(cls, data, source, path)
    return cast(T, found)


def _frozen(value: object) -> Hashable:
    """A hashable image of plain data that tells apart what compares equal across types
    (``1``, ``1.0`` and ``True``), mapping order kept."""
    if isinstance(value, dict):
        return (dict, tuple((_frozen(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (list, tuple(_frozen(v) for v in value))
    return (type(value), value)


def with_strategy(config: RunConfig, strategy: str, options: Any = None) -> RunConfig:
    """The same run under another strategy (its default options unless given)."""
    opts = options if options is not None else STRATEGIES[strategy].Options()
    return replace(config, strategy=strategy, options=opts)
