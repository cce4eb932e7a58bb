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
from typing import TypeVar

from tiersim.config.profiles import (
    SIMD_RUNS,
    CPUProfile,
    CXLProfile,
    DRAMProfile,
    FabricProfile,
    GPUProfile,
    HostProfile,
    LinkProfile,
    NetworkProfile,
    NVMeProfile,
    Profile,
    SimdName,
    find_profile,
)
from tiersim.config.schema import integer, size
from tiersim.errors import ConfigError, ModelError

TIERS = ("hbm", "dram", "cxl", "nvme")
HEADROOM = {"hbm": 0.0, "dram": 0.02, "cxl": 0.0, "nvme": 0.0}
"""Fraction of each tier's capacity a run may not take: 2% of host DRAM for the OS and other
processes (the seed node used 1.75% of its DDR before the run started); the GPU's own overhead
(CUDA context, allocator) is part of a run's reserved bytes, not of the headroom."""


@dataclass(frozen=True)
class DeviceCount:
    """A device profile name (None: the host profile's own device) and how many the node has."""

    device: str | None = None
    """The device's profile name; None: the host profile's device."""
    count: int = integer(1, gt=0, doc="devices of that profile in the node")


@dataclass(frozen=True)
class NetworkCount(DeviceCount):
    """The NICs of a node (``hardware.network``): their profile, how many, and how NCCL reaches
    GPU memory through them."""

    gpudirect: bool = True
    """The NICs read and write GPU memory directly (GPUDirect RDMA: NCCL does so where the NIC is
    within ``NCCL_NET_GDR_LEVEL`` of the GPU on the PCIe tree); false: NCCL stages every byte
    through a pinned host buffer, which each byte crosses twice in host DRAM each way."""


@dataclass(frozen=True)
class HardwareSpec:
    """Scenario section ``hardware:``; names refer to files in ``device_profiles/``. With a
    ``host`` profile, its CPU and DRAM are used, and the other parts it holds (NVMe, GPU link, and
    where it has them the GPU, the collective fabric and the CXL device) unless named here."""

    gpu: str | None = None
    """GPU profile name; None: the host profile's GPU (required without one)."""
    gpus: int = integer(1, gt=0, doc="GPUs of each node, one rank (process) each")
    nodes: int = integer(1, gt=0, doc="nodes, alike, each with its own GPUs and host (CPU, DRAM, CXL, NVMe)")
    fabric: str | None = None
    """Fabric profile name of ZeRO's collectives; None: the host profile's fabric, else the GPU's
    NVLink (``nvlink_bandwidth``)."""
    host_link: str | None = None
    """Link profile name of the host<->GPU path; None: the host profile's link, else the GPU
    profile's ``host_link``."""
    pinned: bool = True
    """Host buffers are pinned (page-locked): host<->GPU copies run at the link's
    ``pinned_bandwidth``; false: at the pageable rate."""
    cpu: str = "xeon-8480"
    """CPU profile name of one socket; with ``host``, the host profile's CPU is used instead."""
    sockets: int = integer(1, gt=0, doc="CPU sockets of the node, each with its own DRAM; ranks are "
                                        "spread evenly over them")
    cores_per_rank: int | None = integer(None, gt=0)
    """Logical CPUs each bound rank holds (``OMP_NUM_THREADS``); None: the node's cores shared
    evenly. Unbound ranks run one thread per physical core of the node instead."""
    numa_bound: bool = True
    """Each rank bound by numactl to its own cores and socket memory; False: unbound ranks
    that the OS scheduler places over the node's sockets."""
    adam_simd: SimdName | None = None
    """The SIMD width DeepSpeed's CPU Adam was built for (its log: "created with AVX2 arithmetic
    capability"); None: the widest the CPU profile has. On Arm (``sve``) DeepSpeed 0.10-0.16
    builds the scalar loop: say ``scalar`` for those versions."""
    dram: str = "ddr5-4800-8ch"
    """DRAM profile name of one socket; with ``host``, the host profile's DRAM is used instead."""
    dram_capacity: int | None = size(None, gt=0, doc="DRAM bytes per socket, in place of the profile's capacity")
    host_memory_in_use: int = size(0, doc="bytes of the node's DRAM in use before the job starts (the OS, "
                                          "other processes; psutil's 'used'), spread evenly over the "
                                          "sockets' DRAM nodes; where it is more than the 2% headroom it "
                                          "takes the headroom's place")
    cxl: DeviceCount | None = None
    """The node's CXL memory expanders (profile and count); None: no CXL memory."""
    nvme: DeviceCount | None = None
    """The node's NVMe drives (profile and count); None: the host profile's drive (one), else none."""
    network: NetworkCount | None = None
    """The node's NICs to the other nodes (a ``network`` profile and the NICs per node); required
    when ``nodes`` > 1; None: the host profile's NIC (one), else none."""
    host: str | None = None
    """Host profile name (written by ``tiersim calibrate`` or ``tiersim fit``) whose parts are
    used as the fields above say."""


@dataclass(frozen=True)
class Hardware:
    """Resolved hardware: profile objects plus counts; helpers give per-rank shares."""

    gpu: GPUProfile | None
    gpus: int
    link: LinkProfile | None
    fabric: FabricProfile | None
    pinned: bool
    cpu: CPUProfile
    sockets: int
    cores_per_rank: int
    numa_bound: bool
    adam_simd: str | None
    dram: DRAMProfile
    dram_capacity_per_socket: int
    cxl: CXLProfile | None
    cxl_count: int
    nvme: NVMeProfile | None
    nvme_count: int
    host_memory_in_use: int = 0
    """Bytes of the node's DRAM in use before the job, over all sockets (``usable``)."""
    nodes: int = 1
    """Nodes of this kind in the job; host figures above are each node's own."""
    network: NetworkProfile | None = None
    """The NIC collectives between nodes cross (None: one node)."""
    network_count: int = 0
    """NICs of each node."""
    gpudirect: bool = True
    """The NICs reach GPU memory directly (``NetworkCount.gpudirect``)."""

    @property
    def ranks_per_socket(self) -> int:
        """GPUs (ranks) whose host memory lives on one socket."""
        return math.ceil(self.gpus / self.sockets)

    @property
    def rank_threads(self) -> int:
        """Threads of the rank's CPU Adam and torch CPU ops: DeepSpeed's CPU Adam splits each
        128M-element tile over the OpenMP team (``#pragma omp parallel for`` in ``Step_AVX``,
        ``csrc/includes/cpu_adam.h`` at v0.13.3), torch's copies over its intra-op pool.

        Bound (``--bind_cores_to_rank``): DeepSpeed v0.13.3 ``deepspeed/launcher/launch.py``
        lines 227-230 set ``OMP_NUM_THREADS`` to the rank's cores and prefix ``numactl``. Unbound,
        the launcher sets neither, and torch sizes its OpenMP pool at ``at::init_num_threads``
        (``aten/src/ATen/ParallelOpenMP.cpp``) to ``mkl_get_max_threads()`` or
        ``intraop_default_num_threads()``, both the physical cores the process sees
        (``c10/core/thread_pool.cpp`` ``TaskThreadPoolBase::defaultNumThreads``: "ThreadPool
        should be defaulted to number of physical cores"): every unbound rank runs one thread per
        physical core of the node (a CPU Adam built against its own OpenMP runtime would run one
        per logical CPU: no fewer)."""
        return self.cores_per_rank if self.numa_bound else self.node_cores

    @property
    def node_cores(self) -> int:
        """Physical cores of the node."""
        return self.cpu.cores_per_socket * self.sockets

    @property
    def rank_cores(self) -> float:
        """Physical cores' worth of SIMD units and load ports the rank's threads get.

        SMT siblings share one core's units, so what counts is the physical cores under the
        threads. Bound ranks hold ``cores_per_rank`` logical CPUs each; while the ranks of a
        socket hold no more of them than it has cores, each is a core of its own (the launcher
        and the usual bind lists take one hardware thread per core first), beyond that the
        socket's cores are shared: ``cores_per_socket / ranks_per_socket`` each (two ranks on
        the two hardware threads of the same 56 cores get 28 cores' worth each). Unbound ranks
        put ``rank_threads`` threads each on the OS scheduler, ``gpus x node_cores`` threads over
        ``node_cores`` cores: oversubscribed whenever there is more than one rank, and the
        scheduler's fair share gives each rank ``node_cores / gpus`` cores' worth while all of
        them run Adam at once (they step in lock-step)."""
        if self.numa_bound:
            return _core_share(self.cores_per_rank, self.ranks_per_socket * self.cores_per_rank,
                               self.cpu.cores_per_socket)
        return _core_share(self.rank_threads, self.gpus * self.rank_threads, self.node_cores)

    @property
    def adam_rate(self) -> float:
        """CPU Adam params/s of the rank's cores for its SIMD build (compute bound; its memory
        traffic is bounded separately by the rank's share of DRAM bandwidth)."""
        return self.cpu.adam_rate(self.rank_cores, self.adam_simd)

    @property
    def has_gpu(self) -> bool:
        """False for a host-only machine (validation of the CPU offload path)."""
        return self.gpu is not None and self.link is not None

    @property
    def rank_gpu(self) -> GPUProfile:
        """The rank's GPU, for a schedule that needs one (a ``ModelError`` on a host-only machine)."""
        if self.gpu is None:
            raise ModelError("this schedule needs a GPU and the hardware has none")
        return self.gpu

    @property
    def host_link(self) -> LinkProfile:
        """The host<->GPU link, for a schedule that copies over it (a ``ModelError`` without one)."""
        if self.link is None:
            raise ModelError("this schedule needs a host<->GPU link and the hardware has none")
        return self.link

    @property
    def pcie_bandwidth(self) -> float:
        """Host<->GPU bytes/s per direction for this rank's buffers (pinned or pageable)."""
        return self.host_link.pinned_bandwidth if self.pinned else self.pageable_bandwidth

    @property
    def pcie_latency(self) -> float:
        """Seconds to set up one host<->GPU copy."""
        return self.host_link.latency

    @property
    def fabric_bandwidth(self) -> float:
        """Bus bandwidth of a ring collective per GPU and direction (bytes/s): the fabric's, or
        the GPU's NVLink."""
        if self.fabric is not None:
            return self.fabric.bus_bandwidth
        return self.rank_gpu.nvlink_bandwidth

    @property
    def fabric_latency(self) -> float:
        """Fixed cost of one collective call (s); 0 on NVLink unless a fabric profile says."""
        return self.fabric.latency if self.fabric is not None else 0.0

    @property
    def pageable_bandwidth(self) -> float:
        """Host->GPU bytes/s of a copy from freshly allocated (pageable) host memory: the link
        profile's figure where it has one (measured), else through the driver's pinned staging
        buffer: one host thread copies a chunk into it, then the DMA engine moves it at the
        pinned rate, one after the other (the CPU copy serializes with the DMA), so a byte
        costs ``1/pinned + 1/memcpy_bandwidth_per_core`` seconds."""
        link = self.host_link
        if link.pageable_bandwidth is not None:
            return link.pageable_bandwidth
        return 1.0 / (1.0 / link.pinned_bandwidth + 1.0 / self.cpu.memcpy_bandwidth_per_core)

    @property
    def dram_bandwidth_per_rank(self) -> float:
        """One rank's fair share of achieved DRAM bandwidth (bytes/s). A bound rank's memory is
        its socket's, shared by the ranks on it: DeepSpeed v0.13.3 ``deepspeed/utils/numa.py``
        ``get_numactl_cmd`` adds ``-m NODE`` when the rank's cores lie in one NUMA node (an NPS4
        quadrant on Milan: its 2 of the socket's 8 channels, as many as the rank's share when
        four ranks share the socket), else only ``-C``, and first touch puts the pages on the
        nodes of its cores. An unbound rank's pages are placed by first touch, wherever the
        thread that first wrote them ran: DeepSpeed fills the fp32 partitions and Adam's
        moments with torch ops on all of the rank's threads, which the scheduler spreads over
        the node, so its pages spread over every socket and NUMA domain (NPS4 quadrants
        alike), and the node's bandwidth is shared by all ranks. Not modelled: the pinned
        buffers one thread allocates land on that thread's domain, and remote accesses add
        latency, which slows latency-bound single-thread copies."""
        if self.numa_bound:
            return self.dram.bandwidth / self.ranks_per_socket
        return self.dram.bandwidth * self.sockets / self.gpus

    @property
    def network_bandwidth_per_rank(self) -> float:
        """One rank's fair share of its node's NICs (bytes/s per direction): every rank of the
        node runs its collectives at once, and their bytes between nodes share the NICs."""
        if self.network is None:
            raise ModelError("this schedule crosses the network between nodes and the hardware has no NIC")
        return self.network.bandwidth * self.network_count / self.gpus

    @property
    def cxl_devices_per_rank(self) -> float:
        """CXL devices' worth of device time one rank gets (devices per socket / ranks per socket)."""
        return (self.cxl_count / self.sockets) / self.ranks_per_socket

    @property
    def nvme_drives_per_rank(self) -> float:
        """NVMe drives' worth of device time one rank gets (the pool is shared by all ranks)."""
        return self.nvme_count / self.gpus

    def usable(self, tier: str) -> int:
        """Bytes of a tier a run may hold (``usable_bytes``)."""
        return self.usable_bytes()[tier]

    def usable_bytes(self) -> dict[str, int]:
        """Bytes of each tier a run may hold, in ``TIERS`` order: its capacity less the tier's
        ``HEADROOM``, or for DRAM less ``host_memory_in_use`` where that is more."""
        capacities = self.capacities()
        usable = {tier: int(capacity * (1.0 - HEADROOM[tier])) for tier, capacity in capacities.items()}
        dram = capacities["dram"]
        if self.host_memory_in_use > dram * HEADROOM["dram"]:
            usable["dram"] = dram - self.host_memory_in_use
        return usable

    def capacity(self, tier: str) -> int:
        """Bytes of a tier (``capacities``; a ``KeyError`` for one that is not a tier)."""
        return self.capacities()[tier]

    def capacities(self) -> dict[str, int]:
        """Bytes of each tier, in ``TIERS`` order: per GPU for ``hbm``, whole node for host tiers
        (0 if absent). All four at once: a run reads every tier (one Python call, not four)."""
        return {
            "hbm": self.gpu.hbm_capacity if self.gpu else 0,
            "dram": self.dram_capacity_per_socket * self.sockets,
            "cxl": self.cxl.capacity * self.cxl_count if self.cxl else 0,
            "nvme": self.nvme.capacity * self.nvme_count if self.nvme else 0,
        }


def resolve_hardware(spec: HardwareSpec, source: str, search: tuple[Path, ...] = (),
                     host: HostProfile | None = None) -> Hardware:
    """Look up every profile the spec names (``host``: the host profile object to use instead of
    looking ``hardware.host`` up); errors name ``source`` and the ``hardware.*`` field."""
    if host is None and spec.host is not None:
        host = find_profile(spec.host, HostProfile, source, "hardware.host", search)
    gpu, link = _gpu_and_link(spec, host, source, search)
    fabric = _part(spec.fabric, FabricProfile, host.fabric if host else None, source, "hardware.fabric", search)
    cpu = host.cpu if host else find_profile(spec.cpu, CPUProfile, source, "hardware.cpu", search)
    dram = host.dram if host else find_profile(spec.dram, DRAMProfile, source, "hardware.dram", search)
    cxl, nvme = _memory_devices(spec, host, source, search)
    network, network_count = _network(spec, host, source, search)
    cores = spec.cores_per_rank or max(1, cpu.cores_per_socket * spec.sockets // spec.gpus)
    _check_cpu(spec, cpu, cores, source)
    dram_capacity = spec.dram_capacity or dram.capacity
    if spec.host_memory_in_use >= dram_capacity * spec.sockets:
        raise ConfigError(source, "hardware.host_memory_in_use", f"{spec.host_memory_in_use / 1e9:.1f} GB in use "
                          f"leaves nothing of the node's {dram_capacity * spec.sockets / 1e9:.1f} GB of DRAM")
    return Hardware(
        gpu=gpu,
        gpus=spec.gpus,
        link=link,
        fabric=fabric,
        pinned=spec.pinned,
        cpu=cpu,
        sockets=spec.sockets,
        cores_per_rank=cores,
        numa_bound=spec.numa_bound,
        adam_simd=spec.adam_simd,
        dram=dram,
        dram_capacity_per_socket=dram_capacity,
        cxl=cxl,
        cxl_count=spec.cxl.count if spec.cxl else 0,
        nvme=nvme,
        nvme_count=spec.nvme.count if spec.nvme else (1 if nvme is not None else 0),
        host_memory_in_use=spec.host_memory_in_use,
        nodes=spec.nodes,
        network=network,
        network_count=network_count,
        gpudirect=spec.network.gpudirect if spec.network else True,
    )


def _gpu_and_link(spec: HardwareSpec, host: HostProfile | None, source: str,
                  search: tuple[Path, ...]) -> tuple[GPUProfile, LinkProfile]:
    """The GPU (named, else the host's) and its host link (named, else the host's, else the GPU's)."""
    gpu = _part(spec.gpu, GPUProfile, host.gpu if host else None, source, "hardware.gpu", search)
    if gpu is None:
        raise ConfigError(source, "hardware.gpu", "required field is missing (the host profile has no GPU)")
    if host is not None and host.link is not None and spec.host_link is None:
        return gpu, host.link
    link = find_profile(spec.host_link or gpu.host_link, LinkProfile, source, "hardware.host_link", search)
    return gpu, link


def _memory_devices(spec: HardwareSpec, host: HostProfile | None, source: str,
                    search: tuple[Path, ...]) -> tuple[CXLProfile | None, NVMeProfile | None]:
    """The CXL and NVMe devices: those the spec's entries name, else the host profile's (an
    NVMe drive the spec leaves out is the host's own)."""
    cxl = _device(spec.cxl, CXLProfile, host.cxl if host else None, source, "hardware.cxl.device", search)
    nvme = _device(spec.nvme, NVMeProfile, host.nvme if host else None, source, "hardware.nvme.device", search)
    if spec.nvme is None and host is not None:
        nvme = host.nvme
    return cxl, nvme


def _network(spec: HardwareSpec, host: HostProfile | None, source: str,
             search: tuple[Path, ...]) -> tuple[NetworkProfile | None, int]:
    """The NIC between nodes and how many each node has: the one ``hardware.network`` names,
    else the host profile's own (one); a job of several nodes without one is a ConfigError."""
    own = host.network if host else None
    network = _device(spec.network, NetworkProfile, own, source, "hardware.network.device", search)
    if spec.network is None:
        network = own
    if network is None and spec.nodes > 1:
        raise ConfigError(source, "hardware.network", f"required with hardware.nodes {spec.nodes}: the NICs that "
                          "collectives between nodes cross ({device: PROFILE, count: NICs per node})")
    if network is None:
        return None, 0
    return network, spec.network.count if spec.network else 1


def _check_cpu(spec: HardwareSpec, cpu: CPUProfile, cores: int, source: str) -> None:
    """The ranks' logical CPUs fit the sockets' hardware threads (a profile that does not give
    ``threads_per_core`` counts each CPU as a core), and the CPU runs the SIMD width Adam was
    built for."""
    ranks_per_socket = math.ceil(spec.gpus / spec.sockets)
    threads = cpu.threads_per_core or 1
    if cores * ranks_per_socket > cpu.cores_per_socket * threads:
        raise ConfigError(
            source,
            "hardware.cores_per_rank",
            f"{cores} logical CPUs for each of {ranks_per_socket} ranks per socket exceeds "
            f"{cpu.cores_per_socket} cores (x{threads} hardware threads) of {cpu.name}",
        )
    if spec.adam_simd and cpu.simd and spec.adam_simd not in SIMD_RUNS[cpu.simd]:
        raise ConfigError(source, "hardware.adam_simd", f"{cpu.name} has no {spec.adam_simd} (its widest: {cpu.simd})")


def _core_share(threads: int, sharing: int, cores: int) -> float:
    """Physical cores' worth that ``threads`` of ``sharing`` threads get on ``cores`` cores."""
    return threads * min(1.0, cores / sharing)


P = TypeVar("P", bound=Profile)


def _part(name: str | None, kind: type[P], own: P | None, source: str, field_path: str,
          search: tuple[Path, ...]) -> P | None:
    """The profile ``name`` of ``kind`` when given, else the host profile's own part (or None)."""
    return find_profile(name, kind, source, field_path, search) if name is not None else own


def _device(spec: DeviceCount | None, kind: type[P], own: P | None, source: str, field_path: str,
            search: tuple[Path, ...]) -> P | None:
    """The device of a ``hardware.cxl``/``hardware.nvme`` entry: its named profile, else the
    host profile's own device; an entry that names none where the host has none is an error."""
    if spec is None:
        return None
    found = _part(spec.device, kind, own, source, field_path, search)
    if found is None:
        raise ConfigError(source, field_path, "required field is missing (the host profile has no such device)")
    return found
