"""Loops as the fast-forward sees them: runs of alike blocks of iterations, and what it keeps
of each loop's iterations built so far."""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from tiersim.engine.schedule import Block

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.fastforward.state import BoundaryState

MAX_PERIOD: Final = 8
"""Longest block of iterations ``runs_of`` looks for a repeating pattern in."""


@functools.lru_cache(maxsize=256)
def runs_of(keys: tuple[Hashable, ...]) -> tuple[Block, ...]:
    """``keys`` as runs of blocks: equal keys in a row are one run of one-iteration blocks, and
    a pattern of up to ``MAX_PERIOD`` keys repeated three times or more (a layer's tensors
    split into sub-groups of a few sizes, in turn) is one run of blocks of that width, the
    longest stretch found first."""
    out: list[Block] = []
    i = 0
    while i < len(keys):
        count, width = _repeats(keys, i, 1), 1
        for period in range(2, MAX_PERIOD + 1):
            blocks = _repeats(keys, i, period)
            if blocks >= 3 and blocks * period > count * width:
                count, width = blocks, period
        out.append(((keys[i] if width == 1 else ("period", keys[i:i + width])), count, width))
        i += count * width
    return tuple(out)


def _repeats(keys: tuple[Hashable, ...], start: int, width: int) -> int:
    """How many times ``keys[start:start + width]`` repeats in a row from ``start``."""
    block = keys[start:start + width]
    if len(block) < width:
        return 0
    count = 1
    while keys[start + count * width:start + (count + 1) * width] == block:
        count += 1
    return count


def at_or_before(ascending: list[int], p: int) -> int:
    """How many of the positions ``ascending`` are at or before ``p``: ``bisect_right`` as a
    binary search in native ints (compiled, the library's is a call through Python)."""
    lo, hi = 0, len(ascending)
    while lo < hi:
        mid = (lo + hi) // 2
        if p < ascending[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def iteration_of(first: list[int], p: int) -> int:
    """The iteration holding task ``p``: the last whose first task (``first``, ascending
    positions) is at or before ``p`` (-1 if none is)."""
    return at_or_before(first, p) - 1


Signature = tuple[int, int, int, str | None]
"""A state's cheap signature: tasks pending, the oldest of them (its position, or its distance
from the iteration's first task), timers armed and the phase."""


@dataclass
class LoopProgress:
    """The iterations of one loop built so far: position of each one's first task, its index
    (moved on by a fast-forward) and key."""

    first: list[int] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    key: list[Hashable] = field(default_factory=list)
    state_cost: int = 0
    """Pending tasks the states taken so far have read."""
    signature: Signature | None = None
    """At the last boundary; a state can only repeat one of equal signature."""
    timers: list[float] = field(default_factory=list)
    """At the last boundary: seconds to each pending timer, in order; a state can only repeat
    one whose timers are as far off (a queue that drains or grows moves them: comparing them
    first spares reading every pending task)."""
    expected: BoundaryState | None = None
    """After a skip over a geometric transient: the state the next boundary must show."""
