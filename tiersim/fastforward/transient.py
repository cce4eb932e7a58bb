"""Geometric transients: a loop's state that settles by one ratio per period.

Some loops never reach a state that repeats to float residue within a few iterations, yet
settle: a copy lagging the compute by an amount that shrinks by the same factor every layer
(two copies sharing a link converge to their periodic overlap that way). While the order of
events within a period stays the same, a period maps the state's values (seconds to go, bytes
left) affinely to the next, and where the state's departure from its limit lies along one
direction each value after period k is ``v* + g r^k`` and each running total (the clock, busy
seconds, bytes moved) ``a + b k + g r^k``, for one ratio ``r`` shared by all. Four consecutive
states show it (every value's successive differences shrink by ``r``, twice); ``advanced``
then gives each value and total ``n`` periods on, which is what simulating those periods
gives. ``FastForwardSession`` checks the result on the period it simulates after
(``GeometricSkipMissed`` if it disagrees). Times are s, sizes bytes.
"""

from __future__ import annotations

from typing import Final

RATIO_MAX: Final = 0.9
"""Largest ratio taken: a slower transient magnifies an error in the ratio by 1/(1-r)^2."""
RATIO_TOL: Final = 1e-6
"""How closely (relative) each successive difference must be the ratio times the one before."""
NOISE: Final = 1e-13
"""Float residue of a value, relative to its magnitude (at least 1): differences below a
million times it show no trend."""


class GeometricSkipMissed(Exception):
    """A loop skipped over a geometric transient did not land where the closed form said: its
    periods were not all alike (the caller simulates the run again without such skips)."""


def common_ratio(series: list[list[float]], totals: list[bool]) -> float | None:
    """The ratio by which every one of ``series`` (each a value at four consecutive period
    boundaries; for a running total, ``totals``, its increments) departs less from its limit
    per period, or None when they do not all settle by one ratio in (0, ``RATIO_MAX``]."""
    differences: list[tuple[list[float], float]] = []
    best, signal = -1, 0.0
    for values, total in zip(series, totals):
        noise = NOISE * max(1.0, abs(values[0]), abs(values[-1]))
        steps = [values[1] - values[0], values[2] - values[1], values[3] - values[2]]
        if total:
            steps = [steps[1] - steps[0], steps[2] - steps[1]]
            noise *= 2
        differences.append((steps, noise))
        if abs(steps[-2]) > signal * noise:
            best, signal = len(differences) - 1, abs(steps[-2]) / noise
    if best < 0 or signal < 1e6:
        return None
    steps, _noise = differences[best]
    ratio = steps[-1] / steps[-2]
    if not 0.0 < ratio <= RATIO_MAX:
        return None
    for steps, noise in differences:
        for j in range(len(steps) - 1):
            if abs(steps[j + 1] - ratio * steps[j]) > RATIO_TOL * max(abs(steps[j]), abs(steps[j + 1])) + 2 * noise:
                return None
    return ratio


def advanced(earlier: float, before: float, now: float, periods: int, ratio: float, total: bool) -> float:
    """What a value (or a running total, ``total``) that was ``earlier``, ``before`` and ``now``
    at three consecutive period boundaries adds over the next ``periods`` periods, settling by
    ``ratio`` (0: it repeats exactly, and ``earlier`` is not read)."""
    step = now - before
    if ratio == 0.0:
        return periods * step if total else 0.0
    if total:
        gap = (step - (before - earlier)) * ratio * ratio / ((ratio - 1.0) ** 2)
        rate = step - gap * (ratio - 1.0) / ratio
        return periods * rate + gap * (ratio ** periods - 1.0)
    return step * ratio / (ratio - 1.0) * (ratio ** periods - 1.0)
