"""Where the measuring threads run: compute on the first CPUs, I/O workers on the rest.

On a small host (2 vCPUs) the kernel's I/O path costs a lot of CPU, and an unpinned torch Adam
thread and the I/O worker threads then share cores differently from run to run (one run's
pipelined swap overlaps, the next one's does not). Calibration and validation both pin the
thread that runs torch with ``n`` threads to the first ``n`` CPUs of the process and the I/O
workers to the others, as a rank bound to its cores with its aio threads beside it would
run; with no CPU to spare nothing is pinned.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

_CPUS: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
"""The process's CPUs when this module was imported (before any pinning)."""


def compute_cpus(threads: int) -> set[int] | None:
    """CPUs for compute with ``threads`` torch threads, or None (unpinned) if none would be spare."""
    return set(_CPUS[:threads]) if 0 < threads < len(_CPUS) else None


def io_cpus(compute_threads: int = 1) -> set[int] | None:
    """CPUs for I/O worker threads beside ``compute_threads`` of compute, or None (unpinned)."""
    return set(_CPUS[compute_threads:]) if 0 < compute_threads < len(_CPUS) else None


def pin_current_thread(cpus: set[int] | None) -> None:
    """Bind the calling thread to ``cpus`` (no-op for None or where the OS cannot)."""
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


@contextmanager
def compute_threads(n: int) -> Iterator[None]:
    """Run torch with ``n`` intra-op threads, the calling thread on ``compute_cpus(n)``."""
    import torch

    old_threads = torch.get_num_threads()
    cpus = compute_cpus(n)
    old_cpus = os.sched_getaffinity(0) if cpus and hasattr(os, "sched_getaffinity") else None
    torch.set_num_threads(n)
    pin_current_thread(cpus)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        pin_current_thread(old_cpus)
