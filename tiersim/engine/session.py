"""Build a task graph while it runs, and skip the stretches that repeat.

A schedule is a program: it adds tasks in order, with loops over layers, micro-steps and
sub-groups. A loop written ``for i in session.repeat(runs)`` tells the session which of its
iterations are alike (``runs``: consecutive iterations with equal keys add the same tasks, with
the same sizes, streams and dependencies relative to the iteration, or tasks the schedule shows
to give the same results, as ``tiersim.strategies.base.micro_runs`` does for gradient copies
that differ only in order). With fast-forward on, the session runs the graph as it is built:
before it lets the loop add iteration ``i`` it runs the engine until iteration ``i-1``'s first
task has started, and there takes the state of the run relative to that moment and that
iteration (every task joined and not done: which iteration of the loop and which of its tasks
it is, whether it waits, how much of its delay is left, or its flow's rate, bytes left and
finish; the network's pending timers; the phase). When two consecutive such states of
iterations in one run are equal (to float residue), every later iteration of the run repeats
the last period exactly, shifted in time and index: the session adds the period's increase of
every time integral (``Accounts``) and link counter once per skipped iteration, moves every
pending time by the skipped periods and goes on after the run's last iteration, which the
loop's lists (read by relative index) now stand for. Nothing else changes, so results are the
full simulation's. A loop whose iterations wait for earlier ones only through their streams
(``self_contained``) also takes the state at a run's first block, after an iteration of another
key or, for its first run, where the loop begins (the tasks pending from before it in the roles
of an iteration's last ones), and matches its tasks to the next state's by their roles (what
each does and waits for), so such a run skips one block sooner. Where four consecutive states
hold the same tasks doing the same things and their times and bytes settle by one ratio per
period (copies that share a link and lag the compute by an amount that shrinks geometrically,
``tiersim.engine.transient``), all but the run's last block are skipped in closed form: the
pending tasks, timers and time integrals are set where the periods would have brought them, and
the last block, simulated, must land where the closed form says (``Unsettled``: the caller runs
again without such skips). Where a state never repeats or settles, every iteration is
simulated; where the lazily built graph would start a task late (``LateTask``), the caller
builds the graph whole.

A schedule may also ``defer`` the tasks of some streams for a stretch (copies that fall
behind the compute at fixed rates, ``tiersim.engine.deferred``): they leave the event run and
its states; a loop holding any is skipped with copies of its last iteration's deferred tasks
standing for the skipped ones (``_deferred_images``; most are timed by the same recursion
without being built, ``Run.images``, and once they rise by one step per iteration kept as
arithmetic progressions). Once every deferred task has ended and no stream defers, a state
``settle``s them first, so their time integrals count in its totals: a loop whose deferred tasks
all end within each iteration (a micro-step's copies, which the next forward waits for) then
repeats as one without any. Should ``settle`` find that a deferred flow could have been slowed
(``NotQuiet``), the caller runs the schedule again without deferring.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from tiersim.engine.deferred import NotQuiet, settle
from tiersim.engine.graph import Task, TaskGraph
from tiersim.engine.runner import EngineRun, LateTask, Run, run_graph
from tiersim.engine.spans import Spans
from tiersim.engine.transient import Unsettled, advanced, common_ratio
from tiersim.errors import ModelError

STATE_BUDGET = 64
"""Pending tasks a loop's states may read per task it has built (plus ``STATE_BUDGET_BASE``):
a loop whose large states keep failing to repeat (a queue that grows) then simulates on
without taking them, so its cost stays linear in its tasks."""
STATE_BUDGET_BASE = 4096
SPECULATIVE_PENDING = 32
"""A state of at most this many pending tasks is taken at a boundary even when it cannot
repeat the one before (its signature differs): the next one may repeat it, a loop then skips
an iteration sooner, and reading it costs less than simulating that iteration. Larger ones
(a queue that grows) are taken only when their signature repeats."""

LoopRun = tuple[Hashable, int] | tuple[Hashable, int, int]
"""(key, count) or (key, count, width): ``count`` consecutive blocks of ``width`` iterations
(1 when not given) whose keys are alike, block for block."""
Runs = Sequence[LoopRun]
"""A loop's iterations as runs of alike blocks."""

MAX_PERIOD = 8
"""Longest block of iterations ``runs_of`` looks for a repeating pattern in."""

_TIME_TOL = 1e-11
"""Seconds of float residue per second of simulated time two states may differ by."""
_REL_TOL = 1e-9
"""Relative difference two rates or byte counts may differ by (a transient that settles
geometrically reaches it within a few iterations; the skipped remainder of it moves the
results by far less than that, relative to the run)."""


class TaskLimit(Exception):
    """A schedule built more tasks than its session allows (``Session.max_tasks``)."""

    def __init__(self, tasks: int) -> None:
        super().__init__(f"{tasks} tasks built")
        self.tasks = tasks


@functools.lru_cache(maxsize=256)
def runs_of(keys: tuple[Hashable, ...], warmup: int = 0) -> tuple[tuple[Hashable, int, int], ...]:
    """``keys`` as runs of blocks: the first ``warmup`` iterations are each their own (a loop
    whose first iterations are built otherwise, e.g. the first waits for a task before the
    loop instead of the iteration before; one that only waits for fewer, ``reach_back``, need not);
    after them, equal keys in a row are one run of one-iteration blocks, and a pattern of up
    to ``MAX_PERIOD`` keys repeated three times or more (a layer's tensors split into
    sub-groups of a few sizes, in turn) is one run of blocks of that width, the longest
    stretch found first."""
    out: list[tuple[Hashable, int, int]] = [(("warmup", i, key), 1, 1) for i, key in enumerate(keys[:warmup])]
    i = len(out)
    while i < len(keys):
        count, width = _repeats(keys, i, 1), 1
        for period in range(2, MAX_PERIOD + 1):
            blocks = _repeats(keys, i, period)
            if blocks >= 3 and blocks * period > count * width:
                count, width = blocks, period
        out.append(((keys[i] if width == 1 else ("period", keys[i:i + width])), count, width))
        i += count * width
    return tuple(out)


def reach_back(tasks: Sequence[str], back: int) -> list[str]:
    """The task ``back`` iterations before the one being built, from a loop's list of one task
    per built iteration (read from its end), as dependencies: none when the list is shorter.
    That iteration is then before the loop's first, or it was fast-forwarded over and every
    task of it is done (a state that repeats holds every pending task of the loop, all of
    built iterations). So a loop's first iterations may share the key of the later ones that
    do wait: two equal states (same pending tasks, each with as many unmet dependencies) show
    that what the later ones wait for that way is done, and waiting for it changes nothing."""
    return [tasks[-back]] if len(tasks) >= back else []


def _repeats(keys: tuple[Hashable, ...], start: int, width: int) -> int:
    """How many times ``keys[start:start + width]`` repeats in a row from ``start``."""
    block = keys[start:start + width]
    if len(block) < width:
        return 0
    count = 1
    while keys[start + count * width:start + (count + 1) * width] == block:
        count += 1
    return count


@dataclass
class _Loop:
    """The iterations of one ``repeat`` built so far: position of each one's first task, its
    index (moved on by a fast-forward) and key."""

    first: list[int] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    key: list[Hashable] = field(default_factory=list)
    state_cost: int = 0
    """Pending tasks the states taken so far have read."""
    signature: tuple[int, int, int, str | None] | None = None
    """At the last boundary: tasks pending, the oldest of them (its position, or its distance
    from the iteration's first task), timers armed and the phase; a state can only repeat
    one of equal signature."""
    timers: list[float] = field(default_factory=list)
    """At the last boundary: seconds to each pending timer, in order; a state can only repeat
    one whose timers are as far off (a queue that drains or grows moves them: comparing them
    first spares reading every pending task)."""
    expected: _State | None = None
    """After a skip over a geometric transient: the state the next boundary must show."""


@dataclass
class _State:
    """A run's state at an iteration boundary (see the module docstring), with the counters
    a fast-forward advances."""

    now: float
    tasks: list[tuple[tuple[Hashable, ...], tuple[float, ...]]]
    """Each pending task: who it is, and what it does: (0, unmet dependencies, stream free)
    waiting, (1, seconds left) in its delay, or (2, rate, bytes left, seconds to its finish,
    seconds since it started) flowing."""
    timers: list[float]
    phase: str | None
    totals: dict[str, dict]
    roles: list[Hashable] | None = None
    """For a state at the first block of a run (a loop of self-contained iterations): each
    pending task's role (``Session._roles``), in the order of ``tasks``."""

    def alike(self, before: _State) -> bool:
        """Whether this state holds the tasks ``before`` does, each doing what it did (waiting
        alike, in its delay, or flowing at the same rate), as many timers and the phase: what a
        state one period on shares whatever its times. Tasks of iterations of different keys
        are the same when their roles are."""
        return self._compare(before) >= 1

    def repeats(self, before: _State) -> bool:
        """Whether this state is ``before`` one period on (alike, and the same times to go)."""
        return self._compare(before) == 2

    def _compare(self, before: _State) -> int:
        """0: not ``alike``; 1: alike; 2: alike with the same seconds and bytes to go (to float
        residue), in one pass."""
        if self.phase != before.phase or len(self.tasks) != len(before.tasks) or len(self.timers) != len(
                before.timers):
            return 0
        time_tol = _TIME_TOL * max(1.0, self.now)
        same = True
        for k, ((who, what), (was, had)) in enumerate(zip(self.tasks, before.tasks)):
            if who != was and (self.roles is None or before.roles is None or self.roles[k] != before.roles[k]):
                return 0
            kind = what[0]
            if kind != had[0]:
                return 0
            if kind == 0:  # waiting: unmet dependencies, stream free
                if what != had:
                    return 0
            elif kind == 1:  # in its delay: seconds left
                same = same and abs(what[1] - had[1]) <= time_tol
            else:  # flowing: the same rate; bytes left, seconds to its finish
                if not math.isclose(what[1], had[1], rel_tol=_REL_TOL):
                    return 0
                same = same and abs(what[2] - had[2]) <= _REL_TOL * max(what[2], had[2]) + 1e-6 and abs(
                    what[3] - had[3]) <= time_tol
        return 2 if same and _close(self.timers, before.timers, time_tol) else 1

    def values(self) -> list[float]:
        """The times and bytes a period moves on: the clock, each delay's seconds left, each
        flow's bytes left, seconds to its finish and since its start, and the seconds to each
        timer."""
        out = [self.now]
        for _who, what in self.tasks:
            if what[0] == 1:
                out.append(what[1])
            elif what[0] == 2:
                out.extend(what[2:])
        out.extend(self.timers)
        return out


def _extrapolated(states: list[_State], periods: int, ratio: float) -> _State:
    """The state ``periods`` periods after the last of ``states`` (consecutive, settling by
    ``ratio``: ``tiersim.engine.transient``): its clock, seconds and bytes to go, and timers
    (not its totals: the skip moves those)."""
    earlier, before, state = states[-3], states[-2], states[-1]
    tasks = []
    for (who, what), (_w, was), (_v, had) in zip(state.tasks, before.tasks, earlier.tasks):
        if what[0] == 1:
            what = (1, what[1] + advanced(had[1], was[1], what[1], periods, ratio, False))
        elif what[0] == 2:
            what = (2, what[1], *(what[j] + advanced(had[j], was[j], what[j], periods, ratio, False)
                                  for j in range(2, len(what))))
        tasks.append((who, what))
    timers = [t + advanced(e, b, t, periods, ratio, False)
              for e, b, t in zip(earlier.timers, before.timers, state.timers)]
    now = state.now + advanced(earlier.now, before.now, state.now, periods, ratio, True)
    return _State(now, tasks, timers, state.phase, {}, state.roles)


def _time(entry: tuple[float, int, int, object]) -> float:
    """An event queue entry's time (s)."""
    return entry[0]


def _close(times: list[float], other: list[float], tol: float) -> bool:
    """Whether two equally long lists of seconds agree to ``tol`` each."""
    return all(abs(a - b) <= tol for a, b in zip(times, other))


class Session:
    """A task graph under construction and, with ``fast_forward``, its run in progress."""

    def __init__(self, capacity_of: Callable[[str], float], fast_forward: bool = True,
                 max_tasks: int | None = None, geometric: bool = True, deferring: bool = True) -> None:
        self.graph = TaskGraph(capacity_of=capacity_of)
        self.max_tasks = max_tasks
        """Tasks the session may build (``TaskLimit`` past it), or None."""
        self.fast_forward = fast_forward
        self.geometric = geometric
        """Whether a fast-forward may skip over transients that settle geometrically."""
        self.deferring = deferring
        """Whether a fast-forward defers the tasks a schedule asks it to (``defer``)."""
        self.run = Run(self.graph) if fast_forward else None
        self.skipped = 0
        """Loop iterations fast-forwarded over."""
        self.skips: list[tuple[float, float, frozenset[str]]] = []
        """The spans fast-forwarded over (s) and the links the skipped event tasks use."""

    def add(self, task: Task) -> str:
        """Add a task and return its name."""
        return self.graph.add(task)

    def defer(self, streams: frozenset[str]) -> None:
        """Add the tasks of ``streams`` as deferred from now on (``tiersim.engine.deferred``;
        an empty set ends it). Only with fast-forward and ``deferring``: a full simulation runs
        every task."""
        if self.run is not None and self.deferring:
            self.graph.deferring = streams
            if streams and self.run.network.pieces is None:
                # what the event run's flows do on a deferred flow's links (``settle``)
                self.run.network.pieces = []
                self.run.network.pieces_since = self.run.env.now

    def repeat(self, runs: Runs, self_contained: bool = False) -> Iterator[int]:
        """The indices of a loop's iterations (0, 1, ...), as many as ``runs`` counts; with
        fast-forward, those past a repeating state within a run are skipped.

        ``self_contained``: an iteration's tasks wait for those of earlier iterations only
        through their streams (each stream's next task follows its last). Then what follows a
        state depends only on its pending tasks and the iterations to come, whatever iteration
        added them, so the state at a run's first block (after a block of another key, or
        where the loop begins: ``_start``) may be the one the next repeats: tasks of different
        keys, or from before the loop, count as the same when their roles are (``_roles``),
        and the run skips one block sooner."""
        blocks = [(run[0], run[1], run[2] if len(run) == 3 else 1) for run in runs]
        if self.run is None:
            for i in range(sum(count * width for _key, count, width in blocks)):
                self._check_size()
                yield i
            return
        loop = _Loop()
        index = 0
        for key, count, width in blocks:
            history: list[_State] = []
            """The states at this run's last blocks, consecutive (the latest last)."""
            block = 0
            while block < count:
                if loop.first:  # a state at each block's start, relative to the block before
                    checking = loop.expected is not None
                    state = self._boundary(loop, checking or block >= 1 or (self_contained and count > 1), checking)
                    if state is not None and self_contained and block <= 1:  # may meet a block of another key
                        state.roles = self._roles(loop)
                    if checking:
                        self._check(loop, state)
                    if state is not None and history:
                        # deferred tasks in the loop not yet in the counters
                        holds = self.graph.last_deferred >= max(loop.first[0], self.run.settled)
                        if state.repeats(history[-1]):
                            references = self._image_references(loop, width, count - block) if holds else None
                            if not holds or references is not None:
                                self._skip(loop, [history[-1], state], count - block, width, references, 0.0)
                                break
                        elif len(history) >= 3 and count - block >= 2 and not holds and self.geometric:
                            states = [*history[-3:], state]
                            ratio = self._trend(states)
                            expected = self._settled(states, count - block, ratio) if ratio is not None else None
                            if ratio is not None and expected is not None:
                                # skip all but the run's last block, which checks the closed form
                                self._skip(loop, states, count - block - 1, width, None, ratio)
                                loop.expected = expected
                                block = count - 1
                                state = None
                    history = [*history[-2:], state] if state is not None else []
                elif self_contained and count > 1:
                    start_state = self._start(loop)
                    history = [start_state] if start_state is not None else []
                start = index + block * width
                for i in range(start, start + width):
                    self._check_size()
                    loop.first.append(len(self.graph.tasks))
                    loop.index.append(i)
                    loop.key.append(key if width == 1 else (key, i - start))
                    yield i
                block += 1
            index += count * width
        if loop.expected is not None:
            self._check(loop, self._boundary(loop, True, force=True))

    def _check(self, loop: _Loop, state: _State | None) -> None:
        """After a skip over a geometric transient, the state at the next boundary must be the
        one the closed form gave (``Unsettled`` otherwise: some skipped period was not alike)."""
        expected, loop.expected = loop.expected, None
        if expected is None:
            return
        if state is None or not state.repeats(expected) or abs(state.now - expected.now) > _TIME_TOL * max(
                1.0, state.now):
            raise Unsettled(f"a loop settled to {state and state.now} s, not {expected.now} s")

    def _trend(self, states: list[_State]) -> float | None:
        """The ratio by which four consecutive states of a run settle (``common_ratio``), or None
        where they do not, hold different tasks, or where the run holds what a skip cannot move
        that way (flows recorded for deferred ones, or event queue entries other than the
        pending tasks' delays and the network's timers)."""
        run = self.run
        if run is None or run.network.pieces is not None:
            return None
        last = states[-1]
        for state in states[:-1]:
            if not last.alike(state):
                return None
        delays = sum(1 for _who, what in last.tasks if what[0] == 1)
        timers = sum(1 for entry in run.env._queue if entry[3].value is None)
        if delays + timers != len(run.env._queue) or timers != len(run.network.armed):
            return None
        rows = [state.values() for state in states]
        series = [[row[j] for row in rows] for j in range(len(rows[0]))]
        return common_ratio(series, [True] + [False] * (len(series) - 1))

    def _settled(self, states: list[_State], periods: int, ratio: float) -> _State | None:
        """The state ``periods`` periods on from consecutive ``states`` settling by ``ratio``,
        unless it or their limit is not ``_possible``."""
        state = _extrapolated(states, periods, ratio)
        limit = _extrapolated(states, 1 << 30, ratio)  # ratio ** 2**30 is 0
        return state if self._possible(state) and self._possible(limit) else None

    def _possible(self, state: _State) -> bool:
        """Whether every pending task could be where ``state`` (this run's pending tasks, moved
        on) has it: no delay longer than the task's, no flow with more bytes left than its size
        or fewer than none, no time to go or since a start below zero. A settling state whose
        limit is not possible crosses into a different order of events on its way there."""
        run = self.run
        if run is None:
            raise ModelError("the session has no run in progress")
        tasks = self.graph.tasks
        slack = _TIME_TOL * max(1.0, state.now)  # float residue
        for p, (_who, what) in zip(run.pending, state.tasks):
            if what[0] == 1 and not -slack <= what[1] <= run.delay[p] + slack:
                return False
            if what[0] == 2 and not (-1e-6 <= what[2] <= tasks[p].size * (1 + _REL_TOL) + 1e-6 and what[3] >= -slack
                                     and what[4] >= -slack):
                return False
        return all(seconds >= -slack for seconds in state.timers)

    def _check_size(self) -> None:
        if self.max_tasks is not None and len(self.graph.tasks) > self.max_tasks:
            raise TaskLimit(len(self.graph.tasks))

    def finish(self) -> EngineRun:
        """Run what is left; the run is ``complete`` unless iterations were skipped or tasks
        deferred."""
        if self.run is None:
            return run_graph(self.graph)
        run = self.run
        run.extend()
        run.env.run()
        settle(run, self.skips)
        result = run.result()
        # a run that skipped or deferred tasks has no record of each one in order
        return replace(result, complete=False) if self.skipped or self.graph.last_deferred >= 0 else result

    def _boundary(self, loop: _Loop, with_state: bool, force: bool = False) -> _State | None:
        """Run until the first task of the loop's last iteration has started; its state then
        (None when not asked for, or when that iteration has no task or never starts; unless
        ``force``, also when it is too large to be worth reading)."""
        run = self.run
        if run is None:
            raise ModelError("the session has no run in progress")
        run.extend()
        first = loop.first[-1]
        if first >= len(self.graph.tasks):
            return None
        env, start = run.env, run.start
        queue = env._queue
        step = env.step
        while start[first] < 0 and queue:
            step()
        if start[first] < 0 or not with_state:
            return None
        if run.proxies_pending:
            return None  # timeouts a state does not describe
        oldest = next(iter(run.pending), -1)  # a task from before the loop is named by position
        head = oldest if oldest < loop.first[0] else oldest - loop.first[-1]
        now = env.now
        signature = (len(run.pending), head, len(run.network.armed), run.accounts.phase)
        timers = sorted(due - now for due in run.network.armed)
        alike = signature == loop.signature and _close(timers, loop.timers, _TIME_TOL * max(1.0, now))
        loop.signature, loop.timers = signature, timers
        if not alike and len(run.pending) > SPECULATIVE_PENDING and not force:
            return None  # cannot repeat the last state, and too large to take for the next one
        if loop.state_cost > STATE_BUDGET * (len(self.graph.tasks) - loop.first[0]) + STATE_BUDGET_BASE and not force:
            return None  # states this large never repeated: simulate on without taking them
        loop.state_cost += len(run.pending)
        return self._state(loop)

    def _start(self, loop: _Loop) -> _State | None:
        """The state where a self-contained loop begins, before it builds an iteration, with
        every pending task in the role of one that ends the iteration before the first
        (``_place``): a loop entered after what each of its iterations ends with (the micro-step
        loop, after the first forward) may then repeat it after one iteration. None where it
        holds timeouts a state does not describe or more than ``SPECULATIVE_PENDING`` tasks."""
        run = self.run
        if run is None:
            raise ModelError("the session has no run in progress")
        run.extend()
        if run.proxies_pending or len(run.pending) > SPECULATIVE_PENDING:
            return None
        now = run.env.now
        loop.signature, loop.timers = None, sorted(due - now for due in run.network.armed)
        loop.state_cost += len(run.pending)
        state = self._state(loop)
        state.roles = self._roles(loop)
        return state

    def _state(self, loop: _Loop) -> _State:
        run = self.run
        if run is None:
            raise ModelError("the session has no run in progress")
        network, accounts = run.network, run.accounts
        now = run.env.now
        accounts.flush(now, network.flows)
        network.flush_busy(now)
        if not self.graph.deferring:  # deferred tasks that have ended count in the totals
            settle(run, self.skips, now)
        flows = {flow.key: flow for flow in network.flows}
        first, index, keys = loop.first, loop.index, loop.key
        current = index[-1] if index else 0
        tasks = []
        start, unmet, at_head, delay = run.start, run.unmet, run.at_head, run.delay
        for p in run.pending:
            if first and p >= first[0]:
                it = bisect.bisect_right(first, p) - 1
                who: tuple[Hashable, ...] = (index[it] - current, p - first[it], keys[it])
            else:
                who = ("before", p)
            if start[p] < 0:
                what: tuple[float, ...] = (0, unmet[p], at_head[p])
            elif p in flows:
                flow = flows[p]
                left = max(flow.remaining - flow.rate * (now - flow.last), 0.0)
                what = (2, flow.rate, left, flow.finish_at - now, now - start[p])
            else:
                what = (1, start[p] + delay[p] - now)
            tasks.append((who, what))
        totals = {"accounts": accounts.totals(), "network": network.totals()}
        return _State(now, tasks, loop.timers, accounts.phase, totals)

    def _roles(self, loop: _Loop) -> list[Hashable]:
        """Each pending task's role, in ``run.pending`` order: what decides its part in what
        follows besides its progress. A task before the loop is itself; one of the loop is its
        iteration relative to the last, its place counted from its iteration's end (iterations
        of different keys may build different numbers of tasks before the ones still pending),
        its stream, phase, category, delay, bytes, links and rate cap, and the pending tasks it
        waits for, placed alike."""
        run, graph = self.run, self.graph
        if run is None:
            raise ModelError("the session has no run in progress")
        first = loop.first
        roles: list[Hashable] = []
        for p in run.pending:
            task = graph.tasks[p]
            waits = tuple(self._place(loop, d) for d in graph.deps[p] if d in run.pending)
            roles.append((self._place(loop, p), task.stream, task.phase, task.category, task.delay, task.size,
                          task.usage, task.rate_cap, waits) if not first or p >= first[0] else self._place(loop, p))
        return roles

    def _place(self, loop: _Loop, p: int) -> tuple[Hashable, int]:
        """Task ``p``'s iteration relative to the loop's last and its distance from that
        iteration's end, or ("before", p) for one before the loop; at the loop's start
        (``_start``, no iteration built) every task is placed as if an iteration ended there."""
        first = loop.first
        if not first:
            return (0, len(self.graph.tasks) - p)
        if p < first[0]:
            return ("before", p)
        it = bisect.bisect_right(first, p) - 1
        end = first[it + 1] if it + 1 < len(first) else len(self.graph.tasks)
        return (loop.index[it] - loop.index[-1], end - p)

    def _skip(self, loop: _Loop, states: list[_State], times: int, width: int, references: dict[int, int] | None,
              ratio: float) -> None:
        """Fast-forward ``times`` periods, each a block of ``width`` iterations, from the last
        of ``states`` (consecutive): periods alike the last one (``ratio`` 0; with the
        ``references`` of the loop's deferred tasks, if it holds any), or settling by ``ratio``
        from the last three (``tiersim.engine.transient``), the pending tasks and timers set
        to their times then."""
        run = self.run
        if run is None:
            raise ModelError("the session has no run in progress")
        network, accounts, env = run.network, run.accounts, run.env
        earlier, before, state = states[-3] if len(states) >= 3 else states[0], states[-2], states[-1]
        for name, counters in (("accounts", accounts), ("network", network)):
            counters.advance(earlier.totals[name], before.totals[name], state.totals[name], times, ratio)
        seconds = advanced(earlier.now, before.now, state.now, times, ratio, True)
        graph = self.graph
        links: frozenset[str] = frozenset()
        if network.pieces is not None:  # only a span after deferring began can meet a deferred flow
            links = frozenset(link for p in range(loop.first[0], len(graph.tasks)) if not graph.deferred[p]
                              for link, _units in (graph.tasks[p].usage if graph.flows[p] is not None else ()))
        self.skips.append((state.now, state.now + seconds, links))
        env._now += seconds
        env._queue[:] = [(at + seconds, priority, eid, event)
                         for at, priority, eid, event in env._queue]
        network.shift(seconds)
        accounts.shift(seconds)
        start, end = run.start, run.end
        for p in range(loop.first[0], len(start)):
            if start[p] >= 0:
                start[p] += seconds
            if end[p] >= 0:
                end[p] += seconds
        for p in range(loop.first[0], run.settled):  # settled deferred tasks move with their iterations
            if p in run.deferred_end:
                run.deferred_start[p] += seconds
                run.deferred_end[p] += seconds
        if ratio:
            self._retime(_extrapolated(states, times, ratio))
        if references is not None:
            self._deferred_images(loop, times, state.now - before.now, seconds, references)
        loop.index[:] = [i + times * width for i in loop.index]
        self.skipped += times * width

    def _retime(self, target: _State) -> None:
        """Give the pending tasks and the network's timers the times and bytes of ``target``
        (a state of this run's pending tasks, now): each delay's end, each flow's bytes left
        and finish, each timer."""
        run = self.run
        if run is None:
            raise ModelError("the session has no run in progress")
        env, network = run.env, run.network
        now = env._now
        flows = {flow.key: flow for flow in network.flows}
        ends: dict[int, float] = {}
        for p, (_who, what) in zip(run.pending, target.tasks):
            if what[0] == 1:
                ends[p] = now + what[1]
                run.start[p] = ends[p] - run.delay[p]
            elif what[0] == 2:
                flow = flows[p]
                flow.remaining, flow.last, flow.finish_at = what[2], now, now + what[3]
                run.start[p] = now - what[4]
                flow.attributed = flow.size - what[2]  # the bytes before now count in the skipped periods
        timers = [now + seconds for seconds in target.timers]  # in order
        queue = env._queue
        armed = sorted((entry for entry in queue if entry[3].value is None), key=_time)  # the timers, in order
        order = {id(entry[3]): k for k, entry in enumerate(armed)}
        queue[:] = [(timers[order[id(event)]] if event.value is None else ends[event.value], priority, eid, event)
                    for _at, priority, eid, event in queue]
        heapq.heapify(queue)
        network.rearm(timers)

    def _image_references(self, loop: _Loop, width: int, times: int) -> dict[int, int] | None:
        """The ``_references`` of a loop holding deferred tasks if it can be skipped ``times``
        blocks (see ``_deferred_images``), else None: one iteration per block; no event task waits
        for a deferred one; the last iteration's deferred tasks depend on deferred tasks of their
        own iteration only; and each compute-side task a deferred one waits for has ended in an
        iteration of the run at most ``times`` back."""
        run, graph = self.run, self.graph
        if run is None or width != 1:
            return None
        deferred, first = graph.deferred, loop.first
        for p in range(first[0], len(graph.tasks)):
            if deferred[p]:
                after = graph.stream_next[p]
                if (after >= 0 and not deferred[after]) or any(not deferred[j] for j in graph.dependents[p]):
                    return None
        last = first[-1]
        for p in range(last, len(graph.tasks)):
            if deferred[p] and any(first[0] <= d < last and deferred[d] for d in graph.deps[p]):
                return None
        references = self._references(loop)
        if references is None or any(len(first) - 1 - it > times for it in references.values()):
            return None
        return references

    def _references(self, loop: _Loop) -> dict[int, int] | None:
        """For each position (within an iteration) of a compute-side task that the last
        iteration's deferred tasks or a waiting one depend on: the latest iteration of the last
        one's key in which it has ended (None if there is none)."""
        run, graph = self.run, self.graph
        if run is None:
            return None
        first, keys, deferred, ends = loop.first, loop.key, graph.deferred, run.end
        last = len(first) - 1
        wanted = set()
        for p in range(first[0], len(graph.tasks)):
            if deferred[p] and (p >= first[last] or p not in run.deferred_end):  # a copy's template, or waiting
                for d in graph.deps[p]:
                    if d >= first[0] and not deferred[d]:
                        it = bisect.bisect_right(first, d) - 1
                        if keys[it] != keys[last]:
                            return None
                        wanted.add(d - first[it])
        references = {}
        for offset in wanted:
            it = last
            while it >= 0 and keys[it] == keys[last] and ends[first[it] + offset] < 0:
                it -= 1
            if it < 0 or keys[it] != keys[last]:
                return None
            references[offset] = it
        return references

    def _deferred_images(self, loop: _Loop, times: int, period: float, seconds: float,
                         references: dict[int, int]) -> None:
        """The deferred tasks of the ``times`` skipped iterations, and the real ones still
        waiting. Every real deferred task keeps its own iteration; the compute-side task at a
        position in iteration j ends, in the periodic stretch, at its reference's end plus
        (j - reference) periods (``_references``: ended before the skip, so in the stretch), and
        past the stretch it is the real task the skip moved there. So a waiting real deferred
        task takes those times for what it waits for, and each skipped iteration gets copies of
        the last iteration's deferred tasks, appended to their streams in order: timed here
        without being built while their inputs are known (``_timed_images``), the rest built."""
        run, graph = self.run, self.graph
        if run is None:
            raise ModelError("the session has no run in progress")
        first, deferred, ends = loop.first, graph.deferred, run.end
        last = len(first) - 1
        stretch = _Stretch(first, ends, references, seconds, period)

        waiting = [p for p in range(first[0], len(graph.tasks)) if deferred[p] and p not in run.deferred_end]
        for p in waiting:
            for d in graph.deps[p]:
                if d >= first[0] and not deferred[d] and ends[d] < 0:
                    it = bisect.bisect_right(first, d) - 1
                    run.unmet[p] -= 1
                    run.ready[p] = max(run.ready[p], stretch.ended(it, d - first[it]))
                    graph.dependents[d].remove(p)
        for p in waiting:
            if not run.unmet[p] and run._before(p) >= 0:
                run._resolve(p)
        template = [q for q in range(first[last], len(graph.tasks)) if deferred[q]]
        inputs = {q: self._inputs(first, q) for q in template}
        timed, tails = self._timed_images(template, inputs, times, stretch)
        for m in range(timed + 1, times + 1):
            names: dict[int, str] = {}
            for q in template:
                task = graph.tasks[q]
                deps: list[str] = []
                floor = tails[task.stream] if timed and m == timed + 1 else 0.0  # after the timed ones
                for kind, at, it in inputs[q]:
                    if kind == 0:
                        deps.append(graph.tasks[at].name)
                    elif kind == 1:
                        deps.append(names[at])
                    elif it + m <= references[at] + times:
                        floor = max(floor, stretch.ended(it + m, at))
                    else:  # the real task the skip moved to iteration it + m
                        deps.append(graph.tasks[first[it + m - times] + at].name)
                names[q] = graph.add(Task(f"{task.name}~{self.skipped + m}", task.stream, task.phase,
                                          task.category, task.delay, task.size, task.usage, task.rate_cap,
                                          tuple(deps)))
                if floor:
                    run.floor[len(graph.tasks) - 1] = floor

    def _inputs(self, first: list[int], q: int) -> list[tuple[int, int, int]]:
        """What loop task ``q``'s copies wait for, per dependency: (0, its position, 0) for a
        task before the loop, (1, its position, 0) for a deferred one of the same iteration, or
        (2, its offset in its iteration, that iteration) for a compute-side one."""
        graph = self.graph
        out = []
        for d in graph.deps[q]:
            if d < first[0]:
                out.append((0, d, 0))
            elif graph.deferred[d]:
                out.append((1, d, 0))
            else:
                it = bisect.bisect_right(first, d) - 1
                out.append((2, d - first[it], it))
        return out

    def _timed_images(self, template: list[int], inputs: dict[int, list[tuple[int, int, int]]], times: int,
                      stretch: _Stretch) -> tuple[int, dict[str, float]]:
        """Time the first skipped iterations' copies of the ``template`` deferred tasks without
        building them, as ``Run`` would (start = the latest of its stream's previous end, its
        dependencies' ends and, for a skipped compute-side one, when the ``stretch`` says it
        ends; end = start + delay + bytes / its own bound), into ``Run.images`` for ``settle``:
        each iteration whose inputs are all known, up to the last but one (that one is built:
        later tasks follow it on its streams). Returns how many were timed and each template
        stream's end after them (s)."""
        run, graph = self.run, self.graph
        if run is None:
            raise ModelError("the session has no run in progress")
        tails = {graph.tasks[q].stream: 0.0 for q in template}
        for stream in tails:
            tails[stream] = run.ended_at(graph.stream_tail(stream))
        steps = []
        for q in template:
            flow = graph.flows[q]
            steps.append(_Step(q, graph.tasks[q].stream, graph.tasks[q].delay,
                               flow[0] / flow[3] if flow is not None else 0.0, inputs[q]))
        if min(tails.values(), default=0.0) < 0 or any(
                run.ended_at(at) < 0 for step in steps for kind, at, _it in step.inputs if kind == 0):
            return 0, tails
        references = stretch.references
        last = min([times - 1] + [references[at] + times - it for step in steps
                                  for kind, at, it in step.inputs if kind == 2])
        """The last skipped iteration whose copies' inputs are all known (a compute-side one of
        iteration ``it + m`` is, up to its reference plus ``times``)."""
        timed: list[tuple[list[float], list[list[float]]]] = []
        steady = False
        for m in range(1, last + 1):
            began_at, terms, tails = _timed_copy(run, steps, stretch, m, tails)
            timed.append((began_at, terms))
            if m >= 3 and all(it + m - 2 > references[at] for step in steps
                              for kind, at, it in step.inputs if kind == 2):
                steady = _steady(timed[-3:], last - m, _TIME_TOL * max(1.0, max(began_at)))
                if steady:
                    break
        rest = last - len(timed) if steady else 0  # iterations after the listed ones, in closed form
        for k, step in enumerate(steps):
            lasting = step.delay + step.moving
            listed = [Spans(began_at[k], lasting, lasting, 1) for began_at, _terms in timed]
            if rest:
                rise = timed[-1][0][k] - timed[-2][0][k]
                listed.append(Spans(timed[-1][0][k] + rise, rise, lasting, rest))
                tails[step.stream] = listed[-1].last  # template order is each stream's order
            if listed:
                run.images[step.task] = listed
        return len(timed) + rest, tails


class _Stretch:
    """The periodic stretch a skip jumped over, for its deferred copies: a loop's iterations
    begin at their tasks' positions ``first``; the compute-side task at a position of the last
    iteration ended, before the skip, in iteration ``references[offset]`` (``Session._references``);
    the skip moved the run on ``seconds``, whole periods of ``period`` s."""

    def __init__(self, first: list[int], ends: list[float], references: dict[int, int], seconds: float,
                 period: float) -> None:
        self.first = first
        self.ends = ends
        self.references = references
        self.seconds = seconds
        self.period = period

    def ended(self, j: int, offset: int) -> float:
        """When the compute-side task at ``offset`` of iteration ``j`` ends (s), for j up to
        its reference plus the iterations skipped (the real ones' ends already moved by the skip)."""
        ref = self.references[offset]
        if j <= ref:
            return self.ends[self.first[j] + offset] - self.seconds
        return self.ends[self.first[ref] + offset] - self.seconds + (j - ref) * self.period


class _Step:
    """A deferred task of the last iteration as its copies repeat it: its position, stream,
    delay and seconds moving (s), and what it waits for (``Session._inputs``)."""

    def __init__(self, task: int, stream: str, delay: float, moving: float,
                 inputs: list[tuple[int, int, int]]) -> None:
        self.task = task
        self.stream = stream
        self.delay = delay
        self.moving = moving
        self.inputs = inputs


def _timed_copy(run: Run, steps: list[_Step], stretch: _Stretch, m: int,
                tails: dict[str, float]) -> tuple[list[float], list[list[float]], dict[str, float]]:
    """Skipped iteration ``m``'s copies' starts, in template order, what each start is the
    latest of (its stream's previous end, then its inputs' ends) and the streams' ends after
    them (s)."""
    ends: dict[int, float] = {}
    after = dict(tails)
    began_at, terms = [], []
    for step in steps:
        values = [after[step.stream]]
        for kind, at, it in step.inputs:
            values.append(run.ended_at(at) if kind == 0 else ends[at] if kind == 1 else stretch.ended(it + m, at))
        began = max(values)
        ends[step.task] = after[step.stream] = began + step.delay + step.moving
        began_at.append(began)
        terms.append(values)
    return began_at, terms, after


def _steady(timed: list[tuple[list[float], list[list[float]]]], remaining: int, tolerance: float) -> bool:
    """Whether three iterations' copies (their starts and what each is the latest of) are past
    their transient, so that every later start is the last one plus whole steps: every term
    went up by the same step twice, each start's latest term stayed the latest, and no other
    term, rising faster, could overtake it within the ``remaining`` iterations (s)."""
    (_a, before), (_b, middle), (_c, now) = timed
    for was, mid, new in zip(before, middle, now):
        winner = _latest(new)
        if _latest(mid) != winner:
            return False
        rise = new[winner] - mid[winner]
        for j, value in enumerate(new):
            step = value - mid[j]
            if abs(step - (mid[j] - was[j])) > tolerance:
                return False
            if step > rise and (step - rise) * remaining >= new[winner] - value:
                return False
    return True


def _latest(values: list[float]) -> int:
    """The position of the largest value (the first of equal ones)."""
    best = 0
    for j in range(1, len(values)):
        if values[j] > values[best]:
            best = j
    return best


def run_schedule(schedule: Callable[[Session], None], capacity_of: Callable[[str], float],
                 fast_forward: bool = True, max_tasks: int | None = None) -> tuple[EngineRun, TaskGraph]:
    """Build and run a schedule; with ``fast_forward``, lazily and skipping repeats: again
    without skips over geometric transients should one not land where it should
    (``Unsettled``), again without deferring should a deferred task not have moved at its own
    rate (``NotQuiet``: its stream then stays in the event run, whose repeats are still
    skipped), and whole (as without fast-forward) should the lazy graph start a task late.
    ``TaskLimit`` once it builds more than ``max_tasks`` tasks."""
    geometric = deferring = fast_forward
    while fast_forward:
        session = Session(capacity_of, fast_forward=True, max_tasks=max_tasks, geometric=geometric,
                          deferring=deferring)
        try:
            schedule(session)
            return session.finish(), session.graph
        except Unsettled:  # raised only by a skip over a geometric transient
            geometric = False
        except NotQuiet:  # raised only by deferred tasks
            deferring = False
        except LateTask:
            break
    session = Session(capacity_of, fast_forward=False, max_tasks=max_tasks)
    schedule(session)
    return session.finish(), session.graph
