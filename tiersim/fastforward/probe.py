"""Whether a fast-forwarded run's results stand where a loop may amplify a float step.

Deferred tasks end, and skipped iterations leave their shifted times, a float step off the full
run's; a loop that ``amplifies`` (a pipelined NVMe step's sub-groups, whose reads and writes
share the drives) may grow such a step through iterations that do not settle into a repeat.
Such a run stands only if it is insensitive at that scale: the schedule is run again, fast, with
each link's capacity ``NUDGE`` higher or lower (``nudged``), and every figure of the two runs
must agree to ``AGREE`` (``agree``). A run that grows a relative step at most ``AGREE / NUDGE``
times then grows the float steps of its skips and deferred ends (about 1e-14 of its times) to
well under the 1e-9 it is held to against the full run; a chaotic one (a float step moves it by
1e-5 and more) disagrees, and the caller runs the schedule whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from tiersim.engine.runner import EngineRun

NUDGE: Final = 1e-12
"""Relative change of each link's capacity in the probing run: some 10,000 float steps of a
run's times (a skip's or a deferred end's is one to a few)."""
AGREE: Final = 1e-10
"""Relative difference every figure of the probing run may show: a growth of a relative step
by at most 100."""
FLOOR: Final = 1e-12
"""Absolute difference (s, bytes) any figure may show, for those near zero."""
K = TypeVar("K")


def nudged(capacity_of: Callable[[str], float]) -> Callable[[str], float]:
    """``capacity_of`` with each link's capacity (units/s) ``NUDGE`` higher and lower by turns,
    in the order the links are first asked for: links nudged apart, not only all together
    against the compute (a drive's reads against the DRAM copies beside them, say)."""
    signs: dict[str, float] = {}

    def capacity(link: str) -> float:
        sign = signs.setdefault(link, -1.0 if len(signs) % 2 else 1.0)
        return capacity_of(link) * (1.0 + sign * NUDGE)

    return capacity


def agree(run: EngineRun, probe: EngineRun) -> bool:
    """Whether every figure of two runs of one schedule (the makespan, each link's busy seconds
    and units moved, and each time integral of their accounts) agrees to ``AGREE`` relative or
    ``FLOOR`` absolute, under the same names."""
    ours, theirs = run.accounts, probe.accounts
    pairs = [(run.makespan, probe.makespan), (ours.exposed, theirs.exposed), *_paired(run.link_busy, probe.link_busy),
             *_paired(run.link_units_moved, probe.link_units_moved), *_paired(ours.spans, theirs.spans),
             *_paired(ours.stream_busy, theirs.stream_busy), *_paired(ours.stream_bytes, theirs.stream_bytes),
             *_paired(ours.busy, theirs.busy), *_paired(ours.moved, theirs.moved)]
    return all(mine is not None and other is not None and abs(mine - other) <= max(AGREE * abs(mine), FLOOR)
               for mine, other in pairs)


def _paired(mine: dict[K, float], other: dict[K, float]) -> list[tuple[float | None, float | None]]:
    """The values of two dicts side by side, over the keys of both (None for a key one lacks)."""
    return [(mine.get(key), other.get(key)) for key in mine.keys() | other.keys()]
