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
  ``strategies`` list (``strategies.nvme.buffer_count``, ``strategies.cxl.dram_weight``,
  ``strategies.dram.ratio``), or a field of an option's block (``strategies.NAME.OPTION.FIELD``:
  ``strategies.dram.offload_param.device``). In a point whose ``strategy`` is another one it is
  ignored.

Order of application: base, the file's ``set``, ``--set`` (``overrides``), the point's factors.
Every point is resolved into its ``RunConfig`` objects before anything runs (each point a
variant of one ``tiersim.config.document.ScenarioDocument``), so a bad value is a ``ConfigError``
naming the sweep file and the field's canonical path (``hardware.nvme.countt``), as ``--set``
and the scenario file would.

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

import functools
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim._version import __version__
from tiersim.config.document import SET, Origin, ScenarioDocument, load_document, show_value
from tiersim.config.limits import FORCE_HINT, MAX_SWEEP_RUNS, MAX_SWEEP_TASKS
from tiersim.errors import ConfigError

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
    """One assignment: canonical path ``key`` = ``value``, written at ``origin``."""

    key: str
    value: Any
    origin: Origin


@dataclass
class Sweep:
    """A parsed sweep: the base scenario with the sweep-level settings applied, and the points."""

    name: str
    source: str
    document: ScenarioDocument
    """The base scenario, the file's ``set`` and ``--set`` applied (but for options of
    strategies the base does not list: see ``pending``)."""
    settings: list[Setting]
    kind: str  # "grid" or "points"
    points: list[dict[str, Any]]
    factors: list[str]
    description: str = ""
    pending: tuple[Setting, ...] = ()
    """Settings of strategies the base does not list, applied where a point selects them."""

    @property
    def base_source(self) -> str:
        """The base scenario's file (or ``SWEEP: base`` for a mapping)."""
        return self.document.source

    def origin(self, index: int) -> Origin:
        """Where the factor values of point ``index`` are written."""
        return Origin(self.source, "grid" if self.kind == "grid" else f"points[{index}]")

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
    source, data, here = _sweep_mapping(spec)
    for key in data:
        if key not in SWEEP_KEYS:
            raise ConfigError(source, str(key), f"unknown field (known: {', '.join(SWEEP_KEYS)})")
    if "base" not in data:
        raise ConfigError(source, "base", "required field is missing (the scenario file to sweep over)")
    base = _read_base(data["base"], source, here)
    settings = _settings(data.get("set"), source, "set") + _settings(list(overrides), SET.source, None)
    kind, points, factors = _design(data, source, base, force)
    for setting in settings:
        if setting.origin == SET and setting.key in factors:
            raise ConfigError(SET.source, setting.key, "is a factor of this sweep; change its values in the sweep file")
    name = data.get("name", Path(source).stem if source != "<sweep>" else "sweep")
    if not isinstance(name, str) or not name:
        raise ConfigError(source, "name", f"expected a non-empty string, got {name!r}")
    description = data.get("description") or ""
    document, pending = _with_settings(base, settings)
    return Sweep(str(name), source, document, settings, kind, points, factors, str(description), pending)


def _sweep_mapping(spec: str | Path | Mapping[str, Any]) -> tuple[str, dict[str, Any], Path]:
    """The sweep's source name, its mapping, and the folder its relative paths start from."""
    from tiersim.config.yamlfile import read_yaml

    if isinstance(spec, Mapping):
        return "<sweep>", dict(spec), Path.cwd()
    path = Path(spec)
    read = read_yaml(path)
    if not isinstance(read, dict):
        raise ConfigError(str(path), "", "a sweep file must be a mapping with 'base' and 'grid' or 'points'")
    return str(path), read, path.parent


def _design(
    data: dict[str, Any], source: str, base: ScenarioDocument, force: bool,
) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The sweep's kind (``grid`` or ``points``), its points and its factors (the keys the
    points set, in order); a grid's points are made only once their count is allowed."""
    if ("grid" in data) == ("points" in data):
        raise ConfigError(source, "grid", "give exactly one of 'grid' (a cartesian product) or 'points' (a list)")
    if "grid" in data:
        axes = _grid_axes(data["grid"], source)
        factors = [key for key, _values in axes]
        _check_run_count(math.prod(len(values) for _key, values in axes), factors, base, "grid", source, force)
        combos = itertools.product(*(values for _key, values in axes))
        return "grid", [dict(zip(factors, combo)) for combo in combos], factors
    points = _list_points(data["points"], source)
    factors = []
    for point in points:
        factors.extend(k for k in point if k not in factors)
    _check_run_count(len(points), factors, base, "points", source, force)
    return "points", points, factors


def _check_run_count(count: int, factors: list[str], base: ScenarioDocument, kind: str, source: str,
                     force: bool) -> None:
    """Refuse ``count`` points (times the base's strategies, unless a factor picks the strategy)
    over ``MAX_SWEEP_RUNS`` runs, unless ``force``."""
    per_point = 1 if STRATEGY_FACTOR in factors else max(1, _strategy_count(base.data))
    if count * per_point > MAX_SWEEP_RUNS and not force:
        raise ConfigError(source, kind, f"{count:,} points x {per_point} strategies = {count * per_point:,} runs; "
                                        f"the limit is {MAX_SWEEP_RUNS:,} runs per sweep ({FORCE_HINT})")


def _with_settings(base: ScenarioDocument, settings: list[Setting]) -> tuple[ScenarioDocument, tuple[Setting, ...]]:
    """The base with the sweep-level settings applied (fields first, then strategy options),
    and the options of strategies the base does not list (for the points that select them)."""
    doc = base
    for setting in settings:
        if not setting.key.startswith(STRATEGY_OPTIONS):
            doc = doc.with_values({setting.key: setting.value}, setting.origin)
    listed = doc.strategy_names()
    pending = []
    for setting in settings:
        if setting.key.startswith(STRATEGY_OPTIONS):
            if setting.key.split(".")[1] in listed:
                doc = doc.with_values({setting.key: setting.value}, setting.origin)
            else:
                pending.append(setting)
    return doc, tuple(pending)


def _read_base(raw: object, source: str, here: Path) -> ScenarioDocument:
    from tiersim.config.scenario import copy_plain

    if isinstance(raw, Mapping):
        return ScenarioDocument(copy_plain(dict(raw)), f"{source}: base", (here,))
    if not isinstance(raw, (str, Path)) or not str(raw):
        raise ConfigError(source, "base", f"expected a scenario file path or mapping, got {raw!r}")
    path = Path(raw)
    if not path.is_absolute():
        path = here / path
    if not path.is_file():
        raise ConfigError(source, "base", f"scenario file {str(raw)!r} not found (looked for {path})")
    return load_document(path)


def _settings(raw: object, source: str, label: str | None) -> list[Setting]:
    """``set:`` as a list of KEY=VALUE strings or a mapping; ``--set`` as a list of strings."""
    from tiersim.config.scenario import parse_assignment

    if raw is None:
        return []
    out: list[Setting] = []
    origin = Origin(source, label) if label else SET
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            _check_key(key, source, f"{label}.{key}")
            out.append(Setting(str(key), value, origin))
        return out
    if not isinstance(raw, list):
        raise ConfigError(source, label or "", "expected a list of KEY=VALUE strings or a mapping")
    for i, item in enumerate(raw):
        where = f"{label}[{i}]" if label else str(item)
        if not isinstance(item, str):
            raise ConfigError(source, where, f"expected KEY=VALUE, got {item!r}")
        key, value = parse_assignment(item, source, where)
        _check_key(key, source, where)
        out.append(Setting(key, value, origin))
    return out


def _check_key(key: object, source: str, where: str) -> None:
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ConfigError(source, where, f"expected a dotted field path, got {key!r}")


def _strategy_count(base: Mapping[str, Any]) -> int:
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
    checked: set[str] = set()  # keys already found well-formed (points repeat their keys)
    out: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        if not isinstance(point, Mapping):
            raise ConfigError(source, f"points[{i}]",
                              f"expected a mapping of dotted field path -> value, got {point!r}")
        for key in point:
            if key not in checked:
                _check_key(key, source, f"points[{i}].{key}")
                checked.add(key)
        canon = _canon(dict(point))
        if canon in seen:
            raise ConfigError(source, f"points[{i}]", f"is the same point as points[{seen[canon]}]")
        seen[canon] = i
        out.append({str(k): v for k, v in point.items()})
    return out


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# --------------------------------------------------------------------------------------------
# Resolution: points -> RunConfigs (all of them, before anything runs)
# --------------------------------------------------------------------------------------------


PROGRESS_EVERY = 1000
"""``plan_sweep`` reports its progress every this many points."""
PLAN_CHUNK = 250
"""Points ``plan_sweep`` resolves per call of ``plan_points`` (a task, on a pool)."""

PlannedPoint = list[tuple[int, str, str, str, "RunConfig", int]]
"""One point's runs as ``PlannedRun`` fields but the run index: point, strategy, point id,
config hash, config and tasks."""
ChunkMap = Callable[[Sequence[tuple[int, int]]], Iterable[tuple[list[PlannedPoint], "ConfigError | None"]]]
"""Resolves each (start, stop) range of points as ``plan_points`` does, results in order."""


def plan_sweep(
    sweep: Sweep, force: bool = False, on_progress: Callable[[int, int], None] | None = None,
    map_chunks: ChunkMap | None = None,
) -> list[PlannedRun]:
    """Every run of the sweep in point order (strategies in base order within a point).

    Each run is checked against the work limit and the sweep's runs against
    ``MAX_SWEEP_TASKS`` tasks in all (unless ``force``); ``on_progress(points done, points)``
    is called every ``PROGRESS_EVERY`` points and at the end. The points are resolved
    ``PLAN_CHUNK`` at a time, in this process or by ``map_chunks`` (a process pool's workers,
    each holding the sweep); the checks and errors are the same either way, in point order."""
    count = len(sweep.points)
    bounds = [(start, min(start + PLAN_CHUNK, count)) for start in range(0, count, PLAN_CHUNK)]
    chunks = map_chunks(bounds) if map_chunks is not None else (
        plan_points(sweep, start, stop, force) for start, stop in bounds)
    runs: list[PlannedRun] = []
    total_tasks = 0
    for (_start, stop), (points, error) in zip(bounds, chunks):
        for planned in points:
            for fields in planned:
                runs.append(PlannedRun(len(runs), *fields))
                total_tasks += fields[-1]
            if total_tasks > MAX_SWEEP_TASKS and not force:
                raise ConfigError(
                    sweep.source,
                    sweep.kind,
                    f"the runs of its first {planned[0][0] + 1:,} of {count:,} points already have "
                    f"{total_tasks:,} tasks; the limit is {MAX_SWEEP_TASKS:,} tasks per sweep ({FORCE_HINT})",
                )
        if error is not None:
            raise error
        if on_progress is not None and stop % PROGRESS_EVERY == 0 and stop < count:
            on_progress(stop, count)
    if on_progress is not None:
        on_progress(count, count)
    return runs


def plan_points(sweep: Sweep, start: int, stop: int,
                force: bool = False) -> tuple[list[PlannedPoint], ConfigError | None]:
    """The runs of points ``start`` to ``stop - 1`` as ``PlannedPoint``s, up to the first that
    cannot be resolved, and that one's error (None if all can)."""
    from tiersim.config.worksize import run_tasks

    encodings: dict[tuple[str, int], tuple[Any, str]] = {}
    out: list[PlannedPoint] = []
    for index in range(start, stop):
        try:
            configs = resolve_point(sweep, index, force)
        except ConfigError as exc:
            return out, exc
        point = {k: v for k, v in sweep.points[index].items() if k != STRATEGY_FACTOR}
        out.append([(index, config.strategy, _digest(_canon({"point": point, "strategy": config.strategy})),
                     config_hash(config, encodings), config, run_tasks(config)) for config in configs])
    return out, None


def plan_digest(runs: Sequence[PlannedRun]) -> str:
    """A hash of the resolved plan: every run's identity and config hash, in order. A sweep's
    output folder records it, so that another sweep is never resumed into that folder."""
    return _digest("\n".join(f"{r.point_id} {r.config_hash}" for r in runs))


def config_hash(config: RunConfig, memo: dict[tuple[str, int], tuple[Any, str]] | None = None) -> str:
    """A short hash of the resolved config (profile figures included) and the tiersim version.

    ``memo`` ((what, id of a config object) -> (object, its encoding or digest)) saves
    re-encoding the hardware, model, sections and scalars (name, seed, strategy) many runs
    share, and re-hashing the hardware; the hash is the same with or without it.
    """
    import dataclasses

    from tiersim.config.schema import to_plain

    def kept(what: str, value: Any, make: Callable[[], str]) -> str:
        """``make()``, once per config object and ``what`` in ``memo``."""
        if memo is None:
            return make()
        cached = memo.get((what, id(value)))
        if cached is None or cached[0] is not value:
            cached = memo[(what, id(value))] = (value, make())
        return cached[1]

    def encoded(value: Any) -> str:
        """``_canon(to_plain(value))`` (kept for immutable values: config objects, scalars)."""
        if not dataclasses.is_dataclass(value) and not isinstance(value, (str, int, float)):
            return _canon(to_plain(value))
        return kept("text", value, lambda: _canon(to_plain(value)))

    fields = _hashed_fields()
    text = "{" + ", ".join(f"{key}: {encoded(getattr(config, name))}" for name, key in fields) + "}"
    hardware = kept("digest", config.hardware, lambda: _digest(encoded(config.hardware)))
    return _digest(text + "|" + hardware + "|" + __version__)


@functools.cache
def _hashed_fields() -> tuple[tuple[str, str], ...]:
    """The fields of ``RunConfig`` that ``config_hash`` encodes as JSON text (all but
    ``hardware``, hashed apart), by name: (name, name as a JSON string)."""
    import dataclasses

    from tiersim.config.scenario import RunConfig

    names = sorted(f.name for f in dataclasses.fields(RunConfig) if f.name != "hardware")
    return tuple((name, json.dumps(name)) for name in names)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def point_document(sweep: Sweep, index: int) -> ScenarioDocument:
    """The scenario of point ``index``: the sweep's document with the point's factors set (each
    blamed on the point; its fields in one variant, its options in another), its ``strategy``
    selected, then the strategy options (those of a strategy the point does not run are left
    out)."""
    from tiersim.strategies import STRATEGIES

    point = sweep.points[index]
    origin = sweep.origin(index)
    doc = sweep.document
    fields = {k: v for k, v in point.items() if k != STRATEGY_FACTOR and not k.startswith(STRATEGY_OPTIONS)}
    if fields:
        doc = doc.with_values(fields, origin)
    selected = point.get(STRATEGY_FACTOR)
    if STRATEGY_FACTOR in point:
        if not isinstance(selected, str) or selected not in STRATEGIES:
            raise ConfigError(
                sweep.source,
                sweep.point_label(index, STRATEGY_FACTOR),
                f"unknown strategy {selected!r} (known: {', '.join(STRATEGIES)})",
            )
        doc = doc.with_strategy(selected)

    def applies(key: str) -> bool:
        """Whether option ``key`` is set here (not when this point runs another strategy)."""
        name = key.split(".")[1]
        return selected is None or name == selected or name not in STRATEGIES

    for setting in sweep.pending:
        if applies(setting.key):
            doc = doc.with_values({setting.key: setting.value}, setting.origin)
    options = {k: v for k, v in point.items() if k.startswith(STRATEGY_OPTIONS) and applies(k)}
    if options:
        doc = doc.with_values(options, origin)
    return doc


def resolve_point(sweep: Sweep, index: int, force: bool = False) -> list[RunConfig]:
    """The run configs of one point (``force`` lifts the work limit of a run). An invalid value
    a setting or factor gave names its canonical path and where it is written; an error in the
    base's own values (or a profile) names the point that ran into it."""
    doc = point_document(sweep, index)
    try:
        return doc.configs((), force)
    except ConfigError as exc:
        if exc.source in (sweep.source, SET.source):
            raise
        selected = STRATEGY_FACTOR in sweep.points[index] and exc.field.startswith(STRATEGY_OPTIONS)
        label = sweep.point_label(index, STRATEGY_FACTOR if selected else None)
        raise ConfigError(sweep.source, label, str(exc)) from None
