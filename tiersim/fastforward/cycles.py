"""A link's flows cut into cycles of one step: what ``credit_deferred`` checks and measures
over fast-forwarded spans without listing each skipped period.

Over a span a fast-forward skipped, the event run's flows repeat at the skipped loop's period
(``SkippedSpan``) and the deferred copies timed there repeat at the same step (``Spans``). Cut
time into cycles of that ``step`` from an ``origin``: a cycle that no edge comes near (a single
interval's start or end, a phase window's bound, the first or last interval of a progression)
holds the intervals the cycle before it holds, one step later, so a run of such cycles has the
peak load of its first and the measures of its first times their count. ``pieces`` cuts a stretch
into the first cycles of such runs (each standing for its run) and the stretches between
(standing for themselves), ``clipped`` the intervals to them. Times are s, loads units/s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tiersim.fastforward.spans import Spans, merged

Piece = tuple[float, float, int]
"""From, to (s), and the cycles it stands for (1: a stretch standing for itself)."""

Load = tuple[float, float, float]
"""From, to (s) and the load (units/s) of a flow."""


def pieces(lo: float, hi: float, step: float, origin: float, edges: Sequence[float],
           spans: Sequence[Spans]) -> list[Piece]:
    """``lo`` to ``hi`` cut into pieces, each run of at least two cycles (of ``step`` from
    ``origin``) at least two cycles from each of the ``edges`` and of the first and last
    intervals of ``spans`` (progressions at ``step``) as its first cycle, and the stretches
    between; the cycle index of a time is off by float residue at most, which two cycles cover."""
    first, last = _cycle(lo, origin, step), _cycle(hi, origin, step)
    near = {first, last}
    for time in edges:
        c = _cycle(time, origin, step)
        near.update((c - 1, c, c + 1))
    for span in spans:
        for start in (span.first, span.first + (span.times - 1) * span.step):
            near.update(range(_cycle(start, origin, step) - 1, _cycle(start + span.length, origin, step) + 2))
    inside = sorted(c for c in near if first <= c <= last)
    out: list[Piece] = []
    since = lo
    for c, after in zip(inside, inside[1:]):
        if after - c > 2:  # cycles c + 1 to after - 1, two or more, none near an edge
            begin = origin + (c + 1) * step
            out.append((since, begin, 1))
            out.append((begin, origin + (c + 2) * step, after - c - 1))
            since = origin + after * step
    out.append((since, hi, 1))
    return out


def _cycle(time: float, origin: float, step: float) -> int:
    """The cycle (of ``step`` from ``origin``) that ``time`` falls in, to float residue."""
    return math.floor((time - origin) / step)


def clipped(cut: list[Piece], singles: Sequence[Load], spans: Sequence[tuple[Spans, float]]) -> list[list[Load]]:
    """Per piece of ``cut``, the parts in it of the ``singles`` and of each progression's
    intervals (with their loads)."""
    out: list[list[Load]] = []
    for lo, hi, _count in cut:
        inside = [(max(a, lo), min(b, hi), load) for a, b, load in singles if a < hi and b > lo]
        for span, load in spans:
            k0, k1 = span.meeting(lo, hi)
            first, step, length = span.first, span.step, span.length
            inside += [(max(first + k * step, lo), min(first + k * step + length, hi), load)
                       for k in range(k0, k1 + 1)]
        out.append(inside)
    return out


def alone(cut: list[Piece], ours: list[list[Load]], theirs: list[list[Load]],
          bounds: Sequence[tuple[float, float]]) -> list[float]:
    """Per window of ``bounds`` (from, to: consecutive, in order), the seconds in which one of
    ``ours`` is on and none of ``theirs`` is (both clipped to the pieces of ``cut``), each piece
    counted as the cycles it stands for."""
    seconds = [0.0] * len(bounds)
    begins: list[float] = [begin for begin, _end in bounds]
    ends: list[float] = [end for _begin, end in bounds]
    last = len(bounds)
    for (_lo, _hi, count), on, off in zip(cut, ours, theirs):
        i = 0
        for a, b in _minus(merged([(a, b) for a, b, _load in on]), merged([(a, b) for a, b, _load in off])):
            while i < last and ends[i] <= a:
                i += 1
            j = i
            while j < last and begins[j] < b:
                seconds[j] += count * (min(b, ends[j]) - max(a, begins[j]))
                j += 1
    return seconds


def _minus(on: list[tuple[float, float]], off: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """What of the disjoint, ordered intervals ``on`` the disjoint, ordered ``off`` leave."""
    out: list[tuple[float, float]] = []
    j = 0
    for a, b in on:
        while j < len(off) and off[j][1] <= a:
            j += 1
        k = j
        while k < len(off) and off[k][0] < b:
            if off[k][0] > a:
                out.append((a, off[k][0]))
            a = max(a, off[k][1])
            k += 1
        if b > a:
            out.append((a, b))
    return out
