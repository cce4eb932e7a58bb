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
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tiersim.config.hardware import Hardware
from tiersim.frozen import by_fields
from tiersim.strategies import footprint
from tiersim.strategies.kinds import ADAM_STATE_BYTES, FP32_BYTES
from tiersim.strategies.memory import HostMemory
from tiersim.workload import TrainingStep

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

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True)
class Allocation:
    """One host tensor of a rank: its placement label, bytes allocated and bytes held."""

    what: str
    allocated: int
    reserved: int

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)


@dataclass(frozen=True)
class Repeated:
    """``tensors`` allocated one after another, ``count`` times over (the tensors of a layer's
    sub-groups, layer after layer; most are one tensor once)."""

    tensors: tuple[Allocation, ...]
    count: int = 1

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)


def once(*tensors: Allocation) -> Repeated:
    """``tensors`` allocated once each, in order."""
    return Repeated(tensors)


LONGEST_BLOCK = 256
"""Items a block may span (a layer's sub-groups, or its tensors, are fewer)."""


def blocks(items: Sequence[T]) -> list[tuple[tuple[T, ...], int]]:
    """``items`` as blocks repeated back to back, in order: (block, how many times). A block
    runs from an item to the next one equal to it where what follows repeats it (the sizes of a
    layer's sub-groups, layer after layer), else it is the item alone."""
    whole = tuple(items)
    found = []
    i = 0
    while i < len(whole):
        try:
            span = whole.index(whole[i], i + 1, i + 1 + LONGEST_BLOCK) - i
        except ValueError:
            span = 1
        count = _repeats(whole, i, span)
        span = span if count > 1 else 1
        found.append((whole[i:i + span], count))
        i += count * span
    return found


def _repeats(items: tuple[T, ...], start: int, span: int) -> int:
    """How many times ``items[start:start + span]`` follows itself from ``start``: repeats tried
    in doubling numbers, then the rest in halving ones."""
    block = items[start:start + span]
    count, step = 1, 1
    while items[start + count * span:start + (count + step) * span] == block * step:
        count += step
        step *= 2
    while step > 1:
        step //= 2
        if items[start + count * span:start + (count + step) * span] == block * step:
            count += step
    return count


def repeated(alike: list[tuple[tuple[T, ...], int]], make: Callable[[T], Iterable[Allocation]]) -> list[Repeated]:
    """A ``Repeated`` per block of ``alike`` (``blocks``): the tensors ``make`` gives for each
    of its items, in order."""
    return [Repeated(tuple(tensor for item in block for tensor in make(item)), count) for block, count in alike]


@dataclass(frozen=True)
class Piece:
    """Tensors of one label laid one after another, ``count`` times over, and the fraction of
    each one's held bytes in DRAM (the first ones: pages are touched in order)."""

    tensors: tuple[Allocation, ...]
    fractions: tuple[float, ...]
    count: int = 1

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    @property
    def what(self) -> str:
        """The label of the piece's tensors."""
        return self.tensors[0].what

    def allocated(self) -> int:
        """Bytes the piece's tensors take, all repeats."""
        return sum(tensor.allocated for tensor in self.tensors) * self.count

    def reserved(self) -> int:
        """Bytes held for the piece's tensors, all repeats."""
        return sum(tensor.reserved for tensor in self.tensors) * self.count

    def in_dram(self, ranks: int) -> tuple[int, int]:
        """Bytes allocated and held in DRAM for the piece's tensors of ``ranks`` ranks, each
        tensor's cut to whole bytes."""
        return (sum(int(t.allocated * ranks * f) for t, f in zip(self.tensors, self.fractions)) * self.count,
                sum(int(t.reserved * ranks * f) for t, f in zip(self.tensors, self.fractions)) * self.count)

    def add_dram_bytes(self, in_dram: float, start: int, stop: int, offset: int) -> float:
        """``in_dram`` plus the bytes of ``start`` to ``stop`` of the label in DRAM, this piece
        laid from ``offset``, added tensor by tensor as floats. Repeats whose tensors are each
        whole in DRAM add one range at once, and those with none add nothing: whole bytes,
        which floats add exactly (a fill splits one repeat at most, after its whole ones)."""
        each = [min(t.allocated, f * t.reserved) for t, f in zip(self.tensors, self.fractions)]
        if self.count > 1 and all(bytes_in == t.allocated for bytes_in, t in zip(each, self.tensors)):
            return in_dram + max(0, min(stop, offset + self.allocated()) - max(start, offset))
        if self.count > 1 and not any(each):
            return in_dram
        begin = offset
        for _ in range(self.count):
            for tensor, bytes_in in zip(self.tensors, each):
                in_dram += max(0.0, min(stop, begin + bytes_in) - max(start, begin))
                begin += tensor.allocated
        return in_dram


def by_label(tensors: tuple[Allocation, ...], fractions: Sequence[float], count: int) -> list[Piece]:
    """``count`` repeats of ``tensors`` with their DRAM ``fractions``: a piece per label, labels
    in order of first appearance, each with its tensors in order (none if ``count`` is 0)."""
    if not count:
        return []
    if len(tensors) == 1:
        return [Piece(tensors, tuple(fractions), count)]
    labels: dict[str, tuple[list[Allocation], list[float]]] = {}
    for tensor, fraction in zip(tensors, fractions):
        alike, their = labels.setdefault(tensor.what, ([], []))
        alike.append(tensor)
        their.append(fraction)
    return [Piece(tuple(alike), tuple(their), count) for alike, their in labels.values()]


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
        self._subgroups: dict[str, tuple[HostMemory, ...]] = {}
        self._offsets: dict[str, tuple[list[Piece], list[int]]] = {}
        for piece in pieces:
            self._by_label.setdefault(piece.what, []).append(piece)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        """Pickled as its hardware, pieces and uniform memory (what it works out, anew)."""
        return HostLayout, (self.hw, self.pieces, self.uniform)

    def labels(self) -> dict[str, list[Piece]]:
        """The pieces of each label, labels in allocation order."""
        return self._by_label

    def memory(self, what: str, start: int = 0, end: int | None = None) -> HostMemory:
        """Where bytes ``start`` to ``end`` (default: all) of ``what`` are, as a fraction in
        DRAM; the label's pieces laid end to end by their allocated bytes."""
        if self.uniform is not None:
            return self.uniform
        return self._between(what, (start, self._laid(what)[1][-1] if end is None else end))[0]

    def by_layer(self, what: str, sizes: tuple[int, ...], element_bytes: int) -> tuple[HostMemory, ...]:
        """The memory of each layer's range of ``what``, laid out in layer order (``sizes``
        elements each, ``element_bytes`` each), worked out once."""
        if self.uniform is not None:
            return (self.uniform,) * len(sizes)
        key = (what, sizes, element_bytes)
        known = self._layers.get(key)
        if known is None:
            bounds = (0, *itertools.accumulate(n * element_bytes for n in sizes))
            known = self._layers[key] = self._between(what, bounds)
        return known

    def _laid(self, what: str) -> tuple[list[Piece], list[int]]:
        """The pieces of ``what`` and the byte offset of each, then the label's end."""
        known = self._offsets.get(what)
        if known is None:
            pieces = self._by_label.get(what, [])
            known = self._offsets[what] = (pieces, [0, *itertools.accumulate(p.allocated() for p in pieces)])
        return known

    def _between(self, what: str, bounds: Sequence[int]) -> tuple[HostMemory, ...]:
        """The memory of each range of ``what`` between neighbouring ``bounds`` (ascending, cut
        at the label's end): its bytes in DRAM added piece by piece, in order, over the pieces
        it overlaps (the others add none)."""
        pieces, offsets = self._laid(what)
        found = []
        first = 0
        for start, end in zip(bounds, bounds[1:]):
            stop = min(end, offsets[-1])
            if stop <= start:
                found.append(HostMemory.dram_only())  # no bytes: costs nothing anywhere
                continue
            while offsets[first + 1] <= start:
                first += 1
            in_dram, index = 0.0, first
            while index < len(pieces) and offsets[index] < stop:
                in_dram = pieces[index].add_dram_bytes(in_dram, start, stop, offsets[index])
                index += 1
            found.append(HostMemory.split_at(self.hw, in_dram / (stop - start)))
        return tuple(found)

    def subgroups(self, what: str) -> tuple[HostMemory, ...]:
        """The memory of each tensor of a per-sub-group label, in order (of its allocated
        bytes: a pinned buffer's rounding is held after them), worked out once a piece."""
        known = self._subgroups.get(what)
        if known is None:
            known = self._subgroups[what] = tuple(itertools.chain.from_iterable(
                tuple(self._tensor_memory(t, f) for t, f in zip(p.tensors, p.fractions)) * p.count
                for p in self._by_label.get(what, ())))
        return known

    def subgroup(self, what: str, index: int) -> HostMemory:
        """The memory of the tensor of sub-group ``index`` of a per-sub-group label."""
        return self.uniform if self.uniform is not None else self.subgroups(what)[index]

    def _tensor_memory(self, tensor: Allocation, dram_fraction: float) -> HostMemory:
        """Where the allocated bytes of ``tensor`` are, ``dram_fraction`` of its held bytes in DRAM."""
        if self.uniform is not None:
            return self.uniform
        size = tensor.allocated
        in_dram = min(size, dram_fraction * tensor.reserved)
        return HostMemory.split_at(self.hw, in_dram / size if size else 1.0)


def allocations(step: TrainingStep, hw: Hardware, staging: Allocation, groups: Sequence[int]) -> list[Repeated]:
    """One rank's host tensors in the order DeepSpeed allocates them (see the module doc):
    the state of the sub-groups of ``groups`` elements (the CPU's), ``staging`` the buffer of
    the boundary's gradient copy; sub-groups repeated back to back taken together (``blocks``)."""
    pin: Callable[[int], int] = footprint.pinned if hw.pinned else int
    alike = blocks(groups)
    largest = max(groups, default=0)
    accum = step.grad_accum_bytes * step.rank_params
    return [
        once(Allocation(RUNTIME, 0, footprint.PROCESS_HOST_BYTES)),
        *repeated(alike, lambda n: (Allocation(FP32_PARAMS, FP32_BYTES * n, FP32_BYTES * n),)),
        *repeated(alike, lambda n: (Allocation(FP32_GRADS, FP32_BYTES * n, pin(FP32_BYTES * n)),)),
        once(Allocation(GRAD_PARTITIONS, accum, pin(accum)), staging),
        *repeated(alike, lambda n: (Allocation(RETAINED, 0, footprint.FIRST_STEP_RETAINED_BYTES * n),
                                    Allocation(ADAM_STATE, ADAM_STATE_BYTES * n, ADAM_STATE_BYTES * n))),
        once(Allocation(H2D_TEMPORARY, step.lp_bytes * largest, step.lp_bytes * largest)),
    ]


def fill(hw: Hardware, tensors: Iterable[Repeated]) -> list[Piece]:
    """``bind``: each allocation of the ranks of a socket takes what is left of the socket's
    DRAM node, the rest spills to its CXL nodes. The repeats of a ``Repeated`` that fit whole
    are pieces of their own, then the repeat that fills DRAM, then the rest, which find none."""
    ranks = hw.ranks_per_socket
    free = hw.usable("dram") // hw.sockets
    pieces: list[Piece] = []
    for alike in tensors:
        needs = [tensor.reserved * ranks for tensor in alike.tensors]
        each = sum(needs)
        whole = max(0, min(alike.count, free // each)) if each else alike.count
        free -= whole * each
        pieces += by_label(alike.tensors, [1.0] * len(needs), whole)
        if whole == alike.count:
            continue
        fractions = []
        for need in needs:
            in_dram = min(need, free)
            free -= in_dram
            fractions.append(in_dram / need if need else 1.0)
        pieces += by_label(alike.tensors, fractions, 1)
        pieces += by_label(alike.tensors, [0.0 if need else 1.0 for need in needs], alike.count - whole - 1)
    return pieces


def host_layout(policy: str, hw: Hardware, tensors: list[Repeated], interleave: HostMemory) -> HostLayout:
    """The layout of ``tensors`` over DRAM and CXL nodes under ``policy``: the fill of a bind or
    a preference, else ``interleave`` for every byte."""
    if policy in FILLS:
        return HostLayout(hw, fill(hw, tensors), None)
    return HostLayout(hw, spread(tensors, interleave.dram_fraction), interleave)


def spread(tensors: Iterable[Repeated], dram_fraction: float) -> list[Piece]:
    """``tensors`` with ``dram_fraction`` of every byte in DRAM (an interleave's pieces)."""
    return [piece for alike in tensors
            for piece in by_label(alike.tensors, [dram_fraction] * len(alike.tensors), alike.count)]
