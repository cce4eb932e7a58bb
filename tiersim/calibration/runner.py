"""Run the micro-benchmarks of a plan, fit the model parameters, and build the host profile.

``CalibrationPlan`` says which sizes and grids to measure (``quick_plan``/``full_plan``, or a
tiny one in tests). The validation cases use other sizes, so the end-to-end optimizer step is
never an input to the fit.

Array sizes are deliberately *not* powers of two: torch places large tensors on page-aligned
mmaps, so four tensors of 2^k elements (Adam's param, grad, exp_avg, exp_avg_sq) start at the
same offsets modulo the cache's set stride and conflict in the caches; on this kind of host a
fused Adam step over 2^23..2^25 params runs 30-50% slower than over 7.7 M or 20 M params.
Real sub-groups (DeepSpeed's ``sub_group_size`` 1e9, model layer sizes) are not powers of two.
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tiersim.calibration import fit, microbench
from tiersim.calibration.profile_writer import build_host_document, write_host_profile
from tiersim.config.profiles import HostProfile

KiB, MiB = 1 << 10, 1 << 20
ADAM_BYTES_PER_PARAM = 28
"""fp32 Adam reads param, grad, exp_avg, exp_avg_sq (16 B) and writes three of them (12 B)."""


@dataclass(frozen=True)
class CalibrationPlan:
    memcpy_sizes: tuple[int, ...]
    memcpy_threads: tuple[int, ...]
    adam_numels: tuple[int, ...]
    adam_threads: tuple[int, ...]
    io_file_size: int
    io_block_sizes: tuple[int, ...]
    io_workers: tuple[int, ...]
    repeats: int = 3
    io_repeats: int = 2
    adam_repeats: int = 3
    latency_entries: int = 1 << 23
    latency_steps: int = 300_000
    cuda_sizes: tuple[int, ...] = (1 * MiB, 16 * MiB, 64 * MiB)
    gpu_adam_numels: tuple[int, ...] = (1 << 22, 1 << 24)
    adam_variants: tuple[str, ...] = ("foreach", "fused")
    quick: bool = True

    def points(self, cuda: bool) -> int:
        """How many progress ticks the plan makes."""
        n = len(self.memcpy_sizes) * len(self.memcpy_threads) + 1 + 3 * len(self.memcpy_threads)
        n += (len(self.adam_numels) + 1) * len(self.adam_variants) * len(self.adam_threads)
        n += 2 * len(self.io_block_sizes) * len(self.io_workers) + 2
        if cuda:
            n += 4 * len(self.cuda_sizes) + len(self.gpu_adam_numels)
        return n


def _threads() -> tuple[int, ...]:
    n = os.cpu_count() or 1
    return tuple(sorted({1, n}))


MB = 1_000_000


def quick_plan() -> CalibrationPlan:
    return CalibrationPlan(
        memcpy_sizes=(15 * MB, 60 * MB, 250 * MB),
        memcpy_threads=_threads(),
        adam_numels=(3_300_000, 7_700_000, 13_100_000, 26_300_000),
        adam_threads=_threads(),
        io_file_size=250 * MB,
        io_block_sizes=(256 * KiB, 512 * KiB, 1 * MiB, 2 * MiB),
        io_workers=(1, 2, 4, 8),
        repeats=5,
        io_repeats=4,
        adam_repeats=7,
        # foreach is 4-5x slower than fused on torch >= 2.4 CPUs and its full-size temporaries
        # (mmap/munmap per step) disturb the samples around it; the full plan measures both.
        adam_variants=("fused",),
        quick=True,
    )


def full_plan() -> CalibrationPlan:
    return CalibrationPlan(
        memcpy_sizes=(3 * MB, 15 * MB, 60 * MB, 250 * MB, 500 * MB),
        memcpy_threads=tuple(range(1, (os.cpu_count() or 1) + 1)),
        adam_numels=(3_300_000, 7_700_000, 13_100_000, 26_300_000, 41_900_000),
        adam_threads=tuple(range(1, (os.cpu_count() or 1) + 1)),
        io_file_size=500 * MB,
        io_block_sizes=(128 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 2 * MiB, 4 * MiB),
        io_workers=(1, 2, 4, 8, 16),
        repeats=7,
        io_repeats=3,
        adam_repeats=9,
        latency_steps=1_000_000,
        quick=False,
    )


@dataclass
class CalibrationResult:
    profile: HostProfile
    path: Path
    bypass_mode: str
    summary: dict[str, Any] = field(default_factory=dict)


def _fit_dict(f: fit.LinearFit | fit.QueueFit) -> dict[str, Any]:
    if isinstance(f, fit.LinearFit):
        return {"intercept_s": f.intercept, "rate": f.rate, "residuals": f.residuals}
    return {"latency_s": f.latency, "bandwidth": f.bandwidth, "queueing": f.queueing, "residuals": f.residuals}


def _strip_samples(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "samples"} for r in records]


@dataclass(frozen=True)
class _Part:
    """What measuring one resource gives: profile figures by section (cpu, dram, nvme, link),
    how each was measured (same keys), raw records and fits (under ``calibration``) and
    summary lines."""

    figures: dict[str, dict[str, Any]]
    methods: dict[str, dict[str, str]]
    records: dict[str, Any]
    summary: dict[str, str] = field(default_factory=dict)


CPU_FIGURES = ("cores_per_socket", "adam_params_per_core", "memcpy_bandwidth_per_core", "adam_step_overhead",
               "adam_params_per_s")
"""The order of the cpu figures in a written profile."""

Tick = Callable[[str], Callable[[], None]]
"""The progress callback of one kind of measured point, by label."""


def run_calibration(
    plan: CalibrationPlan,
    out: Path,
    nvme_dir: Path | None = None,
    on_point: Callable[[str], None] | None = None,
    name: str | None = None,
) -> CalibrationResult:
    """Measure, fit, write ``out`` and return the loaded profile. ``on_point(label)`` is called
    once per measured point. One function measures and fits each resource, in this order:
    host memory, CPU Adam, file I/O, and the host<->GPU link when CUDA is present."""
    hostname = socket.gethostname()
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    nvme_dir = Path(nvme_dir) if nvme_dir else microbench.default_nvme_dir()

    def tick(label: str) -> Callable[[], None]:
        return (lambda: on_point(label)) if on_point else (lambda: None)

    memory = _measure_memory(plan, tick)
    adam = _measure_cpu_adam(plan, tick)
    mode, io = _measure_file_io(plan, nvme_dir, tick)
    parts = [adam, memory, io]
    if microbench.cuda_available():
        parts.append(_measure_link(plan, tick))
    figures: dict[str, dict[str, Any]] = {"cpu": {"cores_per_socket": os.cpu_count() or 1}}
    methods: dict[str, dict[str, str]] = {"cpu": {"cores_per_socket": "os.cpu_count() (all CPUs of this host)"}}
    calibration: dict[str, Any] = {
        "tool": "tiersim calibrate" + (" --quick" if plan.quick else ""),
        "date": date,
        "hostname": hostname,
        "nvme_dir": str(nvme_dir),
        "page_cache_bypass": mode,
    }
    summary: dict[str, str] = {}
    for part in parts:
        for section, values in part.figures.items():
            figures.setdefault(section, {}).update(values)
        for section, texts in part.methods.items():
            methods.setdefault(section, {}).update(texts)
        calibration.update(part.records)
        summary.update(part.summary)
    summary["page cache bypass"] = mode
    cpu = figures["cpu"]
    doc = build_host_document(
        name=name or Path(out).stem,
        hostname=hostname,
        date=date,
        cpu={k: cpu[k] for k in CPU_FIGURES if k in cpu},
        dram=figures["dram"],
        nvme=figures["nvme"],
        link=figures.get("link"),
        methods=methods,
        calibration=calibration,
    )
    profile = write_host_profile(Path(out), doc)
    return CalibrationResult(profile, Path(out), mode, summary)


def _measure_memory(plan: CalibrationPlan, tick: Tick) -> _Part:
    """Host memory: copies (time = latency + size / bandwidth per thread count), STREAM-like
    kernels (bytes/s) and a pointer chase (latency, s)."""
    mem = microbench.memcpy_bandwidth(plan.memcpy_sizes, plan.memcpy_threads, plan.repeats, tick("memory copy"))
    mem_fits = {}
    for t in plan.memcpy_threads:
        pts = [r for r in mem if r["threads"] == t]
        mem_fits[t] = fit.fit_latency_bandwidth([r["size"] for r in pts], [r["seconds"] for r in pts])
    per_core_copy = mem_fits[min(plan.memcpy_threads)].rate / min(plan.memcpy_threads)
    best_copy = max(f.rate for f in mem_fits.values())  # bytes copied per second
    largest = max(plan.memcpy_sizes)
    peak_copy = max([best_copy] + [r["size"] / r["seconds"] for r in mem if r["size"] == largest])
    stream = microbench.dram_stream(largest, plan.memcpy_threads, repeats=plan.repeats, on_point=tick("DRAM stream"))
    best_stream = max(r["bytes"] / r["seconds"] for r in stream)  # read+write bytes per second
    lat = microbench.dram_latency(plan.latency_entries, plan.latency_steps, on_point=tick("memory latency"))
    sizes_txt = ", ".join(f"{s / MB:g} MB" for s in plan.memcpy_sizes)
    return _Part(
        figures={
            "cpu": {"memcpy_bandwidth_per_core": per_core_copy},
            "dram": {
                "capacity": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                "peak_bandwidth": max(2 * peak_copy, best_stream),
                "bandwidth": best_stream,
                "latency": lat["latency_s"],
            },
        },
        methods={
            "cpu": {
                "memcpy_bandwidth_per_core": f"torch copy_ of {sizes_txt} fp32 with 1 thread; fit time = latency + "
                "size/bandwidth; bytes copied per second",
            },
            "dram": {
                "capacity": "os.sysconf(SC_PHYS_PAGES) * SC_PAGE_SIZE (total memory)",
                "peak_bandwidth": f"best measured of torch copy_ and STREAM-like kernels over {largest / MB:g} MB "
                f"arrays, {list(plan.memcpy_threads)} threads, read+write bytes counted",
                "bandwidth": f"best of STREAM-like torch kernels (copy, in-place add_, in-place addcmul_) over "
                f"{largest / MB:g} MB fp32 arrays and {list(plan.memcpy_threads)} threads, read+write bytes counted "
                "(in-place kernels move data as Adam does, without write-allocate)",
                "latency": f"Python pointer chase over a random cycle of {lat['bytes'] // MiB} MiB minus the same "
                "loop in cache (rough; includes TLB misses)",
            },
        },
        records={"memcpy": {
            "fits": {str(t): _fit_dict(f) for t, f in mem_fits.items()},
            "records": _strip_samples(mem),
            "latency_probe": lat,
            "stream_records": stream,
        }},
        summary={"memcpy": f"{best_copy / 1e9:.1f} GB/s copied (best), {per_core_copy / 1e9:.1f} GB/s per core"},
    )


def _measure_cpu_adam(plan: CalibrationPlan, tick: Tick) -> _Part:
    """CPU Adam: time = overhead + numel / rate per (variant, threads); the fastest variant at
    the most threads is the profile's."""
    adam = microbench.cpu_adam(plan.adam_numels, plan.adam_threads, plan.adam_variants, plan.adam_repeats,
                               tick("CPU Adam"))
    overhead = microbench.cpu_adam_overhead(plan.adam_threads, plan.adam_variants, on_point=tick("Adam overhead"))
    adam_fits = _fit_cpu_adam(plan, adam, overhead)
    top = max(plan.adam_threads)
    variant = max(adam_fits, key=lambda v: adam_fits[v].get(top, next(iter(adam_fits[v].values()))).rate)
    one = min(adam_fits[variant])
    chosen = adam_fits[variant]
    return _Part(
        figures={"cpu": _cpu_adam_figures(chosen)},
        methods={"cpu": {
            "adam_params_per_core": f"torch.optim.Adam({variant}=True) step over one fp32 tensor of "
            f"{', '.join(str(n) for n in plan.adam_numels)} params with {one} torch thread(s); "
            "per-call overhead from a 1024-param step, then fit time = overhead + numel/rate; rate / threads",
            "adam_step_overhead": f"median time of torch.optim.Adam({variant}=True).step() over a 1024-param tensor",
            "adam_params_per_s": f"the same Adam fit with 1..{max(plan.adam_threads)} torch threads (params/s each)",
        }},
        records={"adam": {
            "variant": variant,
            "bytes_per_param": ADAM_BYTES_PER_PARAM,
            "step_overhead_s": chosen[one].intercept,
            "params_per_s_by_threads": {str(t): f.rate for t, f in chosen.items()},
            "step_overhead_s_by_threads": {str(t): f.intercept for t, f in chosen.items()},
            "fits": {v: {str(t): _fit_dict(f) for t, f in fs.items()} for v, fs in adam_fits.items()},
            "records": _strip_samples(adam),
            "overhead_records": overhead,
        }},
        summary={"adam": f"{variant}: {chosen[one].rate / 1e6:.0f} M params/s with {one} thread(s), "
                         f"overhead {chosen[one].intercept * 1e6:.0f} us"},
    )


def _fit_cpu_adam(plan: CalibrationPlan, adam: list[dict[str, Any]],
                  overhead: list[dict[str, Any]]) -> dict[str, dict[int, fit.LinearFit]]:
    """{variant: {threads: fit}} for each (variant, threads) with two sizes and an overhead
    measured: the per-call overhead measured on a tiny tensor (s), the rate fitted with it fixed."""
    adam_fits: dict[str, dict[int, fit.LinearFit]] = {}
    for variant in plan.adam_variants:
        for t in plan.adam_threads:
            pts = [r for r in adam if r.get("variant") == variant and r.get("threads") == t]
            over = [r["seconds"] for r in overhead if r.get("variant") == variant and r.get("threads") == t]
            if len(pts) >= 2 and over:
                adam_fits.setdefault(variant, {})[t] = fit.fit_rate_given_intercept(
                    [r["numel"] for r in pts], [r["seconds"] for r in pts], float(over[0])
                )
    if not adam_fits:
        raise RuntimeError("no CPU Adam variant could be measured")
    return adam_fits


def _cpu_adam_figures(chosen: dict[int, fit.LinearFit]) -> dict[str, Any]:
    """The profile's Adam figures from the chosen variant's fits by thread count: params/s per
    core and the step overhead (s) at the fewest threads, and params/s at 1..N threads when
    every count from 1 was measured."""
    one = min(chosen)
    cpu: dict[str, Any] = {
        "adam_params_per_core": chosen[one].rate / one,
        "adam_step_overhead": chosen[one].intercept,
    }
    measured_threads = sorted(chosen)
    if measured_threads == list(range(1, len(measured_threads) + 1)) and len(measured_threads) > 1:
        cpu["adam_params_per_s"] = [chosen[t].rate for t in measured_threads]
    return cpu


def _measure_file_io(plan: CalibrationPlan, nvme_dir: Path, tick: Tick) -> tuple[str, _Part]:
    """File I/O in ``nvme_dir``, page cache bypassed: throughput against (block size, outstanding
    requests) fitted by the queue model, and the latency of single requests. Also returns the
    bypass mode."""
    mode, io = microbench.file_io(
        nvme_dir,
        plan.io_file_size,
        plan.io_block_sizes,
        plan.io_workers,
        ("write", "read"),
        plan.io_repeats,
        tick("file I/O"),
    )
    io_fits = {op: _fit_file_io([r for r in io if r["op"] == op]) for op in ("read", "write")}
    req_lat = [
        microbench.request_latency(nvme_dir, op, mode, on_point=tick("file latency")) for op in ("read", "write")
    ]
    return mode, _Part(
        figures={
            "nvme": {
                "capacity": shutil.disk_usage(nvme_dir).total,
                "read_bandwidth": io_fits["read"].bandwidth,
                "write_bandwidth": io_fits["write"].bandwidth,
                "read_latency": io_fits["read"].latency,
                "write_latency": io_fits["write"].latency,
                "read_queueing": io_fits["read"].queueing,
                "write_queueing": io_fits["write"].queueing,
            }
        },
        methods={"nvme": _file_io_methods(plan, nvme_dir, mode)},
        records={
            "file_io": {
                "fits": {op: _fit_dict(f) for op, f in io_fits.items()},
                "records": _strip_samples(io),
                "request_latency_qd1_4KiB": req_lat,
            }
        },
        summary={
            op: f"B {io_fits[op].bandwidth / 1e9:.2f} GB/s, L {io_fits[op].latency * 1e6:.0f} us, "
            f"q {io_fits[op].queueing:.2f}, max |residual| {io_fits[op].max_abs_residual:.1%}"
            for op in ("read", "write")
        },
    )


def _fit_file_io(points: list[dict[str, Any]]) -> fit.QueueFit:
    """The queue model fitted to one direction's points: throughput (bytes/s) against block
    size (bytes) and outstanding requests."""
    return fit.fit_queue_model(
        [r["block_size"] for r in points], [r["workers"] for r in points], [r["bytes"] / r["seconds"] for r in points]
    )


def _file_io_methods(plan: CalibrationPlan, nvme_dir: Path, mode: str) -> dict[str, str]:
    """How each NVMe figure of the profile was measured, in words."""
    method = {"capacity": f"shutil.disk_usage({nvme_dir}).total"}
    for op in ("read", "write"):
        for what in ("bandwidth", "latency", "queueing"):
            method[f"{op}_{what}"] = (
                f"{op}s of a {plan.io_file_size / MB:g} MB file in {nvme_dir} ({mode}) at block sizes "
                f"{[b // KiB for b in plan.io_block_sizes]} KiB and {list(plan.io_workers)} outstanding requests "
                f"(worker threads issuing preadv/pwritev), {plan.io_repeats} interleaved rounds, medians; "
                "least-squares fit of min(B, N*b/(L + b/B*(1 + q*(N-1)))) for B, L and q in [0, 1]"
            )
    return method


def _measure_link(plan: CalibrationPlan, tick: Tick) -> _Part:
    """The host<->GPU link (time = latency + size / bandwidth per direction, pinned or pageable)
    and GPU Adam (time = overhead + numel / rate); CUDA must be present."""
    copies = microbench.cuda_copy(plan.cuda_sizes, plan.repeats, tick("PCIe copy"))
    link_fits = _fit_link(copies)
    gpu = microbench.gpu_adam(plan.gpu_adam_numels, plan.repeats, tick("GPU Adam"))
    gpu_fit = fit.fit_overhead_rate([r["numel"] for r in gpu], [r["seconds"] for r in gpu])
    link = {
        "raw_bandwidth": max(r["size"] / r["seconds"] for r in copies if r["pinned"]),
        "pinned_bandwidth": min(link_fits[("h2d", True)].rate, link_fits[("d2h", True)].rate),
        "pageable_bandwidth": min(link_fits[("h2d", False)].rate, link_fits[("d2h", False)].rate),
        "latency": float(np.mean([link_fits[(d, True)].intercept for d in ("h2d", "d2h")])),
    }
    method = (
        f"torch copies host<->cuda of {[s // MiB for s in plan.cuda_sizes]} MiB, synchronised; "
        "fit time = latency + size/bandwidth"
    )
    return _Part(
        figures={"link": link},
        methods={"link": dict.fromkeys(link, method)},
        records={
            "cuda": {
                "copies": copies,
                "fits": {f"{d}_{'pinned' if p else 'pageable'}": _fit_dict(f) for (d, p), f in link_fits.items()},
                "gpu_adam": {"records": gpu, "fit": _fit_dict(gpu_fit), "params_per_s": gpu_fit.rate},
            }
        },
    )


def _fit_link(copies: list[dict[str, Any]]) -> dict[tuple[str, bool], fit.LinearFit]:
    """time = latency + size / bandwidth fitted for each (direction, pinned) of the copies."""
    link_fits = {}
    for direction in ("h2d", "d2h"):
        for pinned in (True, False):
            pts = [r for r in copies if r["direction"] == direction and r["pinned"] == pinned]
            link_fits[(direction, pinned)] = fit.fit_latency_bandwidth(
                [r["size"] for r in pts], [r["seconds"] for r in pts]
            )
    return link_fits
