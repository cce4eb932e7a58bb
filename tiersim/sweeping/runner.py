"""Running a sweep: every planned run simulated in-process, on a local process pool or on a Dask
cluster (the same pure ``simulate``), rows streamed into Parquet parts, ``resume`` skipping
stored runs, Ctrl-C keeping what was computed. The sweep file format is in
``tiersim.sweeping.points``; the on-disk rows in ``tiersim.sweeping.store``."""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim._version import __version__
from tiersim.errors import API, ConfigError, ModelError
from tiersim.gc_pause import cyclic_gc_paused
from tiersim.progress import progress_bar

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from tiersim.config.scenario import RunConfig

from tiersim.sweeping.points import PlannedPoint, PlannedRun, Sweep, load_sweep, plan_points, plan_sweep
from tiersim.sweeping.store import (
    PARTS_DIR,
    RESULTS_FILE,
    RowTable,
    concat_tables,
    final_table,
    folder_lock,
    open_folder,
    results_frame,
    stored_rows,
    write_part,
)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, ``signum``) during a sweep: ``saved`` of ``total`` runs are stored
    under ``out`` (if any)."""

    def __init__(self, saved: int, total: int, out: Path | None, signum: int = signal.SIGINT) -> None:
        super().__init__(f"{saved} of {total} runs saved")
        self.saved = saved
        self.total = total
        self.out = out
        self.signum = signum


class SweepAborted(Exception):
    """A sweep stopped by something other than the user (a worker process killed from outside,
    e.g. by the out-of-memory killer): ``saved`` of ``total`` runs are stored under ``out``."""

    def __init__(self, saved: int, total: int, out: Path | None, reason: str) -> None:
        super().__init__(reason)
        self.saved = saved
        self.total = total
        self.out = out
        self.reason = reason


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that it stops a sweep as Ctrl-C does."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While a sweep runs, SIGTERM (``kill PID``) interrupts it as Ctrl-C does (outside the
    main thread signals cannot be handled, and nothing changes)."""
    def interrupt(signum: int, frame: object) -> None:
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --------------------------------------------------------------------------------------------
# Work unit (runs in workers)
# --------------------------------------------------------------------------------------------


INT64_MAX = 2**63 - 1


def run_batch(batch: Sequence[tuple[int, RunConfig]]) -> list[tuple[int, dict[str, Any]]]:
    """Simulate each ``(run index, config)``; return ``(run index, flat row)`` pairs (plain dicts).

    Every row has ``runtime_s`` (seconds the run took here) and ``error`` (None). A run that
    raises becomes a row of its scenario and strategy with ``error`` naming the exception, and
    the batch carries on; so does a run whose result has a whole number the Parquet row cannot
    hold (over 2^63)."""
    from tiersim.analysis.report import flat_row
    from tiersim.simulate import simulate

    out: list[tuple[int, dict[str, Any]]] = []
    with cyclic_gc_paused():
        for index, config in batch:
            began = time.perf_counter()
            try:
                row = flat_row(config.scenario, simulate(config))
                too_large = [k for k, v in row.items() if isinstance(v, int) and abs(v) > INT64_MAX]
                if too_large:
                    raise OverflowError(f"{too_large[0]} = {row[too_large[0]]:.3g} does not fit a 64-bit column")
                row["error"] = None
            except Exception as exc:  # noqa: BLE001 - a failing run is recorded, not fatal to the sweep
                row = {"scenario": config.scenario, "strategy": config.strategy,
                       "error": f"{type(exc).__name__}: {exc}"}
            row["runtime_s"] = time.perf_counter() - began
            row["seed"] = config.seed
            row["tiersim_version"] = __version__
            out.append((index, row))
    return out


@contextlib.contextmanager
def _frozen() -> Iterator[None]:
    """Keep every object made so far out of the collector's full passes (``gc.freeze``): a
    sweep's planned runs, thousands of objects that live as long as the sweep, are passed over
    in tens of milliseconds each time, to free nothing. A pool's workers, forked before
    planning, freeze what they inherit themselves (``_worker_init``)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _noop(_: int) -> None:
    """Starts the pool's workers."""


_SWEEP: Sweep | None = None
"""In a pool worker: the sweep whose points it plans (``_plan_chunk``)."""


def _plan_chunk(start: int, stop: int, force: bool) -> tuple[list[PlannedPoint], ConfigError | None]:
    """In a pool worker: ``plan_points`` of the sweep it holds."""
    if _SWEEP is None:
        raise ModelError("a planning task reached a worker that holds no sweep")
    return plan_points(_SWEEP, start, stop, force)


def _worker_init(parent: int, sweep: Sweep | None) -> None:
    """Pool worker initialiser: it holds ``sweep`` (forked, not copied, on Linux) and keeps
    what it inherits out of the collector's full passes (``gc.freeze``: a pass over the
    parent's objects, tens of milliseconds, would also copy every page it shares with them);
    Ctrl-C and SIGTERM are the parent's to handle (it stops submitting and lets running
    batches finish); the worker dies with its parent, even when the parent is killed outright
    (``kill -9``: Linux's parent-death signal)."""
    global _SWEEP
    gc.freeze()
    _SWEEP = sweep
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() != parent:  # forked by the parent, which died before the signal was armed
            os._exit(1)


# --------------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------------

Batch = list[tuple[int, "RunConfig"]]
Sink = Callable[[list[tuple[int, dict[str, Any]]]], None]


def _batches(runs: Sequence[PlannedRun], size: int) -> list[Batch]:
    items = [(r.index, r.config) for r in runs]
    return [items[i:i + size] for i in range(0, len(items), size)]


def default_chunk_size(runs: int, workers: int) -> int:
    """Runs per task: about 16 tasks per worker, between 1 and 128 runs each (a task's rows
    are one Parquet part, or share one with the tasks that finished with it on a pool: smaller
    tasks in a large sweep cost the parent more than the runs)."""
    return max(1, min(128, math.ceil(runs / (max(1, workers) * 16))))


def default_jobs() -> int:
    """CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_backend(jobs: int | None, scheduler: Any, force: bool = False) -> None:
    """Refuse, before anything runs, ``jobs`` (a whole number) over the CPUs this process may use
    (unless ``force``), and a scheduler address Dask cannot parse or resolve (a ``ConfigError``
    naming the parameter)."""
    if jobs is not None and jobs > default_jobs() and not force:
        raise ConfigError(API, "jobs", f"{jobs} worker processes for the {default_jobs()} CPUs this process may use; "
                                       "at most one per CPU (--force runs more)")
    if isinstance(scheduler, str):
        try:
            from distributed.comm import resolve_address
        except ImportError:
            raise ConfigError(API, "scheduler", "needs dask[distributed]: pip install 'tiersim[dask]'") from None
        try:
            resolve_address(scheduler)
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(API, "scheduler", f"cannot use the Dask scheduler address {scheduler!r} ({exc}); "
                                                "expected e.g. tcp://10.0.0.5:8786") from None


def _run_inline(batches: list[Batch], sink: Sink) -> None:
    for batch in batches:
        sink(run_batch(batch))


def _start_pool(jobs: int, sweep: Sweep | None = None) -> Any:
    """A process pool with its workers started, each holding ``sweep`` (they ignore Ctrl-C;
    the parent handles it)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork starts a worker in ~10 ms (forkserver/spawn: ~1 s of imports each); the workers are
    # started here, before the progress bar's thread exists, and only ever run simulate().
    method = "fork" if sys.platform.startswith("linux") else None
    context = multiprocessing.get_context(method)
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init,
                                   initargs=(os.getpid(), sweep))
    if method == "fork":
        list(executor.map(_noop, range(jobs)))
    return executor


def _run_pool(executor: Any, batches: list[Batch], sink: Sink) -> None:
    """Run the batches on the pool. The sink gets, in one call (one Parquet part), the rows of
    every batch that has finished since its last call, in the order they finished: one batch's
    when the parent keeps up with the workers, several when it lags behind (fast runs)."""
    import queue

    finished: queue.SimpleQueue[Any] = queue.SimpleQueue()
    futures: list[Any] = []
    written: set[Any] = set()
    try:
        futures = [executor.submit(run_batch, batch) for batch in batches]
        for future in futures:
            future.add_done_callback(finished.put)
        while len(written) < len(futures):
            ready = [finished.get()]
            while not finished.empty():
                ready.append(finished.get())
            _store_finished(ready, written, sink)
            for future in ready:
                future.result()  # a batch that raised (its worker died): BrokenProcessPool
    except KeyboardInterrupt:
        # Stop submitting; let running batches finish and keep what they computed.
        executor.shutdown(wait=True, cancel_futures=True)
        _store_finished(futures, written, sink)
        raise


def _store_finished(futures: Sequence[Any], written: set[Any], sink: Sink) -> None:
    """Hand the sink the rows of those ``futures`` that finished without raising and are not
    ``written`` yet, together, in order; they are ``written`` then."""
    done = [f for f in futures if f not in written and f.done() and not f.cancelled() and f.exception() is None]
    sink([pair for future in done for pair in future.result()])
    written.update(done)


def _release_pool(executor: Any) -> None:
    """Shut a pool down (what runs finishes; a broken pool's survivors are killed first)."""
    _kill_if_broken(executor)
    executor.shutdown(wait=True, cancel_futures=True)


def _kill_if_broken(executor: Any) -> None:
    """Kill the surviving workers of a broken pool. They ignore SIGTERM (the parent handles
    it), so the pool's own ``terminate()`` leaves them alive and its shutdown spins forever."""
    if getattr(executor, "_broken", False):
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            with contextlib.suppress(OSError, ValueError):
                process.kill()


def _dask_client(scheduler: Any) -> tuple[Any, bool]:
    """A ``distributed.Client`` for an address, a cluster object or a client (owned: close it)."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(API, "scheduler", "needs dask[distributed]: pip install 'tiersim[dask]'") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    try:
        if isinstance(scheduler, str):
            return Client(scheduler, timeout="10s", set_as_default=False), True
        return Client(scheduler, set_as_default=False), True
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(API, "scheduler", f"cannot connect to the Dask scheduler {scheduler!s} ({exc})") from None


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

    frame: pd.DataFrame
    total: int
    resumed: int
    computed: int
    seconds: float
    results: Path | None
    sweep: Sweep
    workers: int = 1
    where: str = "in-process"
    runs: list[PlannedRun] = field(repr=False, default_factory=list)
    failed: int = 0
    """Rows whose run raised (their ``error`` column says what)."""


NOTICE_RUNS = 1000
"""A sweep of at least this many runs says how large it is even without a progress bar."""


def run_sweep(
    spec: str | Path | Mapping[str, Any],
    jobs: int | None = 1,
    scheduler: Any = None,
    out: str | Path | None = None,
    resume: bool = False,
    overrides: Sequence[str] = (),
    progress: bool = False,
    chunk_size: int | None = None,
    force: bool = False,
    notice: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Plan, run and store a sweep; see the module docstring. Raises ``SweepInterrupted``
    (Ctrl-C or SIGTERM) or ``SweepAborted`` (a worker died), having kept what was computed.
    ``force`` lifts the work limits (``tiersim.config.limits``); ``notice``
    is told the size of the work before planning and before running when ``progress`` is on or
    the sweep has ``NOTICE_RUNS`` points or more (and, without a progress bar, how far the
    planning of such a sweep has got, every tenth).

    In phases: plan, open the store (the rows ``out`` already holds), choose a backend and
    execute the rest, consolidate the rows into one table (and ``results.parquet``)."""
    started = time.perf_counter()
    _check_positive("jobs", jobs)
    _check_positive("chunk_size", chunk_size)
    check_backend(jobs, scheduler, force)
    sweep = load_sweep(spec, overrides, force)
    workers = 1 if scheduler is None and jobs == 1 else (jobs or default_jobs())
    # A local pool is started first and plans the points too (each worker holds the sweep).
    pool = _start_pool(workers, sweep) if scheduler is None and workers > 1 else None
    held = contextlib.ExitStack()  # the output folder's lock, from opening the store to the last file
    try:
        with cyclic_gc_paused():  # planning leaves no reference cycle to collect
            runs = _plan(sweep, force, progress, notice, pool)
        with _frozen():
            if out is not None:
                held.enter_context(folder_lock(Path(out)))
            store = _open_store(sweep, runs, Path(out) if out is not None else None, resume)
            todo = [r for r in runs if r.index not in store.found]
            resumed = len(runs) - len(todo)
            batches = _batches(todo, chunk_size or default_chunk_size(len(todo), workers))
            _execute(store, batches, scheduler, progress, f"sweep {sweep.name}", resumed, pool)
        final, results_path = store.consolidate(overrides)
    finally:
        if pool is not None:
            _release_pool(pool)
        held.close()
    frame = final.to_pandas()
    failed = int(frame["error"].notna().sum()) if "error" in frame.columns else 0
    return SweepOutcome(frame, len(runs), resumed, store.computed, time.perf_counter() - started, results_path,
                        sweep, workers, _where(scheduler, workers), runs, failed)


def _check_positive(name: str, value: object) -> None:
    """Refuse an argument ``name`` that is given (not None) but is not a whole number >= 1."""
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ConfigError(API, name, f"must be a whole number of at least 1, got {value!r}")


def _where(scheduler: Any, workers: int) -> str:
    """Where the runs ran, in words."""
    if scheduler is not None:
        return f"on Dask scheduler {scheduler}"
    return "in-process" if workers == 1 else f"on {workers} worker processes"


def _plan(sweep: Sweep, force: bool, progress: bool, notice: Callable[[str], None] | None,
          pool: Any = None) -> list[PlannedRun]:
    """Plan (validate) every run of the sweep, on the ``pool``'s workers if given, telling
    ``notice`` how large it is."""
    from tiersim.config.worksize import describe

    loud = progress or len(sweep.points) >= NOTICE_RUNS
    if notice is not None and loud:
        notice(f"sweep {sweep.name}: planning {len(sweep.points):,} points")
    with progress_bar(progress, len(sweep.points), f"plan {sweep.name}", "points") as planned:
        tenths = 0

        def report(done: int, total: int) -> None:
            """The bar, or without one a line every tenth of a large sweep."""
            nonlocal tenths
            planned.reach(done)
            if notice is not None and loud and not progress and done < total and done * 10 // total > tenths:
                tenths = done * 10 // total
                notice(f"sweep {sweep.name}: planned {done:,} of {total:,} points")

        def on_pool(bounds: Sequence[tuple[int, int]]) -> Iterator[tuple[list[PlannedPoint], ConfigError | None]]:
            return pool.map(_plan_chunk, [a for a, _ in bounds], [b for _, b in bounds], [force] * len(bounds))

        try:
            runs = plan_sweep(sweep, force, report, on_pool if pool is not None else None)
        except BrokenProcessPool:
            raise SweepAborted(0, len(sweep.points), None, "a worker process died while planning "
                               "(killed from outside, e.g. by the out-of-memory killer)") from None
    if notice is not None and (loud or len(runs) >= NOTICE_RUNS):
        notice(f"sweep {sweep.name}: {describe(len(runs), sum(r.tasks for r in runs))}")
    return runs


@dataclass
class _Store:
    """Where a sweep's rows go: Parquet parts under ``out`` (if any), each part's table also
    kept in memory. ``found``: {run index: row} of the rows ``out`` held before this sweep ran."""

    sweep: Sweep
    runs: list[PlannedRun]
    out: Path | None
    found: dict[int, int]
    rows: RowTable
    tables: list[Any] = field(default_factory=list)
    """The parts ``out`` held before this sweep ran, then each added one, in the order they
    were written (so consolidating reads nothing back)."""
    computed: int = 0

    def add(self, results: list[tuple[int, dict[str, Any]]]) -> None:
        """Store the rows of one finished batch."""
        table = self.rows.table([self.rows.row(self.runs[i], row) for i, row in results])
        if self.out is not None:
            write_part(self.out / PARTS_DIR, table)
        self.tables.append(table)
        self.computed += len(results)

    def consolidate(self, overrides: Sequence[str]) -> tuple[Any, Path | None]:
        """Every run's row in run order as one Arrow table, written to ``results.parquet``
        under ``out`` (whose path comes back; None without ``out``)."""
        table = concat_tables(self.tables, self.out)
        runs = self.runs
        found = stored_rows(table, runs)
        missing = len(runs) - len(found)
        if missing or table is None:  # pragma: no cover - would be a bug (a part lost between write and read)
            raise ModelError(f"sweep finished but {missing} of {len(runs)} runs have no row")
        final = final_table(table, found, self.sweep, overrides)
        if self.out is None:
            return final, None
        import pyarrow.parquet as pq

        results_path = self.out / RESULTS_FILE
        tmp = self.out / f".{RESULTS_FILE}.tmp"
        pq.write_table(final, tmp)
        os.replace(tmp, results_path)
        return final, results_path


def _open_store(sweep: Sweep, runs: list[PlannedRun], out: Path | None, resume: bool) -> _Store:
    """The store of this sweep: ``out`` checked (see ``store.open_folder``) and its rows of
    this sweep found."""
    stored = open_folder(out, sweep, runs, resume) if out is not None else []
    found = stored_rows(concat_tables(stored, out), runs, failed=False)
    return _Store(sweep, runs, out, found, RowTable(sweep, runs), stored)


Backend = Callable[[list[Batch], Sink], None]
"""Runs batches, handing each one's rows to the sink as it finishes."""


def _choose_backend(scheduler: Any, pool: Any) -> tuple[Backend, Callable[[], None]]:
    """The backend (on the Dask ``scheduler``, the process ``pool``, or in this process) and
    how to let go of it afterwards (the pool is its owner's to shut down)."""
    if scheduler is not None:
        client, owned = _dask_client(scheduler)
        return functools.partial(_run_dask, client), client.close if owned else _nothing
    if pool is not None:
        return functools.partial(_run_pool, pool), _nothing
    return _run_inline, _nothing


def _nothing() -> None:
    """Letting go of the in-process backend (or of a Dask client the caller owns)."""


def _execute(
    store: _Store, batches: list[Batch], scheduler: Any, progress: bool, label: str, resumed: int, pool: Any = None,
) -> None:
    """Run the batches on the chosen backend (Dask ``scheduler``, the process ``pool``, or
    in this process) into ``store``, with a progress bar over every run
    (``resumed`` of them done before); Ctrl-C, SIGTERM and a dead worker keep what was stored."""
    release = _nothing
    total = len(store.runs)
    try:
        with _sigterm_interrupts():
            backend, release = _choose_backend(scheduler, pool) if batches else (_run_inline, _nothing)
            with progress_bar(progress, total, label, "runs", resumed) as bar:

                def sink(results: list[tuple[int, dict[str, Any]]]) -> None:
                    if results:
                        store.add(results)
                        bar.advance(len(results))

                backend(batches, sink)
    except KeyboardInterrupt as exc:
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        raise SweepInterrupted(resumed + store.computed, total, store.out, signum) from None
    except BrokenProcessPool:
        raise SweepAborted(
            resumed + store.computed,
            total,
            store.out,
            "a worker process died (killed from outside, e.g. by the out-of-memory killer)",
        ) from None
    finally:
        release()


def sweep(
    sweep_file_or_dict: str | Path | Mapping[str, Any],
    jobs: int | None = 1,
    scheduler: Any = None,
    out: str | Path | None = None,
    resume: bool = False,
    overrides: Sequence[str] = (),
    progress: bool = False,
    chunk_size: int | None = None,
    force: bool = False,
) -> pd.DataFrame:
    """Run a sweep and return its rows as a DataFrame (one row per run, in point order).

    ``jobs``: 1 runs in this process, N>1 on a local process pool, None = one per CPU.
    ``scheduler``: a Dask scheduler address (``tcp://host:8786``), cluster or ``Client``; the
    runs then go to that cluster instead. ``out``: a folder for ``parts/`` and
    ``results.parquet`` (``resume=True`` continues an interrupted sweep there).
    ``overrides``: ``KEY=VALUE`` strings applied to the base scenario, as ``--set``.
    ``force``: lift the limits on the work (``tiersim.config.limits``). A run that raises is a row
    with its ``error``; the others carry on.
    """
    return run_sweep(sweep_file_or_dict, jobs, scheduler, out, resume, overrides, progress, chunk_size, force).frame


__all__ = [
    "SweepAborted",
    "SweepInterrupted",
    "SweepOutcome",
    "run_batch",
    "run_sweep",
    "sweep",
    "results_frame",
    "default_jobs",
    "default_chunk_size",
]
