"""The ZeRO-Infinity swapper's settings and the NVMe throughput they allow.

A swap stream keeps ``queue_depth`` requests of ``block_size`` bytes in flight on each of
``thread_count`` aio threads. By Little's law its throughput is
``N * block / (latency + block / drive_bandwidth)`` with ``N = queue_depth * thread_count``,
also at most ``thread_count * aio_thread_bandwidth`` when the profile sets that. When the
profile sets ``read_queueing``/``write_queueing`` = q, each request also waits behind q of the
other N-1 requests' transfers: ``N * block / (latency + block / drive_bandwidth * (1 + q*(N-1)))``. The drives'
bandwidth is shared with every other stream through the ``nvme`` link (device-seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiersim.config.hardware import Hardware
from tiersim.config.profiles import NVMeProfile
from tiersim.config.schema import integer, size
from tiersim.errors import ConfigError, ModelError
from tiersim.frozen import by_fields
from tiersim.strategies.builder import StepBuilder, TaskKind
from tiersim.strategies.param_options import ParamOffload

AIO_ALIGNED_BYTES = 1024
"""Bytes per aio thread a swapped tensor's length is aligned to (DeepSpeed ``AIO_ALIGNED_BYTES``)."""
TENSORS_SWAPPED_IN = 4
"""fp32 param, exp_avg, exp_avg_sq and gradient of a sub-group are read for its update."""
TENSORS_SWAPPED_OUT = 3
"""param, exp_avg, exp_avg_sq are written back (the gradient is consumed)."""


@dataclass(frozen=True)
class SwapOptions:
    """DeepSpeed ``offload_optimizer`` (device nvme) and ``aio`` settings."""

    buffer_count: int = integer(4, gt=0, doc="pinned swap buffers, one sub-group tensor each, at least 4 (DeepSpeed "
                                             "offload_optimizer.buffer_count)")
    block_size: int = size(1 << 20, gt=0, doc="bytes of one aio request (DeepSpeed aio.block_size)")
    queue_depth: int = integer(8, gt=0, doc="requests in flight on each aio thread (DeepSpeed aio.queue_depth)")
    thread_count: int = integer(1, gt=0, doc="threads submitting a swap stream's aio requests (DeepSpeed "
                                            "aio.thread_count)")
    pipeline_read: bool = False
    """A sub-group's swap-in runs during the previous sub-group's update (it waits only for the
    update before that); false: after it (DeepSpeed ``offload_optimizer.pipeline_read``)."""
    pipeline_write: bool = False
    """Swap-outs run in the background: the next sub-group's swap-in and update wait only for
    free buffers, not for the previous swap-out (DeepSpeed ``offload_optimizer.pipeline_write``)."""
    offload_param: ParamOffload | None = None
    """The 16-bit parameters offloaded too (``tiersim.strategies.param_offload``); absent: in HBM."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    def validate(self, source: str, path: str) -> None:
        """A sub-group's swap-in needs ``TENSORS_SWAPPED_IN`` buffers at once."""
        if self.buffer_count < TENSORS_SWAPPED_IN:
            field = f"{path}.buffer_count" if path else "buffer_count"
            raise ConfigError(source, field, f"must be at least {TENSORS_SWAPPED_IN} (one per swapped tensor)")

    @property
    def groups_in_flight(self) -> int:
        """Sub-groups whose tensors fit in the buffers at the same time."""
        return self.buffer_count // TENSORS_SWAPPED_IN


def stream_rate(nvme: NVMeProfile, swap: SwapOptions, write: bool) -> float:
    """Bytes/s one swap stream (read or write) can sustain on its own."""
    bandwidth = nvme.write_bandwidth if write else nvme.read_bandwidth
    latency = nvme.write_latency if write else nvme.read_latency
    queueing = (nvme.write_queueing if write else nvme.read_queueing) or 0.0
    outstanding = swap.queue_depth * swap.thread_count
    transfer = swap.block_size / bandwidth * (1.0 + queueing * (outstanding - 1))
    rate = outstanding * swap.block_size / (latency + transfer)
    if nvme.aio_thread_bandwidth is not None:
        rate = min(rate, swap.thread_count * nvme.aio_thread_bandwidth)
    return rate


def device_cost(nvme: NVMeProfile, write: bool) -> float:
    """Device-seconds one byte costs on a drive (1 / its sequential bandwidth)."""
    return 1.0 / (nvme.write_bandwidth if write else nvme.read_bandwidth)


def aio_kind(builder: StepBuilder, swap: SwapOptions, stream: str, phase: str, write: bool) -> TaskKind:
    """aio reads or writes (units: bytes) between pinned DRAM buffers and NVMe on ``stream``, at
    the rate ``swap``'s settings sustain (``stream_rate``; made once per schedule)."""
    key = ("aio", stream, phase, write)
    kind = builder.kinds.get(key)
    if kind is None:
        nvme = drives(builder.hw)
        usage = (("nvme", device_cost(nvme, write)), ("dram", 1.0))
        latency = nvme.write_latency if write else nvme.read_latency
        category = "nvme_write" if write else "nvme_read"
        kind = builder.kinds[key] = TaskKind(stream, phase, category, latency, usage, stream_rate(nvme, swap, write))
    return kind


def drives(hw: Hardware) -> NVMeProfile:
    """The rank's NVMe drives' profile (a ``ModelError`` on hardware without them)."""
    if hw.nvme is None:
        raise ModelError("an NVMe schedule on hardware without NVMe drives")
    return hw.nvme
