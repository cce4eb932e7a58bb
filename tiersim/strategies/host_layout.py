"""Where a CPU-offloading rank's host tensors live under a numactl memory policy.

``weighted-interleave`` (``numactl -w``) and ``interleave`` (``-i``, equal pages on every node of
the list: the socket's DRAM node and its CXL nodes) split every allocation alike. ``bind`` (``-m``
over the socket's DRAM node and its CXL nodes) allocates from the nearest node, DRAM, until it is
full and then from the CXL nodes; ``preferred`` (``-p`` DRAM) falls back the same way here, every
socket's DRAM filling alike. Pages land where they are first touched, and DeepSpeed zeroes or
pins each tensor as it creates it, so under these two which bytes sit on CXL follows the order
of DeepSpeed's allocations (v0.16.2):

1. the process's own memory (CUDA, NCCL, Python) at start;
2. ``_create_fp32_partitions``: the fp32 partition of each sub-group, in order;
3. ``initialize_optimizer_states``: each sub-group's fp32 gradient buffer (pinned), in order;
4. ``_setup_for_real_optimizer``: the flat ``grad_partitions_flat_buffer`` (pinned, in
   ``grad_accum_dtype``, parameters in model order), then ``pinned_grad_buffer`` (the fp32
   staging buffer of the largest partition; before 0.15.4 the 16-bit temporary of
   ``converts_on_host``, in the first backward);
5. the first ``step``, per sub-group: ``unscale_and_clip_grads``' retained fp32 temporary, then
   CPU Adam's lazily created ``exp_avg`` and ``exp_avg_sq`` (``deepspeed/ops/adam/cpu_adam.py``);
6. the 16-bit temporary of each sub-group's H2D copy, freed and made again every sub-group: in
   the steady state it takes what the persistent tensors left.

The ranks of a socket allocate in lock-step and share its DRAM node (its capacity less
``hardware.host_memory_in_use``'s share and the headroom): each allocation takes its share of
what DRAM has left, the rest goes to CXL, and an access to a byte range is costed on the tiers
its bytes are on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tiersim.config.hardware import Hardware
from tiersim.strategies import footprint
from tiersim.strategies.kinds import ADAM_STATE_BYTES, FP32_BYTES
from tiersim.strategies.memory import HostMemory
from tiersim.workload import TrainingStep

MemoryPolicy = Literal["bind", "preferred", "interleave", "weighted-interleave"]
"""A rank's numactl memory policy (``-m``, ``-p``, ``-i``, ``-w``)."""
DRAMPolicy = Literal["bind", "preferred"]
"""The policies of memory on DRAM nodes alone (an interleave needs CXL nodes)."""
FILLS = ("bind", "preferred")
"""Policies that fill DRAM first and spill to CXL in allocation order."""

FP32_PARAMS = "fp32 params"
ADAM_STATE = "Adam m, v"
FP32_GRADS = "fp32 gradients (per sub-group)"
GRAD_PARTITIONS = "gradient partitions (grad_accum_dtype)"
H2D_TEMPORARY = "16-bit temporary of the H2D copy"
STAGING = "fp32 gradient staging"
CONVERT_TEMPORARY = "16-bit temporary of the gradient copy"
"""The staging buffer of the boundary's gradient copy before 0.15.4."""
RETAINED = "retained after the first step"
RUNTIME = "process runtime"


@dataclass(frozen=True)
class Allocation:
    """One host tensor of a rank: its placement label, bytes allocated and bytes held."""

    what: str
    allocated: int
    reserved: int


@dataclass(frozen=True)
class Piece:
    """An allocation and the fraction of its held bytes in DRAM (the first ones: pages are
    touched in order)."""

    allocation: Allocation
    dram_fraction: float


class HostLayout:
    """A rank's host tensors in allocation order, each with its DRAM fraction; the memory of a
    byte range of a labelled tensor (the sub-groups of a label joined in order)."""

    def __init__(self, hw: Hardware, pieces: list[Piece], uniform: HostMemory | None) -> None:
        self.hw = hw
        self.pieces = pieces
        self.uniform = uniform
        """The memory of every byte (an interleave), or None (a bind: each piece its own)."""
        self._by_label: dict[str, list[Piece]] = {}
        self._layers: dict[tuple[str, tuple[int, ...], int], tuple[HostMemory, ...]] = {}
        for piece in pieces:
            self._by_label.setdefault(piece.allocation.what, []).append(piece)

    def labels(self) -> dict[str, list[Piece]]:
        """The pieces of each label, labels in allocation order."""
        return self._by_label

    def memory(self, what: str, start: int = 0, end: int | None = None) -> HostMemory:
        """Where bytes ``start`` to ``end`` (default: all) of ``what`` are, as a fraction in
        DRAM; the label's pieces laid end to end by their allocated bytes."""
        if self.uniform is not None:
            return self.uniform
        pieces = self._by_label.get(what, [])
        offsets = [0, *itertools.accumulate(p.allocation.allocated for p in pieces)]
        stop = offsets[-1] if end is None else min(end, offsets[-1])
        if stop <= start:
            return HostMemory.dram_only()  # no bytes: costs nothing anywhere
        in_dram = 0.0
        for piece, offset in zip(pieces, offsets):
            dram_end = offset + min(piece.allocation.allocated, piece.dram_fraction * piece.allocation.reserved)
            in_dram += max(0.0, min(stop, dram_end) - max(start, offset))
        return HostMemory.split_at(self.hw, in_dram / (stop - start))

    def by_layer(self, what: str, sizes: tuple[int, ...], element_bytes: int) -> tuple[HostMemory, ...]:
        """The memory of each layer's range of ``what``, laid out in layer order (``sizes``
        elements each, ``element_bytes`` each), worked out once."""
        key = (what, sizes, element_bytes)
        known = self._layers.get(key)
        if known is None:
            offsets = [0, *itertools.accumulate(n * element_bytes for n in sizes)]
            known = self._layers[key] = tuple(self.memory(what, a, b) for a, b in zip(offsets, offsets[1:]))
        return known

    def subgroup(self, what: str, index: int) -> HostMemory:
        """The memory of the tensor of sub-group ``index`` of a per-sub-group label (its
        allocated bytes: a pinned buffer's rounding is held after them)."""
        if self.uniform is not None:
            return self.uniform
        tensor = self._by_label[what][index]
        size = tensor.allocation.allocated
        in_dram = min(size, tensor.dram_fraction * tensor.allocation.reserved)
        return HostMemory.split_at(self.hw, in_dram / size if size else 1.0)


def allocations(step: TrainingStep, hw: Hardware, staging: Allocation, groups: Sequence[int]) -> list[Allocation]:
    """One rank's host tensors in the order DeepSpeed allocates them (see the module doc):
    the state of the sub-groups of ``groups`` elements (the CPU's), ``staging`` the buffer of
    the boundary's gradient copy."""
    pin: Callable[[int], int] = footprint.pinned if hw.pinned else int
    largest = max(groups, default=0)
    accum = step.grad_accum_bytes * step.rank_params
    first_step = ((Allocation(RETAINED, 0, footprint.FIRST_STEP_RETAINED_BYTES * n),
                   Allocation(ADAM_STATE, ADAM_STATE_BYTES * n, ADAM_STATE_BYTES * n)) for n in groups)
    return [
        Allocation(RUNTIME, 0, footprint.PROCESS_HOST_BYTES),
        *(Allocation(FP32_PARAMS, FP32_BYTES * n, FP32_BYTES * n) for n in groups),
        *(Allocation(FP32_GRADS, FP32_BYTES * n, pin(FP32_BYTES * n)) for n in groups),
        Allocation(GRAD_PARTITIONS, accum, pin(accum)),
        staging,
        *itertools.chain.from_iterable(first_step),
        Allocation(H2D_TEMPORARY, step.lp_bytes * largest, step.lp_bytes * largest),
    ]


def fill(hw: Hardware, tensors: Iterable[Allocation]) -> list[Piece]:
    """``bind``: each allocation of the ranks of a socket takes what is left of the socket's
    DRAM node, the rest spills to its CXL nodes."""
    ranks = hw.ranks_per_socket
    free = hw.usable("dram") // hw.sockets
    pieces = []
    for tensor in tensors:
        need = tensor.reserved * ranks
        in_dram = min(need, free)
        free -= in_dram
        pieces.append(Piece(tensor, in_dram / need if need else 1.0))
    return pieces


def host_layout(policy: str, hw: Hardware, tensors: list[Allocation], interleave: HostMemory) -> HostLayout:
    """The layout of ``tensors`` over DRAM and CXL nodes under ``policy``: the fill of a bind or
    a preference, else ``interleave`` for every byte."""
    if policy in FILLS:
        return HostLayout(hw, fill(hw, tensors), None)
    return HostLayout(hw, [Piece(t, interleave.dram_fraction) for t in tensors], interleave)
