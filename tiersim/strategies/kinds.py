"""Task kinds the strategies share: CPU Adam, host copies and conversions, PCIe copies, and the
bytes per element they move."""

from __future__ import annotations

import math

from tiersim.engine import Task
from tiersim.strategies.builder import StepBuilder, TaskKind
from tiersim.strategies.memory import HostMemory, traffic
from tiersim.workload import SubGroup

FP32_BYTES = 4
"""Bytes per element of fp32 master weights, Adam moments and the optimizer's gradients."""
ADAM_READ_BYTES = 16
"""Adam reads fp32 param, grad, exp_avg, exp_avg_sq per element (bytes)."""
ADAM_WRITE_BYTES = 12
"""Adam writes fp32 param, exp_avg, exp_avg_sq per element (bytes)."""
ADAM_STATE_BYTES = 8
"""Adam's fp32 exp_avg and exp_avg_sq per element (bytes)."""
PCIE_LINKS = frozenset({"pcie_d2h", "pcie_h2d"})
"""The GPU's PCIe link, each way: what a host<->GPU copy crosses besides host memory (``pcie_kind``)."""


def adam_kind(builder: StepBuilder, memory: HostMemory, writes: HostMemory | None = None) -> TaskKind:
    """CPU Adam over a sub-group (units: elements) as one flow of its memory traffic.

    DeepSpeed's CPU Adam reads param, grad, m, v and writes param, m, v (fp32; ZeRO-3 makes
    the 16-bit copy for the GPU afterwards, see ``params_to_gpu``). Its rate is the lower of two
    bounds: the compute bound, the CPU's Adam rate on the rank's physical cores' worth for its
    SIMD build (``Hardware.adam_rate``, elements/s), and the memory bound, its 28 bytes per
    element over the rank's share of the socket's DRAM bandwidth, which the ``dram`` link
    shares with every other flow on it. ``adam_step_overhead`` is the fixed cost of one call.
    """
    per_element = ADAM_READ_BYTES + ADAM_WRITE_BYTES
    cap = builder.figure("adam_rate") * per_element
    usage = traffic(memory, ADAM_READ_BYTES / per_element, writes, ADAM_WRITE_BYTES / per_element)
    overhead = builder.hw.cpu.adam_step_overhead or 0.0
    return TaskKind("cpu", "optimizer_step", "adam", overhead, usage, cap, per_element)


def gpu_adam_task(builder: StepBuilder, group: SubGroup, deps: tuple[str, ...], lp_copy: bool = True) -> Task:
    """GPU Adam over a sub-group on the compute stream, bound by HBM bandwidth: it reads and
    writes the fp32 state (``ADAM_READ_BYTES``, ``ADAM_WRITE_BYTES``) and writes the 16-bit
    parameter copy (``lp_copy``; not when the parameters are offloaded), once per element."""
    per_element = ADAM_READ_BYTES + ADAM_WRITE_BYTES + (builder.lp_bytes if lp_copy else 0)
    return Task(f"step.{group.index}.adam", "gpu", "optimizer_step", "adam", 0.0, group.numel * per_element,
                (("hbm", 1.0),), math.inf, deps)


def host_copy_kind(builder: StepBuilder, phase: str, category: str, memory: HostMemory, read: float,
                   write: float, threads: float, writes: HostMemory | None = None) -> TaskKind:
    """A torch copy or dtype conversion on ``threads`` physical cores' worth (units: elements)
    reading ``read`` bytes per element where ``memory`` says and writing ``write`` where
    ``writes`` does (None: the same), at most ``threads x memcpy_bandwidth_per_core`` bytes
    written per second and its memory's share."""
    key = ("host_copy", phase, category, memory, read, write, threads, writes)
    kind = builder.kinds.get(key)
    if kind is None:
        usage = traffic(memory, read / write, writes, 1.0)
        rate = threads * builder.hw.cpu.memcpy_bandwidth_per_core
        kind = builder.kinds[key] = TaskKind("cpu", phase, category, 0.0, usage, rate, write)
    return kind


def pcie_kind(builder: StepBuilder, direction: str, phase: str, memory: HostMemory, rate_cap: float = math.inf,
              stream: str | None = None) -> TaskKind:
    """Host<->GPU copies (units: bytes) in ``direction`` ("h2d" or "d2h"), on ``stream`` (by
    default the copy engine of that direction): the link's setup latency, then the bytes over
    PCIe, read from (h2d) or written to (d2h) host memory, at most ``rate_cap`` bytes/s (made
    once per schedule)."""
    key = (direction, phase, memory, rate_cap, stream)
    kind = builder.kinds.get(key)
    if kind is None:
        host = memory.access(1, 0) if direction == "h2d" else memory.access(0, 1)
        usage = ((f"pcie_{direction}", 1.0), *host)
        kind = builder.kinds[key] = TaskKind(stream or direction, phase, direction, builder.figure("pcie_latency"),
                                             usage, rate_cap)
    return kind
