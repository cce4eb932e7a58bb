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

from tiersim.config.hardware import Hardware
from tiersim.config.profiles import NVMeProfile
from tiersim.errors import ModelError
from tiersim.strategies.builder import StepBuilder, TaskKind
from tiersim.strategies.swap_options import SwapOptions

AIO_ALIGNED_BYTES = 1024
"""Bytes per aio thread a swapped tensor's length is aligned to (DeepSpeed ``AIO_ALIGNED_BYTES``)."""
TENSORS_SWAPPED_OUT = 3
"""param, exp_avg, exp_avg_sq are written back (the gradient is consumed)."""


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
