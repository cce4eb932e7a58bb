"""Geometric transients in closed form (``tiersim.fastforward.transient``): values and running totals
that settle by one ratio per period, extrapolated over any number of periods."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tiersim.fastforward.transient import RATIO_MAX, advanced, common_ratio

ratios = st.floats(0.05, 0.99 * RATIO_MAX)
gaps = st.floats(1e-3, 1e3) | st.floats(-1e3, -1e-3)


def settling(limit: float, gap: float, ratio: float, k: int) -> float:
    """A value ``gap * ratio**k`` from its ``limit`` after period ``k``."""
    return limit + gap * ratio ** k


def running(rate: float, gap: float, ratio: float, k: int) -> float:
    """A running total growing by ``rate`` per period, ``gap * ratio**k`` off its line."""
    return 5.0 + rate * k + gap * ratio ** k


@given(ratio=ratios, gap=gaps, limit=st.floats(-1e3, 1e3), rate=st.floats(1e-3, 1e3), k=st.integers(0, 6),
       periods=st.integers(1, 10**6))
def test_advanced_gives_a_value_and_a_total_any_number_of_periods_on(ratio: float, gap: float, limit: float,
                                                                      rate: float, k: int, periods: int) -> None:
    values = [settling(limit, gap, ratio, k + j) for j in range(3)]
    then = settling(limit, gap, ratio, k + 2 + periods)
    moved = advanced(values[0], values[1], values[2], periods, ratio, False)
    assert values[2] + moved == pytest.approx(then, rel=1e-9, abs=1e-9 * abs(gap))
    totals = [running(rate, gap, ratio, k + j) for j in range(3)]
    then = running(rate, gap, ratio, k + 2 + periods)
    assert totals[2] + advanced(totals[0], totals[1], totals[2], periods, ratio, True) == pytest.approx(
        then, rel=1e-9, abs=1e-9 * (abs(gap) + rate))


def test_ratio_zero_is_a_period_repeated_exactly() -> None:
    """A repeat (ratio 0): a value stays, a total adds its last step per period, bit for bit as
    ``periods * (now - before)``, and the step before is not read."""
    assert advanced(float("nan"), 1.5, 2.25, 7, 0.0, True) == 7 * (2.25 - 1.5)
    assert advanced(float("nan"), 1.5, 2.25, 7, 0.0, False) == 0.0


@given(ratio=ratios, gaps_=st.lists(gaps, min_size=1, max_size=4), rate=st.floats(1e-3, 1.0), k=st.integers(0, 4))
def test_common_ratio_is_the_ratio_every_series_settles_by(ratio: float, gaps_: list[float], rate: float,
                                                             k: int) -> None:
    assume(max(abs(gap) for gap in gaps_) * ratio ** (k + 2) > 1e-4)  # a trend well above float residue
    series = [[settling(10.0, gap, ratio, k + j) for j in range(4)] for gap in gaps_]
    series.append([running(rate, gaps_[0], ratio, k + j) for j in range(4)])
    found = common_ratio(series, [False] * len(gaps_) + [True])
    assert found == pytest.approx(ratio, rel=1e-6)


def test_common_ratio_refuses_what_does_not_settle_by_one_ratio() -> None:
    """Two ratios, a ratio above ``RATIO_MAX``, growth, oscillation and no change at all."""
    one = [settling(1.0, 0.3, 0.5, k) for k in range(4)]
    assert common_ratio([one], [False]) == pytest.approx(0.5)
    assert common_ratio([one, [settling(1.0, 0.3, 0.25, k) for k in range(4)]], [False, False]) is None
    assert common_ratio([[settling(1.0, 0.3, 0.5, k) + settling(0.0, 0.3, 0.2, k) for k in range(4)]],
                        [False]) is None
    assert common_ratio([[settling(1.0, 0.3, 0.95, k) for k in range(4)]], [False]) is None
    assert common_ratio([[settling(1.0, 0.3, 1.5, k) for k in range(4)]], [False]) is None
    assert common_ratio([[settling(1.0, 0.3, -0.5, k) for k in range(4)]], [False]) is None
    assert common_ratio([[2.0, 2.0, 2.0, 2.0], [running(1.0, 0.0, 0.5, k) for k in range(4)]],
                        [False, True]) is None
