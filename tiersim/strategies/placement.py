"""Where a strategy puts tensors: bytes per tier, and why a run does not fit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tiersim.config.profiles import GPUProfile
from tiersim.frozen import by_fields
from tiersim.strategies import footprint
from tiersim.workload import TrainingStep


@dataclass
class Placement:
    """Bytes of each named tensor group on each tier (hbm per GPU; host tiers whole node): the
    bytes its tensors take (allocated) and the bytes the process holds for them (reserved:
    allocator rounding and caching, retained temporaries, runtime; see ``footprint``)."""

    items: list[tuple[str, str, int, int]] = field(default_factory=list)

    def put(self, tier: str, what: str, allocated: int, reserved: int | None = None) -> None:
        """Place ``what`` on ``tier``: ``allocated`` bytes, holding ``reserved`` (default the same)."""
        held = allocated if reserved is None else reserved
        if allocated or held:
            self.items.append((tier, what, int(allocated), int(held)))

    def totals(self) -> dict[str, int]:
        """Peak allocated bytes per tier (every tier listed, 0 when unused)."""
        return _by_tier(self.items, False)

    def reserved(self) -> dict[str, int]:
        """Bytes held per tier (every tier listed): what decides whether a run fits."""
        return _by_tier(self.items, True)


def _by_tier(items: list[tuple[str, str, int, int]], held: bool) -> dict[str, int]:
    """The items' allocated (or ``held``) bytes summed per tier, keyed in the order of ``TIERS``.
    Each tier is summed in a native integer (compiled, adding into a dict's boxed integers costs
    ten times more, and a run sums its placement three times)."""
    hbm = dram = cxl = nvme = 0
    for tier, _what, allocated, reserved in items:
        amount = reserved if held else allocated
        if tier == "hbm":
            hbm += amount
        elif tier == "dram":
            dram += amount
        elif tier == "cxl":
            cxl += amount
        elif tier == "nvme":
            nvme += amount
        else:
            raise KeyError(tier)
    return {"hbm": hbm, "dram": dram, "cxl": cxl, "nvme": nvme}


@dataclass(frozen=True)
class Misfit:
    """A tier short of capacity: the bytes a run holds on it against the bytes it has (per GPU
    for hbm, on the node for the host tiers)."""

    tier: str
    need_bytes: int
    have_bytes: int

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    @property
    def scope(self) -> str:
        """What the bytes count: "per GPU" (hbm) or "on the node" (host tiers)."""
        return "per GPU" if self.tier == "hbm" else "on the node"

    def __str__(self) -> str:
        return (f"{self.tier} needs {self.need_bytes / 1e9:.1f} GB {self.scope} "
                f"but has {self.have_bytes / 1e9:.1f} GB")


@dataclass(frozen=True)
class MissingDevice:
    """A device a strategy needs that the hardware lacks: its tier (``cxl``, ``nvme``) and
    what it is called in words ("CXL devices")."""

    tier: str
    what: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)

    def __str__(self) -> str:
        return f"no {self.what} in hardware.{self.tier}"


Unfit = Misfit | MissingDevice
"""Why a run does not fit: a tier short of bytes or a missing device."""


def place_gpu_common(step: TrainingStep, placement: Placement, gpu: GPUProfile, grads_on_gpu: bool,
                     gradient_conversion: int, fetched_ahead: int | None = None, step_transient: int = 0,
                     peak: dict[str, int] | None = None) -> None:
    """What every strategy keeps in HBM (per GPU): the 16-bit parameter partition (and gradients),
    ZeRO-3's contiguous reduce bucket, and at the backward peak the gathered layers, activations,
    the largest tensor's gradient before it moves into the bucket and ``gradient_conversion``
    bytes of fp32 gradient partitions on their way off the GPU. The caching allocator reserves
    ``footprint.allocator_reserve`` beyond the transient peak; the CUDA context and libraries add
    ``gpu.reserved_memory`` beside it. ``peak``: the tensors live at the transient peak, where a
    strategy knows them (``zero12_hbm``), in place of that sum of each kind's largest.

    With the parameters offloaded (``fetched_ahead``: layers fetched ahead of the one computing,
    ``param_offload.prefetch_depth``) the partition is not in HBM; the layers in flight are (also
    with one rank), and with several ranks their partitions copied in before the all-gather."""
    offloaded = fetched_ahead is not None
    if not offloaded:
        placement.put("hbm", "bf16 parameters (partition)", step.lp_param_bytes_on_gpu())
    if grads_on_gpu:
        placement.put("hbm", "bf16 gradients (partition)", step.lp_grad_bytes_on_gpu())
    placement.put("hbm", "reduce bucket", step.training.reduce_bucket_size * step.lp_bytes)
    transient = peak if peak is not None else _transients(step, gradient_conversion, fetched_ahead)
    for what, num_bytes in transient.items():
        placement.put("hbm", what, num_bytes)
    at_peak = sum(transient.values())
    reserve = footprint.allocator_reserve(step, at_peak)
    placement.put("hbm", "caching-allocator reserve (freed blocks kept)", 0, reserve)
    beyond = step_transient - at_peak - reserve
    placement.put("hbm", "optimizer step's temporary, beyond the backward's peak", max(beyond, 0))
    placement.put("hbm", "CUDA context and libraries", 0, gpu.reserved_memory)


def _transients(step: TrainingStep, gradient_conversion: int, fetched_ahead: int | None) -> dict[str, int]:
    """The largest of each kind of transient tensor in HBM (their sum is the counted peak)."""
    offloaded = fetched_ahead is not None
    transient = {
        "activations": step.activation_peak_bytes,
        "gradient of the largest tensor": step.largest_tensor * step.lp_bytes,
        "fp32 gradient partitions (on their way to the host)": gradient_conversion,
    }
    dp = step.training.data_parallel
    if step.training.zero_stage >= 3 and (dp > 1 or offloaded):
        in_flight = 1 + (fetched_ahead if fetched_ahead is not None else 1)
        transient["gathered layers (current + prefetch)"] = in_flight * step.largest_layer * step.lp_bytes
        if offloaded and dp > 1:
            transient["fetched partitions (before their all-gather)"] = (
                in_flight * math.ceil(step.largest_layer / dp) * step.lp_bytes)
    return transient


def largest_partition(step: TrainingStep) -> int:
    """Elements of the largest tensor partition one rank owns (ZeRO-3 partitions each tensor)."""
    return math.ceil(step.largest_tensor / step.training.data_parallel)  # ceil is monotone
