"""The gradient swapper of ZeRO-Infinity's optimizer offload: where the boundary backward waits.

At the accumulation boundary ZeRO-3's ``partition_grads`` hands each swappable sub-group's fp32
gradient partitions to ``optimizer_swapper.swap_out_gradients``, which packs them into pinned
buffers (DeepSpeed v0.13.3 and v0.16.2 alike, ``deepspeed/runtime/swap_tensor/``):

- ``optimizer_utils.py`` ``_swap_out_gradients``: on first use the swapper takes every free
  swap buffer, ``buffer_count`` of them, each of the largest sub-group's aligned elements
  (``swap_buffer_manager.allocate_all``); a tensor below ``min_aio_bytes`` (the larger of 1 MiB
  and the aio ``block_size``) stays in memory unswapped; ``_adjust_for_misaligned_lengths``
  swaps each tensor's part that is a whole number of ``numel_alignment`` elements.
- ``async_swapper.py`` ``AsyncTensorSwapper``: tensors go into the current buffer, each copied
  in by a blocking ``copy_`` (``utils.py`` ``SwapBuffer.insert_tensor``: the host thread waits for
  the D2H); a tensor that does not fit moves on to a free buffer, and the full one's write is
  submitted (``_flush_ready_buffers``); with no free buffer left, ``_flush_buffers_until_complete``
  waits for every write submitted (the ``async_swap_gradient_wait`` timer) and frees them all.
- The buffers still filled at the end of the backward are written and waited for by the step's
  first swap-in (``_flush_gradient_swapper`` in ``swap_in_optimizer_state``).

So a backward whose fp32 gradients outgrow the swapper's buffers waits, on its host thread, for
the drives to write every buffer before it can go on.
"""

from __future__ import annotations

import functools

MIN_AIO_BYTES = 1 << 20
"""Bytes below which a tensor is not swapped at all (DeepSpeed ``swap_tensor/utils.py``)."""


@functools.lru_cache(maxsize=64)
def drains(layers: tuple[tuple[int, ...], ...], buffer_numel: int, buffers: int, alignment: int,
           min_numel: int) -> tuple[bool, ...]:
    """For each layer, in the order the backward hands their fp32 gradient partitions to the
    swapper (``layers``: the elements of each tensor's partition), whether the swapper runs out
    of its ``buffers`` buffers of ``buffer_numel`` elements while taking them, and so waits for
    every write submitted before. Tensors under ``min_numel`` elements stay in memory; the others
    are swapped in whole multiples of ``alignment`` elements."""
    fill, taken = 0, 0  # elements in the current buffer; buffers taken, the current one included
    out = []
    for tensors in layers:
        waited = False
        for numel in tensors:
            if numel < min_numel:
                continue
            size = numel // alignment * alignment
            if taken and fill + size <= buffer_numel:
                fill += size
            elif taken < buffers:
                taken, fill = taken + 1, size
            else:
                taken, fill, waited = 1, size, True
        out.append(waited)
    return tuple(out)
