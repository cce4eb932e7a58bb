"""A layer pass's seconds on a GPU: GEMMs in waves of output tiles, memory-bound kernels at HBM
bandwidth, and the host time ZeRO-3's hooks take (``tiersim.layer_kernels`` lists the work).

* A GEMM's output is cut into ``gemm_tile_m x gemm_tile_n`` tiles, one thread block each; the
  GPU runs ``sm_count`` of them at a time (one block per SM for the large-tile kernels of cuBLAS
  and CUTLASS), so a GEMM takes ``ceil(tiles / sm_count)`` waves, each as long as one tile's
  ``2 * tile_m * tile_n * k`` FLOPs at one SM's peak (``bf16_flops / sm_count``) times
  ``compute_efficiency``. A partial tile or a partial last wave costs a whole one. It is never
  faster than its operands' bytes over HBM (``hbm_bandwidth * memory_efficiency``): the roofline.
* Memory-bound kernels move their bytes at ``hbm_bandwidth * memory_efficiency``.
* ZeRO-3's hooks (DeepSpeed v0.13.3 ``parameter_offload.py``, ``_register_hooks_recursively``)
  run on every module call, forward and backward: ``fetch_sub_module`` and
  ``release_sub_module`` of ``partitioned_param_coordinator.py`` (trace bookkeeping, sets of
  parameters, all-gather submission, events, ``wait_stream``). The host blocks in them only on
  ``__ongoing_fetch_events[0].synchronize()`` when more than two parameter fetches are
  outstanding, that is on the all-gathers (which the schedule models as their own tasks, the
  compute waiting for them), and never on the compute stream: with one rank
  (``_no_gather_coalesced``) nothing is in flight at all. So the host thread runs ahead of the GPU
  and the hooks of the layer's modules overlap its kernels; they set the pass's time only where
  they take longer than the kernels (small micro-batches): a pass takes
  ``max(kernel seconds, module calls x zero3_hook_latency)``. Kernel launches (a few microseconds
  each, tens per layer) are left out.
"""

from __future__ import annotations

import math

from tiersim.config.profiles import GPUProfile
from tiersim.layer_kernels import Gemm, PassKernels


def gemm_tiles(g: Gemm, gpu: GPUProfile) -> int:
    """Output tiles of ``g`` (a partial tile counts whole), over all its products, with the tile
    laid the way that needs fewer (the libraries have each tile shape in both orientations, and
    computing ``C^T = B^T A^T`` swaps ``m`` and ``n``)."""
    tm, tn = gpu.gemm_tile_m, gpu.gemm_tile_n
    along = math.ceil(g.m / tm) * math.ceil(g.n / tn)
    across = math.ceil(g.m / tn) * math.ceil(g.n / tm)
    return min(along, across) * g.batch


def gemm_waves(g: Gemm, gpu: GPUProfile) -> int:
    """Waves of ``sm_count`` tiles ``g`` takes."""
    return math.ceil(gemm_tiles(g, gpu) / gpu.sm_count)


def hbm_rate(gpu: GPUProfile) -> float:
    """Achieved HBM bandwidth, bytes/s (read + written)."""
    return gpu.hbm_bandwidth * gpu.memory_efficiency


def gemm_seconds(g: Gemm, gpu: GPUProfile) -> float:
    """Seconds of ``g``: its waves of tiles at the achieved per-SM rate, or its bytes over HBM if
    longer."""
    per_sm = gpu.bf16_flops / gpu.sm_count * gpu.compute_efficiency
    compute = gemm_waves(g, gpu) * 2.0 * gpu.gemm_tile_m * gpu.gemm_tile_n * g.k / per_sm
    return max(compute, g.hbm_bytes / hbm_rate(gpu))


def kernel_seconds(work: PassKernels, gpu: GPUProfile) -> float:
    """GPU seconds of a pass's kernels, one after another on the compute stream."""
    return sum(gemm_seconds(g, gpu) for g in work.gemms) + work.memory_bytes / hbm_rate(gpu)


def hook_seconds(work: PassKernels, gpu: GPUProfile, zero_stage: int) -> float:
    """Host seconds ZeRO-3's hooks take over a pass's module calls (0 below stage 3)."""
    return work.module_calls * gpu.zero3_hook_latency if zero_stage >= 3 else 0.0


_KNOWN_MAX = 4096
"""Passes ``pass_seconds`` keeps (it forgets them all past this many)."""
_known: dict[tuple[int, int, int], tuple[PassKernels, GPUProfile, float]] = {}
"""``pass_seconds`` by the identities of its work and GPU (held, so that neither id is reused
while kept) and the ZeRO stage: sweep points of one model, batch and GPU share both objects
(``build_step`` is cached), and a pass's seconds were 5% of such a point's run."""


def pass_seconds(work: PassKernels, gpu: GPUProfile, zero_stage: int) -> float:
    """Seconds of one layer pass: its kernels, or the hooks' host time where that is longer."""
    key = (id(work), id(gpu), zero_stage)
    known = _known.get(key)
    if known is None or known[0] is not work or known[1] is not gpu:
        if len(_known) >= _KNOWN_MAX:
            _known.clear()
        known = _known[key] = (work, gpu, max(kernel_seconds(work, gpu), hook_seconds(work, gpu, zero_stage)))
    return known[2]
