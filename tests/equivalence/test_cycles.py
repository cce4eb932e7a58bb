"""A link's flows cut into cycles (tiersim.fastforward.cycles) peak and measure as their
intervals listed one by one do, with as many intervals clipped whatever the progressions' count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.fastforward import cycles
from tiersim.fastforward.cycles import Load
from tiersim.fastforward.spans import Spans, merged

STEP = 0.5
Drawn = tuple[list[Load], list[Load], list[tuple[float, float]], float, list[float]]
"""What ``by_cycles`` returns."""


@st.composite
def progressions(draw: st.DrawFn, grid: bool) -> tuple[Spans, float]:
    """A progression at ``STEP`` of 1-60 intervals up to twice as long as it, and a load; on
    ``grid``, at sixteenths of a second (float arithmetic on them is exact: no ties broken by
    residue), else anywhere."""
    if grid:
        first, length = draw(st.integers(0, 320)) / 16, draw(st.integers(0, 16)) / 16
    else:
        first, length = draw(st.floats(0.0, 20.0)), draw(st.floats(0.0, 2.0)) * STEP
    return Spans(first, STEP, length, draw(st.integers(1, 60))), draw(st.floats(0.1, 3.0))


def singles(grid: bool) -> st.SearchStrategy[list[tuple[float, float, float]]]:
    """Up to five intervals (from, seconds, load), on ``grid`` at sixteenths of a second."""
    times = (st.integers(0, 960).map(lambda n: n / 16), st.integers(0, 80).map(lambda n: n / 16)) if grid else (
        st.floats(0.0, 60.0), st.floats(0.0, 5.0))
    return st.lists(st.tuples(*times, st.floats(0.1, 3.0)), max_size=5)


def listed(spans: list[tuple[Spans, float]], loads: list[tuple[float, float, float]]) -> list[Load]:
    return [(a, a + d, load) for a, d, load in loads] + [(a, b, load) for span, load in spans for a, b in span.listed()]


def peak(ours: list[Load], theirs: list[Load]) -> float:
    """The largest load at a moment one of ``ours`` is on (just after each start)."""
    flows = ours + theirs
    best = 0.0
    for t in [a for a, b, _load in flows if b > a]:
        if any(a <= t < b for a, b, _load in ours):
            best = max(best, sum(load for a, b, load in flows if a <= t < b))
    return best


def free(ours: list[Load], theirs: list[Load], lo: float, hi: float) -> float:
    """Seconds in ``[lo, hi]`` with one of ``ours`` on and none of ``theirs``."""
    on = merged([(max(a, lo), min(b, hi)) for a, b, _load in ours if a < hi and b > lo])
    off = merged([(a, b) for a, b, _load in theirs])
    total = sum(b - a for a, b in on)
    for a, b in on:
        total -= sum(max(0.0, min(b, d) - max(a, c)) for c, d in off)
    return total


def by_cycles(ours: list[tuple[Spans, float]], our_singles: list[tuple[float, float, float]],
              theirs: list[tuple[Spans, float]], their_singles: list[tuple[float, float, float]],
              bounds: list[float]) -> Drawn:
    """The flows listed (ours, theirs), the windows ``bounds`` cut the stretch of ours into, and
    the peak and per window seconds alone found by cycles."""
    mine, others = listed(ours, our_singles), listed(theirs, their_singles)
    lo, hi = min(a for a, _b, _load in mine), max(b for _a, b, _load in mine)
    cuts = sorted({lo, hi, *(t for t in bounds if lo < t < hi)})
    windows = list(zip(cuts, cuts[1:])) or [(lo, hi)]
    edges = [t for a, b, _load in mine[:len(our_singles)] + others[:len(their_singles)] for t in (a, b)] + cuts
    cut = cycles.pieces(lo, hi, STEP, ours[0][0].first, edges, [span for span, _load in ours + theirs])
    on = cycles.clipped(cut, mine[:len(our_singles)], ours)
    off = cycles.clipped(cut, others[:len(their_singles)], theirs)
    found = peak([f for piece in on for f in piece], [f for piece in off for f in piece])
    return mine, others, windows, found, cycles.alone(cut, on, off, windows)


@st.composite
def drawn_by_cycles(draw: st.DrawFn, grid: bool) -> Drawn:
    """``by_cycles`` of up to three progressions and five single flows each side and up to three
    window bounds, on ``grid`` at sixteenths of a second (else anywhere)."""
    bounds = st.integers(0, 1100).map(lambda n: n / 16) if grid else st.floats(0.0, 70.0)
    return by_cycles(draw(st.lists(progressions(grid), min_size=1, max_size=3)), draw(singles(grid)),
                     draw(st.lists(progressions(grid), max_size=3)), draw(singles(grid)),
                     draw(st.lists(bounds, max_size=3)))


@settings(max_examples=300, deadline=None)
@given(drawn=drawn_by_cycles(True))
def test_cycles_peak_as_the_listed_intervals(drawn: Drawn) -> None:
    mine, others, _windows, found, _seconds = drawn
    assert found == pytest.approx(peak(mine, others), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(drawn=drawn_by_cycles(False))
def test_cycles_measure_as_the_listed_intervals(drawn: Drawn) -> None:
    mine, others, windows, _found, seconds = drawn
    for (begin, end), alone in zip(windows, seconds):
        assert alone == pytest.approx(free(mine, others, begin, end), abs=1e-7)


def test_a_thousand_periods_clip_as_many_intervals_as_ten() -> None:
    """Copies of one period's two flows over many periods, and copies deferred at the same step
    beside them (each alone 0.15 s of its 0.2: from 1.1 to 1.25 s after the first flow and
    before the next period's): the cycles clipped are those near the ends, whatever the
    periods' count."""
    clipped = {}
    for times in (10, 1000):
        theirs = [(Spans(1.0, 0.5, 0.1, times), 2.0), (Spans(1.3, 0.5, 0.3, times), 1.0)]
        ours = [(Spans(1.05, 0.5, 0.2, times - 2), 1.5)]
        lo, hi = 1.05, ours[0][0].last
        cut = cycles.pieces(lo, hi, 0.5, 1.0, [], [span for span, _load in ours + theirs])
        on, off = cycles.clipped(cut, [], ours), cycles.clipped(cut, [], theirs)
        assert cycles.alone(cut, on, off, [(0.0, 1e4)])[0] == pytest.approx((times - 2) * 0.15, rel=1e-9)
        clipped[times] = sum(len(piece) for piece in on + off)
    assert clipped[10] == clipped[1000]
