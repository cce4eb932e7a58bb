"""Where host-resident bytes live, and what reading or writing them costs on each link.

Engine flows name the links each byte consumes. A host-memory policy turns "read N bytes"
or "write N bytes" into that usage: DRAM bytes cost 1 unit of the ``dram`` link (bytes/s);
CXL bytes cost device-seconds on the ``cxl`` link (1/read or 1/write bandwidth, bounded by
the CXL link's own bandwidth). Weighted interleave splits every allocation by page weights; a bind
over DRAM and CXL nodes (``tiersim.strategies.host_layout``) gives each tensor its own split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tiersim.config.hardware import Hardware
from tiersim.engine.graph import Usage
from tiersim.errors import ModelError


class HostMemory:
    """Fractions of host allocations in DRAM and in CXL memory (they sum to 1).

    A plain class with its hash worked out once (a schedule's task kinds are looked up by keys
    holding one, dozens of times a run; a frozen dataclass hashes its fields each time and is
    made in Python even compiled): nothing changes one once made. Two are equal when every
    field is."""

    __slots__ = ("_hash", "cxl_fraction", "cxl_read_cost", "cxl_write_cost", "dram_fraction")

    def __init__(self, dram_fraction: float, cxl_fraction: float, cxl_read_cost: float = 0.0,
                 cxl_write_cost: float = 0.0) -> None:
        self.dram_fraction = dram_fraction
        self.cxl_fraction = cxl_fraction
        self.cxl_read_cost = cxl_read_cost
        self.cxl_write_cost = cxl_write_cost
        self._hash = hash(self._fields())

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return HostMemory, self._fields()

    def _fields(self) -> tuple[float, float, float, float]:
        return self.dram_fraction, self.cxl_fraction, self.cxl_read_cost, self.cxl_write_cost

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostMemory) and (self is other or self._fields() == other._fields())

    def __repr__(self) -> str:
        return ("HostMemory(dram_fraction={!r}, cxl_fraction={!r}, cxl_read_cost={!r}, cxl_write_cost={!r})"
                .format(*self._fields()))

    @classmethod
    def dram_only(cls) -> HostMemory:
        """Everything bound to the socket's DRAM (numactl -m)."""
        return _DRAM_ONLY

    @classmethod
    def interleave(cls, hw: Hardware, dram_weight: float, cxl_weight: float) -> HostMemory:
        """Weighted interleave of DRAM and CXL pages (numactl --weighted-interleave)."""
        total = dram_weight + cxl_weight
        return cls._on_cxl(hw, dram_weight / total, cxl_weight / total)

    @classmethod
    def split_at(cls, hw: Hardware, dram_fraction: float) -> HostMemory:
        """``dram_fraction`` of the bytes in DRAM, the rest on the CXL devices (all of it in DRAM:
        ``dram_only``, whatever the hardware)."""
        if dram_fraction >= 1.0:
            return _DRAM_ONLY
        return cls._on_cxl(hw, dram_fraction, 1.0 - dram_fraction)

    @classmethod
    def _on_cxl(cls, hw: Hardware, dram_fraction: float, cxl_fraction: float) -> HostMemory:
        """Bytes split between DRAM and the CXL devices of ``hw``, costed at the devices' rates."""
        if hw.cxl is None:
            raise ModelError("host memory on CXL on hardware without CXL devices")
        return cls(
            dram_fraction=dram_fraction,
            cxl_fraction=cxl_fraction,
            cxl_read_cost=1.0 / min(hw.cxl.read_bandwidth, hw.cxl.link_bandwidth),
            cxl_write_cost=1.0 / min(hw.cxl.write_bandwidth, hw.cxl.link_bandwidth),
        )

    def blend(self, others: Sequence[tuple[HostMemory, float]], weight: float) -> HostMemory:
        """The memory of an access touching this tensor's ``weight`` bytes and each other
        ``(memory, bytes)``: fractions weighted by bytes (itself when they all agree)."""
        if all(memory == self for memory, _bytes in others):
            return self
        parts = ((self, weight), *others)
        total = sum(num_bytes for _memory, num_bytes in parts)
        dram = sum(memory.dram_fraction * num_bytes for memory, num_bytes in parts) / total
        on_cxl = [memory for memory, num_bytes in parts if memory.cxl_fraction > 0 and num_bytes > 0]
        if dram >= 1.0 or not on_cxl:
            return _DRAM_ONLY
        return HostMemory(dram, 1.0 - dram, on_cxl[0].cxl_read_cost, on_cxl[0].cxl_write_cost)

    def access(self, read_bytes: float, write_bytes: float) -> Usage:
        """Link usage of reading ``read_bytes`` and writing ``write_bytes`` per unit of a flow."""
        usage: list[tuple[str, float]] = []
        if self.dram_fraction > 0:
            usage.append(("dram", self.dram_fraction * (read_bytes + write_bytes)))
        if self.cxl_fraction > 0:
            cost = self.cxl_fraction * (read_bytes * self.cxl_read_cost + write_bytes * self.cxl_write_cost)
            usage.append(("cxl", cost))
        return tuple(usage)

    def split(self, num_bytes: int) -> dict[str, int]:
        """Bytes of an allocation that land in each host tier."""
        in_cxl = int(round(num_bytes * self.cxl_fraction))
        return {"dram": num_bytes - in_cxl, "cxl": in_cxl}


_DRAM_ONLY = HostMemory(1.0, 0.0)


def traffic(reads: HostMemory, read_bytes: float, writes: HostMemory | None, write_bytes: float) -> Usage:
    """Link usage of reading ``read_bytes`` where ``reads`` says and writing ``write_bytes``
    where ``writes`` says (None: the same memory), each part costed on its own tier."""
    if writes is None or writes == reads:
        return reads.access(read_bytes, write_bytes)
    units: dict[str, float] = {}
    for link, amount in (*reads.access(read_bytes, 0.0), *writes.access(0.0, write_bytes)):
        units[link] = units.get(link, 0.0) + amount
    return tuple((link, amount) for link, amount in units.items() if amount > 0)
