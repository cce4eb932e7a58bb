"""A run's state at a loop's iteration boundary: what the fast-forward compares.

Each pending task is named by who it is (its iteration relative to the loop's last and its
place in it, and that iteration's key; or its position, for a task from before the loop) and
described by what it does: ``Waiting`` (unmet dependencies, whether its stream is free),
``Delaying`` (seconds of its delay left) or ``Flowing`` (rate, bytes left, seconds to its
finish and since its start). Two consecutive states of alike iterations that agree (to float
residue) show a period that repeats; four that hold the same tasks doing the same things and
whose times and bytes settle by one ratio show a geometric transient
(``tiersim.fastforward.transient``). Times are s, sizes bytes, rates bytes/s.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Final

from tiersim.fastforward.counters import CounterTotals
from tiersim.fastforward.transient import advanced

TIME_TOL: Final = 1e-11
"""Seconds of float residue per second of simulated time two states may differ by."""
REL_TOL: Final = 1e-9
"""Relative difference two rates or byte counts may differ by (a transient that settles
geometrically reaches it within a few iterations; the skipped remainder of it moves the
results by far less than that, relative to the run)."""

NOT_ALIKE: Final = 0
ALIKE: Final = 1
REPEATS: Final = 2
"""How a state compares with one before (``BoundaryState.compare``)."""


class Waiting:
    """A task not started: its dependencies not yet done and whether its stream is free."""

    __slots__ = ("at_head", "unmet")

    def __init__(self, unmet: int, at_head: bool) -> None:
        self.unmet = unmet
        self.at_head = at_head


_SHARED_UNMET: Final = 8
"""Unmet dependencies up to which ``waiting`` hands out a shared ``Waiting``."""
_WAITING: Final = [Waiting(unmet, at_head) for unmet in range(_SHARED_UNMET) for at_head in (False, True)]


def waiting(unmet: int, at_head: bool) -> Waiting:
    """A task not started, as ``Waiting`` (never changed once made): one shared for each of a few
    unmet dependencies and stream states, so that a state's waiting tasks make no objects."""
    if unmet < _SHARED_UNMET:
        return _WAITING[2 * unmet + (1 if at_head else 0)]
    return Waiting(unmet, at_head)


class Delaying:
    """A task in its delay: the seconds of it left."""

    __slots__ = ("left",)

    def __init__(self, left: float) -> None:
        self.left = left


class Flowing:
    """A task whose flow moves: its rate, bytes left, seconds to its finish and since its start."""

    __slots__ = ("left", "rate", "since_start", "to_finish")

    def __init__(self, rate: float, left: float, to_finish: float, since_start: float) -> None:
        self.rate = rate
        self.left = left
        self.to_finish = to_finish
        self.since_start = since_start


Doing = Waiting | Delaying | Flowing
"""What a pending task does at a boundary."""


class BoundaryState:
    """A run's state at an iteration boundary (see the module docstring), with the counters
    a fast-forward advances. ``roles``: for a state at the first block of a run (a loop of
    self-contained iterations), each pending task's role (``FastForwardSession._roles``), in
    the order of ``who``."""

    __slots__ = ("doing", "now", "phase", "roles", "timers", "totals", "who")

    def __init__(self, now: float, who: list[Hashable], doing: list[Doing], timers: list[float],
                 phase: str | None, totals: CounterTotals | None, roles: list[Hashable] | None = None) -> None:
        self.now = now
        self.who = who
        self.doing = doing
        self.timers = timers
        self.phase = phase
        self.totals = totals
        self.roles = roles

    def alike(self, before: BoundaryState) -> bool:
        """Whether this state holds the tasks ``before`` does, each doing what it did (waiting
        alike, in its delay, or flowing at the same rate), as many timers and the phase: what a
        state one period on shares whatever its times. Tasks of iterations of different keys
        are the same when their roles are."""
        return self.compare(before) >= ALIKE

    def repeats(self, before: BoundaryState) -> bool:
        """Whether this state is ``before`` one period on (alike, and the same times to go)."""
        return self.compare(before) == REPEATS

    def compare(self, before: BoundaryState) -> int:
        """``NOT_ALIKE``, ``ALIKE``, or ``REPEATS``: alike with the same seconds and bytes to go
        (to float residue), in one pass."""
        if self.phase != before.phase or len(self.who) != len(before.who) or len(self.timers) != len(
                before.timers):
            return NOT_ALIKE
        time_tol = TIME_TOL * max(1.0, self.now)
        same = True
        for k in range(len(self.who)):
            if not self._same_task(before, k):
                return NOT_ALIKE
            doing = _compare_doing(self.doing[k], before.doing[k], time_tol)
            if doing == NOT_ALIKE:
                return NOT_ALIKE
            same = same and doing == REPEATS
        return REPEATS if same and close(self.timers, before.timers, time_tol) else ALIKE

    def _same_task(self, before: BoundaryState, k: int) -> bool:
        """Whether the ``k``-th pending task is the one ``before`` had there: the same one, or
        one in the same role."""
        if self.who[k] == before.who[k]:
            return True
        return self.roles is not None and before.roles is not None and self.roles[k] == before.roles[k]

    def values(self) -> list[float]:
        """The times and bytes a period moves on: the clock, each delay's seconds left, each
        flow's bytes left, seconds to its finish and since its start, and the seconds to each
        timer."""
        out = [self.now]
        for what in self.doing:
            if isinstance(what, Delaying):
                out.append(what.left)
            elif isinstance(what, Flowing):
                out.extend((what.left, what.to_finish, what.since_start))
        out.extend(self.timers)
        return out


def _compare_doing(what: Doing, had: Doing, time_tol: float) -> int:
    """How one pending task compares with what it did a period before: ``NOT_ALIKE`` (doing
    something else, or flowing at another rate), ``ALIKE``, or ``REPEATS`` (the same seconds and
    bytes to go, to ``time_tol`` s and float residue)."""
    if isinstance(what, Waiting):
        if not isinstance(had, Waiting) or what.unmet != had.unmet or what.at_head != had.at_head:
            return NOT_ALIKE
        return REPEATS
    if isinstance(what, Delaying):
        if not isinstance(had, Delaying):
            return NOT_ALIKE
        return REPEATS if abs(what.left - had.left) <= time_tol else ALIKE
    if not isinstance(had, Flowing) or not math.isclose(what.rate, had.rate, rel_tol=REL_TOL):
        return NOT_ALIKE
    return REPEATS if _flow_repeats(what, had, time_tol) else ALIKE


def _flow_repeats(what: Flowing, had: Flowing, time_tol: float) -> bool:
    """Whether a flow has as many bytes left and as long to go as it had a period before."""
    return abs(what.left - had.left) <= REL_TOL * max(what.left, had.left) + 1e-6 and abs(
        what.to_finish - had.to_finish) <= time_tol


def extrapolated(states: list[BoundaryState], periods: int, ratio: float) -> BoundaryState:
    """The state ``periods`` periods after the last of ``states`` (consecutive, settling by
    ``ratio``: ``tiersim.fastforward.transient``): its clock, seconds and bytes to go, and
    timers (not its totals: the skip moves those)."""
    earlier, before, state = states[-3], states[-2], states[-1]
    doing: list[Doing] = []
    for what, was, had in zip(state.doing, before.doing, earlier.doing):
        if isinstance(what, Delaying) and isinstance(was, Delaying) and isinstance(had, Delaying):
            what = Delaying(what.left + advanced(had.left, was.left, what.left, periods, ratio, False))
        elif isinstance(what, Flowing) and isinstance(was, Flowing) and isinstance(had, Flowing):
            what = Flowing(what.rate,
                           what.left + advanced(had.left, was.left, what.left, periods, ratio, False),
                           what.to_finish + advanced(had.to_finish, was.to_finish, what.to_finish, periods, ratio,
                                                     False),
                           what.since_start + advanced(had.since_start, was.since_start, what.since_start, periods,
                                                       ratio, False))
        doing.append(what)
    timers = [t + advanced(e, b, t, periods, ratio, False)
              for e, b, t in zip(earlier.timers, before.timers, state.timers)]
    now = state.now + advanced(earlier.now, before.now, state.now, periods, ratio, True)
    return BoundaryState(now, state.who, doing, timers, state.phase, None, state.roles)


def first_pending(pending: dict[int, None]) -> int:
    """The first of a run's pending tasks (they join in order: the oldest), or -1 if none
    (``next`` compiled is a call through Python)."""
    for p in pending:
        return p
    return -1


def close(times: list[float], other: list[float], tol: float) -> bool:
    """Whether two equally long lists of seconds agree to ``tol`` each."""
    return all(abs(a - b) <= tol for a, b in zip(times, other))
