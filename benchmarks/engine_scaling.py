"""How the engine scales: tasks, events and wall time of one simulated iteration.

For Llama-style 7B and 70B on a 4x H100 node and GPT-3 175B on an 8x H100 node (its 16-bit
parameters alone would need 87.5 GB per GPU on 4), with DRAM, CXL and NVMe, build
the scenario with ``scenario_from_dict``, simulate one iteration per offload strategy and print
a markdown table: model, strategy, fits, tasks, events, wall time (best of ``--repeat`` runs of
``simulate``, ms) and the predicted iteration time. ``tasks`` counts the engine tasks of the
graph (rows of the trace); ``events`` is the engine's count (tasks + flow timers).

    python3 benchmarks/engine_scaling.py --repeat 3
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tiersim.scenario import scenario_from_dict  # noqa: E402
from tiersim.simulate import simulate  # noqa: E402

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

TRAINING: dict[str, Any] = {"seq_len": 2048, "micro_batch": 1, "global_batch": 4, "sub_group_size": 1e8}

STRATEGIES: list[Any] = ["dram", "cxl", "nvme"]


def scenario(model: str) -> dict[str, Any]:
    """The scenario mapping (as a YAML file would hold it) for one model."""
    return {
        "name": f"engine-scaling-{model}",
        "model": dict(MODELS[model]),
        "training": {**TRAINING, "global_batch": GPUS[model]},
        "hardware": {**HARDWARE, "gpus": GPUS[model]},
        "strategies": list(STRATEGIES),
    }


class Timeout(Exception):
    """A simulation ran past ``--timeout`` seconds (the engine did not terminate)."""


def _alarm(signum: int, frame: object) -> None:
    raise Timeout


def measure(model: str, repeat: int, timeout: float) -> list[dict[str, Any]]:
    """Simulate each strategy ``repeat`` times; keep the best wall time.

    Each ``simulate`` call gets ``timeout`` seconds of wall time (SIGALRM); a case that runs
    past it is reported as such instead of hanging the benchmark.
    """
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    for config in scenario_from_dict(scenario(model), f"<engine_scaling:{model}>"):
        best = float("inf")
        result = None
        try:
            for _ in range(repeat):
                start = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, timeout)
                try:
                    result = simulate(config)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                best = min(best, time.perf_counter() - start)
        except Timeout:
            rows.append({"model": model, "strategy": config.strategy, "fits": None, "tasks": None,
                         "events": None, "wall_ms": None, "iteration_s": None,
                         "reason": f"did not finish within {timeout:g} s"})
            continue
        assert result is not None
        tasks = len(result.trace) if result.fits else 0
        rows.append({
            "model": model,
            "strategy": config.strategy,
            "fits": result.fits,
            "tasks": tasks,
            "events": result.events,
            "wall_ms": best * 1e3,
            "iteration_s": result.iteration_time_s,
            "reason": result.reason,
        })
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| model | strategy | fits | tasks | events | wall time (ms) | predicted iteration (s) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        predicted = f"{r['iteration_s']:.3f}" if r["iteration_s"] is not None else f"- ({r['reason']})"
        fits = "?" if r["fits"] is None else ("yes" if r["fits"] else "no")
        wall = f"> {r['reason'].split()[-2]} s" if r["wall_ms"] is None else f"{r['wall_ms']:.1f}"
        tasks = "?" if r["tasks"] is None else r["tasks"]
        events = "?" if r["events"] is None else r["events"]
        lines.append(f"| {r['model']} | {r['strategy']} | {fits} | {tasks} | {events} | {wall} | {predicted} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best wall time is kept")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one simulate() call may take before the case is reported as unfinished")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    rows: list[dict[str, Any]] = []
    for model in args.models:
        rows.extend(measure(model, args.repeat, args.timeout))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
