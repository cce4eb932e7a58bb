"""Wall and CPU time of the README's install (command 1 without its run) from a clean clone.

Clones this checkout's committed HEAD into a temporary folder and runs
``python3 -m venv .venv && . .venv/bin/activate && pip install -e .`` there, as a user's first
command does; the dependencies come from pip's cache where it has them. CPU is the user +
system time of every process the install ran, which a VM busy with other work inflates less
than the wall time; on an idle machine the wall time is about the CPU time less what the C
compiler runs in parallel (setup.py compiles on every CPU).

    python3 benchmarks/install_time.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -q -e ."


def children_cpu() -> float:
    """User + system time of this process's finished children so far (s)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_install() -> tuple[float, float]:
    """Clone, install, and return the install's wall and CPU time (s)."""
    with tempfile.TemporaryDirectory(prefix="tiersim-install-") as folder:
        clone = Path(folder) / "tiersim"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        cpu, wall = children_cpu(), time.perf_counter()
        subprocess.run(["bash", "-c", INSTALL], cwd=clone, check=True, stdout=subprocess.DEVNULL)
        wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
        check = "import tiersim._native as n; n.install(); assert n.ACTIVE, n.describe()"
        subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", check], cwd=clone, check=True)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="installs, each from a fresh clone")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}: {INSTALL}")
    for _ in range(args.repeat):
        wall, cpu = timed_install()
        print(f"wall {wall:.1f} s, CPU {cpu:.1f} s (compiled engine built and used)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
