"""Drift probes: the calibration's own single-resource micro-benchmarks, re-timed between the
validation rounds, so that predictions can follow a shared host whose speed drifts.

On a cloud VM the CPU Adam rate and the disk bandwidth move by 20-40% over minutes (noisy
neighbours), so a profile calibrated a minute ago can be off by more than the model is. Each
validation round first times three reference probes: one CPU Adam step over a single fp32
tensor, and one read and one write of a set of probe files at one (block size, outstanding
requests) point of the calibration grid that no validation case uses. The median ratio of the
calibration's own measurement at that point (its raw median, so the fit's residual there does
not count as drift; the profile's model where the profile carries no such record) to the time
measured now, per probe, says how much faster (> 1) or slower the resource runs now than when
it was calibrated; ``corrected_profile`` scales the profile's
rates (Adam params/s, read and write bandwidth) by it, keeping every fitted shape parameter
(per-call overhead, latencies, queueing). No end-to-end step is ever an input.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from tiersim.calibration.directio import AlignedBuffer, DirectFile, IOPool, Segment
from tiersim.calibration.fit import queue_throughput
from tiersim.calibration.microbench import make_cpu_adam
from tiersim.calibration.placement import compute_threads, io_cpus
from tiersim.config.profiles import HostProfile
from tiersim.validation.real_step import time_step

ADAM_PROBE_NUMEL = 26_300_000
"""Params of the Adam probe (a calibration size; validation sub-groups are 5-25 M)."""
IO_PROBE_BLOCK = 2 << 20
IO_PROBE_WORKERS = 8
"""2 MiB x 8 outstanding: a calibration grid point, not a validation case's swap setting."""
IO_PROBE_FILES = 16
IO_PROBE_BYTES = 256 << 20
"""The calibration's transfer at each grid point: 256 MiB over 16 files."""


@dataclass(frozen=True)
class Drift:
    """Speed now over speed at calibration (model time / measured time, medians), per resource."""

    adam: float = 1.0
    read: float = 1.0
    write: float = 1.0

    def describe(self) -> str:
        """One line: each factor as a percentage change."""
        parts = [f"{name} {(value - 1) * 100:+.0f}%" for name, value in
                 (("CPU Adam", self.adam), ("disk read", self.read), ("disk write", self.write))]
        return "speed now vs calibration: " + ", ".join(parts)


def corrected_profile(host: HostProfile, drift: Drift) -> HostProfile:
    """``host`` with its Adam rates and disk bandwidths scaled by ``drift``."""
    cpu = host.cpu
    per_s = [rate * drift.adam for rate in cpu.adam_params_per_s] if cpu.adam_params_per_s else None
    per_core = cpu.adam_params_per_core * drift.adam if cpu.adam_params_per_core is not None else None
    efficiency = cpu.adam_simd_efficiency * drift.adam if cpu.adam_simd_efficiency is not None else None
    cpu = replace(cpu, adam_params_per_core=per_core, adam_simd_efficiency=efficiency, adam_params_per_s=per_s)
    nvme = replace(host.nvme, read_bandwidth=host.nvme.read_bandwidth * drift.read,
                   write_bandwidth=host.nvme.write_bandwidth * drift.write)
    return replace(host, cpu=cpu, nvme=nvme)


class DriftProbes:
    """The reference probes of one validation run; ``sample()`` times each once."""

    def __init__(self, host: HostProfile, directory: Path, mode: str, variant: str,
                 arena: AlignedBuffer | None = None) -> None:
        """``arena``: memory of at least ``IO_PROBE_BYTES`` to move the probe files through
        (the validation's swap buffers, so the probes see the disk fill the same pages), else
        the probes' own."""
        self.host = host
        self.variant = variant
        param = torch.nn.Parameter(torch.randn(ADAM_PROBE_NUMEL))
        param.grad = torch.randn(ADAM_PROBE_NUMEL) * 1e-3
        self._param = param
        self._adam = make_cpu_adam(param, variant)
        self._adam.step()  # creates the state
        per_file = IO_PROBE_BYTES // IO_PROBE_FILES
        if arena is not None and arena.nbytes < IO_PROBE_BYTES:
            raise ValueError(f"the probes need {IO_PROBE_BYTES} bytes of arena, got {arena.nbytes}")
        self._own = arena is None
        self._buffer = AlignedBuffer(IO_PROBE_BYTES) if arena is None else arena
        self._buffer.view[:IO_PROBE_BYTES] = os.urandom(1 << 20) * (IO_PROBE_BYTES >> 20)
        self._files = [DirectFile(Path(directory) / f"tiersim-drift-{os.getpid()}-{k}.bin", mode, create_size=per_file)
                       for k in range(IO_PROBE_FILES)]
        self._segments = [Segment(f.fd, self._buffer.view, k * per_file, 0, per_file)
                          for k, f in enumerate(self._files)]
        self._pool = IOPool(IO_PROBE_WORKERS, IO_PROBE_BLOCK, mode, io_cpus(1))
        self._pool.run("write", self._segments)
        self.samples: dict[str, list[float]] = {"adam": [], "read": [], "write": []}

    def sample(self, record: bool = True) -> None:
        """Time one Adam step, one read and one write of the probe files (s)."""
        timings = {
            "adam": time_step(self._one_thread_adam, warmup=0, repeats=1).median_s,
            "read": time_step(lambda: self._pool.run("read", self._segments), warmup=0, repeats=1).median_s,
            "write": time_step(lambda: self._pool.run("write", self._segments), warmup=0, repeats=1).median_s,
        }
        if record:
            for name, seconds in timings.items():
                self.samples[name].append(seconds)

    def _one_thread_adam(self) -> None:
        with compute_threads(1):
            self._adam.step()

    def model_seconds(self) -> dict[str, float]:
        """What the profile's fitted model says each probe takes (s)."""
        cpu, nvme = self.host.cpu, self.host.nvme
        adam = (cpu.adam_step_overhead or 0.0) + ADAM_PROBE_NUMEL / cpu.adam_rate(1)

        def io(bandwidth: float, latency: float, queueing: float | None) -> float:
            rate = queue_throughput(IO_PROBE_BLOCK, IO_PROBE_WORKERS, latency, bandwidth, queueing or 0.0)
            return IO_PROBE_BYTES / float(rate)

        return {
            "adam": adam,
            "read": io(nvme.read_bandwidth, nvme.read_latency, nvme.read_queueing),
            "write": io(nvme.write_bandwidth, nvme.write_latency, nvme.write_queueing),
        }

    def reference_seconds(self) -> dict[str, float]:
        """Each probe's time at calibration: the calibration's raw record at the probe's point
        (scaled to the probe's size), else the fitted model's time."""
        reference = self.model_seconds()
        cal = self.host.calibration if isinstance(self.host.calibration, dict) else {}
        adam = cal.get("adam")
        adam = adam if isinstance(adam, dict) else {}
        for record in adam.get("records") or ():
            if (record.get("variant"), record.get("numel"), record.get("threads")) == (
                    self.variant, ADAM_PROBE_NUMEL, 1) and record.get("seconds"):
                reference["adam"] = float(record["seconds"])
        files = cal.get("file_io")
        files = files if isinstance(files, dict) else {}
        for record in files.get("records") or ():
            if (record.get("block_size"), record.get("workers")) == (IO_PROBE_BLOCK, IO_PROBE_WORKERS) and \
                    record.get("op") in ("read", "write") and record.get("seconds") and record.get("bytes"):
                reference[str(record["op"])] = float(record["seconds"]) * IO_PROBE_BYTES / float(record["bytes"])
        return reference

    def drift(self) -> Drift:
        """Reference time over the median measured time, per probe (1.0 where nothing was timed)."""
        reference = self.reference_seconds()
        factors = {name: reference[name] / statistics.median(got) if got else 1.0
                   for name, got in self.samples.items()}
        return Drift(**factors)

    def close(self) -> None:
        """Close the I/O pool and remove the probe files."""
        self._pool.close()
        for f in self._files:
            f.unlink()
        self._segments.clear()
        if self._own:
            self._buffer.close()

