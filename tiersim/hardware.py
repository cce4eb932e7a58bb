"""The machine a scenario runs on: profile names and counts, resolved into profile objects.

All ranks of a data-parallel job are symmetric and run in lock-step, so the simulator runs one
representative rank. What ranks share (a socket's DRAM bandwidth, the CXL devices of a socket,
the NVMe pool) is given to that rank as its fair share: the shared capacity divided by the
number of ranks that share it. Capacities (bytes) are reported for the whole node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tiersim.errors import ConfigError
from tiersim.profiles import (
    CPUProfile,
    CXLProfile,
    DRAMProfile,
    GPUProfile,
    HostProfile,
    LinkProfile,
    NVMeProfile,
    find_profile,
)
from tiersim.schema import integer, size

TIERS = ("hbm", "dram", "cxl", "nvme")


@dataclass(frozen=True)
class DeviceCount:
    """A device profile name and how many of them the node has."""

    device: str
    count: int = integer(1, gt=0)


@dataclass(frozen=True)
class HardwareSpec:
    """Scenario section ``hardware:``; names refer to files in ``device_profiles/``."""

    gpu: str
    gpus: int = integer(1, gt=0)
    host_link: str | None = None
    pinned: bool = True
    cpu: str = "xeon-8480"
    sockets: int = integer(1, gt=0)
    cores_per_rank: int | None = integer(None, gt=0)
    dram: str = "ddr5-4800-8ch"
    dram_capacity: int | None = size(None, gt=0, doc="per socket; overrides the profile")
    cxl: DeviceCount | None = None
    nvme: DeviceCount | None = None
    host: str | None = None


@dataclass(frozen=True)
class Hardware:
    """Resolved hardware: profile objects plus counts; helpers give per-rank shares."""

    gpu: GPUProfile | None
    gpus: int
    link: LinkProfile | None
    pinned: bool
    cpu: CPUProfile
    sockets: int
    cores_per_rank: int
    dram: DRAMProfile
    dram_capacity_per_socket: int
    cxl: CXLProfile | None
    cxl_count: int
    nvme: NVMeProfile | None
    nvme_count: int

    @property
    def ranks_per_socket(self) -> int:
        """GPUs (ranks) whose host memory lives on one socket."""
        return math.ceil(self.gpus / self.sockets)

    @property
    def has_gpu(self) -> bool:
        """False for a host-only machine (validation of the CPU offload path)."""
        return self.gpu is not None and self.link is not None

    @property
    def pcie_bandwidth(self) -> float:
        """Host<->GPU bytes/s per direction for this rank's buffers (pinned or pageable)."""
        assert self.link is not None
        return self.link.pinned_bandwidth if self.pinned else self.link.pageable_bandwidth

    @property
    def pcie_latency(self) -> float:
        """Seconds to set up one host<->GPU copy."""
        assert self.link is not None
        return self.link.latency

    @property
    def dram_bandwidth_per_rank(self) -> float:
        """One rank's fair share of its socket's achieved DRAM bandwidth (bytes/s)."""
        return self.dram.bandwidth / self.ranks_per_socket

    @property
    def cxl_devices_per_rank(self) -> float:
        """CXL devices' worth of device time one rank gets (devices per socket / ranks per socket)."""
        return (self.cxl_count / self.sockets) / self.ranks_per_socket

    @property
    def nvme_drives_per_rank(self) -> float:
        """NVMe drives' worth of device time one rank gets (the pool is shared by all ranks)."""
        return self.nvme_count / self.gpus

    def capacity(self, tier: str) -> int:
        """Usable bytes of a tier: per GPU for ``hbm``, whole node for host tiers (0 if absent)."""
        if tier == "hbm":
            return self.gpu.hbm_capacity - self.gpu.reserved_memory if self.gpu else 0
        if tier == "dram":
            return self.dram_capacity_per_socket * self.sockets
        if tier == "cxl":
            return self.cxl.capacity * self.cxl_count if self.cxl else 0
        if tier == "nvme":
            return self.nvme.capacity * self.nvme_count if self.nvme else 0
        raise KeyError(tier)


def resolve_hardware(spec: HardwareSpec, source: str, search: tuple[Path, ...] = ()) -> Hardware:
    """Look up every profile the spec names; errors name ``source`` and the ``hardware.*`` field."""
    gpu = find_profile(spec.gpu, "gpu", source, "hardware.gpu", search)
    assert isinstance(gpu, GPUProfile)
    host: HostProfile | None = None
    if spec.host is not None:
        found = find_profile(spec.host, "host", source, "hardware.host", search)
        assert isinstance(found, HostProfile)
        host = found
    link_name = spec.host_link or gpu.host_link
    if host is not None and host.link is not None and spec.host_link is None:
        link = host.link
    else:
        link_profile = find_profile(link_name, "link", source, "hardware.host_link", search)
        assert isinstance(link_profile, LinkProfile)
        link = link_profile
    cpu = host.cpu if host else find_profile(spec.cpu, "cpu", source, "hardware.cpu", search)
    dram = host.dram if host else find_profile(spec.dram, "dram", source, "hardware.dram", search)
    assert isinstance(cpu, CPUProfile) and isinstance(dram, DRAMProfile)
    cxl = None
    if spec.cxl is not None:
        cxl = find_profile(spec.cxl.device, "cxl", source, "hardware.cxl.device", search)
        assert isinstance(cxl, CXLProfile)
    nvme = None
    if spec.nvme is not None:
        nvme = find_profile(spec.nvme.device, "nvme", source, "hardware.nvme.device", search)
    elif host is not None:
        nvme = host.nvme
    assert nvme is None or isinstance(nvme, NVMeProfile)
    cores = spec.cores_per_rank or max(1, cpu.cores_per_socket * spec.sockets // spec.gpus)
    ranks_per_socket = math.ceil(spec.gpus / spec.sockets)
    if cores * ranks_per_socket > cpu.cores_per_socket * 2:
        raise ConfigError(
            source,
            "hardware.cores_per_rank",
            f"{cores} cores for each of {ranks_per_socket} ranks per socket exceeds "
            f"{cpu.cores_per_socket} cores (x2 hardware threads) of {cpu.name}",
        )
    return Hardware(
        gpu=gpu,
        gpus=spec.gpus,
        link=link,
        pinned=spec.pinned,
        cpu=cpu,
        sockets=spec.sockets,
        cores_per_rank=cores,
        dram=dram,
        dram_capacity_per_socket=spec.dram_capacity or dram.capacity,
        cxl=cxl,
        cxl_count=spec.cxl.count if spec.cxl else 0,
        nvme=nvme,
        nvme_count=spec.nvme.count if spec.nvme else (1 if nvme is not None else 0),
    )
