"""What a DeepSpeed 0.16 / PyTorch 2.5 run really holds in memory beyond its tensors' own bytes.

A placement item has the bytes its tensors occupy (``allocated``, what ``peak_bytes`` reports)
and the bytes the process holds for them (``reserved``, what decides a fit):

- Pinned host memory comes from PyTorch's CUDA caching host allocator, which rounds every
  request up to a power of two (``pinned``): a 34.2 GB gradient buffer holds 32 GiB (34.4 GB),
  a 0.85 GB swap buffer 1 GiB.
- The first optimizer step on the CPU leaves a full-size fp32 temporary per updated element
  behind (``FIRST_STEP_RETAINED_BYTES``): the host footprint grows by 12 B per parameter at
  step 1 where Adam's moments explain 8. DeepSpeed tracks this as CPU RSS growth in issue
  #7693 (https://github.com/deepspeedai/DeepSpeed/issues/7693: "unscale_and_clip_grads - adds
  4 bytes"); the seed study's 70B DRAM and CXL logs show it as 63.6 GiB per rank.
- Each rank's process holds host memory of its own beyond its tensors (``PROCESS_HOST_BYTES``:
  CUDA and NCCL host buffers, the aio handle, Python).
- On the GPU the caching allocator keeps freed blocks of the transient tensors (gathered
  layers, activations, gradients) for reuse, so it reserves more than it has allocated at peak
  (``allocator_reserve``); the CUDA context and libraries add the GPU profile's
  ``reserved_memory`` outside the allocator. Their sum is what ``nvidia-smi`` shows.

The two calibrated constants come from the seed study's 70B logs
(``tiersim.fitting.footprint.calibrate``, which a test re-derives them with); every other
figure is a byte count DeepSpeed's source allocates.
"""

from __future__ import annotations

from tiersim.layer_kernels import score_matrix_bytes
from tiersim.projections import ffn_width
from tiersim.workload import TrainingStep

FIRST_STEP_RETAINED_BYTES = 4
"""Bytes per element updated by CPU Adam in host memory left allocated after the first step."""

PROCESS_HOST_BYTES = 1_180_000_000
"""Host bytes one rank's process holds beyond its tensors (calibrated: the 70B NVMe log's host
growth per rank less the swapper's and ZeRO-3's pinned buffers)."""

ALLOCATOR_RESERVE = 1.59
"""GPU bytes the caching allocator reserves per byte of transient peak allocation (calibrated:
the 70B logs' steady ``CA`` less the persistent partition and bucket, over the modeled
transient peak; the same in all three runs). ZeRO-3 only: see ``allocator_reserve``."""


def allocator_reserve(step: TrainingStep, transient_bytes: int) -> int:
    """GPU bytes the caching allocator holds beyond the ``transient_bytes`` allocated at peak.

    ZeRO-3: ``ALLOCATOR_RESERVE`` per transient byte, calibrated on logs where the gathered
    parameters are allocated and released every layer, in sizes that differ from the
    activations' and on the all-gather's stream (whose freed blocks the compute stream cannot
    reuse).

    ZeRO-1/2 (``stage_1_and_2.py``): ``largest_block``, a point estimate between 0 and one
    layer's working set (``zero_one_two_reserve_bounds``).
    """
    if step.training.zero_stage >= 3:
        return round(ALLOCATOR_RESERVE * transient_bytes) - transient_bytes
    return largest_block(step)


def largest_block(step: TrainingStep) -> int:
    """The ZeRO-1/2 reserve: the largest single tensor a decoder layer's recompute allocates (a
    rank's 16-bit ``s x s`` score matrices without flash attention, or its share of the FFN's
    ``t x f`` intermediate).

    Below ZeRO-3 the 16-bit parameters are one persistent flat buffer, the ipg buckets come back
    at the same size every backward, and every layer requests the same sizes in the same order
    as the one before. PyTorch's allocator (best fit within a stream's pool, requests rounded to
    512 B, large segments to 2 MiB, no ``expandable_segments`` before 2.1) serves each layer from
    the blocks the previous one freed, merged back into their segments. One block outlives the
    layer that made it: the gradient it hands the layer below (``2*s*b*h``), live through that
    layer's recompute. Where it sits inside a free region the previous layer left, it splits that
    region, and the one request that no longer fits either part gets a segment of its own: at
    most the layer's largest tensor stays reserved beside the peak. That is the point estimate;
    exact reuse (no such split) gives 0 and a layer's whole working set bounds it above."""
    model, training = step.model, step.training
    widths = {ffn_width(model, moe) / training.tensor_parallel for moe in {False, model.experts > 0}}
    return max(int(score_matrix_bytes(model, training)), int(step.lp_bytes * step.tokens_per_micro_batch * max(widths)))


def zero_one_two_reserve_bounds(step: TrainingStep) -> tuple[int, int]:
    """The ZeRO-1/2 reserve's bounds (bytes): exact reuse, and one decoder layer's working set."""
    return 0, max((layer.working_bytes for layer in step.layers if layer.name.startswith("layer.")), default=0)


def pinned(num_bytes: int) -> int:
    """Bytes PyTorch's caching host allocator holds for a pinned request of ``num_bytes``: the
    next power of two."""
    return 1 << max(0, int(num_bytes) - 1).bit_length() if num_bytes > 0 else 0
