"""The real offloaded optimizer step, with torch tensors, for each strategy the host can run.

* ``DRAMAdam``: fp32 params, grads, exp_avg, exp_avg_sq in host memory; one torch Adam step
  (``foreach`` or ``fused``) per sub-group, in order (the ZeRO-Offload path).
* ``NVMeAdam``: the four state tensors of each sub-group live in files; a sub-group is swapped
  in (param, grad, exp_avg, exp_avg_sq read into page-aligned swap buffers, page cache
  bypassed), stepped by torch Adam on the buffers, and swapped out (param, exp_avg,
  exp_avg_sq written back), through ``buffer_count`` buffers with ``block_size`` requests,
  ``queue_depth * thread_count`` outstanding; ``pipeline_read`` issues the read of sub-group
  i+1 before the step of i, ``pipeline_write`` lets the write of i overlap the step of i+1
  (the ZeRO-Infinity PartitionedOptimizerSwapper path).
* ``CudaOffloadAdam`` (CUDA only): gradients copied D2H, CPU Adam, parameters copied H2D, per
  sub-group; ``GPUAdam`` (CUDA only): everything on the GPU.

``time_step`` times a step: warm-up, then the median of repeats.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from tiersim.calibration.directio import (
    AlignedBuffer,
    BufferWindow,
    DirectFile,
    IOHandle,
    IOPool,
    Segment,
    align_up,
    probe_bypass_mode,
)
from tiersim.calibration.microbench import make_cpu_adam
from tiersim.calibration.placement import compute_threads, io_cpus
from tiersim.errors import ConfigError

TENSORS_IN = ("param", "grad", "exp_avg", "exp_avg_sq")
TENSORS_OUT = ("param", "exp_avg", "exp_avg_sq")
LR = 1e-3


@dataclass(frozen=True)
class SwapConfig:
    """The same fields as ``tiersim.strategies.swap.SwapOptions``."""

    buffer_count: int = 4
    block_size: int = 1 << 20
    queue_depth: int = 8
    thread_count: int = 1
    pipeline_read: bool = False
    pipeline_write: bool = False


@dataclass(frozen=True)
class Timing:
    median_s: float
    samples: list[float]


def time_step(step: Callable[[], object], warmup: int = 1, repeats: int = 3) -> Timing:
    """Run ``step`` ``warmup`` times untimed, then ``repeats`` times timed; median seconds."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return Timing(statistics.median(samples), samples)


def make_initial_state(subgroup_numels: Sequence[int], seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(param, grad) fp32 tensors per sub-group, reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, generator=gen), torch.randn(n, generator=gen) * 1e-2) for n in subgroup_numels]


class DRAMAdam:
    """State in host memory; one Adam step per sub-group in order."""

    strategy = "dram"

    def __init__(
        self, initial: list[tuple[torch.Tensor, torch.Tensor]], *, threads: int, variant: str = "fused"
    ) -> None:
        self.threads = threads
        self.variant = variant
        self.params = []
        self.opts = []
        for p0, g0 in initial:
            p = torch.nn.Parameter(p0.clone())
            p.grad = g0.clone()
            self.params.append(p)
            self.opts.append(make_cpu_adam(p, variant, LR))

    def step(self) -> None:
        with compute_threads(self.threads):
            for opt in self.opts:
                opt.step()

    def parameters(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.params]

    def close(self) -> None:
        self.params.clear()
        self.opts.clear()


def swap_buffer_bytes(subgroup_numels: Sequence[int], swap: SwapConfig) -> int:
    """Bytes of the swap buffers ``NVMeAdam`` needs: one page-aligned fp32 slot per swapped
    tensor of the largest sub-group, for each of the buffer sets."""
    return (swap.buffer_count // len(TENSORS_IN)) * len(TENSORS_IN) * align_up(max(subgroup_numels) * 4)


def _buffer_sets(swap: SwapConfig) -> int:
    """Sub-groups' worth of swap buffers ``swap`` gives, checked against what the swapper needs."""
    sets = swap.buffer_count // len(TENSORS_IN)
    if sets < 1:
        raise ConfigError("<validate>", "swap.buffer_count", f"must be at least {len(TENSORS_IN)}")
    if (swap.pipeline_read or swap.pipeline_write) and sets < 2:
        raise ConfigError("<validate>", "swap.buffer_count", "pipelining needs buffers for two sub-groups (8)")
    if swap.block_size % 4096:
        raise ConfigError("<validate>", "swap.block_size", "must be a multiple of 4096 bytes")
    return sets


def _swap_buffers(slot: int, sets: int, arena: AlignedBuffer | None) -> list[list[AlignedBuffer | BufferWindow]]:
    """``sets`` sets of one ``slot``-byte buffer per swapped tensor: new ones, or slots of
    ``arena`` (memory shared with other users)."""
    if arena is None:
        return [[AlignedBuffer(slot) for _ in TENSORS_IN] for _ in range(sets)]
    return [
        [arena.window((s * len(TENSORS_IN) + k) * slot, slot) for k in range(len(TENSORS_IN))]
        for s in range(sets)
    ]


class NVMeAdam:
    """State in files, swapped through ``buffer_count`` swap buffers (see module doc): its own,
    or slots of a shared ``arena``."""

    strategy = "nvme"

    def __init__(
        self,
        initial: list[tuple[torch.Tensor, torch.Tensor]],
        nvme_dir: Path,
        swap: SwapConfig,
        *,
        threads: int,
        variant: str = "fused",
        mode: str | None = None,
        arena: AlignedBuffer | None = None,
    ) -> None:
        self.swap = swap
        self.threads = threads
        self.variant = variant
        self.sets = _buffer_sets(swap)
        self.numels = [p.numel() for p, _ in initial]
        if arena is not None and (need := swap_buffer_bytes(self.numels, swap)) > arena.nbytes:
            raise ValueError(f"the arena has {arena.nbytes} bytes, the swap buffers need {need}")
        self.dir = Path(tempfile.mkdtemp(prefix="tiersim-swap-", dir=nvme_dir))
        self.mode = mode or probe_bypass_mode(self.dir)
        self.buffers = _swap_buffers(align_up(max(self.numels) * 4), self.sets, arena)
        workers = swap.queue_depth * swap.thread_count
        self.read_pool = IOPool(workers, swap.block_size, self.mode, io_cpus(threads))
        self.write_pool = (
            IOPool(workers, swap.block_size, self.mode, io_cpus(threads)) if swap.pipeline_write else self.read_pool
        )
        self.files: list[dict[str, DirectFile]] = []
        # One placeholder Parameter + Adam per sub-group; its data, grad and state are pointed
        # at the swap buffers before each step (the step counter stays in memory, as in DeepSpeed).
        self.opt_params: list[torch.nn.Parameter] = []
        self.opts: list[torch.optim.Adam] = []
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in self.numels]
        for i, (p0, g0) in enumerate(initial):
            self._write_initial(i, p0, g0)
            p = torch.nn.Parameter(torch.empty(0))
            self.opt_params.append(p)
            self.opts.append(make_cpu_adam(p, variant, LR))
        self._tensors = [[buf.tensor(buf.nbytes // 4) for buf in bset] for bset in self.buffers]

    def _write_initial(self, i: int, p0: torch.Tensor, g0: torch.Tensor) -> None:
        """Create sub-group ``i``'s files and write its parameters, gradients and zeroed moments
        through the first buffer set."""
        n = p0.numel()
        self.files.append(
            {name: DirectFile(self.dir / f"sg{i}.{name}", self.mode, create_size=n * 4) for name in TENSORS_IN})
        init_buf = self.buffers[0]
        for name, buf in zip(TENSORS_IN, init_buf):
            src = {"param": p0, "grad": g0}.get(name)
            t = buf.tensor(n)
            t.zero_() if src is None else t.copy_(src)
        self.write_pool.run("write", self._segments(i, init_buf, TENSORS_IN))

    def _segments(self, i: int, bset: list[AlignedBuffer | BufferWindow], names: Sequence[str]) -> list[Segment]:
        length = align_up(self.numels[i] * 4)
        return [Segment(self.files[i][name].fd, bset[TENSORS_IN.index(name)].view, 0, 0, length) for name in names]

    def _bind(self, i: int, s: int) -> torch.optim.Adam:
        n = self.numels[i]
        views = {name: self._tensors[s][k][:n] for k, name in enumerate(TENSORS_IN)}
        p = self.opt_params[i]
        p.data = views["param"]
        p.grad = views["grad"]
        opt = self.opts[i]
        opt.state[p] = {"step": self.steps[i], "exp_avg": views["exp_avg"], "exp_avg_sq": views["exp_avg_sq"]}
        return opt

    def _unbind(self, i: int) -> None:
        p = self.opt_params[i]
        self.opts[i].state.pop(p, None)
        p.grad = None
        p.data = torch.empty(0)

    def step(self) -> None:
        n = len(self.numels)
        sw = self.swap
        reads: dict[int, IOHandle] = {}
        writes: dict[int, IOHandle] = {}  # by buffer set

        def issue_read(i: int) -> None:
            s = i % self.sets
            if s in writes:  # the set's previous sub-group must be out first
                writes.pop(s).wait()
            reads[i] = self.read_pool.submit("read", self._segments(i, self.buffers[s], TENSORS_IN))

        with compute_threads(self.threads):
            if n and sw.pipeline_read:
                issue_read(0)
            for i in range(n):
                s = i % self.sets
                if not sw.pipeline_read:
                    issue_read(i)
                reads.pop(i).wait()
                if sw.pipeline_read and i + 1 < n:
                    issue_read(i + 1)
                opt = self._bind(i, s)
                opt.step()
                self._unbind(i)
                handle = self.write_pool.submit("write", self._segments(i, self.buffers[s], TENSORS_OUT))
                if sw.pipeline_write:
                    writes[s] = handle
                else:
                    handle.wait()
            for handle in writes.values():
                handle.wait()

    def parameters(self) -> list[torch.Tensor]:
        """Read the params back from their files (through the same bypassing path)."""
        out = []
        bset = self.buffers[0]
        for i, n in enumerate(self.numels):
            self.read_pool.run("read", self._segments(i, bset, ("param",)))
            out.append(bset[0].tensor(n).clone())
        return out

    def close(self) -> None:
        self.read_pool.close()
        if self.write_pool is not self.read_pool:
            self.write_pool.close()
        for files in self.files:
            for f in files.values():
                f.unlink()
        self._tensors = []
        for bset in self.buffers:
            for buf in bset:
                buf.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class CudaOffloadAdam:
    """CUDA only: per sub-group, grads D2H into pinned host memory, CPU Adam on the host copy
    of the state, updated params H2D (ZeRO-Offload with the PCIe copies)."""

    strategy = "dram+pcie"

    def __init__(
        self, initial: list[tuple[torch.Tensor, torch.Tensor]], *, threads: int, variant: str = "fused"
    ) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available")
        self.threads = threads
        self.host = DRAMAdam(initial, threads=threads, variant=variant)
        for p in self.host.params:
            p.data = p.data.pin_memory()
            p.grad = p.grad.pin_memory()  # type: ignore[union-attr]
        self.host.opts = [make_cpu_adam(p, variant, LR) for p in self.host.params]
        self.gpu_params = [p.detach().cuda() for p in self.host.params]
        self.gpu_grads = [p.grad.cuda() for p in self.host.params]  # type: ignore[union-attr]

    def step(self) -> None:
        with compute_threads(self.threads):
            for p, opt, gp, gg in zip(self.host.params, self.host.opts, self.gpu_params, self.gpu_grads):
                p.grad.copy_(gg)  # type: ignore[union-attr]  # D2H, synchronous into pinned memory
                opt.step()
                gp.copy_(p.detach(), non_blocking=True)
            torch.cuda.synchronize()

    def parameters(self) -> list[torch.Tensor]:
        return [g.cpu() for g in self.gpu_params]

    def close(self) -> None:
        self.host.close()
        self.gpu_params.clear()
        self.gpu_grads.clear()


class GPUAdam:
    """CUDA only: all state on the GPU; one fused Adam step per sub-group."""

    strategy = "gpu"

    def __init__(self, initial: list[tuple[torch.Tensor, torch.Tensor]], **_: object) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available")
        self.params = []
        self.opts = []
        for p0, g0 in initial:
            p = torch.nn.Parameter(p0.cuda())
            p.grad = g0.cuda()
            self.params.append(p)
            self.opts.append(torch.optim.Adam([p], lr=LR, fused=True))

    def step(self) -> None:
        for opt in self.opts:
            opt.step()
        torch.cuda.synchronize()

    def parameters(self) -> list[torch.Tensor]:
        return [p.detach().cpu() for p in self.params]

    def close(self) -> None:
        self.params.clear()
        self.opts.clear()


def reference_adam(
    initial: list[tuple[torch.Tensor, torch.Tensor]], steps: int, variant: str = "fused"
) -> list[torch.Tensor]:
    """Plain in-memory torch Adam over all sub-groups for ``steps`` steps (for correctness checks)."""
    params = []
    for p0, g0 in initial:
        p = torch.nn.Parameter(p0.clone())
        p.grad = g0.clone()
        params.append(p)
    opt = make_cpu_adam(params, variant, LR)
    for _ in range(steps):
        opt.step()
    return [p.detach().clone() for p in params]


def host_threads() -> int:
    return os.cpu_count() or 1
