"""Device profiles: typed, validated descriptions of GPUs, links, host memory, CXL and NVMe.

A profile is a YAML file in a profile directory (the bundled ones, ``tiersim.config.bundled``; the
directories in ``TIERSIM_PROFILE_PATH`` or given with ``--profile-path``; ``./device_profiles``)
or a path given directly. Each file has ``kind``,
``name``, ``description``, the figures of that kind (units allowed, see ``tiersim.config.units``) and
``sources``: one citation per figure. All values are stored in base units: bytes, bytes/s,
FLOP/s, seconds.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, TypeVar, overload

from tiersim.config.bundled import bundled_dir
from tiersim.config.schema import build, duration, flops, integer, number, rate, size
from tiersim.config.yamlfile import read_yaml
from tiersim.errors import ConfigError

DEFAULT_PROFILE_DIR = bundled_dir("device_profiles")
"""The bundled profiles (the checkout's ``device_profiles/`` in an editable install)."""


@dataclass(frozen=True, kw_only=True)
class _ProfileBase:
    kind: str
    """Which kind of device the file describes (a key of ``PROFILE_KINDS``), and so which fields
    it has."""
    name: str
    """The file name without ``.yaml``; scenarios name the profile by it."""
    description: str
    """Free text: what the device is."""
    sources: dict[str, str]
    """Where each figure comes from (figure name -> citation: datasheet, measurement, derivation);
    every figure the file sets must have one, and only figures may."""
    price_usd: float | None = number(None, ge=0, doc="street price of one unit (USD), for planning")

    def validate(self, source: str, path: str) -> None:
        """Every figure must cite where it comes from."""
        figures = {f.name for f in fields(self)} - {"kind", "name", "description", "sources"}
        for figure in sorted(figures):
            if getattr(self, figure) is not None and figure not in self.sources:
                raise ConfigError(source, f"sources.{figure}", "every figure needs a cited source")
        for key in self.sources:
            if key not in figures:
                raise ConfigError(source, f"sources.{key}", "cites a figure this profile does not have")


@dataclass(frozen=True, kw_only=True)
class GPUProfile(_ProfileBase):
    """A GPU: HBM capacity (bytes) and bandwidth (bytes/s), dense bf16 peak (FLOP/s), its SMs and
    the output tile its GEMM kernels compute per SM (``tiersim.strategies.gpu_kernels``)."""

    hbm_capacity: int = size(gt=0, doc="HBM bytes of one GPU")
    hbm_bandwidth: float = rate(doc="peak HBM bandwidth (bytes/s); memory-bound kernels achieve "
                                    "memory_efficiency of it")
    bf16_flops: float = flops(doc="dense bf16 tensor-core peak (FLOP/s)")
    sm_count: int = integer(gt=0, doc="streaming multiprocessors; bf16_flops / sm_count is one SM's peak")
    gemm_tile_m: int = integer(gt=0, doc="rows of the output tile one thread block of a large bf16 GEMM computes")
    gemm_tile_n: int = integer(gt=0, doc="columns of that tile")
    compute_efficiency: float = number(gt=0, le=1, doc="achieved / peak of the MMA pipeline on a full wave "
                                                       "of large tiles")
    zero3_hook_latency: float = duration(doc="host seconds ZeRO-3's hooks take per module call and pass "
                                             "(parameter fetch and release bookkeeping) on the thread driving this GPU")
    memory_efficiency: float = number(gt=0, le=1, doc="achieved / peak HBM bandwidth")
    nvlink_bandwidth: float = rate(doc="per GPU, per direction, for reduce-scatter/all-gather")
    reserved_memory: int = size(doc="held outside the caching allocator: CUDA context, NCCL buffers, libraries")
    host_link: str = ""
    """Link profile name of the GPU's host connection, used where ``hardware.host_link`` and the
    host profile name none."""


@dataclass(frozen=True, kw_only=True)
class LinkProfile(_ProfileBase):
    """A host<->GPU link, per direction (bytes/s), with a per-transfer latency (s): PCIe, or a
    superchip's NVLink-C2C (a GPU profile's ``host_link`` names any link profile). Copies from
    pageable memory run at ``pageable_bandwidth`` where it is measured, else through the
    driver's staging buffer at a rate the host CPU sets (``Hardware.pageable_bandwidth``)."""

    raw_bandwidth: float = rate(doc="the link's rate per direction before protocol overhead; for reference: "
                                    "copies run at pinned_bandwidth or the pageable rate")
    pinned_bandwidth: float = rate(doc="achieved copy rate per direction between pinned host memory and the GPU")
    pageable_bandwidth: float | None = rate(None, doc="achieved host->GPU copy rate from pageable memory, where "
                                                      "measured; None: derived from pinned_bandwidth and the "
                                                      "CPU's memcpy_bandwidth_per_core")
    latency: float = duration(doc="fixed cost of one host<->GPU copy (s)")


@dataclass(frozen=True, kw_only=True)
class FabricProfile(_ProfileBase):
    """The GPU-to-GPU path of ZeRO's all-gathers and reduce-scatters when it is not the GPU's own
    NVLink (for example PCIe peer-to-peer through the host bridges): the bus bandwidth a ring
    collective achieves per GPU and direction (bytes/s, NCCL's "busbw") and the fixed cost of
    one collective call (s). ``via_host_link``: the traffic also crosses each GPU's PCIe link,
    where it shares bandwidth with host<->GPU copies."""

    bus_bandwidth: float = rate(doc="bus bandwidth of a ring collective per GPU and direction (NCCL busbw)")
    latency: float = duration(doc="fixed cost of one collective call (s)")
    via_host_link: bool = False
    """The collectives' traffic also crosses each GPU's host link, sharing it with host<->GPU copies."""


@dataclass(frozen=True, kw_only=True)
class NetworkProfile(_ProfileBase):
    """A node's network interface (one NIC port and the switched fabric behind it) that
    collectives between nodes cross: its rate per direction (bytes/s) and the rate NCCL's ring
    collectives achieve through it, the latency of one message from NIC to NIC through the
    fabric (s), and NCCL's latencies of a ring that crosses it (s). The NIC reads and writes GPU
    memory over the GPU's host link (GPUDirect RDMA), where its bytes share the link with
    host<->GPU copies."""

    port_bandwidth: float = rate(doc="the port's data rate per direction (signalling less line coding); for "
                                     "reference: collectives run at bandwidth")
    bandwidth: float = rate(doc="achieved RDMA payload rate of one port per direction: the data rate less "
                                "per-packet headers at the MTU")
    collective_bandwidth: float | None = rate(None, doc="measured bus bandwidth NCCL's ring all-gather and "
                                                        "reduce-scatter reach between nodes per NIC (bytes/s), at "
                                                        "tens to hundreds of MB; None: bandwidth")
    latency: float = duration(doc="one message, NIC to NIC through the fabric's switches (s); a ring "
                                  "collective pays it once per step between nodes")
    call_latency: float = duration(doc="fixed cost of one collective call that crosses the network (s): "
                                       "NCCL's base latency of a ring")
    step_latency: float = duration(doc="NCCL's latency of each step of a ring from one node to the next (s), "
                                       "besides the message's own latency")
    proxy_step_latency: float = duration(doc="NCCL's latency of each step within a node of a ring that crosses "
                                             "nodes (s): its network proxy posting each step")

    def validate(self, source: str, path: str) -> None:
        """Figures cited; NCCL reaching at most the payload rate."""
        super().validate(source, path)
        if self.collective_bandwidth is not None and self.collective_bandwidth > self.bandwidth:
            raise ConfigError(source, "collective_bandwidth",
                              f"must not exceed bandwidth ({self.bandwidth:.4g} B/s), "
                              f"got {self.collective_bandwidth:.4g}")

    @property
    def collective_rate(self) -> float:
        """Bytes/s of NCCL's ring collectives through one NIC: the measured bus bandwidth, else
        the payload rate."""
        return self.collective_bandwidth if self.collective_bandwidth is not None else self.bandwidth


SimdName = Literal["avx512", "avx2", "sve", "scalar"]
"""A SIMD instruction set a CPU executes and DeepSpeed's CPU Adam may be built for."""
SIMD_BITS: dict[str, int] = {"avx512": 512, "avx2": 256, "sve": 128, "scalar": 32}
"""Vector width of each SIMD instruction set DeepSpeed's CPU Adam is built for (bits); fp32
lanes are bits / 32 (``csrc/includes/simd.h`` at v0.13.3: ``SIMD_WIDTH`` 16 for ``__AVX512__``,
8 for ``__AVX256__``; without either, the scalar loop of ``cpu_adam_impl.cpp``). ``sve``: Arm
SVE at the 128-bit vector length of Neoverse V2 (NVIDIA Grace), 4 fp32 lanes; DeepSpeed 0.10 to
0.16 has no Arm SIMD path (its builds there are ``scalar``), a later one a vector-length-agnostic
SVE kernel (deepspeedai/DeepSpeed pull request 8365)."""
SIMD_RUNS: dict[str, tuple[str, ...]] = {
    "avx512": ("avx512", "avx2", "scalar"),
    "avx2": ("avx2", "scalar"),
    "sve": ("sve", "scalar"),
    "scalar": ("scalar",),
}
"""The builds a CPU whose widest instruction set is the key can run (x86 and Arm apart)."""
ADAM_VECTOR_OPS = 10
"""Floating-point vector instructions per vector of parameters in DeepSpeed's CPU Adam (AdamW,
weight decay > 0), ``Step_AVX`` in ``csrc/includes/cpu_adam.h`` at v0.13.3: 3 ``simd_mul``
(moment decay, variance decay, grad squared), 5 ``simd_fma`` (moment, variance, bias-corrected
denominator, decoupled weight decay, parameter update), 1 ``simd_sqrt``, 1 ``simd_div``; besides
4 loads (grad, exp_avg, exp_avg_sq, param) and 3 stores (param, exp_avg, exp_avg_sq)."""
SIMD_FIGURES = ("simd", "simd_datapath_bits", "fma_units", "simd_clock", "adam_simd_efficiency")
"""The figures the first-principles Adam rate needs (all of them, or ``adam_params_per_core``)."""


@dataclass(frozen=True, kw_only=True)
class CPUProfile(_ProfileBase):
    """A host CPU socket: its cores and SMT threads, its SIMD units, and CPU Adam's rate on them.

    DeepSpeed CPU Adam's rate per physical core (parameters/s) is, from first principles,
    ``fp32 lanes per FMA unit x fma_units x simd_clock / ADAM_VECTOR_OPS x adam_simd_efficiency``,
    lanes being the instruction set's width (``SIMD_BITS``) cut to the core's datapath (a 512-bit
    instruction on a 256-bit datapath runs as two halves). SMT siblings share one core's SIMD
    units, so rates count physical cores. ``adam_params_per_core`` (measured by ``tiersim
    calibrate`` or fitted by ``tiersim fit``), when set, replaces the first-principles figure; it
    counts the profile's widest SIMD width and scales with the lanes of a narrower one.
    """

    cores_per_socket: int = integer(gt=0, doc="physical cores of one socket")
    threads_per_core: int | None = integer(None, gt=0, doc="hardware threads (SMT) per physical core")
    simd: SimdName | None = None
    """The widest SIMD instruction set the cores execute."""
    simd_datapath_bits: int | None = integer(None, gt=0, doc="width of each FMA unit's datapath (bits)")
    fma_units: int | None = integer(None, gt=0, doc="fp32 FMA units (pipes) per physical core")
    simd_clock: float | None = number(None, gt=0, doc="core clock the SIMD peak counts (Hz; the bundled "
                                                         "profiles take the datasheet base clock)")
    adam_simd_efficiency: float | None = number(None, gt=0, le=1, doc="CPU Adam's achieved / SIMD peak rate")
    adam_params_per_core: float | None = number(None, gt=0, doc="measured or fitted CPU Adam, fp32, params/s per "
                                                                 "physical core; replaces the SIMD figures")
    memcpy_bandwidth_per_core: float = rate(doc="single-core streaming copy (bytes copied/s); a rank's "
                                                "multi-threaded torch copies run at cores x this, within its memory")
    adam_step_overhead: float | None = duration(None, doc="fixed cost of one optimizer.step call (s)")
    adam_params_per_s: list[float] | None = None
    """Measured Adam params/s with 1, 2, ... cores, when the rate does not scale linearly."""

    def validate(self, source: str, path: str) -> None:
        """Figures cited; the measured Adam rates positive; an Adam rate it can give."""
        super().validate(source, path)
        for i, value in enumerate(self.adam_params_per_s or ()):
            if not value > 0:
                raise ConfigError(source, f"adam_params_per_s[{i}]", f"must be greater than 0, got {value:g}")
        missing = [name for name in SIMD_FIGURES if getattr(self, name) is None]
        if self.adam_params_per_core is None and missing:
            raise ConfigError(source, "adam_params_per_core",
                              f"required without the SIMD figures (missing: {', '.join(missing)})")

    def simd_lanes(self, simd: str | None = None) -> float:
        """fp32 results per cycle per physical core for ``simd`` (None: the widest the CPU has):
        the instruction's lanes cut to the datapath, times the FMA units."""
        width = SIMD_BITS[simd or self.simd or "scalar"]
        datapath = self.simd_datapath_bits or width
        return min(width, datapath) / 32 * (self.fma_units or 1)

    def adam_core_rate(self, simd: str | None = None) -> float:
        """CPU Adam params/s on one physical core built for ``simd`` (None: the widest): the
        measured or fitted figure scaled by lanes, else the SIMD peak times the efficiency."""
        if self.adam_params_per_core is not None:
            if self.simd is None or simd is None:
                return self.adam_params_per_core
            return self.adam_params_per_core * self.simd_lanes(simd) / self.simd_lanes()
        assert self.simd_clock is not None and self.adam_simd_efficiency is not None  # validate()
        return self.simd_lanes(simd) * self.simd_clock / ADAM_VECTOR_OPS * self.adam_simd_efficiency

    def adam_rate(self, cores: float, simd: str | None = None) -> float:
        """Adam params/s on ``cores`` physical cores' worth: the measured rate for that many when
        known, beyond the measurements the last one's per-core rate, else cores x the core rate."""
        table = self.adam_params_per_s
        if not table:
            return cores * self.adam_core_rate(simd)
        whole = int(cores)
        if whole == cores and 1 <= whole <= len(table):
            return table[whole - 1]
        return table[-1] / len(table) * cores


@dataclass(frozen=True, kw_only=True)
class DRAMProfile(_ProfileBase):
    """Host DRAM of one socket: capacity (bytes), achievable bandwidth (bytes/s), idle latency (s)."""

    capacity: int = size(gt=0, doc="DRAM bytes of one socket")
    peak_bandwidth: float = rate(doc="theoretical bandwidth of the socket's channels; for reference: the "
                                     "simulator uses bandwidth")
    bandwidth: float = rate(doc="achieved (STREAM-like) by one socket, read+write combined")
    latency: float = duration(doc="idle load latency (s); for reference, not used by the simulator")


@dataclass(frozen=True, kw_only=True)
class CXLProfile(_ProfileBase):
    """A CXL Type-3 memory expander: link and device bandwidth (bytes/s), added latency (s)."""

    capacity: int = size(gt=0, doc="bytes of one device")
    link_bandwidth: float = rate(doc="the device's CXL link, per direction")
    read_bandwidth: float = rate(doc="the device's media and controller, all reads")
    write_bandwidth: float = rate(doc="the device's media and controller, all writes")
    added_latency: float = duration(doc="load latency above local DRAM (s); for reference, not used by the "
                                        "simulator")


@dataclass(frozen=True, kw_only=True)
class NVMeProfile(_ProfileBase):
    """An NVMe SSD (or pool): sequential bandwidths (bytes/s), per-request latencies (s).

    Throughput of a stream with N requests of B bytes outstanding follows Little's law,
    N*B / (latency + B/bandwidth), capped by the device bandwidth and, when set, by what one
    aio submission thread can drive (``aio_thread_bandwidth``).

    ``read_queueing`` / ``write_queueing`` (optional, 0..1, default unset = 0) say how much of
    the transfer time of the other N-1 outstanding requests each request waits behind: the
    per-request latency overlaps across the queue, the data transfer of queued requests goes
    through the device at ``q`` of full serialisation. A request then takes
    ``latency + B/bandwidth * (1 + q*(N-1))``, so throughput is
    N*B / (latency + B/bandwidth * (1 + q*(N-1))): q = 0 is the plain Little's-law model above,
    q = 1 a single transfer channel (throughput approaches the bandwidth only gradually with N,
    as a virtual disk or a drive with one internal queue does). ``tiersim calibrate`` fits them.
    """

    capacity: int = size(gt=0, doc="bytes of one drive")
    read_bandwidth: float = rate(doc="sequential reads of one drive")
    write_bandwidth: float = rate(doc="sequential writes of one drive")
    read_latency: float = duration(doc="time a read request takes besides its transfer (s)")
    write_latency: float = duration(doc="time a write request takes besides its transfer (s)")
    aio_thread_bandwidth: float | None = rate(None, doc="most bytes/s one aio submission thread drives; "
                                                        "None: no limit")
    read_queueing: float | None = number(None, ge=0, le=1, doc="transfer serialisation of queued reads, 0..1")
    write_queueing: float | None = number(None, ge=0, le=1, doc="transfer serialisation of queued writes, 0..1")


@dataclass(frozen=True, kw_only=True)
class HostProfile(_ProfileBase):
    """A whole node as ``tiersim calibrate`` measures it or ``tiersim fit`` infers it from
    training logs: CPU, DRAM, NVMe, and where known the GPU link, the GPU, the collective fabric,
    the CXL expander and the NIC between nodes. Each part is a full profile mapping of its kind (with ``kind``,
    ``name``, ``description`` and ``sources``); raw measurements or the fit report sit beside it
    in ``calibration`` (free-form, not used by the simulator)."""

    cpu: CPUProfile = None  # type: ignore[assignment]
    """The node's CPU socket: a ``cpu`` profile mapping."""
    dram: DRAMProfile = None  # type: ignore[assignment]
    """One socket's DRAM: a ``dram`` profile mapping."""
    nvme: NVMeProfile = None  # type: ignore[assignment]
    """The node's NVMe drive: an ``nvme`` profile mapping."""
    link: LinkProfile | None = None
    """The host<->GPU link: a ``link`` profile mapping; None: ``hardware.host_link`` or the GPU's."""
    gpu: GPUProfile | None = None
    """The GPU: a ``gpu`` profile mapping; None: ``hardware.gpu`` names it."""
    fabric: FabricProfile | None = None
    """The GPUs' collective path: a ``fabric`` profile mapping; None: ``hardware.fabric`` or NVLink."""
    cxl: CXLProfile | None = None
    """A CXL memory expander: a ``cxl`` profile mapping, for a ``hardware.cxl`` entry naming no device."""
    network: NetworkProfile | None = None
    """The NIC between nodes: a ``network`` profile mapping, for a ``hardware.network`` entry naming
    no device."""
    calibration: dict[str, object] | None = None
    """Raw measurements or the fit report, free-form; not read by the simulator."""

    def validate(self, source: str, path: str) -> None:
        for part in ("cpu", "dram", "nvme"):
            if getattr(self, part) is None:
                raise ConfigError(source, part, "required field is missing")


Profile = (GPUProfile | LinkProfile | FabricProfile | NetworkProfile | CPUProfile | DRAMProfile | CXLProfile
           | NVMeProfile | HostProfile)
PROFILE_KINDS: dict[str, type] = {
    "host": HostProfile,
    "gpu": GPUProfile,
    "link": LinkProfile,
    "fabric": FabricProfile,
    "network": NetworkProfile,
    "cpu": CPUProfile,
    "dram": DRAMProfile,
    "cxl": CXLProfile,
    "nvme": NVMeProfile,
}


def profile_dirs() -> list[Path]:
    """Where profiles are looked up by name, first match wins, and nowhere else: the
    ``--profile-path`` folders and $TIERSIM_PROFILE_PATH (the CLI puts the former in front of
    the latter), ./device_profiles, then the bundled profiles."""
    env = os.environ.get("TIERSIM_PROFILE_PATH", "")
    dirs = [Path(p) for p in env.split(os.pathsep) if p]
    dirs += [Path.cwd() / "device_profiles", DEFAULT_PROFILE_DIR]
    unique: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for d in dirs:
        try:
            info = d.stat()
        except OSError:
            continue
        identity = (info.st_dev, info.st_ino)  # the same folder by any path
        if stat.S_ISDIR(info.st_mode) and identity not in seen:
            seen.add(identity)
            unique.append(d)
    return unique


def load_profile_file(path: Path) -> Profile:
    """Load and validate one profile file (cached while the file is unchanged)."""
    try:
        info = path.stat()
    except OSError:
        return _load_profile(path)
    return _load_cached(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=1024)
def _load_cached(path: str, mtime_ns: int, size: int) -> Profile:
    """``_load_profile`` keyed by the file's identity; errors are raised, never cached."""
    return _load_profile(Path(path))


def _load_profile(path: Path) -> Profile:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a profile must be a mapping")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in PROFILE_KINDS:
        raise ConfigError(str(path), "kind", f"must be one of {', '.join(PROFILE_KINDS)}; got {kind!r}")
    profile: Profile = build(PROFILE_KINDS[kind], data, str(path))
    if profile.name != path.stem:
        raise ConfigError(str(path), "name", f"must equal the file name {path.stem!r}, got {profile.name!r}")
    return profile


P = TypeVar("P", bound=_ProfileBase)


def kind_name(kind: type[_ProfileBase]) -> str:
    """The ``kind:`` a profile file of this class has."""
    return next(name for name, cls in PROFILE_KINDS.items() if cls is kind)


@overload
def find_profile(name: str, kind: type[P], source: str, field_path: str, extra: tuple[Path, ...] = ()) -> P: ...


@overload
def find_profile(name: str, kind: None, source: str, field_path: str, extra: tuple[Path, ...] = ()) -> Profile: ...


def find_profile(name: str, kind: type[_ProfileBase] | None, source: str, field_path: str,
                 extra: tuple[Path, ...] = ()) -> _ProfileBase:
    """Resolve a profile of class ``kind`` (any kind when None) by name, on ``profile_dirs``, or
    by path (a name ending ``.yaml``: relative to the current folder, else to one of ``extra``,
    e.g. the scenario's folder); errors name the referring field and, for an unknown name, the
    known ones."""
    kind_text = kind_name(kind) if kind is not None else None
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml"):
        for base in (Path.cwd(), *extra):
            if (base / candidate).is_file():
                profile = load_profile_file(base / candidate)
                break
        else:
            raise ConfigError(source, field_path, f"profile file {name!r} not found")
    else:
        for directory in profile_dirs():
            path = directory / f"{name}.yaml"
            if path.is_file():
                profile = load_profile_file(path)
                break
        else:
            known = ", ".join(_names_of_kind(kind_text)) or "none on the search path"
            what = f"{kind_text} profile" if kind_text else "profile"
            raise ConfigError(source, field_path, f"unknown {what} {name!r} (known: {known})")
    if kind is not None and not isinstance(profile, kind):
        raise ConfigError(source, field_path, f"profile {name!r} is a {profile.kind} profile, expected {kind_text}")
    return profile


def _names_of_kind(kind: str | None) -> list[str]:
    """Names of the readable profiles of ``kind`` (any when None), for error messages; broken
    files are skipped."""
    names: set[str] = set()
    for directory in profile_dirs():
        for path in directory.glob("*.yaml"):
            try:
                if kind is None or load_profile_file(path).kind == kind:
                    names.add(path.stem)
            except ConfigError:
                continue
    return sorted(names)


def list_profiles() -> list[Profile]:
    """All profiles on the search path, by kind then name (first directory wins a name)."""
    seen: dict[str, Profile] = {}
    for directory in profile_dirs():
        for path in sorted(directory.glob("*.yaml")):
            if path.stem not in seen:
                seen[path.stem] = load_profile_file(path)
    return sorted(seen.values(), key=lambda p: (p.kind, p.name))


