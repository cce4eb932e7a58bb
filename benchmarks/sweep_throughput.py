"""Sweep throughput: runs per second for a grid of Llama-2-70B iterations, per ``--jobs``.

Builds a ``--points``-point sweep (default 1,000) on scenarios/llama2-70b-offload.yaml with
``training.global_batch=4`` (one micro-step per rank: one iteration = forward, backward and
the offloaded optimizer step), NVMe offload, over NVMe drive count x pinned buffer count x aio
queue depth x aio thread count, and runs it with ``tiersim.sweeping.runner.run_sweep`` for each ``--jobs``
value (1 = in this process, N = a process pool of N), ``--repeat`` times each (default 3: the
VM's speed drifts by tens of percent within an hour). Prints the planning seconds in-process
(resolving every point's config; a sweep on a pool plans on its workers), the mean CPU
milliseconds per run of a worker's batch (``simulate`` and the result row) measured
in-process on a sample of the configs, and a markdown table: jobs,
runs, best wall seconds (planning, pool start, runs, Parquet parts and the final file), best
and every runs/s, and the best's speed-up over the first row. Target (issue 5): at least 200
runs/s on 2 cores. ``instructions_per_run.py`` counts instructions instead of seconds.
``--dask-workers 1 2 4`` also runs the sweep on a Dask ``LocalCluster`` of that many
single-threaded worker processes (started before the clock starts, closed after), one table
row per cluster size (issue 15: docs/performance.md gives runs/s for 1, 2 and 4 workers).
``--stub-simulate`` measures what the sweep costs around simulate: every run returns one
``Result`` simulated up front (the pool's workers are forked after the stub is in place), so
the table's seconds are loading and planning the points, the pool, the result rows, the Parquet
parts and the final file, and nothing else (``--jobs`` only: Dask's workers are spawned and
would run the real ``simulate``).

    python3 benchmarks/sweep_throughput.py --points 1000 --jobs 1 2
    python3 benchmarks/sweep_throughput.py --points 1000 --jobs 1 2 --stub-simulate
    python3 benchmarks/sweep_throughput.py --points 1000 --jobs 1 --dask-workers 1 2 4
    python3 benchmarks/sweep_throughput.py --points 100000 --jobs 2 --repeat 1 --force
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tiersim import _native  # noqa: E402
from tiersim.sweeping.points import load_sweep, plan_sweep  # noqa: E402
from tiersim.sweeping.runner import run_batch, run_sweep  # noqa: E402

AXES = {
    "hardware.nvme.count": [1, 2, 4, 8, 16],
    "strategies.nvme.buffer_count": [4, 8, 16, 32, 64],
    "strategies.nvme.queue_depth": [2, 4, 8, 16, 32, 64, 128, 256],
    "strategies.nvme.thread_count": [1, 2, 4, 8, 16],
}  # 5 * 5 * 8 * 5 = 1,000 points


def sweep_spec(points: int) -> dict:
    """The first ``points`` points of the grid (cycled if more are asked for) as a points sweep."""
    keys = list(AXES)
    combos = itertools.islice(itertools.cycle(itertools.product(*AXES.values())), points)
    rows = []
    for i, combo in enumerate(combos):
        point = {"strategy": "nvme", **dict(zip(keys, combo))}
        if i >= 1000:  # beyond the grid: vary the seed so every point is distinct
            point["seed"] = i // 1000
        rows.append(point)
    return {
        "name": "bench-70b-nvme",
        "base": str(ROOT / "scenarios" / "llama2-70b-offload.yaml"),
        "set": ["training.global_batch=4"],
        "points": rows,
    }


def run_cpu_ms(spec: dict, sample: int, force: bool = False) -> float:
    """Mean process CPU milliseconds per run of what a sweep worker does (``run_batch``:
    simulate and the result row) over ``sample`` configs of the sweep, after one untimed run."""
    runs = plan_sweep(load_sweep(spec), force=force)
    step = max(1, len(runs) // sample)
    chosen = [(r.index, r.config) for r in runs[::step]][:sample]
    run_batch(chosen[:1])
    start = time.process_time()
    run_batch(chosen)
    return (time.process_time() - start) * 1000 / len(chosen)


def stub_simulate(spec: dict) -> None:
    """Make ``simulate`` return, for every config, the ``Result`` of the sweep's first run
    (simulated once, here), so that a sweep costs only what it does around ``simulate``."""
    import tiersim.simulate as simulate_module

    result = simulate_module.simulate(plan_sweep(load_sweep({**spec, "points": spec["points"][:1]}))[0].config)
    simulate_module.simulate = lambda config, **kwargs: result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sample", type=int, default=50, help="configs timed in-process for CPU ms/run")
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="sweeps per --jobs value (the VM's speed drifts)")
    parser.add_argument("--dask-workers", type=int, nargs="*", default=[],
                        help="also run on a Dask LocalCluster of each of these worker counts")
    parser.add_argument("--force", action="store_true",
                        help="lift the sweep's work limit (100,000 points count over 10^8 tasks)")
    parser.add_argument("--stub-simulate", action="store_true",
                        help="every run returns one precomputed Result: what the sweep costs around simulate")
    args = parser.parse_args()
    if args.stub_simulate and args.dask_workers:
        parser.error("--stub-simulate applies to --jobs only (Dask's workers would run the real simulate)")
    spec = sweep_spec(args.points)
    if args.stub_simulate:
        stub_simulate(spec)
    t0 = time.perf_counter()
    plan_sweep(load_sweep(spec), force=args.force)
    planning = time.perf_counter() - t0
    cpu_ms = run_cpu_ms(spec, args.sample, args.force)
    work = "stub simulate + row" if args.stub_simulate else "simulate + row"
    print(f"{args.points} points of 70B (global_batch 4, nvme), planning in-process {planning:.2f} s, "
          f"{cpu_ms:.3g} ms CPU per run ({work}) in-process (mean of {args.sample}; {_native.describe()})")
    print()
    print("| backend | runs | wall s (best) | runs/s (best) | runs/s (each repeat) | speed-up (best) |")
    print("|---|-----:|--------------:|--------------:|---------------------:|----------------:|")
    first: float | None = None
    for jobs in args.jobs:
        first = row(f"jobs {jobs}", spec, args, first, jobs=jobs)
    for workers in args.dask_workers:
        from distributed import LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster:
            first = row(f"Dask LocalCluster, {workers} workers", spec, args, first, jobs=None, scheduler=cluster)
    return 0


def row(label: str, spec: dict, args: argparse.Namespace, first: float | None, **backend: object) -> float:
    """Run the sweep ``args.repeat`` times on one backend and print its table row; the first
    row's best runs/s (the speed-up's base)."""
    rates, walls = [], []
    total = 0
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            outcome = run_sweep(spec, out=Path(tmp) / "out", chunk_size=args.chunk_size, force=args.force,
                                **backend)  # type: ignore[arg-type]
        total = outcome.total
        rates.append(outcome.total / outcome.seconds)
        walls.append(outcome.seconds)
    best = max(rates)
    base = first or best
    each = ", ".join(f"{rate:.1f}" for rate in rates)
    print(f"| {label} | {total} | {min(walls):.2f} | {best:.1f} | {each} | {best / base:.2f}x |", flush=True)
    return base


if __name__ == "__main__":
    sys.exit(main())
