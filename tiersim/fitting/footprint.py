"""Calibrate the footprint's two software constants on measured runs (``strategies.footprint``).

- ``PROCESS_HOST_BYTES``: an NVMe run's host memory holds the swapper's and ZeRO-3's buffers and
  each rank's process; the measured host growth less the modeled buffers, per rank.
- ``ALLOCATOR_RESERVE``: the GPU caching allocator's steady reserve (``CA``) less the persistent
  allocations (16-bit partition, reduce bucket), over the modeled transient peak; the mean of
  the runs given.

Each run is the log's scenario on the node of a system file (as ``tiersim fit`` builds it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tiersim.fitting.solver import Problem
from tiersim.fitting.system import System
from tiersim.ingest.log_scenario import steady_state
from tiersim.ingest.training_log import read_log
from tiersim.simulate import simulate

PERSISTENT_HBM = ("bf16 parameters (partition)", "bf16 gradients (partition)", "reduce bucket")
OVERHEAD_HBM = ("caching-allocator reserve (freed blocks kept)", "CUDA context and libraries")


def calibrate(system: System, logs: Sequence[str | Path]) -> dict[str, float]:
    """``process_host_bytes`` (from the NVMe runs among ``logs``) and ``allocator_reserve``."""
    problem = Problem(system, logs)
    runtime: list[float] = []
    reserve: list[float] = []
    for path, config in problem.runs:
        result = simulate(config)
        measured = steady_state(read_log(path))
        hbm = [(what, allocated) for tier, what, allocated, _ in result.placement_items if tier == "hbm"]
        persistent = sum(a for what, a in hbm if what in PERSISTENT_HBM)
        transient = sum(a for what, a in hbm if what not in PERSISTENT_HBM + OVERHEAD_HBM)
        reserve.append((measured["memory:gpu_reserved"] - persistent) / transient)
        if config.strategy == "nvme":
            buffers = sum(held for tier, what, _, held in result.placement_items
                          if tier == "dram" and what != "process runtime")
            runtime.append((measured["memory:host_used"] - buffers) / config.training.data_parallel)
    return {"process_host_bytes": sum(runtime) / len(runtime), "allocator_reserve": sum(reserve) / len(reserve)}
