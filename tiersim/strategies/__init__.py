"""Offload strategies. Each is a ``Strategy`` subclass registered here by its ``name``.

To add one: write a module with a ``Strategy`` subclass (``name``, optional ``Options``
dataclass, ``place``, ``offload_gradients``, ``optimizer_step``) and add it to ``STRATEGIES``.
"""

from __future__ import annotations

from tiersim.strategies.base import Plan, Strategy
from tiersim.strategies.gpu import GPUResident
from tiersim.strategies.host import CXLInterleave, HostOffload
from tiersim.strategies.nvme import NVMeSwap
from tiersim.strategies.placement import Placement

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (GPUResident, HostOffload, CXLInterleave, NVMeSwap)
}

__all__ = ["STRATEGIES", "Placement", "Plan", "Strategy"]
