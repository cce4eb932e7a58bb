"""A sweep's rows on disk: Arrow tables with fixed column types, Parquet part files written
atomically under ``OUT/parts/``, and their consolidation, in run order, into
``OUT/results.parquet`` (see ``tiersim.sweeping.points`` for what a row holds).

``OUT/sweep.json`` names the sweep a folder belongs to (its name, files and the hash of its
resolved plan, ``plan_digest``); it is written before the first part. ``open_folder`` refuses,
before touching anything, a folder that holds another sweep (or rows without that record),
and without ``resume`` one that already holds this sweep. A sweep holds ``OUT/.lock`` while it
writes there (``folder_lock``), so a second writer is refused."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim._version import __version__
from tiersim.config.document import show_value
from tiersim.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa

from tiersim.sweeping.points import (
    STRATEGY_FACTOR,
    PlannedRun,
    Sweep,
    plan_digest,
)

RESULTS_FILE = "results.parquet"
PARTS_DIR = "parts"
SWEEP_FILE = "sweep.json"
LOCK_FILE = ".lock"
ROW_PREFIX = ("point", "point_id")
ROW_SUFFIX = ("seed", "tiersim_version", "config_hash")

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
        for name in ("scenario", "strategy", "bottleneck", "reason", "error", "tiersim_version"):
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

    def table(self, rows: Sequence[dict[str, Any]]) -> pa.Table:
        import pyarrow as pa

        columns = list(dict.fromkeys(key for row in rows for key in row))  # in order of first use
        arrays = [pa.array([row.get(c) for row in rows], type=self._type(c)) for c in columns]
        return pa.Table.from_arrays(arrays, names=columns)


def write_part(parts: Path, table: pa.Table) -> Path:
    """Write one part atomically: a hidden temp file in the same folder, then rename."""
    import pyarrow.parquet as pq

    name = f"part-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = parts / f".{name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, parts / name)
    return parts / name


def read_parts(parts: Path, clean: bool = True) -> list[pa.Table]:
    """Every complete part (with ``clean``, leftover temp files of a killed sweep are removed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables: list[pa.Table] = []
    if not parts.is_dir():
        return tables
    for tmp in parts.glob(".part-*.tmp") if clean else ():
        with contextlib.suppress(OSError):
            tmp.unlink()
    for path in sorted(parts.glob("part-*.parquet")):
        try:
            tables.append(pq.read_table(path))
        except (OSError, pa.ArrowInvalid):
            print(f"tiersim: warning: ignoring unreadable part {path}", file=sys.stderr)
    return tables


def concat_tables(tables: Sequence[pa.Table], where: Path | None = None) -> pa.Table | None:
    """The tables as one (column types promoted); parts that cannot be merged are a ConfigError
    naming the folder ``where``."""
    import pyarrow as pa

    if not tables:
        return None
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ConfigError(str(where or "sweep"), PARTS_DIR, f"parts that cannot be merged ({exc})") from None


def stored_rows(table: pa.Table | None, runs: Sequence[PlannedRun], failed: bool = True) -> dict[int, int]:
    """{run index: row in ``table``} for stored rows that still belong to this sweep: a run's
    first row without an ``error``, else (when ``failed``) its last failed one."""
    if table is None or table.num_rows == 0 or "point_id" not in table.column_names:
        return {}
    by_id = {r.point_id: r for r in runs}
    ids = table.column("point_id").to_pylist()
    none = [None] * len(ids)
    hashes = table.column("config_hash").to_pylist() if "config_hash" in table.column_names else none
    errors = table.column("error").to_pylist() if "error" in table.column_names else none
    found: dict[int, int] = {}
    failures: dict[int, int] = {}
    for row, (pid, chash, error) in enumerate(zip(ids, hashes, errors)):
        run = by_id.get(pid)
        if run is None or run.config_hash != chash:
            continue
        if error is not None:
            failures[run.index] = row
        elif run.index not in found:
            found[run.index] = row
    if failed:
        for index, row in failures.items():
            found.setdefault(index, row)
    return found


class FolderInUse(ConfigError):
    """The output folder already holds this sweep (``stored`` of ``total`` runs) and no
    ``resume`` was asked for."""

    def __init__(self, out: Path, stored: int, total: int) -> None:
        self.out, self.stored, self.total = out, stored, total
        state = f"complete, {total:,} runs" if stored == total else f"{stored:,} of {total:,} runs"
        super().__init__(str(out), "out", f"already holds this sweep ({state})")


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock (``OUT/.lock``, made with the folder when missing) while a sweep writes
    there: a second writer, in this process or another, is refused in one line. The lock is the
    kernel's (``flock``; the file is never written): it goes with its holder however that ends,
    so a lock file a killed sweep left behind locks nothing."""
    import fcntl

    path = out / LOCK_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise ConfigError(str(out), "out", f"cannot write there ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigError(str(out), "out", f"another sweep is writing there now (it holds {LOCK_FILE}); wait "
                                               "for it to finish or choose another folder") from None
        yield
    finally:
        os.close(handle)


def open_folder(out: Path, sweep: Sweep, runs: Sequence[PlannedRun], resume: bool) -> list[pa.Table]:
    """The stored parts of this sweep in ``out``, after checking (before touching anything)
    that the folder is new or this sweep's and, without ``resume``, new; the folder and its
    ``sweep.json`` are created when missing."""
    parts = out / PARTS_DIR
    record_path = out / SWEEP_FILE
    digest = plan_digest(runs)
    record = _read_record(record_path)
    if record is None:
        if (out / RESULTS_FILE).exists() or any(parts.glob("part-*.parquet")):
            raise ConfigError(str(out), "out", f"holds sweep results without a {SWEEP_FILE} (another tool's or an "
                                               "older tiersim's); nothing was changed: choose another folder")
    elif record.get("plan") != digest:
        raise ConfigError(str(out), "out", f"belongs to sweep {record.get('name')!r} ({record.get('runs')} runs, "
                                           f"plan {record.get('plan')}), not to this one ({sweep.name!r}, "
                                           f"{len(runs)} runs, plan {digest}); nothing was changed: "
                                           f"choose another folder")
    elif not resume:
        stored = stored_rows(concat_tables(read_parts(parts, clean=False), out), runs, failed=False)
        raise FolderInUse(out, len(stored), len(runs))
    tables = read_parts(parts)
    try:
        parts.mkdir(parents=True, exist_ok=True)
        if record is None:
            meta = {"name": sweep.name, "source": sweep.source, "base": sweep.base_source, "plan": digest,
                    "runs": len(runs), "points": len(sweep.points), "factors": sweep.factors,
                    "tiersim_version": __version__}
            tmp = out / f".{SWEEP_FILE}.tmp"
            tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
            os.replace(tmp, record_path)
    except OSError as exc:
        raise ConfigError(str(out), "out", f"cannot write there ({exc.strerror})") from None
    return tables


def _read_record(path: Path) -> dict[str, Any] | None:
    """A folder's ``sweep.json`` (None when there is none)."""
    if not path.exists():
        return None
    from tiersim.config.yamlfile import read_input

    try:
        record = json.loads(read_input(path, 1 << 20))
    except (ConfigError, UnicodeDecodeError, ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        raise ConfigError(str(path), "", "is not a sweep record written by tiersim; choose another folder")
    return record


def final_table(table: pa.Table, found: dict[int, int], sweep: Sweep, overrides: Sequence[str]) -> pa.Table:
    """The stored rows of this sweep in run order, with provenance in the schema metadata."""
    import pyarrow as pa

    order = [found[i] for i in sorted(found)]
    final = table.take(pa.array(order, type=pa.int64()))
    meta = {
        "name": sweep.name,
        "source": sweep.source,
        "base": sweep.base_source,
        "set": [f"{s.key}={show_value(s.value)}" for s in sweep.settings],
        "factors": sweep.factors,
        "tiersim_version": __version__,
    }
    return final.replace_schema_metadata({b"tiersim.sweep": json.dumps(meta, default=str).encode()})


def results_frame(out: str | Path) -> pd.DataFrame:
    """Read a finished sweep's ``results.parquet`` (a folder or the file) as a DataFrame."""
    import pandas as pd

    path = Path(out)
    return pd.read_parquet(path / RESULTS_FILE if path.is_dir() else path)
