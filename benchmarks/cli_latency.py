"""CLI latency: the process wall time of ``tiersim --help`` and ``tiersim run quickstart``.

Runs each command ``--repeat`` times (default 10) as a user does, ``python -m tiersim ARGS`` in a
fresh process on this checkout (its bytecode cached in ``__pycache__``, as an install has it,
whatever ``PYTHONDONTWRITEBYTECODE`` says), taking turns with ``python -c pass`` (the interpreter's own
start-up) so that the VM's drift hits all alike, and prints a markdown table: command, median
wall seconds, the median's ratio to ``python -c pass``'s, median CPU seconds (user + system of
the child) and the target (issue 38: ``--help`` within 0.15 s, ``run`` within 0.3 s on the
2-core VM). ``python -X importtime -m tiersim ARGS`` shows where the rest goes.

    python3 benchmarks/cli_latency.py
    python3 benchmarks/cli_latency.py --repeat 20
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BASELINE = ("-c", "pass")
"""The interpreter starting and stopping, nothing imported but its site."""

COMMANDS = {
    "tiersim --help": (("-m", "tiersim", "--help"), 0.15),
    "tiersim run scenarios/quickstart.yaml": (("-m", "tiersim", "run", "scenarios/quickstart.yaml"), 0.3),
}
"""Each command as shown, its interpreter arguments and its target (s)."""


def timed(args: tuple[str, ...]) -> tuple[float, float]:
    """One run of ``python ARGS`` on this checkout: wall and CPU seconds (user + system)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(repeat: int) -> dict[str, list[tuple[float, float]]]:
    """``repeat`` (wall, CPU) samples of the baseline and of each command, taken in turns."""
    runs: dict[str, tuple[str, ...]] = {"python -c pass": BASELINE, **{k: v[0] for k, v in COMMANDS.items()}}
    for args in runs.values():
        timed(args)  # warm the file cache and write the bytecode, as an installed package has it
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, args in runs.items():
            samples[name].append(timed(args))
    return samples


def table(samples: dict[str, list[tuple[float, float]]]) -> str:
    """The markdown table of medians (module doc)."""
    base = statistics.median(wall for wall, _cpu in samples["python -c pass"])
    lines = ["| command | median wall (s) | ratio to `python -c pass` | median CPU (s) | target (s) |",
             "|---|---:|---:|---:|---:|"]
    for name, runs in samples.items():
        wall = statistics.median(w for w, _c in runs)
        cpu = statistics.median(c for _w, c in runs)
        target = f"{COMMANDS[name][1]:.2f}" if name in COMMANDS else "-"
        lines.append(f"| `{name}` | {wall:.3f} | {wall / base:.1f} | {cpu:.3f} | {target} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of each command (default 10)")
    args = parser.parse_args()
    samples = measure(args.repeat)
    print(f"median of {args.repeat} runs each, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} after them")
    print(table(samples))


if __name__ == "__main__":
    main()
