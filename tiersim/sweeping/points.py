"""Sweeps: a base scenario plus factors, run as a grid or a list of points, one Parquet row per run.

A sweep file (YAML)::

    name: nvme-knobs                       # optional; default: the file's stem
    description: ...                       # optional
    base: ../scenarios/quickstart.yaml     # the scenario, relative to this file (or a mapping)
    set: [training.global_batch=8]         # optional: applied to the base first (list or mapping)
    grid:                                  # cartesian product, last key varies fastest
      hardware.nvme.count: [1, 2, 4]
      strategies.nvme.buffer_count: [4, 8]
    # or, instead of grid, a list of points:
    # points:
    #   - {hardware.nvme.count: 1, strategy: nvme}
    #   - {hardware.nvme.count: 4, strategy: dram}

A factor is any scenario field by dotted path (``model.layers``, ``hardware.cxl.count``,
``training.global_batch``, ...), plus two forms for strategies:

- ``strategy``: runs only that strategy (its options as in the base scenario, or its defaults
  when the base does not list it). Without it every strategy of the base is a separate run.
- ``strategies.NAME.OPTION``: sets OPTION of strategy NAME's entry in the base scenario's
  ``strategies`` list (``strategies.nvme.buffer_count``, ``strategies.cxl.dram_weight``). In a
  point whose ``strategy`` is another one it is ignored.

Order of application: base, the file's ``set``, ``--set`` (``overrides``), the point's factors.
Every point is resolved into its ``RunConfig`` objects before anything runs, so a bad point is a
``ConfigError`` naming the sweep file and the factor (``grid.hardware.nvme.countt``).

Each run becomes one flat row: ``point`` (index of its point), ``point_id`` (hash of the point's
factors and the strategy), every factor (column named by its dotted path; ``strategy`` is the
``strategy`` column), every field of ``tiersim.analysis.report.flat_row``, ``seed``, ``tiersim_version``
and ``config_hash`` (hash of the resolved config and the version). Workers (a process pool, or
a Dask cluster) get ``RunConfig`` objects and return plain dicts; the rows stream into Parquet
part files under ``OUT/parts/`` (each written atomically) and are consolidated, in point order,
into ``OUT/results.parquet``. ``resume=True`` keeps stored rows whose point_id and config_hash
are still in the sweep and runs only the rest, so an interrupted and resumed sweep ends with the
same file as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim._version import __version__
from tiersim.errors import ConfigError
from tiersim.config.limits import FORCE_HINT, MAX_SWEEP_RUNS, MAX_SWEEP_TASKS

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.config.scenario import RunConfig

SWEEP_KEYS = ("name", "description", "base", "set", "grid", "points")
STRATEGY_FACTOR = "strategy"
STRATEGY_OPTIONS = "strategies."

# --------------------------------------------------------------------------------------------
# Sweep definition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One assignment ``key = value``; ``source`` and ``label`` name where it was written."""

    key: str
    value: Any
    source: str
    label: str


@dataclass
class Sweep:
    """A parsed sweep: the base scenario mapping, sweep-level settings and the points."""

    name: str
    source: str
    base: dict[str, Any]
    base_source: str
    search: tuple[Path, ...]
    settings: list[Setting]
    kind: str  # "grid" or "points"
    points: list[dict[str, Any]]
    factors: list[str]
    description: str = ""

    def point_label(self, index: int, key: str | None = None) -> str:
        """Where in the sweep file a point (or one of its factors) is written."""
        if self.kind == "grid":
            if key is not None:
                return f"grid.{key}"
            desc = ", ".join(f"{k}={show_value(v)}" for k, v in self.points[index].items())
            return f"grid point {index} ({desc})"
        return f"points[{index}]" + (f".{key}" if key is not None else "")


@dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep: which point, its strategy, its resolved config and identity."""

    index: int
    point: int
    strategy: str
    point_id: str
    config_hash: str
    config: RunConfig
    tasks: int = 0
    """Tasks its run builds (``tiersim.config.worksize.run_tasks``)."""


def load_sweep(spec: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), force: bool = False) -> Sweep:
    """Read and check a sweep file (or mapping); ``overrides`` are ``--set`` style KEY=VALUE.
    More than ``MAX_SWEEP_RUNS`` runs is refused before any point is made, unless ``force``."""
    from tiersim.config.yamlfile import read_yaml

    if isinstance(spec, Mapping):
        source, data, here = "<sweep>", dict(spec), Path.cwd()
    else:
        path = Path(spec)
        source, data, here = str(path), read_yaml(path), path.parent
        if not isinstance(data, dict):
            raise ConfigError(source, "", "a sweep file must be a mapping with 'base' and 'grid' or 'points'")
    for key in data:
        if key not in SWEEP_KEYS:
            raise ConfigError(source, str(key), f"unknown field (known: {', '.join(SWEEP_KEYS)})")
    if "base" not in data:
        raise ConfigError(source, "base", "required field is missing (the scenario file to sweep over)")
    base, base_source, search = _read_base(data["base"], source, here)
    settings = _settings(data.get("set"), source, "set") + _settings(list(overrides), "--set", None)
    if ("grid" in data) == ("points" in data):
        raise ConfigError(source, "grid", "give exactly one of 'grid' (a cartesian product) or 'points' (a list)")
    kind = "grid" if "grid" in data else "points"
    if kind == "grid":
        axes = _grid_axes(data["grid"], source)
        factors = [key for key, _values in axes]
        count = math.prod(len(values) for _key, values in axes)
    else:
        points = _list_points(data["points"], source)
        factors = []
        for point in points:
            factors.extend(k for k in point if k not in factors)
        count = len(points)
    per_point = 1 if STRATEGY_FACTOR in factors else max(1, _strategy_count(base))
    if count * per_point > MAX_SWEEP_RUNS and not force:
        raise ConfigError(source, kind, f"{count:,} points x {per_point} strategies = {count * per_point:,} runs; "
                                        f"the limit is {MAX_SWEEP_RUNS:,} runs per sweep ({FORCE_HINT})")
    if kind == "grid":
        keys = [key for key, _values in axes]
        points = [dict(zip(keys, combo)) for combo in itertools.product(*(values for _key, values in axes))]
    for setting in settings:
        if setting.source == "--set" and setting.key in factors:
            raise ConfigError("--set", setting.key, "is a factor of this sweep; change its values in the sweep file")
    name = data.get("name", Path(source).stem if source != "<sweep>" else "sweep")
    if not isinstance(name, str) or not name:
        raise ConfigError(source, "name", f"expected a non-empty string, got {name!r}")
    description = data.get("description") or ""
    return Sweep(str(name), source, base, base_source, search, settings, kind, points, factors, str(description))


def _read_base(raw: object, source: str, here: Path) -> tuple[dict[str, Any], str, tuple[Path, ...]]:
    from tiersim.config.scenario import copy_plain
    from tiersim.config.yamlfile import read_yaml

    if isinstance(raw, Mapping):
        return copy_plain(dict(raw)), f"{source}: base", (here,)
    if not isinstance(raw, (str, Path)) or not str(raw):
        raise ConfigError(source, "base", f"expected a scenario file path or mapping, got {raw!r}")
    path = Path(raw)
    if not path.is_absolute():
        path = here / path
    if not path.is_file():
        raise ConfigError(source, "base", f"scenario file {str(raw)!r} not found (looked for {path})")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a scenario must be a mapping")
    return data, str(path), (path.parent,)


def _settings(raw: object, source: str, label: str | None) -> list[Setting]:
    """``set:`` as a list of KEY=VALUE strings or a mapping; ``--set`` as a list of strings."""
    from tiersim.config.scenario import parse_assignment

    if raw is None:
        return []
    out: list[Setting] = []
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            _check_key(key, source, f"{label}.{key}")
            out.append(Setting(str(key), value, source, f"{label}.{key}"))
        return out
    if not isinstance(raw, list):
        raise ConfigError(source, label or "", "expected a list of KEY=VALUE strings or a mapping")
    for i, item in enumerate(raw):
        where = f"{label}[{i}]" if label else str(item)
        if not isinstance(item, str):
            raise ConfigError(source, where, f"expected KEY=VALUE, got {item!r}")
        key, value = parse_assignment(item, source, where)
        _check_key(key, source, where)
        out.append(Setting(key, value, source, f"{label}.{key}" if label else key))
    return out


def _check_key(key: object, source: str, where: str) -> None:
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ConfigError(source, where, f"expected a dotted field path, got {key!r}")


def _strategy_count(base: dict[str, Any]) -> int:
    """How many strategies the base scenario lists (each is a run of every point)."""
    strategies = base.get("strategies")
    return len(strategies) if isinstance(strategies, list) else 1


def _grid_axes(grid: object, source: str) -> list[tuple[str, list[Any]]]:
    if not isinstance(grid, Mapping):
        raise ConfigError(source, "grid", "expected a mapping of dotted field path -> list of values")
    if not grid:
        raise ConfigError(source, "grid", "is empty: give at least one factor and its values")
    axes: list[tuple[str, list[Any]]] = []
    for key, values in grid.items():
        _check_key(key, source, f"grid.{key}")
        where = f"grid.{key}"
        if not isinstance(values, list) or not values:
            raise ConfigError(source, where, f"expected a non-empty list of values, got {values!r}")
        seen: set[str] = set()
        for value in values:
            canon = _canon(value)
            if canon in seen:
                raise ConfigError(source, where, f"value {show_value(value)} is listed twice")
            seen.add(canon)
        axes.append((str(key), list(values)))
    return axes


def _list_points(points: object, source: str) -> list[dict[str, Any]]:
    if not isinstance(points, list) or not points:
        raise ConfigError(source, "points", "expected a non-empty list of mappings (dotted field path -> value)")
    seen: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        if not isinstance(point, Mapping):
            raise ConfigError(source, f"points[{i}]", f"expected a mapping of dotted field path -> value, got {point!r}")
        for key in point:
            _check_key(key, source, f"points[{i}].{key}")
        canon = _canon(dict(point))
        if canon in seen:
            raise ConfigError(source, f"points[{i}]", f"is the same point as points[{seen[canon]}]")
        seen[canon] = i
        out.append({str(k): v for k, v in point.items()})
    return out


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def show_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


# --------------------------------------------------------------------------------------------
# Resolution: points -> RunConfigs (all of them, before anything runs)
# --------------------------------------------------------------------------------------------


PROGRESS_EVERY = 1000
"""``plan_sweep`` reports its progress every this many points."""


def plan_sweep(sweep: Sweep, force: bool = False,
               on_progress: Callable[[int, int], None] | None = None) -> list[PlannedRun]:
    """Every run of the sweep in point order (strategies in base order within a point).

    Each run is checked against the work limit and the sweep's runs against
    ``MAX_SWEEP_TASKS`` tasks in all (unless ``force``); ``on_progress(points done, points)``
    is called every ``PROGRESS_EVERY`` points and at the end."""
    from tiersim.config.worksize import run_tasks

    runs: list[PlannedRun] = []
    hardware_digests: dict[int, tuple[Any, str]] = {}
    resolved: dict[Any, Any] = {}
    total_tasks = 0
    for index, point in enumerate(sweep.points):
        if on_progress is not None and index % PROGRESS_EVERY == 0 and index:
            on_progress(index, len(sweep.points))
        for config in resolve_point(sweep, index, resolved, force):
            tasks = run_tasks(config)
            total_tasks += tasks
            ident = {"point": {k: v for k, v in point.items() if k != STRATEGY_FACTOR},
                     "strategy": config.strategy}
            runs.append(PlannedRun(
                index=len(runs),
                point=index,
                strategy=config.strategy,
                point_id=_digest(_canon(ident)),
                config_hash=config_hash(config, hardware_digests),
                config=config,
                tasks=tasks,
            ))
        if total_tasks > MAX_SWEEP_TASKS and not force:
            raise ConfigError(sweep.source, sweep.kind,
                              f"the runs of its first {index + 1:,} of {len(sweep.points):,} points already have "
                              f"{total_tasks:,} tasks; the limit is {MAX_SWEEP_TASKS:,} tasks per sweep ({FORCE_HINT})")
    if on_progress is not None:
        on_progress(len(sweep.points), len(sweep.points))
    return runs


def plan_digest(runs: Sequence[PlannedRun]) -> str:
    """A hash of the resolved plan: every run's identity and config hash, in order. A sweep's
    output folder records it, so that another sweep is never resumed into that folder."""
    return _digest("\n".join(f"{r.point_id} {r.config_hash}" for r in runs))


def config_hash(config: RunConfig, memo: dict[int, tuple[Any, str]] | None = None) -> str:
    """A short hash of the resolved config (profile figures included) and the tiersim version.

    ``memo`` (id of a Hardware object -> (object, digest)) saves re-encoding hardware shared by
    many runs; the hash is the same with or without it.
    """
    import dataclasses

    from tiersim.config.schema import to_plain

    hardware = config.hardware
    cached = memo.get(id(hardware)) if memo is not None else None
    if cached is not None and cached[0] is hardware:
        hw_digest = cached[1]
    else:
        hw_digest = _digest(_canon(to_plain(hardware)))
        if memo is not None:
            memo[id(hardware)] = (hardware, hw_digest)
    rest = {f.name: to_plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.name != "hardware"}
    return _digest(_canon(rest) + "|" + hw_digest + "|" + __version__)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve_point(sweep: Sweep, index: int, resolved: dict[Any, Any] | None = None,
                  force: bool = False) -> list[RunConfig]:
    """The run configs of one point; errors name the sweep file and the factor. ``resolved``:
    hardware resolved for earlier points (see ``scenario_from_dict``); ``force`` lifts the
    work limit of a run."""
    from tiersim.config.scenario import copy_plain, scenario_from_dict
    from tiersim.strategies import STRATEGIES

    point = sweep.points[index]
    data = copy_plain(sweep.base)
    assignments = list(sweep.settings) + [
        Setting(k, v, sweep.source, sweep.point_label(index, k)) for k, v in point.items() if k != STRATEGY_FACTOR
    ]
    option_settings: list[tuple[Setting, str, str]] = []
    for setting in assignments:
        if setting.key.startswith(STRATEGY_OPTIONS):
            parts = setting.key.split(".")
            if len(parts) != 3:
                raise ConfigError(setting.source, setting.label,
                                  "strategy options are written strategies.NAME.OPTION, e.g. strategies.nvme.buffer_count")
            name, option = parts[1], parts[2]
            if name not in STRATEGIES:
                raise ConfigError(setting.source, setting.label,
                                  f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")
            option_names = _option_fields(STRATEGIES[name].Options)
            if option not in option_names:
                known = ", ".join(sorted(option_names)) or "none"
                raise ConfigError(setting.source, setting.label,
                                  f"strategy {name!r} has no option {option!r} (known: {known})")
            option_settings.append((setting, name, option))
        else:
            _assign(data, setting)
    selected: str | None = None
    if STRATEGY_FACTOR in point:
        selected = point[STRATEGY_FACTOR]
        label = sweep.point_label(index, STRATEGY_FACTOR)
        if not isinstance(selected, str) or selected not in STRATEGIES:
            raise ConfigError(sweep.source, label, f"unknown strategy {selected!r} (known: {', '.join(STRATEGIES)})")
        entries = _entries(data, sweep.base_source)
        entry = entries.get(selected, {"name": selected})
        data["strategies"] = [entry]
    for setting, name, option in option_settings:
        entries = _entries(data, sweep.base_source)
        if name not in entries:
            if selected is not None:
                continue  # this point runs another strategy: the option does not apply
            raise ConfigError(setting.source, setting.label,
                              f"strategy {name!r} is not in the base scenario's strategies (has: {', '.join(entries)})")
        entries[name][option] = setting.value
        data["strategies"] = list(entries.values())
    try:
        return scenario_from_dict(data, sweep.base_source, (), sweep.search, resolved, force)
    except ConfigError as exc:
        raise _attribute(exc, data, assignments, sweep, index) from None


def _option_fields(options_cls: type) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(options_cls) if f.init}


def _entries(data: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """The ``strategies`` list as {name: mapping} (string entries become mappings)."""
    raw = data.get("strategies")
    if not isinstance(raw, list):
        raise ConfigError(source, "strategies", "expected a non-empty list of strategy names or mappings")
    entries: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(raw):
        fields = {"name": item} if isinstance(item, str) else item
        if not isinstance(fields, dict) or not isinstance(fields.get("name"), str):
            raise ConfigError(source, f"strategies[{i}]", "expected a strategy name or a mapping with 'name'")
        entries.setdefault(fields["name"], dict(fields))
    return entries


def _assign(data: dict[str, Any], setting: Setting) -> None:
    """Set ``setting.key`` (dotted) in ``data`` as ``--set`` would (``tiersim.config.scenario.assign``)."""
    from tiersim.config.scenario import assign

    assign(data, setting.key, setting.value, setting.source, setting.label)


def _attribute(exc: ConfigError, data: dict[str, Any], assignments: list[Setting], sweep: Sweep,
               index: int) -> ConfigError:
    """Name the factor (or setting) an error in the resolved scenario comes from."""
    from tiersim.config.scenario import named_field, touches

    fld = named_field(exc.field, data)
    if exc.source == sweep.base_source:
        for setting in reversed(assignments):
            if touches(setting.key, fld):
                return ConfigError(setting.source, setting.label, f"{exc.message} (value {show_value(setting.value)})")
    if STRATEGY_FACTOR in sweep.points[index] and (fld.startswith("strategies") or fld == ""):
        return ConfigError(sweep.source, sweep.point_label(index, STRATEGY_FACTOR), str(exc))
    return ConfigError(sweep.source, sweep.point_label(index), str(exc))
