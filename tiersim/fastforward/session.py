"""The accelerated session: it runs the graph while the schedule builds it, and skips the
stretches that repeat.

Before a loop (``Session.loop``) adds iteration ``i`` the session runs the engine until
iteration ``i-1``'s first task has started, and there takes the run's ``BoundaryState``
relative to that moment and that iteration (``tiersim.fastforward.state``). When two
consecutive such states of iterations in one run of alike blocks (``tiersim.fastforward.loops``)
are equal (to float residue), every later iteration of the run repeats the last period exactly,
shifted in time and index: the session adds the period's increase of every time integral once
per skipped iteration (``tiersim.fastforward.counters``), moves every pending time by the
skipped periods (``tiersim.fastforward.shift``) and goes on after the run's last iteration,
which the loop's lists (read from their ends) now stand for. Nothing else changes, so results
are the full simulation's. A loop whose iterations wait for earlier ones only through their
streams (``self_contained``) also takes the state at a run's first block, after an iteration
of another key or, for its first run, where the loop begins (the tasks pending from before it
in the roles of an iteration's last ones), and matches its tasks to the next state's by their
roles (what each does and waits for), so such a run skips one block sooner. Where four
consecutive states hold the same tasks doing the same things and their times and bytes settle
by one ratio per period (``tiersim.fastforward.transient``), all but the run's last block are
skipped in closed form, and the last block, simulated, must land where the closed form says
(``GeometricSkipMissed``: the caller runs again without such skips). Where a state never
repeats or settles, every iteration is simulated; where the lazily built graph would start a
task late (``LateTask``), the caller builds the graph whole.

A state equal to the one 2 or 4 blocks before (``REPEAT_LAGS``), though not to the one before,
shows a period of that many blocks (a pipelined NVMe step's reads and writes sharing the drives
can settle so): the run is skipped by whole periods, as above, and the blocks left over are
simulated.

Streams a schedule says carry copies in the background (``background_copies``) are deferred
(``tiersim.fastforward.deferred``): they leave the event run and its states; a loop holding
any is skipped with copies of its last iteration's deferred tasks standing for the skipped ones
(``tiersim.fastforward.deferred_copies``). Once every deferred task has ended and no stream
defers, a state credits them first, so their time integrals count in its totals: a loop whose
deferred tasks all end within each iteration (a micro-step's copies, which the next forward
waits for) then repeats as one without any. Should a deferred flow have been slowed
(``DeferredFlowContended``: checked at each state until the first skip of flows that may meet
them, ``refuse_early``, and when they are credited), the caller runs the schedule again with
the streams that contended in the event run, deferring the others. Deferred tasks end a float
step off the event run's times; a loop that would grow such a step (``amplifies``: a pipelined
NVMe step's sub-groups) and builds ``UNSETTLED_ITERATIONS`` after deferred tasks or a skip
(whose shifted times are a float step off the full run's sums too) without settling into a
repeat marks the session ``unsettled``: its results stand only if a run with nudged rates
agrees (``tiersim.fastforward.probe``), or the caller runs the schedule whole; one with more
than as many iterations again still to build has the caller run the schedule whole at once
(``UnsettledAmplifyingLoop``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Final

from tiersim.engine.flows import Flow, FlowSpan
from tiersim.engine.graph import TaskGraph
from tiersim.engine.runner import EngineRun, LateTask
from tiersim.engine.schedule import Block, Runs, Session, blocks_of, run_whole
from tiersim.errors import ModelError
from tiersim.fastforward.counters import advance_counters, snapshot
from tiersim.fastforward.deferred import Deferral, DeferredFlowContended, SkippedSpan, credit_deferred, refuse_early
from tiersim.fastforward.deferred_copies import SkippedStretch, add_skipped_copies, copy_references
from tiersim.fastforward.deferred_run import DeferringRun
from tiersim.fastforward.loops import LoopProgress, iteration_of, runs_of
from tiersim.fastforward.probe import agree, nudged
from tiersim.fastforward.shift import retime, shift_run
from tiersim.fastforward.state import (
    REL_TOL,
    TIME_TOL,
    BoundaryState,
    Delaying,
    Doing,
    Flowing,
    close,
    extrapolated,
    first_pending,
    waiting,
)
from tiersim.fastforward.transient import GeometricSkipMissed, advanced, common_ratio

STATE_BUDGET: Final = 64
"""Pending tasks a loop's states may read per task it has built (plus ``STATE_BUDGET_BASE``):
a loop whose large states keep failing to repeat (a queue that grows) then simulates on
without taking them, so its cost stays linear in its tasks."""
STATE_BUDGET_BASE: Final = 4096
REPEAT_LAGS: Final = (2, 4)
"""Blocks apart, besides consecutive ones, that a run's states are compared at for a repeat:
a pipelined NVMe step's reads and writes sharing the drives can settle into a period of 2 or 4
sub-groups, each unlike the one before."""
SPECULATIVE_PENDING: Final = 32
"""A state of at most this many pending tasks is taken at a boundary even when it cannot
repeat the one before (its signature differs): the next one may repeat it, a loop then skips
an iteration sooner, and reading it costs less than simulating that iteration. Larger ones
(a queue that grows) are taken only when their signature repeats."""


UNSETTLED_ITERATIONS: Final = 24
"""Iterations a loop that amplifies a float step in its start (``Session.loop``) may build
after tasks were deferred (their ends are a float step off the event run's) or iterations
skipped (their shifted times are a float step off the full run's sums) before its run must be
probed: one that settles into a repeat skips after a few, and a step grown 1.4x per iteration
over 24 (a pipelined NVMe step's sub-groups, about 3,000x) stays float residue; a run with one
that has not settled by then is ``unsettled``, and stands only if a run with nudged rates
agrees with it (``run_schedule``). One with more than ``UNSETTLED_ITERATIONS`` still to build
then is run whole (``UnsettledAmplifyingLoop``): the probe would simulate those unsettled
iterations twice more, which costs more than the whole run it might save (a chaotic step of
300 sub-groups: 31 ms probed, 7 ms run whole)."""


class UnsettledAmplifyingLoop(Exception):
    """A loop that amplifies a float step in its start built ``UNSETTLED_ITERATIONS`` without
    settling into a repeat, after tasks were deferred or iterations skipped, with more than as
    many still to build: the caller runs the schedule whole, so that the loop begins where the
    full run's does, to the bit."""


class _AlikeBlocks:
    """One run of a loop's alike blocks as the session goes through it: ``count`` blocks of
    ``width`` iterations, and the states at its last boundaries (consecutive, the latest last;
    at most ``depth`` of them)."""

    def __init__(self, count: int, width: int, self_contained: bool, depth: int) -> None:
        self.count = count
        self.width = width
        self.self_contained = self_contained
        self.depth = depth
        self.history: list[BoundaryState] = []

    def remember(self, state: BoundaryState | None) -> None:
        """Add the state at the latest boundary (None: a boundary without one, which no later
        state can be compared across, so the history starts again)."""
        self.history = [*self.history[1 - self.depth:], state] if state is not None else []


class FastForwardSession(Session):
    """A task graph under construction and its run in progress, skipping what repeats.
    ``geometric``: whether it may skip over transients that settle geometrically;
    ``deferring``: whether it defers the streams a schedule says carry background copies;
    ``lags``: the blocks apart, besides consecutive ones, that states are compared at."""

    def __init__(self, capacity_of: Callable[[str], float], max_tasks: int | None = None, geometric: bool = True,
                 deferring: bool = True, kept: frozenset[str] = frozenset(),
                 lags: tuple[int, ...] = REPEAT_LAGS) -> None:
        super().__init__(capacity_of, max_tasks)
        self.geometric = geometric
        self.lags = lags
        self.depth = max((3, *lags))
        """States a run of alike blocks keeps: three before the latest for a geometric transient,
        and as many as the longest lag."""
        self.deferring = deferring
        self.kept = kept
        """Streams never deferred (their flows contended in an earlier try)."""
        self.run = DeferringRun(self.graph)
        self.background: frozenset[str] = frozenset()
        """The streams deferring now."""
        self.deferral = Deferral()
        self.skipped = 0
        """Loop iterations fast-forwarded over."""
        self.unsettled = False
        """Whether a loop that amplifies built ``UNSETTLED_ITERATIONS`` without settling after
        deferred tasks or skipped iterations (``run_schedule`` probes the run)."""

    def background_copies(self, streams: frozenset[str]) -> None:
        """Defer the tasks of ``streams`` but the ``kept`` from now on (an empty set ends it), if
        ``deferring``."""
        streams = streams - self.kept
        if self.deferring:
            self.background = streams
            self.run.defer_from(len(self.graph.tasks), streams)
            network = self.run.network
            if streams and network.recorded is None:
                # what the event run's flows do on a deferred flow's links (``credit_deferred``)
                network.recorded = []
                network.recorded_since = self.run.clock.now()

    def loop(self, keys: Sequence[Hashable], self_contained: bool = False, amplifies: bool = False) -> Iterator[int]:
        return self._repeat(runs_of(tuple(keys)), self_contained, amplifies)

    def loop_runs(self, runs: Runs, self_contained: bool = False) -> Iterator[int]:
        return self._repeat(blocks_of(runs), self_contained, False)

    def _repeat(self, blocks: Sequence[Block], self_contained: bool, amplifies: bool) -> Iterator[int]:
        """The indices of a loop's iterations; those past a repeating state within a run of
        alike blocks are skipped. ``self_contained`` (``Session.loop``): what follows a state
        depends only on its pending tasks and the iterations to come, whatever iteration added
        them, so the state at a run's first block (after a block of another key, or where the
        loop begins: ``_start``) may be the one the next repeats: tasks of different keys, or
        from before the loop, count as the same when their roles are (``_roles``). A loop that
        ``amplifies``, begun after deferred tasks or skipped iterations, that builds
        ``UNSETTLED_ITERATIONS`` makes the session ``unsettled`` (``UnsettledAmplifyingLoop``
        with more than as many to go)."""
        loop = LoopProgress()
        unsettled = self._unsettled_limit(amplifies)
        total = sum(count * width for _key, count, width in blocks)
        index = 0
        for key, count, width in blocks:
            alike = _AlikeBlocks(count, width, self_contained, self.depth)
            block = 0
            while block < count:
                if loop.first:  # a state at each block's start, relative to the block before
                    block = self._at_boundary(loop, alike, block)
                    if block >= count:
                        break
                elif self_contained and count > 1:
                    start_state = self._start(loop)
                    alike.history = [start_state] if start_state is not None else []
                start = index + block * width
                for i in range(start, start + width):
                    self.check_size()
                    if len(loop.first) == unsettled:
                        self._unsettled(total - i)
                    loop.first.append(len(self.graph.tasks))
                    loop.index.append(i)
                    loop.key.append(key if width == 1 else (key, i - start))
                    yield i
                block += 1
            index += count * width
        if loop.expected is not None:
            self._check(loop, self._boundary(loop, True, force=True))

    def _unsettled(self, left: int) -> None:
        """A loop that amplifies has built ``UNSETTLED_ITERATIONS`` unsettled, ``left`` to go:
        the session is ``unsettled``, or (more than as many to go) ``UnsettledAmplifyingLoop``."""
        if left > UNSETTLED_ITERATIONS:
            raise UnsettledAmplifyingLoop(f"a loop that amplifies built {UNSETTLED_ITERATIONS} iterations "
                                          f"unsettled, {left} to go")
        self.unsettled = True

    def _unsettled_limit(self, amplifies: bool) -> int:
        """The iterations a loop may build before the session is ``unsettled``:
        ``UNSETTLED_ITERATIONS`` for one that ``amplifies`` begun after some stream deferred or
        some iteration was skipped (either leaves a float step off the full run's times, which it
        may grow), else -1 (no limit)."""
        deferred = any(streams for _position, streams in self.run.changes)
        return UNSETTLED_ITERATIONS if amplifies and (deferred or self.skipped) else -1

    def _at_boundary(self, loop: LoopProgress, alike: _AlikeBlocks, block: int) -> int:
        """Take the state before ``block`` of a run and skip from it if it repeats or settles;
        returns the block to build next (``alike.count`` after a skip to the run's end)."""
        checking = loop.expected is not None
        wanted = checking or block >= 1 or (alike.self_contained and alike.count > 1)
        state = self._boundary(loop, wanted, checking)
        if state is not None and alike.self_contained and block <= 1:  # may meet a block of another key
            state.roles = self._roles(loop)
        if checking:
            self._check(loop, state)
        if state is not None and alike.history:
            after = self._skip_from(loop, alike, block, state)
            if after == alike.count:
                return after
            if after >= 0:  # blocks left after a skip: simulated, the first checks a settling transient
                alike.remember(None)
                return after
        alike.remember(state)
        return block

    def _skip_from(self, loop: LoopProgress, alike: _AlikeBlocks, block: int, state: BoundaryState) -> int:
        """Skip from ``state``, before ``block``: the rest of the run if it repeats the one
        before (returns the run's count); else, with no deferred task of the loop yet to be
        credited, whole periods if it repeats one a few blocks before (``_skip_lagged``), or
        all but the run's last block if the last four settle geometrically (``_skip_settling``);
        returns the block to build next, or -1 if none of these."""
        history, left = alike.history, alike.count - block
        # deferred tasks in the loop not yet in the counters
        holds = self.run.last_deferred >= max(loop.first[0], self.deferral.credited)
        if state.repeats(history[-1]):
            references = copy_references(self.run, loop, alike.width, left) if holds else None
            if not holds or references is not None:
                self._skip(loop, [history[-1], state], left, alike.width, references, 0.0)
                return alike.count
            return -1
        if holds:
            return -1
        after = self._skip_lagged(loop, alike, block, state)
        return after if after >= 0 else self._skip_settling(loop, alike, block, state)

    def _skip_lagged(self, loop: LoopProgress, alike: _AlikeBlocks, block: int, state: BoundaryState) -> int:
        """Skip whole periods of ``lag`` blocks (the first of ``lags`` for which ``state``
        repeats the state ``lag`` blocks before: a period of that many blocks, each unlike the
        one before) as far as the run's end; returns the first block left, or -1 if no lag
        shows a repeat."""
        history, left = alike.history, alike.count - block
        for lag in self.lags:
            if lag <= min(len(history), left) and state.repeats(history[-lag]):
                periods = left // lag
                self._skip(loop, [history[-lag], state], periods, alike.width * lag, None, 0.0)
                return block + periods * lag
        return -1

    def _skip_settling(self, loop: LoopProgress, alike: _AlikeBlocks, block: int, state: BoundaryState) -> int:
        """Skip all but the run's last block if the last four states settle geometrically and
        no deferred flow is yet to be checked (a settling span's flows are not shifted copies of
        a period's, ``SkippedSpan``); returns the last block, or -1 if they do not."""
        history, left = alike.history, alike.count - block
        if len(history) >= 3 and left >= 2 and self.geometric and self.run.network.recorded is None:
            states = [*history[-3:], state]
            ratio = self._trend(states)
            expected = self._settled(states, left, ratio) if ratio is not None else None
            if ratio is not None and expected is not None:
                self._skip(loop, states, left - 1, alike.width, None, ratio)
                loop.expected = expected
                return alike.count - 1
        return -1

    def _check(self, loop: LoopProgress, state: BoundaryState | None) -> None:
        """After a skip over a geometric transient, the state at the next boundary must be the
        one the closed form gave (``GeometricSkipMissed`` otherwise: some skipped period was not
        alike)."""
        expected, loop.expected = loop.expected, None
        if expected is None:
            return
        if state is None or not state.repeats(expected) or abs(state.now - expected.now) > TIME_TOL * max(
                1.0, state.now):
            raise GeometricSkipMissed(f"a loop settled to {state and state.now} s, not {expected.now} s")

    def _trend(self, states: list[BoundaryState]) -> float | None:
        """The ratio by which four consecutive states of a run settle (``common_ratio``), or None
        where they do not, hold different tasks, or where the run holds what a skip cannot move
        that way (flows recorded for deferred ones, or event queue entries other than the
        pending tasks' delays and the network's timers)."""
        run = self.run
        if run.network.recorded is not None:
            return None
        last = states[-1]
        for state in states[:-1]:
            if not last.alike(state):
                return None
        delays = sum(1 for what in last.doing if isinstance(what, Delaying))
        queued = run.clock.queued()
        timers = sum(1 for _at, value in queued if value is None)
        if delays + timers != len(queued) or timers != len(run.network.armed):
            return None
        rows = [state.values() for state in states]
        series = [[row[j] for row in rows] for j in range(len(rows[0]))]
        return common_ratio(series, [True] + [False] * (len(series) - 1))

    def _settled(self, states: list[BoundaryState], periods: int, ratio: float) -> BoundaryState | None:
        """The state ``periods`` periods on from consecutive ``states`` settling by ``ratio``,
        unless it or their limit is not ``_possible``."""
        state = extrapolated(states, periods, ratio)
        limit = extrapolated(states, 1 << 30, ratio)  # ratio ** 2**30 is 0
        return state if self._possible(state) and self._possible(limit) else None

    def _possible(self, state: BoundaryState) -> bool:
        """Whether every pending task could be where ``state`` (this run's pending tasks, moved
        on) has it: no delay longer than the task's, no flow with more bytes left than its size
        or fewer than none, no time to go or since a start below zero. A settling state whose
        limit is not possible crosses into a different order of events on its way there."""
        run = self.run
        tasks = self.graph.tasks
        slack = TIME_TOL * max(1.0, state.now)  # float residue
        for p, what in zip(run.pending, state.doing):
            if isinstance(what, Delaying) and not -slack <= what.left <= run.delay[p] + slack:
                return False
            if isinstance(what, Flowing) and not (-1e-6 <= what.left <= tasks[p].size * (1 + REL_TOL) + 1e-6
                                                  and what.to_finish >= -slack and what.since_start >= -slack):
                return False
        return all(seconds >= -slack for seconds in state.timers)

    def finish(self) -> EngineRun:
        """Run what is left; the run is ``complete`` unless iterations were skipped or tasks
        deferred."""
        run = self.run
        run.extend()
        run.clock.run()
        credit_deferred(run, self.deferral)
        # a run that skipped or deferred tasks has no record of each one in order
        return run.result(not self.skipped and run.last_deferred < 0)

    def _boundary(self, loop: LoopProgress, with_state: bool, force: bool = False) -> BoundaryState | None:
        """Run until the first task of the loop's last iteration has started; its state then
        (None when not asked for, or when that iteration has no task or never starts; unless
        ``force``, also when it is too large to be worth reading)."""
        run = self.run
        run.extend()
        first = loop.first[-1]
        if first >= len(self.graph.tasks):
            return None
        clock, start = run.clock, run.start
        while start[first] < 0 and clock.pending():
            clock.step()
        if start[first] < 0 or not with_state:
            return None
        if run.proxies_pending:
            return None  # timeouts a state does not describe
        oldest = first_pending(run.pending)  # a task from before the loop is named by position
        head = oldest if oldest < loop.first[0] else oldest - loop.first[-1]
        now = clock.now()
        signature = (len(run.pending), head, len(run.network.armed), run.accounts.phase)
        timers = sorted(due - now for due in run.network.armed)
        alike = signature == loop.signature and close(timers, loop.timers, TIME_TOL * max(1.0, now))
        loop.signature, loop.timers = signature, timers
        if not alike and len(run.pending) > SPECULATIVE_PENDING and not force:
            return None  # cannot repeat the last state, and too large to take for the next one
        if loop.state_cost > STATE_BUDGET * (len(self.graph.tasks) - loop.first[0]) + STATE_BUDGET_BASE and not force:
            return None  # states this large never repeated: simulate on without taking them
        loop.state_cost += len(run.pending)
        return self._state(loop)

    def _start(self, loop: LoopProgress) -> BoundaryState | None:
        """The state where a self-contained loop begins, before it builds an iteration, with
        every pending task in the role of one that ends the iteration before the first
        (``_place``): a loop entered after what each of its iterations ends with (the micro-step
        loop, after the first forward) may then repeat it after one iteration. None where it
        holds timeouts a state does not describe or more than ``SPECULATIVE_PENDING`` tasks."""
        run = self.run
        run.extend()
        if run.proxies_pending or len(run.pending) > SPECULATIVE_PENDING:
            return None
        now = run.clock.now()
        loop.signature, loop.timers = None, sorted(due - now for due in run.network.armed)
        loop.state_cost += len(run.pending)
        state = self._state(loop)
        state.roles = self._roles(loop)
        return state

    def _state(self, loop: LoopProgress) -> BoundaryState:
        run = self.run
        network, accounts = run.network, run.accounts
        now = run.clock.now()
        accounts.flush(now, network.flows)
        network.flush_busy(now)
        if not self.background:  # deferred tasks that have ended count in the totals
            credit_deferred(run, self.deferral, now)
        elif network.recorded is not None and not self.deferral.skipped:  # a refusal now spares the rest
            refuse_early(run, self.deferral)
        first, index, keys = loop.first, loop.index, loop.key
        current = index[-1] if index else 0
        who: list[Hashable] = []
        doing: list[Doing] = []
        start, unmet, at_head, delay = run.start, run.unmet, run.at_head, run.delay
        it = 0  # the pending tasks joined in order of position: their iterations only rise
        for p in run.pending:
            if first and p >= first[0]:
                while it + 1 < len(first) and first[it + 1] <= p:  # ``iteration_of``, walked
                    it += 1
                who.append((index[it] - current, p - first[it], keys[it]))
            else:
                who.append(("before", p))
            flow = _flow_of(network.flows, p) if start[p] >= 0 else None
            if start[p] < 0:
                doing.append(waiting(unmet[p], at_head[p]))
            elif flow is not None:
                left = max(flow.remaining - flow.rate * (now - flow.last), 0.0)
                doing.append(Flowing(flow.rate, left, flow.finish_at - now, now - start[p]))
            else:
                doing.append(Delaying(start[p] + delay[p] - now))
        return BoundaryState(now, who, doing, loop.timers, accounts.phase, snapshot(accounts, network))

    def _roles(self, loop: LoopProgress) -> list[Hashable]:
        """Each pending task's role, in ``run.pending`` order: what decides its part in what
        follows besides its progress. A task before the loop is itself; one of the loop is its
        iteration relative to the last, its place counted from its iteration's end (iterations
        of different keys may build different numbers of tasks before the ones still pending),
        its stream, phase, category, delay, bytes, links and rate cap, and the pending tasks it
        waits for, placed alike."""
        run, graph = self.run, self.graph
        first = loop.first
        roles: list[Hashable] = []
        for p in run.pending:
            task = graph.tasks[p]
            waits = tuple(self._place(loop, d) for d in graph.deps[p] if d in run.pending)
            roles.append((self._place(loop, p), task.stream, task.phase, task.category, task.delay, task.size,
                          task.usage, task.rate_cap, waits) if not first or p >= first[0] else self._place(loop, p))
        return roles

    def _place(self, loop: LoopProgress, p: int) -> tuple[Hashable, int]:
        """Task ``p``'s iteration relative to the loop's last and its distance from that
        iteration's end, or ("before", p) for one before the loop; at the loop's start
        (``_start``, no iteration built) every task is placed as if an iteration ended there."""
        first = loop.first
        if not first:
            return (0, len(self.graph.tasks) - p)
        if p < first[0]:
            return ("before", p)
        it = iteration_of(first, p)
        end = first[it + 1] if it + 1 < len(first) else len(self.graph.tasks)
        return (loop.index[it] - loop.index[-1], end - p)

    def _skip(self, loop: LoopProgress, states: list[BoundaryState], times: int, width: int,
              references: dict[int, int] | None, ratio: float) -> None:
        """Fast-forward ``times`` periods, each a block of ``width`` iterations, from the last
        of ``states`` (consecutive): periods alike the last one (``ratio`` 0; with the
        ``references`` of the loop's deferred tasks, if it holds any), or settling by ``ratio``
        from the last three (``tiersim.fastforward.transient``), the pending tasks and timers
        set to their times then."""
        run = self.run
        earlier, before, state = states[-3] if len(states) >= 3 else states[0], states[-2], states[-1]
        if earlier.totals is None or before.totals is None or state.totals is None:
            raise ModelError("a fast-forward from a state without its counters")
        advance_counters(run.accounts, run.network, earlier.totals, before.totals, state.totals, times, ratio)
        seconds = advanced(earlier.now, before.now, state.now, times, ratio, True)
        if run.network.recorded is not None:  # a deferred flow may meet the skipped periods' flows
            self.deferral.skipped.append(SkippedSpan(self._last_period(before.now), state.now - before.now, times))
        shift_run(run, seconds, loop.first[0], self.deferral.credited)
        if ratio:
            retime(run, extrapolated(states, times, ratio))
        if references is not None:
            stretch = SkippedStretch(loop.first, run.end, references, seconds, state.now - before.now)
            add_skipped_copies(run, self.deferral, loop, times, stretch, self.skipped)
        loop.index[:] = [i + times * width for i in loop.index]
        self.skipped += times * width

    def _last_period(self, since: float) -> list[FlowSpan]:
        """The event run's flows recorded from ``since`` (s), the last state's but one: a period
        that repeats, as each state flushes the network's flows into its record."""
        recorded = self.run.network.recorded or []
        i = len(recorded)
        while i > 0 and recorded[i - 1].until >= since:
            i -= 1
        return [span for span in recorded[i:] if span.since >= since]


def _flow_of(flows: list[Flow], p: int) -> Flow | None:
    """Task ``p``'s flow among the network's ``flows`` (a few; the last of its key, as a dict of
    them by key would hold), or None: no dict to build and no int boxed to look one up."""
    found = None
    for flow in flows:
        if flow.key == p:
            found = flow
    return found


def run_schedule(schedule: Callable[[Session], None], capacity_of: Callable[[str], float],
                 fast_forward: bool = True, max_tasks: int | None = None) -> tuple[EngineRun, TaskGraph]:
    """Build and run a schedule; with ``fast_forward``, lazily and skipping repeats: again
    without skips over geometric transients should one not land where it should
    (``GeometricSkipMissed``), again should a deferred task not have moved at its own rate
    (``DeferredFlowContended``: the streams it names then stay in the event run, whose repeats
    are still skipped, and the others defer; none defers once it names none new), and whole
    (``run_whole``, as without fast-forward) should the lazy graph start a task late, a loop
    that amplifies not settle after deferred tasks or skipped iterations with many iterations to
    go (``UnsettledAmplifyingLoop``), or a run with such a loop near its end
    (``FastForwardSession.unsettled``) not stand the probe (``_stands``). ``TaskLimit`` once it
    builds more than ``max_tasks`` tasks."""
    geometric = deferring = fast_forward
    kept: frozenset[str] = frozenset()
    while fast_forward:
        session = FastForwardSession(capacity_of, max_tasks, geometric, deferring, kept)
        try:
            schedule(session)
            run = session.finish()
        except GeometricSkipMissed:  # raised only by a skip over a geometric transient
            geometric = False
            continue
        except DeferredFlowContended as contended:  # raised only by deferred tasks
            deferring = bool(contended.streams - kept)
            kept |= contended.streams
            continue
        except (UnsettledAmplifyingLoop, LateTask):
            break
        if session.unsettled and not _stands(run, schedule, capacity_of, max_tasks, geometric, deferring, kept):
            break
        return run, session.graph
    return run_whole(schedule, capacity_of, max_tasks)


def _stands(run: EngineRun, schedule: Callable[[Session], None], capacity_of: Callable[[str], float],
            max_tasks: int | None, geometric: bool, deferring: bool, kept: frozenset[str]) -> bool:
    """Whether the fast run ``run`` of ``schedule`` agrees with one, made the same way, with
    every link's capacity nudged (``tiersim.fastforward.probe``); not if that one would run
    again or whole (its skips may differ, and with them where its loop reaches the bound)."""
    probe = FastForwardSession(nudged(capacity_of), max_tasks, geometric, deferring, kept)
    try:
        schedule(probe)
        return agree(run, probe.finish())
    except (GeometricSkipMissed, DeferredFlowContended, UnsettledAmplifyingLoop, LateTask):
        return False
