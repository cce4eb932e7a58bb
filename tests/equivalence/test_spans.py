"""Spans in arithmetic progression (tiersim.fastforward.spans) measure what their intervals, listed one
by one, measure: seconds in a window, meeting an interval, and the union of several."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.fastforward.spans import Intervals, Spans, _by_count_step, _by_start, merged, merged_with, union


@st.composite
def progressions(draw: st.DrawFn) -> Spans:
    """A progression of 1-40 intervals, each at most as long as the step."""
    step = draw(st.floats(0.01, 5.0))
    length = draw(st.floats(0.0, 1.0)) * step
    return Spans(draw(st.floats(0.0, 50.0)), step, length, draw(st.integers(1, 40)))


def listed_covered(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)


@settings(max_examples=300, deadline=None)
@given(span=progressions(), lo=st.floats(-5.0, 250.0), width=st.floats(0.0, 100.0))
def test_seconds_in_a_window_are_those_of_the_listed_intervals(span: Spans, lo: float, width: float) -> None:
    hi = lo + width
    assert span.covered(lo, hi) == pytest.approx(listed_covered(span.listed(), lo, hi), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(progressions(), min_size=1, max_size=4),
       singles=st.lists(st.tuples(st.floats(0.0, 200.0), st.floats(0.0, 3.0)), max_size=5),
       lo=st.floats(-5.0, 250.0), width=st.floats(0.0, 300.0))
def test_a_union_covers_what_the_listed_intervals_cover_once(spans: list[Spans], singles: list[tuple[float, float]],
                                                             lo: float, width: float) -> None:
    parts = [Intervals([], [span]) for span in spans] + [Intervals([(a, a + d) for a, d in singles])]
    together = union(parts)
    listed = merged([i for part in parts for i in part.listed()])
    assert together.covered(lo, lo + width) == pytest.approx(listed_covered(listed, lo, lo + width), abs=1e-9)
    pieces = together.listed()
    assert listed_covered(pieces, -1e9, 1e9) == pytest.approx(listed_covered(listed, -1e9, 1e9), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(progressions(), max_size=4),
       singles=st.lists(st.tuples(st.floats(0.0, 200.0), st.floats(0.0, 3.0)), max_size=12))
def test_progressions_merged_term_by_term_are_their_listed_intervals_merged(spans: list[Spans],
                                                                         singles: list[tuple[float, float]]) -> None:
    """``merged_with`` meets the progressions' intervals in order without listing them, and
    gives exactly what merging them listed gives (the same floats)."""
    ordered = merged([(a, a + d) for a, d in singles])
    listed = [interval for span in spans for interval in span.listed()]
    assert merged_with(ordered, spans) == merged(ordered + listed)


@settings(max_examples=200, deadline=None)
@given(spans=st.lists(progressions(), max_size=8),
       intervals=st.lists(st.tuples(st.sampled_from([0.0, 1.0, 2.5]) | st.floats(0.0, 9.0), st.floats(0.0, 9.0)),
                          max_size=8))
def test_the_few_sorted_by_insertion_come_in_sorted_s_order(spans: list[Spans],
                                                            intervals: list[tuple[float, float]]) -> None:
    """The insertion sorts ``union`` and ``merged`` use for a few items give ``sorted``'s order,
    ties as they came."""
    assert _by_start(intervals) == sorted(intervals, key=lambda interval: interval[0])
    assert _by_count_step(spans) == sorted(spans, key=lambda span: (span.times, span.step))


def test_a_chain_of_copies_is_one_stretch_and_a_gapped_one_stays_a_progression() -> None:
    """Three copies per iteration, each starting where the one before ended, make one stretch;
    two with a gap between them stay progressions (not listed interval by interval)."""
    chain = [Spans(0.0, 3.0, 1.0, 1000), Spans(1.0, 3.0, 1.0, 1000), Spans(2.0, 3.0, 1.0, 1000)]
    together = union([Intervals([], chain)])
    assert together.singles == [(0.0, 3000.0)] and not together.spans
    gapped = union([Intervals([], [Spans(0.0, 3.0, 1.0, 1000), Spans(2.0, 3.0, 0.5, 1000)])])
    assert not gapped.singles and len(gapped.spans) == 2
    assert gapped.covered(0.0, 3000.0) == pytest.approx(1500.0)
