"""Whether the 70B NVMe backward's copy and write streams are a max-plus recursion.

The fast-forward (``tiersim.fastforward``) cannot skip the 70B NVMe backward: its D2H,
H2D and NVMe-write streams fall behind the compute in queues that grow (docs/design/fast-forward.md).
A design that would skip it takes those streams out of the event run and computes their
tasks as start = the later of the stream's previous end and the dependencies' ends, end =
start + delay + bytes / the flow's own bound. That is exact only when none of their links
can saturate. This script checks it on points of the sweep benchmark's grid: it simulates
each point in full, recomputes those streams' backward tasks from the other tasks' end times
and prints the largest relative difference in end time and the recursion's wall time.

    python3 benchmarks/copy_stage_recursion.py [--points 0 137 999]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sweep_throughput import sweep_spec  # noqa: E402

from tiersim.simulate import simulate  # noqa: E402
from tiersim.sweeping.points import load_sweep, plan_sweep  # noqa: E402

COPY_STREAMS = frozenset({"d2h", "h2d", "aio_write"})
"""The streams the recursion recomputes."""


def recursion_error(index: int, config: object) -> tuple[int, float, float]:
    """Tasks recomputed, the largest relative end-time difference and the recursion's seconds."""
    result = simulate(config, fast_forward=False)  # type: ignore[arg-type]
    run, graph = result.engine, result.built
    if run is None or graph is None:
        raise SystemExit(f"point {index} does not fit")
    chosen = [p for p, task in enumerate(graph.tasks) if task.phase == "backward" and task.stream in COPY_STREAMS]
    began = time.perf_counter()
    ends: dict[int, float] = {}
    for p in chosen:  # program order is stream order
        ready = max((ends.get(d, run.end[d]) for d in graph.deps[p]), default=0.0)
        previous = graph.stream_prev[p]
        if previous >= 0:
            ready = max(ready, ends.get(previous, run.end[previous]))
        flow = graph.flows[p]
        ends[p] = ready + graph.tasks[p].delay + (flow[0] / flow[3] if flow else 0.0)
    seconds = time.perf_counter() - began
    worst = max(abs(ends[p] - run.end[p]) / run.end[p] for p in chosen)
    return len(chosen), worst, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="+", default=[0, 137, 999], help="grid points (0-999)")
    args = parser.parse_args()
    planned = plan_sweep(load_sweep(sweep_spec(1000)))
    for index in args.points:
        count, worst, seconds = recursion_error(index, planned[index].config)
        print(f"point {index}: {count} copy and write tasks of the backward, largest relative end-time "
              f"difference {worst:.1e}, recursion {seconds * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
