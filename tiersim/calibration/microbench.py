"""Micro-benchmarks, each of a single resource, returning plain records (dicts of numbers).

Every function takes an optional ``on_point`` callback, called once per measured point, so a
caller can drive a progress bar. Times are medians of repeats after a warm-up, in seconds.
"""

from __future__ import annotations

import array
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim.calibration.directio import (
    ALIGN,
    AlignedBuffer,
    DirectFile,
    IOPool,
    Segment,
    align_up,
    probe_bypass_mode,
)
from tiersim.calibration.placement import compute_threads, io_cpus

if TYPE_CHECKING:
    import torch

Record = dict[str, Any]
"""One measured point: what was measured (sizes in bytes, counts) and ``seconds`` it took."""
OnPoint = Callable[[], None] | None


def _tick(on_point: OnPoint) -> None:
    if on_point is not None:
        on_point()


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1, inner: int = 1) -> tuple[float, list[float]]:
    """Median seconds per call of ``fn`` over ``repeats`` samples of ``inner`` calls each."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples), samples


# --------------------------------------------------------------------------- host memory


def memcpy_bandwidth(
    sizes: Sequence[int], threads: Sequence[int], repeats: int = 5, on_point: OnPoint = None
) -> list[Record]:
    """``dst.copy_(src)`` of float32 torch tensors of ``size`` bytes with ``threads`` torch
    threads. Records: size (bytes copied), threads, seconds per copy."""
    import torch

    records: list[Record] = []
    for size in sizes:
        numel = max(size // 4, 1)
        src = torch.rand(numel)
        dst = torch.empty_like(src)
        inner = max(1, (64 << 20) // max(size, 1))
        for t in threads:
            with compute_threads(t):
                secs, samples = median_time(functools.partial(dst.copy_, src), repeats, warmup=2, inner=inner)
            records.append({"size": numel * 4, "threads": t, "seconds": secs, "samples": samples})
            _tick(on_point)
        del src, dst
    return records


STREAM_KERNELS = {
    # name: (bytes counted per element moved, read+write), in-place kernels have no write-allocate
    "copy": 8,
    "add_": 12,
    "addcmul_": 16,
}


def dram_stream(
    size: int, threads: Sequence[int], kernels: Sequence[str] = tuple(STREAM_KERNELS), repeats: int = 5,
    on_point: OnPoint = None,
) -> list[Record]:
    """STREAM-like torch kernels over fp32 arrays of ``size`` bytes each: ``copy`` (c = a),
    ``add_`` (a += b) and ``addcmul_`` (a += b*c, Adam's in-place read/write mix). Records:
    kernel, size, threads, bytes (read+write counted), seconds."""
    import torch

    numel = max(size // 4, 1)
    a, b, c = torch.rand(numel), torch.rand(numel), torch.rand(numel)
    fns = {
        "copy": lambda: c.copy_(a),
        "add_": lambda: a.add_(b),
        "addcmul_": lambda: a.addcmul_(b, c),
    }
    records: list[Record] = []
    for t in threads:
        for k in kernels:
            with compute_threads(t):
                secs, _ = median_time(fns[k], repeats, warmup=2)
            records.append(
                {"kernel": k, "size": numel * 4, "threads": t, "bytes": numel * STREAM_KERNELS[k], "seconds": secs}
            )
            _tick(on_point)
    return records


def dram_latency(entries: int = 1 << 23, steps: int = 300_000, seed: int = 0, on_point: OnPoint = None) -> Record:
    """Rough idle load latency: a Python pointer chase over one random cycle of ``entries``
    int64 slots (``entries*8`` bytes, beyond the last-level cache) minus the same loop over a
    cache-resident cycle, per step. Interpreter overhead cancels to a few ns."""
    import numpy as np

    def chase_time(n: int) -> float:
        rng = np.random.default_rng(seed)
        perm = rng.permutation(n)
        nxt = np.empty(n, dtype=np.int64)
        nxt[perm] = np.roll(perm, -1)
        table = array.array("q")
        table.frombytes(nxt.tobytes())
        best = float("inf")
        for _ in range(3):
            i = 0
            t0 = time.perf_counter()
            for _ in range(steps):
                i = table[i]
            best = min(best, (time.perf_counter() - t0) / steps)
        return best

    far = chase_time(entries)
    near = chase_time(1024)
    _tick(on_point)
    return {
        "entries": entries,
        "bytes": entries * 8,
        "steps": steps,
        "chase_s": far,
        "baseline_s": near,
        "latency_s": max(far - near, 1e-9),
    }


# --------------------------------------------------------------------------- CPU Adam


def make_cpu_adam(params: torch.Tensor | Sequence[torch.Tensor], variant: str, lr: float = 1e-3) -> torch.optim.Adam:
    """torch.optim.Adam over ``params`` (a tensor, or a list of them) with the ``foreach`` or
    ``fused`` CPU implementation."""
    import torch

    if variant not in ("foreach", "fused"):
        raise ValueError(f"unknown Adam variant {variant!r}")
    group = [params] if isinstance(params, torch.Tensor) else list(params)
    return torch.optim.Adam(group, lr=lr, foreach=variant == "foreach", fused=variant == "fused")


def cpu_adam(
    numels: Sequence[int],
    threads: Sequence[int],
    variants: Sequence[str] = ("foreach", "fused"),
    repeats: int = 5,
    on_point: OnPoint = None,
) -> list[Record]:
    """One ``optimizer.step()`` of torch Adam over a single fp32 tensor of ``numel`` params
    (state already created). Records: variant, numel, threads, seconds per step (median).

    Each variant's (numel, threads) points are timed in ``repeats`` interleaved rounds, one
    sample of each per round, so a slow spell of a shared host lands on every point alike;
    the variants one after the other, since foreach's full-size temporaries (mmap/munmap per
    step) slow down the fused steps timed next to them."""
    records: list[Record] = []
    opts = _cpu_adam_optimizers(numels, variants, records)
    # Grouped by thread count (switching torch's thread pool has a transient cost), numels
    # interleaved inside each group; one untimed step after each switch.
    grid = [
        (numel, variant, t) for t in threads for variant in variants for numel in numels if (numel, variant) in opts
    ]
    samples = _cpu_adam_rounds(opts, grid, variants, threads, max(repeats, 1), on_point)
    records.extend(_median_record({"variant": v, "numel": n, "threads": t}, samples[(n, v, t)]) for n, v, t in grid)
    return records


def _cpu_adam_rounds(
    opts: dict[tuple[int, str], torch.optim.Adam], grid: list[tuple[int, str, int]], variants: Sequence[str],
    threads: Sequence[int], rounds: int, on_point: OnPoint,
) -> dict[tuple[int, str, int], list[float]]:
    """Seconds per step of each (numel, variant, threads) of ``grid``, one sample per round
    after a warm-up round; one variant's rounds after the other's (foreach's temporaries
    disturb fused). ``on_point`` is told of each point in the last round."""
    samples: dict[tuple[int, str, int], list[float]] = {key: [] for key in grid}
    for variant in variants:
        for r in range(rounds + 1):  # round 0 is a warm-up
            for t in threads:
                points = [key for key in grid if key[1] == variant and key[2] == t]
                secs = _time_cpu_adam_steps(opts, [(numel, variant) for numel, _v, _t in points], t,
                                            on_point if r == rounds else None)
                if r:
                    for key, sample in zip(points, secs):
                        samples[key].append(sample)
    return samples


def _cpu_adam_optimizers(
    numels: Sequence[int], variants: Sequence[str], records: list[Record],
) -> dict[tuple[int, str], torch.optim.Adam]:
    """{(numel, variant): an Adam over a fresh fp32 parameter of ``numel`` params, stepped
    once (state created)}; a variant that fails (fused may be missing) appends an error record."""
    import torch

    opts: dict[tuple[int, str], torch.optim.Adam] = {}
    for numel in numels:
        param = torch.nn.Parameter(torch.randn(numel))
        param.grad = torch.randn(numel) * 1e-3
        for variant in variants:
            try:
                opt = make_cpu_adam(param, variant)
                opt.step()
            except (RuntimeError, TypeError, ValueError) as exc:  # fused may be missing
                records.append({"variant": variant, "numel": numel, "error": str(exc)})
                continue
            opts[(numel, variant)] = opt
    return opts


def _time_cpu_adam_steps(
    opts: dict[tuple[int, str], torch.optim.Adam], points: list[tuple[int, str]], threads: int, on_point: OnPoint,
) -> list[float]:
    """Seconds per step of each (numel, variant) of ``points`` on ``threads`` threads, after
    one untimed step; ``on_point`` is told of each."""
    with compute_threads(threads):
        if points:
            opts[points[0]].step()
        secs = []
        for numel, variant in points:
            inner = max(1, (1 << 25) // numel)  # samples of at least ~20 ms
            secs.append(median_time(opts[(numel, variant)].step, 1, warmup=0, inner=inner)[0])
            _tick(on_point)
    return secs


def _median_record(fields: Record, samples: list[float]) -> Record:
    """A record of ``fields`` with the median of the ``samples`` (s) as its ``seconds``."""
    return {**fields, "seconds": statistics.median(samples), "samples": samples}


def cpu_adam_overhead(
    threads: Sequence[int],
    variants: Sequence[str] = ("foreach", "fused"),
    numel: int = 1024,
    repeats: int = 7,
    on_point: OnPoint = None,
) -> list[Record]:
    """Per-call overhead of ``optimizer.step()``: the time of a step over a ``numel``-param
    tensor (compute negligible). Records: variant, threads, seconds."""
    import torch

    records: list[Record] = []
    param = torch.nn.Parameter(torch.randn(numel))
    param.grad = torch.randn(numel)
    for variant in variants:
        try:
            opt = make_cpu_adam(param, variant)
            opt.step()
        except (RuntimeError, TypeError, ValueError) as exc:
            records.append({"variant": variant, "numel": numel, "error": str(exc)})
            continue
        for t in threads:
            with compute_threads(t):
                secs, _ = median_time(opt.step, repeats, warmup=10, inner=200)
            records.append({"variant": variant, "numel": numel, "threads": t, "seconds": secs})
            _tick(on_point)
    return records


# --------------------------------------------------------------------------- file I/O


def default_nvme_dir() -> Path:
    """A directory on the local disk (not tmpfs): $TMPDIR if it is not tmpfs, else /var/tmp."""
    candidates = [Path(tempfile.gettempdir()), Path("/var/tmp"), Path.cwd()]
    for c in candidates:
        if c.is_dir() and os.access(c, os.W_OK) and not _is_tmpfs(c):
            return c
    return candidates[0]


def _is_tmpfs(path: Path) -> bool:
    try:
        best, fstype = "", ""
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and target.startswith(parts[1]) and len(parts[1]) > len(best):
                best, fstype = parts[1], parts[2]
        return fstype in ("tmpfs", "ramfs")
    except OSError:
        return False


def file_io(
    directory: Path,
    file_size: int,
    block_sizes: Sequence[int],
    workers: Sequence[int],
    ops: Sequence[str] = ("write", "read"),
    repeats: int = 2,
    on_point: OnPoint = None,
    mode: str | None = None,
    files: int = 16,
) -> tuple[str, list[Record]]:
    """Transfers of ``file_size`` bytes spread over ``files`` files in ``directory`` (one batch
    covering all of them, front to back, as a sub-group's tensors are swapped) with ``workers``
    outstanding requests of ``block_size`` bytes, page cache bypassed. Returns the bypass mode
    used and records: op, block_size, workers, bytes, files, seconds (median).

    Several files, because on a virtual or thin-provisioned disk the read rate depends on where
    a file's blocks landed (one file can read at half the rate of the next, reproducibly); the
    swap files of a real step are many, so the rate over many placements is the one to fit.

    The grid is measured in ``repeats`` interleaved rounds (every op, block size and request
    count once per round, after one untimed pass of each op), each round on a fresh set of
    files and a fresh buffer, so a drift of a shared or virtual disk over the run, and the luck
    of one placement of the files or of the buffer's memory, spread over all points instead of
    biasing some of them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    mode = mode or probe_bypass_mode(directory)
    files = max(int(files), 1)
    per_file = align_up(max(file_size // files, 1), max(max(block_sizes), ALIGN))
    layout = _IOFiles(directory, mode, files, per_file, max(workers), max(block_sizes))
    grid = [(op, block, n) for op in ops for block in block_sizes for n in workers]
    try:
        layout.fresh(0)
        samples = _file_io_rounds(layout, grid, ops, max(repeats, 1), on_point)
    finally:
        layout.close()
    size = per_file * files
    return mode, [
        _median_record({"op": op, "block_size": block, "workers": n, "bytes": size, "files": files},
                       samples[(op, block, n)])
        for op, block, n in grid
    ]


class _IOFiles:
    """The files ``file_io`` transfers to and from: ``files`` files of ``per_file`` bytes in
    ``directory``, and one buffer (``segments``: one transfer covering them all)."""

    def __init__(self, directory: Path, mode: str, files: int, per_file: int, workers: int, block: int) -> None:
        self.directory, self.mode, self.files, self.per_file = directory, mode, files, per_file
        self.workers, self.block = workers, block
        self.buf: AlignedBuffer | None = None
        self.handles: list[DirectFile] = []
        self.segments: list[Segment] = []

    def fresh(self, round_: int) -> None:
        """A new set of files (new block placement) and a new buffer (new memory placement:
        on a virtual machine the rate the disk fills a buffer at depends on where its memory
        landed), laid out on the device untimed."""
        self.close()
        size = self.per_file * self.files
        buf = self.buf = AlignedBuffer(size)
        buf.mm.write(os.urandom(min(size, 1 << 20)) * (size // min(size, 1 << 20)))
        self.handles = [
            DirectFile(self.directory / f"tiersim-calibrate-{os.getpid()}-{round_}-{k}.bin", self.mode,
                       create_size=self.per_file)
            for k in range(self.files)
        ]
        self.segments = [Segment(h.fd, buf.view, k * self.per_file, 0, self.per_file)
                         for k, h in enumerate(self.handles)]
        with IOPool(self.workers, self.block, self.mode, io_cpus()) as pool:
            pool.run("write", self.segments)
            if self.mode != "O_DIRECT":
                for h in self.handles:
                    os.fsync(h.fd)

    def close(self) -> None:
        """Delete the files and free the buffer."""
        for h in self.handles:
            h.unlink()
        self.handles = []
        self.segments = []
        if self.buf is not None:
            self.buf.close()
            self.buf = None


def _file_io_rounds(
    layout: _IOFiles, grid: list[tuple[str, int, int]], ops: Sequence[str], rounds: int, on_point: OnPoint,
) -> dict[tuple[str, int, int], list[float]]:
    """Seconds of each (op, block size, requests) of ``grid`` over the whole ``layout``, one
    sample per round, each round on fresh files, after one untimed pass of each op;
    ``on_point`` is told of each point in the last round."""
    pools = {(block, n): IOPool(n, block, layout.mode, io_cpus()) for _op, block, n in grid}
    try:
        for op in ops:  # warm-up pass of each op
            pools[(layout.block, layout.workers)].run(op, layout.segments)
        samples: dict[tuple[str, int, int], list[float]] = {key: [] for key in grid}
        for r in range(rounds):
            if r:
                layout.fresh(r)  # every round samples other placements
            for op, block, n in grid:
                t0 = time.perf_counter()
                pools[(block, n)].run(op, layout.segments)
                samples[(op, block, n)].append(time.perf_counter() - t0)
                if r == rounds - 1:
                    _tick(on_point)
    finally:
        for pool in pools.values():
            pool.close()
    return samples


def request_latency(
    directory: Path,
    op: str,
    mode: str,
    block: int = ALIGN,
    count: int = 200,
    span: int = 64 << 20,
    on_point: OnPoint = None,
) -> Record:
    """Mean time of one ``block``-byte request at queue depth 1, at random aligned offsets of a
    ``span``-byte file (for the record; the fit uses the bandwidth grid)."""
    import numpy as np

    directory = Path(directory)
    buf = AlignedBuffer(max(span, block))
    f = DirectFile(directory / f"tiersim-latency-{os.getpid()}.bin", mode, create_size=span)
    try:
        with IOPool(1, 1 << 20, mode, io_cpus()) as pool:
            pool.run("write", [Segment(f.fd, buf.view, 0, 0, span)])
            if mode != "O_DIRECT":
                os.fsync(f.fd)
        offsets = np.random.default_rng(1).integers(0, span // block, size=count) * block
        io = os.preadv if op == "read" else os.pwritev
        if mode != "O_DIRECT":
            os.posix_fadvise(f.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        view = buf.view[:block]
        t0 = time.perf_counter()
        for off in offsets:
            io(f.fd, [view], int(off))
        if op == "write" and mode != "O_DIRECT":
            os.fsync(f.fd)
        secs = (time.perf_counter() - t0) / count
        del view
    finally:
        f.unlink()
        buf.close()
    _tick(on_point)
    return {"op": op, "block_size": block, "count": count, "seconds": secs}


# --------------------------------------------------------------------------- CUDA (guarded)


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def _synced_copy(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool) -> None:
    """Copy ``src`` into ``dst`` and wait for the device."""
    import torch

    dst.copy_(src, non_blocking=non_blocking)
    torch.cuda.synchronize()


def _synced_step(opt: torch.optim.Optimizer) -> None:
    """One optimizer step, waited for on the device."""
    import torch

    opt.step()
    torch.cuda.synchronize()


def cuda_copy(sizes: Sequence[int], repeats: int = 5, on_point: OnPoint = None) -> list[Record]:
    """Host<->device copies of ``size`` bytes, pinned and pageable host memory, both directions,
    synchronised per copy. Records: direction (h2d/d2h), pinned, size, seconds."""
    import torch

    records: list[Record] = []
    dev = torch.device("cuda")
    for size in sizes:
        numel = max(size // 4, 1)
        gpu = torch.empty(numel, device=dev)
        for pinned in (True, False):
            host = torch.empty(numel, pin_memory=pinned)
            for direction in ("h2d", "d2h"):
                dst, src = (gpu, host) if direction == "h2d" else (host, gpu)
                secs, samples = median_time(functools.partial(_synced_copy, dst, src, pinned), repeats, warmup=2)
                records.append({"direction": direction, "pinned": pinned, "size": numel * 4, "seconds": secs})
                _tick(on_point)
            del host, dst, src
        del gpu
    return records


def gpu_adam(numels: Sequence[int], repeats: int = 5, on_point: OnPoint = None) -> list[Record]:
    """torch fused Adam step on the GPU over one fp32 tensor. Records: numel, seconds."""
    import torch

    records: list[Record] = []
    for numel in numels:
        p = torch.nn.Parameter(torch.randn(numel, device="cuda"))
        p.grad = torch.randn_like(p) * 1e-3
        try:
            opt = torch.optim.Adam([p], lr=1e-3, fused=True)
        except (RuntimeError, TypeError, ValueError):
            opt = torch.optim.Adam([p], lr=1e-3, foreach=True)
        secs, _ = median_time(functools.partial(_synced_step, opt), repeats, warmup=2)
        records.append({"numel": numel, "seconds": secs})
        _tick(on_point)
        del p, opt
    return records
