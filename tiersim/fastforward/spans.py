"""Time spans in arithmetic progression: what ``settle`` credits deferred tasks with.

A ``Spans`` is ``times`` intervals of ``length`` seconds, the k-th starting at ``first + k *
step`` (s). The copies of a deferred task that a fast-forward times over many skipped
iterations (a stream that keeps pace with the compute, or one whose queue grows by the same
amount every iteration) are one progression; ``Intervals`` holds such progressions beside
single intervals (the deferred tasks that ran). The measures ``settle`` needs (seconds inside
each phase window, the union of what is on a link) are computed from the progressions' terms,
so their cost does not grow with the iterations skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Final

_TOUCH: Final = 1e-12
"""Relative float residue by which consecutive intervals may miss touching and still be one
stretch (a stream whose queue never empties)."""

_START: Final = itemgetter(0)
"""An interval's start (s), the key ``merged`` sorts by."""

_FEW: Final = 8
"""Intervals ``merged`` sorts by insertion, not by a call of the builtin ``sorted`` (a call
through Python compiled, which costs more than sorting a few)."""

Window = tuple[float, float, str]
"""A phase window: from, to (s) and the phase."""


class Spans:
    """``times`` intervals of ``length`` s, the k-th from ``first + k * step`` (s); ``step``
    is at least ``length`` (a stream runs one task at a time). ``last``: where the last ends."""

    __slots__ = ("first", "last", "length", "step", "times")

    def __init__(self, first: float, step: float, length: float, times: int) -> None:
        self.first = first
        self.step = step
        self.length = length
        self.times = times
        self.last = first + (times - 1) * step + length

    def joined(self) -> bool:
        """Whether each interval reaches the next (the progression is one stretch)."""
        return self.step <= self.length + _TOUCH * max(abs(self.first), self.step)

    def covered(self, lo: float, hi: float) -> float:
        """Seconds of the intervals inside ``[lo, hi]``."""
        first, step, length = self.first, self.step, self.length
        k0, k1 = self.meeting(lo, hi)
        if k0 > k1 or length <= 0:
            return 0.0
        start0, start1 = first + k0 * step, first + k1 * step
        return (k1 - k0 + 1) * length - max(0.0, lo - start0) - max(0.0, start1 + length - hi)

    def meeting(self, lo: float, hi: float) -> tuple[int, int]:
        """The first and last k whose interval overlaps ``(lo, hi)`` (k0 > k1: none)."""
        first, step, length, count = self.first, self.step, self.length, self.times
        if hi <= first or lo >= self.last:
            return 1, 0
        if count == 1:
            return 0, 0
        k0 = max(0, math.floor((lo - first - length) / step))
        while k0 > 0 and first + (k0 - 1) * step + length > lo:
            k0 -= 1
        while k0 < count and first + k0 * step + length <= lo:
            k0 += 1
        k1 = min(count - 1, max(0, math.ceil((hi - first) / step)))
        while k1 < count - 1 and first + (k1 + 1) * step < hi:
            k1 += 1
        while k1 >= 0 and first + k1 * step >= hi:
            k1 -= 1
        return k0, k1

    def minus(self, lo: float, hi: float) -> tuple[list[Spans], list[tuple[float, float]]]:
        """What of the intervals lies outside ``[lo, hi]``: the progressions of those before and
        after it, and the parts (start, end, s) of the two it cuts."""
        k0, k1 = self.meeting(lo, hi)
        if k0 > k1:
            return [self], []
        first, step, length, times = self.first, self.step, self.length, self.times
        kept, parts = [], []
        if k0:
            kept.append(Spans(first, step, length, k0))
        if k1 + 1 < times:
            kept.append(Spans(first + (k1 + 1) * step, step, length, times - k1 - 1))
        start, end = first + k0 * step, first + k1 * step + length
        if lo > start:
            parts.append((start, lo))
        if end > hi:
            parts.append((hi, end))
        return kept, parts

    def listed(self) -> list[tuple[float, float]]:
        """Every interval as (start, end) (s)."""
        first, step, length = self.first, self.step, self.length
        return [(first + k * step, first + k * step + length) for k in range(self.times)]


class Intervals:
    """Single intervals (``singles``: start, end, s) and progressions of them (``spans``), with
    the earliest start ``lo``, the latest end ``hi`` and the seconds of them all, ``total``."""

    __slots__ = ("hi", "lo", "singles", "spans", "total")

    def __init__(self, singles: list[tuple[float, float]], spans: list[Spans] | None = None) -> None:
        if spans:
            alone = [(span.first, span.first + span.length) for span in spans if span.times == 1]
            self.singles = singles + alone if alone else singles
            self.spans = [span for span in spans if span.times > 1]
        else:
            self.singles, self.spans = singles, []
        lo, hi, total = math.inf, -math.inf, 0.0
        for start, end in self.singles:
            lo, hi, total = min(lo, start), max(hi, end), total + (end - start)
        for span in self.spans:
            lo, hi, total = min(lo, span.first), max(hi, span.last), total + span.times * span.length
        self.lo, self.hi, self.total = lo, hi, total

    def later(self, seconds: float) -> Intervals:
        """Every interval starting ``seconds`` later and as much shorter (a flow moves after its
        task's delay)."""
        if not seconds:
            return self
        return Intervals([(start + seconds, end) for start, end in self.singles],
                         [Spans(s.first + seconds, s.step, s.length - seconds, s.times) for s in self.spans])

    def covered(self, lo: float, hi: float) -> float:
        """Seconds of the intervals inside ``[lo, hi]``."""
        seconds = sum((min(e, hi) - max(s, lo) for s, e in self.singles if s < hi and e > lo), 0.0)
        return seconds + sum((span.covered(lo, hi) for span in self.spans), 0.0)

    def per_window(self, windows: list[Window], least: float = 0.0) -> list[tuple[str, float]]:
        """Seconds of the intervals in each phase window (those over ``least`` s)."""
        lo, hi = self.lo, self.hi
        out = []
        for begin, end, phase in windows:
            if begin >= hi or end <= lo:
                continue
            seconds = self.total if begin <= lo and hi <= end else self.covered(begin, end)
            if seconds > least:
                out.append((phase, seconds))
        return out

    def listed(self) -> list[tuple[float, float]]:
        """Every interval as (start, end) (s)."""
        return self.singles + [interval for span in self.spans for interval in span.listed()]


def union(parts: Iterable[Intervals]) -> Intervals:
    """Disjoint intervals (at most touching) covering what ``parts`` cover.

    A progression whose intervals reach each other is one stretch. Progressions of as many
    intervals at one step (to float residue: a chain of copies, one per iteration) repeat one
    pattern, the union of their first intervals: while it fits in one step, its pieces are
    progressions at that step again, kept as such unless a single interval overlaps them (then
    they are listed, and merged with the rest)."""
    singles, periodic = _joined(parts)
    blocks: list[tuple[float, float, list[Spans]]] = []
    for members in _alike(periodic):
        block = _pattern_block(members, singles)
        if block is not None:
            blocks.append(block)
    singles = merged(singles)
    listed: list[tuple[float, float]] = []
    crossed: list[Spans] = []
    spans: list[Spans] = []
    for lo, hi, pieces in blocks:
        tol = _TOUCH * max(abs(lo), abs(hi))  # touching, to float residue, is not crossing
        if any(lo < b_hi - tol and hi > b_lo + tol for b_lo, b_hi, other in blocks if other is not pieces):
            crossed += pieces  # listed, but merged term by term (``merged_with``)
            continue
        spans += _outside_singles(pieces, lo, hi, tol, singles, listed)
    if listed:
        singles = merged(singles + listed)
    return Intervals(merged_with(singles, crossed) if crossed else singles, spans)


def _joined(parts: Iterable[Intervals]) -> tuple[list[tuple[float, float]], list[Spans]]:
    """The single intervals of ``parts`` (a progression whose intervals reach each other is one)
    and their other progressions (of intervals longer than none)."""
    singles: list[tuple[float, float]] = []
    periodic: list[Spans] = []
    for part in parts:
        singles += part.singles
        for span in part.spans:
            if span.length <= 0:
                continue
            if span.joined():
                singles.append((span.first, span.last))
            else:
                periodic.append(span)
    return singles, periodic


def _pattern_block(members: list[Spans], singles: list[tuple[float, float]]) -> tuple[float, float, list[Spans]] | None:
    """Progressions of as many intervals at one step: while the union of their first intervals
    fits in one step, its pieces at that step (those that reach each other join ``singles``),
    as (from, to, the pieces left) or None; else all their intervals join ``singles``."""
    count, step = members[0].times, members[0].step
    pattern = merged([(s.first, s.first + s.length) for s in members])
    lo, hi = pattern[0][0], pattern[-1][1]
    if hi - lo > step * (1 + _TOUCH):
        singles += [interval for member in members for interval in member.listed()]
        return None
    pieces = [Spans(a, step, b - a, count) for a, b in pattern]
    joined = [(p.first, p.last) for p in pieces if p.joined()]
    singles += joined
    if len(joined) == len(pieces):
        return None
    return (lo, hi + (count - 1) * step, [p for p in pieces if not p.joined()])


def _outside_singles(pieces: list[Spans], lo: float, hi: float, tol: float, singles: list[tuple[float, float]],
                     listed: list[tuple[float, float]]) -> list[Spans]:
    """A block's progressions (from ``lo`` to ``hi``, s) without what a single interval covers
    (that is its own): the parts it cuts join ``listed``."""
    for start, end in singles:  # in order
        if start >= hi - tol:
            break
        if end > lo + tol:
            left: list[Spans] = []
            for piece in pieces:
                if end <= piece.first or start >= piece.last:  # ``minus`` would keep it whole
                    left.append(piece)
                    continue
                kept, cut = piece.minus(start, end)
                left += kept
                listed += cut
            pieces = left
    return pieces


def _alike(periodic: list[Spans]) -> list[list[Spans]]:
    """Progressions grouped by count and step (equal to float residue)."""
    groups: list[list[Spans]] = []
    for span in _by_count_step(periodic):
        last = groups[-1][0] if groups else None
        if last is not None and last.times == span.times and span.step - last.step <= 16 * _TOUCH * span.step:
            groups[-1].append(span)
        else:
            groups.append([span])
    return groups


def _by_count_step(periodic: list[Spans]) -> list[Spans]:
    """Progressions in order of count, then step, those alike as they came (``sorted`` by
    insertion: a sort key compiled is a call through Python; a union holds a few)."""
    ordered = periodic[:]
    for k in range(1, len(ordered)):
        item, j = ordered[k], k
        while j > 0 and (ordered[j - 1].times > item.times or (
                ordered[j - 1].times == item.times and ordered[j - 1].step > item.step)):
            ordered[j] = ordered[j - 1]
            j -= 1
        ordered[j] = item
    return ordered


def merged(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals (s) joined where they overlap or touch, in order."""
    out: list[tuple[float, float]] = []
    if not intervals:
        return out
    ordered = sorted(intervals, key=_START) if len(intervals) > _FEW else _by_start(intervals)
    lo, hi = ordered[0]
    for k in range(1, len(ordered)):
        start, end = ordered[k]
        if start > hi:
            out.append((lo, hi))
            lo, hi = start, end
        elif end > hi:
            hi = end
    out.append((lo, hi))
    return out


def _by_start(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A few intervals in order of their starts, those of equal starts as they came (``sorted``,
    by insertion)."""
    ordered = list(intervals)
    for k in range(1, len(ordered)):
        item, j = ordered[k], k
        while j > 0 and ordered[j - 1][0] > item[0]:
            ordered[j] = ordered[j - 1]
            j -= 1
        ordered[j] = item
    return ordered


class _Terms:
    """A progression's intervals met in order (``merged_with``): the next one's start ``head``
    (s; inf past the last) and how many were taken, in a native object (no float boxed)."""

    __slots__ = ("head", "span", "taken")

    def __init__(self, span: Spans) -> None:
        self.span = span
        self.taken = 0
        self.head = span.first if span.times > 0 else math.inf

    def take(self) -> float:
        """The end of the next interval (s, as ``Spans.listed`` has it), then move on."""
        span = self.span
        end = self.head + span.length
        self.taken += 1
        self.head = span.first + self.taken * span.step if self.taken < span.times else math.inf
        return end


def merged_with(ordered: list[tuple[float, float]], spans: list[Spans]) -> list[tuple[float, float]]:
    """``merged`` of the disjoint, ordered intervals ``ordered`` and every interval of the
    progressions ``spans`` (s), their intervals met in order without listing them: at each
    turn the earliest start not yet taken."""
    out: list[tuple[float, float]] = []
    terms = [_Terms(span) for span in spans]
    i, lo, hi, begun = 0, 0.0, 0.0, False
    while True:
        start, end = math.inf, 0.0
        which: _Terms | None = None
        if i < len(ordered):
            start, end = ordered[i]
        for term in terms:
            if term.head < start:
                start, which = term.head, term
        if which is not None:
            end = which.take()
        elif i < len(ordered):
            i += 1
        else:
            break
        if not begun or start > hi:
            if begun:
                out.append((lo, hi))
            lo, hi, begun = start, end, True
        elif end > hi:
            hi = end
    if begun:
        out.append((lo, hi))
    return out
