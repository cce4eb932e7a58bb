"""How the engine scales: tasks built, events and instructions of one simulated iteration.

For Llama-style 7B and 70B on a 4x H100 node and GPT-3 175B on an 8x H100 node (its 16-bit
parameters alone would need 87.5 GB per GPU on 4), one micro-step per rank, and for 70B also
at global batch 1,024 and 10^6 (256 and 250,000 micro-steps of gradient accumulation), then
70B on 1, 8, 64 and 512 nodes of 8 H100s (8, 64, 512 and 4,096 GPUs; data parallelism over
all of them, one micro-step per rank; the nodes joined by 8 NDR InfiniBand NICs each, as a DGX
H100's compute fabric), with DRAM, CXL and NVMe, build the scenario with ``scenario_from_dict``,
simulate one iteration per offload strategy and print a markdown table: model, GPUs, global
batch, strategy, fits, tasks built,
events (the engine's: delays and flow timers processed), the full simulation's events
(without fast-forward; not run past ``--full-limit`` micro-steps), wall time (best of
``--repeat`` runs of ``simulate``, ms), instructions per run (``--instructions``: counted by
valgrind's callgrind, one child process per case and strategy, counting its runs alone:
``callgrind.py``) and the predicted iteration time. ``--cases nodes`` runs only the cases of
nodes, and adds a column: each run's cost against the same strategy on 8 GPUs (one node), in
instructions where counted, else in CPU seconds (``time.process_time``, best of ``--repeat``,
all measured in one run of this script). A 4,096-GPU job must cost what an 8-GPU one does:
one rank of each role is simulated, whatever the ranks.

    python3 benchmarks/engine_scaling.py --cases node --repeat 3 --instructions
    python3 benchmarks/engine_scaling.py --cases nodes --repeat 5 --instructions --runs 3
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiersim import _native
from tiersim.config.scenario import scenario_from_dict
from tiersim.simulate import simulate

MODELS: dict[str, dict[str, Any]] = {
    "llama-7b": {"name": "llama-7b", "layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000},
    "llama-70b": {"name": "llama-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
                  "ffn": 28672, "vocab": 32000},
    "gpt3-175b": {"name": "gpt3-175b", "layers": 96, "hidden": 12288, "heads": 96, "ffn": 49152,
                  "activation": "gelu", "norm": "layernorm", "bias": True, "vocab": 50257},
}

HARDWARE: dict[str, Any] = {
    "gpu": "h100-sxm",
    "gpus": 4,
    "sockets": 2,
    "cpu": "xeon-8480",
    "dram": "ddr5-4800-8ch",
    "dram_capacity": "2 TiB",
    "cxl": {"device": "micron-cz120", "count": 4},
    "nvme": {"device": "samsung-pm9a3", "count": 4},
}

GPUS: dict[str, int] = {"llama-7b": 4, "llama-70b": 4, "gpt3-175b": 8}

NETWORK: dict[str, Any] = {"device": "ib-ndr400-cx7", "count": 8}
"""The NICs between nodes: a DGX H100 has eight single-port ConnectX-7 NDR 400 Gb/s adapters
for its compute fabric, one per GPU (NVIDIA DGX H100 user guide, "Network Ports")."""

TRAINING: dict[str, Any] = {"seq_len": 2048, "micro_batch": 1, "global_batch": 4, "sub_group_size": 1e8}

STRATEGIES: list[Any] = ["dram", "cxl", "nvme"]


class Case(NamedTuple):
    """One configuration: global batch = micro-steps x GPUs in all (micro-batch 1)."""

    model: str
    micro_steps: int
    gpus: int
    """GPUs of each node."""
    nodes: int = 1


CASES: list[Case] = [Case("llama-7b", 1, 4), Case("llama-70b", 1, 4), Case("gpt3-175b", 1, 8),
                     Case("llama-70b", 256, 4), Case("llama-70b", 250_000, 4)]
"""The cases of one node: model size and gradient accumulation."""
NODE_CASES: list[Case] = [Case("llama-70b", 1, 8, nodes) for nodes in (1, 8, 64, 512)]
"""70B on 8, 64, 512 and 4,096 GPUs, nodes of 8: the first is the cost the others must keep."""
GROUPS = {"all": CASES + NODE_CASES, "node": CASES, "nodes": NODE_CASES}
"""The cases ``--cases`` picks."""


def scenario(case: Case) -> dict[str, Any]:
    """The scenario mapping (as a YAML file would hold it) for one case."""
    hardware = {**HARDWARE, "gpus": case.gpus, "nodes": case.nodes}
    if case.nodes > 1:
        hardware["network"] = dict(NETWORK)
    return {
        "name": f"engine-scaling-{case.model}",
        "model": dict(MODELS[case.model]),
        "training": {**TRAINING, "global_batch": case.gpus * case.nodes * case.micro_steps},
        "hardware": hardware,
        "strategies": list(STRATEGIES),
    }


def configs(case: Case) -> list[Any]:
    return scenario_from_dict(scenario(case), f"<engine_scaling:{case.model}>", force=True)


class Timeout(Exception):
    """A simulation ran past ``--timeout`` seconds (the engine did not terminate)."""


def _alarm(signum: int, frame: object) -> None:
    raise Timeout


def timed(config: Any, repeat: int, timeout: float, **options: Any) -> tuple[Any, float, float]:
    """The result, best wall seconds and best CPU seconds of ``repeat`` runs (None, inf, inf past
    ``timeout`` s)."""
    best, cpu, result = float("inf"), float("inf"), None
    signal.signal(signal.SIGALRM, _alarm)
    try:
        for _ in range(repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                result = simulate(config, max_tasks=None, **options)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            best = min(best, time.perf_counter() - start)
            cpu = min(cpu, time.process_time() - start_cpu)
    except Timeout:
        return None, float("inf"), float("inf")
    return result, best, cpu


def measure(case: Case, repeat: int, timeout: float, full_limit: int) -> list[dict[str, Any]]:
    """Simulate each strategy of a case ``repeat`` times (and once without fast-forward)."""
    rows = []
    for config in configs(case):
        result, best, cpu = timed(config, repeat, timeout)
        full = None
        if case.micro_steps <= full_limit:
            full, _, _ = timed(config, 1, timeout, fast_forward=False)
        fits = result is not None and result.fits
        rows.append({
            "model": case.model,
            "gpus": case.gpus * case.nodes,
            "global_batch": config.training.global_batch,
            "strategy": config.strategy,
            "fits": None if result is None else result.fits,
            "tasks": len(result.built.tasks) if fits else 0,
            "events": result.events if fits else None,
            "full_events": full.events if full is not None and full.fits else None,
            "wall_ms": None if result is None else best * 1e3,
            "cpu_ms": None if result is None else cpu * 1e3,
            "iteration_s": result.iteration_time_s if result is not None else None,
            "reason": f"did not finish within {timeout:g} s" if result is None else result.reason,
        })
    return rows


def child(group: str, case: int, strategy: int, runs: int) -> None:
    """Build every case's configs of ``group`` and run each once; then ``runs`` runs of case
    ``case``'s config of strategy ``strategy`` (the part callgrind counts)."""
    every = [configs(k) for k in GROUPS[group]]
    for batch in every:
        for config in batch:
            simulate(config, max_tasks=None)
    config = every[case][strategy]

    def counted() -> None:
        for _ in range(runs):
            simulate(config, max_tasks=None)

    sys.call_tracing(counted, ())


def instructions(group: str, runs: int) -> list[float]:
    """Instructions per run, per case and strategy (in the order of the table's rows)."""
    from callgrind import counted

    return [counted([__file__, "--child", group, str(case), str(strategy), str(runs)]) / runs
            for case in range(len(GROUPS[group])) for strategy in range(len(STRATEGIES))]


def against_one_node(rows: list[dict[str, Any]], cost: list[float]) -> list[float | None]:
    """Each row's ``cost`` over that of the same model and strategy on 8 GPUs (None: none ran)."""
    base = {(r["model"], r["strategy"]): c for r, c in zip(rows, cost) if r["gpus"] == 8 and r["fits"]}
    return [c / base[r["model"], r["strategy"]] if r["fits"] and (r["model"], r["strategy"]) in base else None
            for r, c in zip(rows, cost)]


def markdown(rows: list[dict[str, Any]], counted: list[float] | None, ratios: list[float | None] | None) -> str:
    """The rows as a markdown table (``ratios``: the column of cost against 8 GPUs, if any)."""
    unit = "instructions" if counted is not None else "CPU time"
    lines = [
        "| model | GPUs | global batch | strategy | fits | tasks built | events | events without fast-forward |"
        " wall time (ms) | instructions per run (M) | predicted iteration (s) |"
        + (f" {unit} against 8 GPUs |" if ratios is not None else ""),
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if ratios is not None else ""),
    ]
    for n, r in enumerate(rows):
        predicted = f"{r['iteration_s']:.3f}" if r["iteration_s"] is not None else f"- ({r['reason']})"
        fits = "?" if r["fits"] is None else ("yes" if r["fits"] else "no")
        wall = "timeout" if r["wall_ms"] is None else f"{r['wall_ms']:.1f}"
        events = "-" if r["events"] is None else f"{r['events']:,}"
        full = "-" if r["full_events"] is None else f"{r['full_events']:,}"
        count = "-" if counted is None else f"{counted[n] / 1e6:.1f}"
        ratio = "" if ratios is None else (" - |" if ratios[n] is None else f" {ratios[n]:.2f}x |")
        lines.append(f"| {r['model']} | {r['gpus']:,} | {r['global_batch']:,} | {r['strategy']} | {fits} "
                     f"| {r['tasks']:,} | {events} | {full} | {wall} | {count} | {predicted} |{ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", choices=sorted(GROUPS), default="all",
                        help="node: one node's models and batches; nodes: 70B on 8 to 4,096 GPUs (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best wall and CPU time are kept")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one simulate() call may take before the case is reported as unfinished")
    parser.add_argument("--full-limit", type=int, default=256,
                        help="most micro-steps a case is also simulated for without fast-forward")
    parser.add_argument("--instructions", action="store_true", help="count instructions with valgrind (minutes)")
    parser.add_argument("--runs", type=int, default=5, help="counted runs per strategy under valgrind")
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child[0], *(int(v) for v in args.child[1:]))
        return 0
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on the PATH")
    rows: list[dict[str, Any]] = []
    for case in GROUPS[args.cases]:
        rows.extend(measure(case, args.repeat, args.timeout, args.full_limit))
    counted = instructions(args.cases, args.runs) if args.instructions else None
    ratios = None
    if args.cases != "node":
        ratios = against_one_node(rows, counted if counted is not None else [r["cpu_ms"] or 0.0 for r in rows])
    print(_native.describe())
    print(markdown(rows, counted, ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
