"""Predict the offloaded optimizer step alone, for validation against the real torch path.

``predict_optimizer_step`` runs exactly the optimizer-step tasks the ``dram`` or ``nvme``
strategy schedules in a full iteration, for given sub-group sizes on a host profile (what
``tiersim calibrate`` measured), so the validation compares the simulator's own mechanism with
a real execution of the same algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tiersim.config.hardware import Hardware
from tiersim.config.profiles import GPUProfile, HostProfile
from tiersim.engine import Task, run_graph
from tiersim.strategies import STRATEGIES
from tiersim.strategies.builder import StepBuilder
from tiersim.strategies.swap import SwapOptions
from tiersim.workload import ModelSpec, SubGroup, TrainingSpec, build_step

_PLACEHOLDER_MODEL = ModelSpec(layers=1, hidden=64, heads=1, ffn=64, vocab=64)


def host_hardware(host: HostProfile, threads: int, gpu: GPUProfile | None = None) -> Hardware:
    """One rank on a calibrated host: its CPU (``threads`` cores), DRAM, NVMe and GPU link."""
    return Hardware(gpu=gpu, gpus=1, link=host.link, fabric=None, pinned=True, cpu=host.cpu, sockets=1,
                    cores_per_rank=threads, numa_bound=True, adam_simd=None, dram=host.dram,
                    dram_capacity_per_socket=host.dram.capacity, cxl=None, cxl_count=0, nvme=host.nvme, nvme_count=1)


def predict_optimizer_step(
    host: HostProfile,
    strategy: str,
    subgroup_numels: Sequence[int],
    *,
    threads: int,
    swap: SwapOptions | None = None,
    gpu: GPUProfile | None = None,
) -> float:
    """Seconds for one optimizer step over sub-groups of ``subgroup_numels`` fp32 elements, under
    ``strategy`` (a name in ``STRATEGIES``: "dram", "nvme", "gpu"; swap options apply to "nvme")."""
    training = TrainingSpec(global_batch=1)
    groups = tuple(SubGroup(i, int(n)) for i, n in enumerate(subgroup_numels))
    step = replace(build_step(_PLACEHOLDER_MODEL, training), subgroups=groups, rank_params=sum(subgroup_numels))
    options = swap if strategy == "nvme" else None
    planner = STRATEGIES[strategy](options)
    builder = StepBuilder(step, host_hardware(host, threads, gpu))
    begin = builder.add(Task("step.begin", "cpu", "optimizer_step", "marker"))
    planner.optimizer_step(builder, begin)
    return run_graph(builder.graph).makespan
