"""The options of CPU offload (``strategies.dram``, ``strategies.cxl``): partial offload's
``ratio``, the ranks' numactl memory ``policy`` and parameter offload. They live apart from the compiled
``tiersim.strategies.host`` and ``host_layout`` because the scenario schema reads their ``Literal``
types at run time, which mypyc does not keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tiersim.config.schema import number
from tiersim.frozen import by_fields
from tiersim.strategies.param_options import ParamOffload

MemoryPolicy = Literal["bind", "preferred", "interleave", "weighted-interleave"]
"""A rank's numactl memory policy (``-m``, ``-p``, ``-i``, ``-w``)."""
DRAMPolicy = Literal["bind", "preferred"]
"""The policies of memory on DRAM nodes alone (an interleave needs CXL nodes)."""

RATIO_DOC = ("fraction of the optimizer sub-groups updated on the CPU (DeepSpeed offload_optimizer.ratio, "
             "ZeRO-3 only); the rest stay in HBM and the GPU updates them")


@dataclass(frozen=True)
class HostOptions:
    """CPU offload's options, and the memory policy of each rank on its socket's DRAM node alone."""

    ratio: float = number(1.0, ge=0, le=1, doc=RATIO_DOC)
    policy: DRAMPolicy = "bind"
    """The numactl policy over the socket's DRAM node: ``bind`` (-m) or ``preferred`` (-p), the same
    placement on DRAM alone (an interleave needs CXL nodes: the ``cxl`` strategy)."""

    offload_param: ParamOffload | None = None
    """The 16-bit parameters offloaded too (``tiersim.strategies.param_offload``); absent: in HBM."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)


@dataclass(frozen=True)
class CXLOptions:
    """CPU offload's options, the memory policy of each rank over its socket's DRAM node and CXL
    nodes, and the page weights of the weighted interleave."""

    ratio: float = number(1.0, ge=0, le=1, doc=RATIO_DOC)
    policy: MemoryPolicy = "weighted-interleave"
    """The numactl policy over the socket's DRAM node and its CXL nodes: ``weighted-interleave``
    (-w: pages split by ``dram_weight``:``cxl_weight``), ``interleave`` (-i: equal pages on every
    node, DRAM 1 : CXL its nodes per socket), ``bind`` (-m: DRAM until full, then CXL, in
    DeepSpeed's allocation order) or ``preferred`` (-p DRAM: the same fill)."""
    dram_weight: float = number(12, gt=0, doc="DRAM's page weight under weighted-interleave: dram_weight / "
                                              "(dram_weight + cxl_weight) of every host allocation is in DRAM")
    cxl_weight: float = number(5, gt=0, doc="CXL's page weight under weighted-interleave: cxl_weight / "
                                            "(dram_weight + cxl_weight) of every host allocation is on the CXL "
                                            "devices")

    offload_param: ParamOffload | None = None
    """The 16-bit parameters offloaded too (``tiersim.strategies.param_offload``); absent: in HBM."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return by_fields(self)
