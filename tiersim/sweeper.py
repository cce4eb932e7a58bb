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
``strategy`` column), every field of ``tiersim.report.flat_row``, ``seed``, ``tiersim_version``
and ``config_hash`` (hash of the resolved config and the version). Workers (a process pool, or
a Dask cluster) get ``RunConfig`` objects and return plain dicts; the rows stream into Parquet
part files under ``OUT/parts/`` (each written atomically) and are consolidated, in point order,
into ``OUT/results.parquet``. ``resume=True`` keeps stored rows whose point_id and config_hash
are still in the sweep and runs only the rest, so an interrupted and resumed sweep ends with the
same file as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from tiersim import __version__
from tiersim.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa

    from tiersim.scenario import RunConfig

SWEEP_KEYS = ("name", "description", "base", "set", "grid", "points")
STRATEGY_FACTOR = "strategy"
STRATEGY_OPTIONS = "strategies."
RESULTS_FILE = "results.parquet"
PARTS_DIR = "parts"
ROW_PREFIX = ("point", "point_id")
ROW_SUFFIX = ("seed", "tiersim_version", "config_hash")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: ``saved`` of ``total`` runs are stored under ``out`` (if any)."""

    def __init__(self, saved: int, total: int, out: Path | None) -> None:
        super().__init__(f"{saved} of {total} runs saved")
        self.saved = saved
        self.total = total
        self.out = out


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
            desc = ", ".join(f"{k}={_show(v)}" for k, v in self.points[index].items())
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
    config: "RunConfig"


def load_sweep(spec: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> Sweep:
    """Read and check a sweep file (or mapping); ``overrides`` are ``--set`` style KEY=VALUE."""
    from tiersim.profiles import read_yaml

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
    points = _grid_points(data["grid"], source) if kind == "grid" else _list_points(data["points"], source)
    factors: list[str] = []
    for point in points:
        factors.extend(k for k in point if k not in factors)
    for setting in settings:
        if setting.source == "--set" and setting.key in factors:
            raise ConfigError("--set", setting.key, "is a factor of this sweep; change its values in the sweep file")
    name = data.get("name", Path(source).stem if source != "<sweep>" else "sweep")
    if not isinstance(name, str) or not name:
        raise ConfigError(source, "name", f"expected a non-empty string, got {name!r}")
    description = data.get("description") or ""
    return Sweep(str(name), source, base, base_source, search, settings, kind, points, factors, str(description))


def _read_base(raw: object, source: str, here: Path) -> tuple[dict[str, Any], str, tuple[Path, ...]]:
    from tiersim.profiles import read_yaml

    if isinstance(raw, Mapping):
        return copy.deepcopy(dict(raw)), f"{source}: base", (here,)
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
    from tiersim.scenario import parse_assignment

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


def _grid_points(grid: object, source: str) -> list[dict[str, Any]]:
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
                raise ConfigError(source, where, f"value {_show(value)} is listed twice")
            seen.add(canon)
        axes.append((str(key), list(values)))
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in axes))]


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


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


# --------------------------------------------------------------------------------------------
# Resolution: points -> RunConfigs (all of them, before anything runs)
# --------------------------------------------------------------------------------------------


def plan_sweep(sweep: Sweep) -> list[PlannedRun]:
    """Every run of the sweep in point order (strategies in base order within a point)."""
    runs: list[PlannedRun] = []
    hardware_digests: dict[int, tuple[Any, str]] = {}
    for index, point in enumerate(sweep.points):
        for config in resolve_point(sweep, index):
            ident = {"point": {k: v for k, v in point.items() if k != STRATEGY_FACTOR},
                     "strategy": config.strategy}
            runs.append(PlannedRun(
                index=len(runs),
                point=index,
                strategy=config.strategy,
                point_id=_digest(_canon(ident)),
                config_hash=config_hash(config, hardware_digests),
                config=config,
            ))
    return runs


def config_hash(config: "RunConfig", memo: dict[int, tuple[Any, str]] | None = None) -> str:
    """A short hash of the resolved config (profile figures included) and the tiersim version.

    ``memo`` (id of a Hardware object -> (object, digest)) saves re-encoding hardware shared by
    many runs; the hash is the same with or without it.
    """
    import dataclasses

    from tiersim.schema import to_plain

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


def resolve_point(sweep: Sweep, index: int) -> list["RunConfig"]:
    """The run configs of one point; errors name the sweep file and the factor."""
    from tiersim.scenario import scenario_from_dict
    from tiersim.strategies import STRATEGIES

    point = sweep.points[index]
    data = copy.deepcopy(sweep.base)
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
        return scenario_from_dict(data, sweep.base_source, (), sweep.search)
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
    """Set ``setting.key`` (dotted) in ``data`` as ``--set`` would (``tiersim.scenario.assign``)."""
    from tiersim.scenario import assign

    assign(data, setting.key, setting.value, setting.source, setting.label)


def _attribute(exc: ConfigError, data: dict[str, Any], assignments: list[Setting], sweep: Sweep,
               index: int) -> ConfigError:
    """Name the factor (or setting) an error in the resolved scenario comes from."""
    fld = exc.field
    if fld.startswith("strategies["):
        close = fld.find("]")
        try:
            entry = data["strategies"][int(fld[len("strategies["):close])]
            name = entry if isinstance(entry, str) else entry.get("name")
            rest = fld[close + 1:]
            rest = rest[1:] if rest.startswith(".") else rest
            if name is not None and rest and rest != "name":
                fld = f"strategies.{name}.{rest}"
        except (ValueError, IndexError, KeyError, TypeError, AttributeError):
            pass
    if fld and exc.source == sweep.base_source:
        for setting in reversed(assignments):
            key = setting.key
            if fld == key or fld.startswith(key + ".") or fld.startswith(key + "[") or key.startswith(fld + "."):
                return ConfigError(setting.source, setting.label, f"{exc.message} (value {_show(setting.value)})")
    if STRATEGY_FACTOR in sweep.points[index] and (fld.startswith("strategies") or fld == ""):
        return ConfigError(sweep.source, sweep.point_label(index, STRATEGY_FACTOR), str(exc))
    return ConfigError(sweep.source, sweep.point_label(index), str(exc))


# --------------------------------------------------------------------------------------------
# Work unit (runs in workers)
# --------------------------------------------------------------------------------------------


def run_batch(batch: Sequence[tuple[int, "RunConfig"]]) -> list[tuple[int, dict[str, Any]]]:
    """Simulate each ``(run index, config)``; return ``(run index, flat row)`` pairs (plain dicts)."""
    from tiersim.report import flat_row
    from tiersim.simulate import simulate

    out: list[tuple[int, dict[str, Any]]] = []
    for index, config in batch:
        row = flat_row(config.scenario, simulate(config))
        row["seed"] = config.seed
        row["tiersim_version"] = __version__
        out.append((index, row))
    return out


def _noop(_: int) -> None:
    """Starts the pool's workers."""


def _ignore_sigint() -> None:
    """Pool worker initialiser: Ctrl-C is the parent's to handle (it stops submitting)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --------------------------------------------------------------------------------------------
# Rows and Parquet parts
# --------------------------------------------------------------------------------------------


class RowTable:
    """Turns rows into Arrow tables with one fixed type per factor column."""

    def __init__(self, sweep: Sweep, runs: Sequence[PlannedRun]) -> None:
        import pyarrow as pa

        self.sweep = sweep
        self.runs = runs
        self.factors = [k for k in sweep.factors if k != STRATEGY_FACTOR and k not in ROW_PREFIX + ROW_SUFFIX]
        self.types: dict[str, Any] = {"point": pa.int64(), "point_id": pa.string(), "config_hash": pa.string()}
        self.text_factors: set[str] = set()
        for key in self.factors:
            values = [sweep.points[r.point].get(key) for r in runs]
            try:
                inferred = pa.array(values).type
                nested = pa.types.is_nested(inferred)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                inferred, nested = None, True
            if nested:
                self.text_factors.add(key)
                self.types[key] = pa.string()
            else:
                self.types[key] = inferred
        for name in ("scenario", "strategy", "bottleneck", "reason", "tiersim_version"):
            self.types.setdefault(name, pa.string())
        self.float_suffix = "_s"

    def _type(self, column: str) -> Any:
        import pyarrow as pa

        if column in self.types:
            return self.types[column]
        return pa.float64() if column.endswith(self.float_suffix) else None

    def row(self, run: PlannedRun, result_row: dict[str, Any]) -> dict[str, Any]:
        """The full row: prefix, factors, result fields, seed, version, config hash."""
        point = self.sweep.points[run.point]
        row: dict[str, Any] = {"point": run.point, "point_id": run.point_id}
        for key in self.factors:
            value = point.get(key)
            if key in self.text_factors and value is not None and not isinstance(value, str):
                value = json.dumps(value, sort_keys=True, default=str)
            row[key] = value
        for key, value in result_row.items():
            if key not in ROW_SUFFIX:
                row[key] = value
        row["seed"] = result_row.get("seed", run.config.seed)
        row["tiersim_version"] = result_row.get("tiersim_version", __version__)
        row["config_hash"] = run.config_hash
        return row

    def table(self, rows: Sequence[dict[str, Any]]) -> "pa.Table":
        import pyarrow as pa

        columns: list[str] = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
        arrays = [pa.array([row.get(c) for row in rows], type=self._type(c)) for c in columns]
        return pa.Table.from_arrays(arrays, names=columns)


def _write_part(parts: Path, table: "pa.Table") -> Path:
    """Write one part atomically: a hidden temp file in the same folder, then rename."""
    import pyarrow.parquet as pq

    name = f"part-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = parts / f".{name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, parts / name)
    return parts / name


def _read_parts(parts: Path) -> list["pa.Table"]:
    """Every complete part (leftover temp files of a killed sweep are removed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    if not parts.is_dir():
        return tables
    for tmp in parts.glob(".part-*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
    for path in sorted(parts.glob("part-*.parquet")):
        try:
            tables.append(pq.read_table(path))
        except (OSError, pa.ArrowInvalid):
            print(f"tiersim: warning: ignoring unreadable part {path}", file=sys.stderr)
    return tables


def _concat(tables: Sequence["pa.Table"]) -> "pa.Table | None":
    import pyarrow as pa

    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def _stored_rows(table: "pa.Table | None", runs: Sequence[PlannedRun]) -> dict[int, int]:
    """{run index: row in ``table``} for stored rows that still belong to this sweep."""
    if table is None or table.num_rows == 0 or "point_id" not in table.column_names:
        return {}
    by_id = {r.point_id: r for r in runs}
    ids = table.column("point_id").to_pylist()
    hashes = table.column("config_hash").to_pylist() if "config_hash" in table.column_names else [None] * len(ids)
    found: dict[int, int] = {}
    for row, (pid, chash) in enumerate(zip(ids, hashes)):
        run = by_id.get(pid)
        if run is not None and run.config_hash == chash and run.index not in found:
            found[run.index] = row
    return found


def _final_table(table: "pa.Table", found: dict[int, int], sweep: Sweep, overrides: Sequence[str]) -> "pa.Table":
    """The stored rows of this sweep in run order, with provenance in the schema metadata."""
    import pyarrow as pa

    order = [found[i] for i in sorted(found)]
    final = table.take(pa.array(order, type=pa.int64()))
    meta = {
        "name": sweep.name,
        "source": sweep.source,
        "base": sweep.base_source,
        "set": [f"{s.key}={_show(s.value)}" for s in sweep.settings],
        "factors": sweep.factors,
        "tiersim_version": __version__,
    }
    return final.replace_schema_metadata({b"tiersim.sweep": json.dumps(meta, default=str).encode()})


# --------------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------------

Batch = list[tuple[int, "RunConfig"]]
Sink = Callable[[list[tuple[int, dict[str, Any]]]], None]


def _batches(runs: Sequence[PlannedRun], size: int) -> list[Batch]:
    items = [(r.index, r.config) for r in runs]
    return [items[i:i + size] for i in range(0, len(items), size)]


def default_chunk_size(runs: int, workers: int) -> int:
    """Runs per task: about 16 tasks per worker, between 1 and 32 runs each."""
    return max(1, min(32, math.ceil(runs / (max(1, workers) * 16))))


def default_jobs() -> int:
    """CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _run_inline(batches: list[Batch], sink: Sink) -> None:
    for batch in batches:
        sink(run_batch(batch))


def _start_pool(jobs: int) -> Any:
    """A process pool with its workers started (they ignore Ctrl-C; the parent handles it)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork starts a worker in ~10 ms (forkserver/spawn: ~1 s of imports each); the workers are
    # started here, before the progress bar's thread exists, and only ever run simulate().
    method = "fork" if sys.platform.startswith("linux") else None
    context = multiprocessing.get_context(method)
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_ignore_sigint)
    if method == "fork":
        list(executor.map(_noop, range(jobs)))
    return executor


def _run_pool(executor: Any, batches: list[Batch], sink: Sink) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait

    futures: list[Any] = []
    written: set[Any] = set()
    try:
        futures = [executor.submit(run_batch, batch) for batch in batches]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                sink(future.result())
                written.add(future)
    except KeyboardInterrupt:
        # Stop submitting; let running batches finish and keep what they computed.
        executor.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if future not in written and future.done() and not future.cancelled() and future.exception() is None:
                sink(future.result())
                written.add(future)
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _dask_client(scheduler: Any) -> tuple[Any, bool]:
    """A ``distributed.Client`` for an address, a cluster object or a client (owned: close it)."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--scheduler", "", "needs dask[distributed]: pip install 'tiersim[dask]'") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    try:
        if isinstance(scheduler, str):
            return Client(scheduler, timeout="10s", set_as_default=False), True
        return Client(scheduler, set_as_default=False), True
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError("--scheduler", str(scheduler), f"cannot connect to the Dask scheduler ({exc})") from None


def _run_dask(client: Any, batches: list[Batch], sink: Sink) -> None:
    from distributed import as_completed

    futures: list[Any] = []
    try:
        futures = client.map(run_batch, batches, pure=False)
        for future in as_completed(futures, loop=client.loop):
            sink(future.result())
            future.release()
    except KeyboardInterrupt:
        client.cancel(futures)
        raise


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------


@dataclass
class SweepOutcome:
    """What ``run_sweep`` did: rows (DataFrame), counts and the results file."""

    frame: "pd.DataFrame"
    total: int
    resumed: int
    computed: int
    seconds: float
    results: Path | None
    sweep: Sweep
    workers: int = 1
    where: str = "in-process"
    runs: list[PlannedRun] = field(repr=False, default_factory=list)


def run_sweep(
    spec: str | Path | Mapping[str, Any],
    jobs: int | None = 1,
    scheduler: Any = None,
    out: str | Path | None = None,
    resume: bool = False,
    overrides: Sequence[str] = (),
    progress: bool = False,
    chunk_size: int | None = None,
) -> SweepOutcome:
    """Plan, run and store a sweep; see the module docstring. Raises ``SweepInterrupted``."""
    started = time.perf_counter()
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise ConfigError("--jobs", "", f"must be a whole number of at least 1, got {jobs!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ConfigError("--chunk-size", "", f"must be a whole number of at least 1, got {chunk_size!r}")
    sweep = load_sweep(spec, overrides)
    runs = plan_sweep(sweep)
    rows_table = RowTable(sweep, runs)
    out_dir = Path(out) if out is not None else None
    parts = out_dir / PARTS_DIR if out_dir is not None else None

    stored: list[Any] = []
    found: dict[int, int] = {}
    if parts is not None:
        existing = _read_parts(parts) if parts.is_dir() else []
        if existing and not resume:
            raise ConfigError(str(out_dir), "--out",
                              "already holds results of a sweep; pass --resume to continue it, or choose another --out")
        stored = existing
        found = _stored_rows(_concat(stored), runs)
        try:
            parts.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(str(out_dir), "--out", f"cannot create directory ({exc.strerror})") from None
    todo = [r for r in runs if r.index not in found]
    resumed = len(runs) - len(todo)
    memory_tables: list[Any] = []
    computed = 0

    workers = 1 if scheduler is None and jobs == 1 else (jobs or default_jobs())
    size = chunk_size or default_chunk_size(len(todo), workers)
    batches = _batches(todo, size)

    backend: Any = None
    owned = False
    try:
        if batches and scheduler is not None:
            backend, owned = _dask_client(scheduler)
        elif batches and workers > 1:
            backend, owned = _start_pool(workers), True
        with _progress_bar(progress, len(runs), resumed, sweep.name) as advance:

            def sink(results: list[tuple[int, dict[str, Any]]]) -> None:
                nonlocal computed
                if not results:
                    return
                table = rows_table.table([rows_table.row(runs[i], row) for i, row in results])
                if parts is not None:
                    _write_part(parts, table)
                else:
                    memory_tables.append(table)
                computed += len(results)
                advance(len(results))

            if not batches:
                pass
            elif scheduler is not None:
                _run_dask(backend, batches, sink)
            elif workers == 1:
                _run_inline(batches, sink)
            else:
                _run_pool(backend, batches, sink)
    except KeyboardInterrupt:
        raise SweepInterrupted(resumed + computed, len(runs), out_dir) from None
    finally:
        if owned and backend is not None:
            if scheduler is not None:
                backend.close()
            else:
                backend.shutdown(wait=True, cancel_futures=True)

    if parts is not None:
        table = _concat(_read_parts(parts))
    else:
        table = _concat(memory_tables)
    found = _stored_rows(table, runs)
    missing = len(runs) - len(found)
    if missing:  # pragma: no cover - would be a bug (a part lost between write and read)
        raise RuntimeError(f"sweep finished but {missing} of {len(runs)} runs have no row")
    assert table is not None
    final = _final_table(table, found, sweep, overrides)
    results_path = None
    if out_dir is not None:
        import pyarrow.parquet as pq

        results_path = out_dir / RESULTS_FILE
        tmp = out_dir / f".{RESULTS_FILE}.tmp"
        pq.write_table(final, tmp)
        os.replace(tmp, results_path)
    frame = final.to_pandas()
    where = f"on Dask scheduler {scheduler}" if scheduler is not None else (
        "in-process" if workers == 1 else f"on {workers} worker processes")
    return SweepOutcome(frame, len(runs), resumed, computed, time.perf_counter() - started, results_path, sweep,
                        workers, where, runs)


def sweep(
    sweep_file_or_dict: str | Path | Mapping[str, Any],
    jobs: int | None = 1,
    scheduler: Any = None,
    out: str | Path | None = None,
    resume: bool = False,
    overrides: Sequence[str] = (),
    progress: bool = False,
    chunk_size: int | None = None,
) -> "pd.DataFrame":
    """Run a sweep and return its rows as a DataFrame (one row per run, in point order).

    ``jobs``: 1 runs in this process, N>1 on a local process pool, None = one per CPU.
    ``scheduler``: a Dask scheduler address (``tcp://host:8786``), cluster or ``Client``; the
    runs then go to that cluster instead. ``out``: a folder for ``parts/`` and
    ``results.parquet`` (``resume=True`` continues an interrupted sweep there).
    ``overrides``: ``KEY=VALUE`` strings applied to the base scenario, as ``--set``.
    """
    return run_sweep(sweep_file_or_dict, jobs, scheduler, out, resume, overrides, progress, chunk_size).frame


@contextlib.contextmanager
def _progress_bar(enabled: bool, total: int, done: int, name: str) -> Iterator[Callable[[int], None]]:
    """A rich progress bar with ETA on stderr; a no-op when disabled."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        task = bar.add_task(f"sweep {name}", total=total, completed=done, rate="")
        start, count = time.perf_counter(), 0

        def advance(n: int) -> None:
            nonlocal count
            count += n
            elapsed = time.perf_counter() - start
            rate = f"{count / elapsed:.1f} runs/s" if elapsed > 0 else ""
            bar.update(task, advance=n, rate=rate)

        yield advance


def results_frame(out: str | Path) -> "pd.DataFrame":
    """Read a finished sweep's ``results.parquet`` (a folder or the file) as a DataFrame."""
    import pandas as pd

    path = Path(out)
    return pd.read_parquet(path / RESULTS_FILE if path.is_dir() else path)


__all__ = ["Sweep", "PlannedRun", "SweepInterrupted", "SweepOutcome", "load_sweep", "plan_sweep", "resolve_point",
           "run_batch", "run_sweep", "sweep", "results_frame", "config_hash", "default_jobs", "default_chunk_size"]
