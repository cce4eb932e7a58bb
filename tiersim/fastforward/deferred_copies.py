"""The deferred copies of skipped iterations: timed without being built where their inputs
are known, as arithmetic progressions once they rise by one step per iteration.

A loop that holds deferred tasks (``tiersim.fastforward.deferred``) is skipped with copies of
its last iteration's deferred tasks standing for the skipped ones. The compute-side task at a
position of iteration j ends, in the periodic stretch the skip jumped over, at its reference's
end plus (j - reference) periods (``SkippedStretch``); past the stretch it is the real task
the skip moved there. Times are s, sizes bytes, rates bytes/s.
"""

from __future__ import annotations

from typing import Final

from tiersim.engine.graph import Task, TaskGraph
from tiersim.fastforward.deferred import Deferral
from tiersim.fastforward.deferred_run import DeferringRun
from tiersim.fastforward.loops import LoopProgress, iteration_of
from tiersim.fastforward.spans import Spans
from tiersim.fastforward.state import TIME_TOL

BEFORE_LOOP: Final = 0
SAME_ITERATION: Final = 1
COMPUTE_SIDE: Final = 2
"""What a copy's dependency is (``CopyInput.source``)."""


class CopyInput:
    """One dependency of a deferred loop task's copies: a task before the loop (``at``: its
    position), a deferred task of the same iteration (its position), or a compute-side task
    (``at``: its offset in its ``iteration``)."""

    __slots__ = ("at", "iteration", "source")

    def __init__(self, source: int, at: int, iteration: int) -> None:
        self.source = source
        self.at = at
        self.iteration = iteration


class SkippedStretch:
    """The periodic stretch a skip jumped over, for its deferred copies: a loop's iterations
    begin at their tasks' positions ``first``; the compute-side task at a position of the last
    iteration ended, before the skip, in iteration ``references[offset]`` (``copy_references``);
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


class CopyStep:
    """A deferred task of the last iteration as its copies repeat it: its position, its
    stream's place among the template's streams (``slot``), delay and seconds moving (s), and
    what it waits for (``_inputs``)."""

    def __init__(self, task: int, slot: int, delay: float, moving: float, inputs: list[CopyInput]) -> None:
        self.task = task
        self.slot = slot
        self.delay = delay
        self.moving = moving
        self.inputs = inputs


def copy_references(run: DeferringRun, loop: LoopProgress, width: int, times: int) -> dict[int, int] | None:
    """The references (``_references``) of a loop holding deferred tasks if it can be skipped
    ``times`` blocks, else None: one iteration per block; no event task waits for a deferred
    one; the last iteration's deferred tasks depend on deferred tasks of their own iteration
    only; and each compute-side task a deferred one waits for has ended in an iteration of the
    run at most ``times`` back."""
    if width != 1 or not _copies_stand_apart(run, loop.first):
        return None
    references = _references(run, loop)
    if references is None or any(len(loop.first) - 1 - it > times for it in references.values()):
        return None
    return references


def _copies_stand_apart(run: DeferringRun, first: list[int]) -> bool:
    """Whether no event task of the loop waits for a deferred one (on its stream or as a
    dependency), and the last iteration's deferred tasks depend on deferred tasks of their own
    iteration only."""
    graph, deferred = run.graph, run.deferred
    for p in run.deferred_since(first[0]):
        after = graph.stream_next[p]
        if (after >= 0 and not deferred[after]) or any(not deferred[j] for j in graph.dependents[p]):
            return False
    last = first[-1]
    return not any(any(first[0] <= d < last and deferred[d] for d in graph.deps[p]) for p in run.deferred_since(last))


def _references(run: DeferringRun, loop: LoopProgress) -> dict[int, int] | None:
    """For each position (within an iteration) of a compute-side task that the last
    iteration's deferred tasks or a waiting one depend on: the latest iteration of the last
    one's key in which it has ended (None if there is none)."""
    graph = run.graph
    first, keys, deferred, ends = loop.first, loop.key, run.deferred, run.end
    last = len(first) - 1
    wanted = set()
    for p in run.deferred_since(first[0]):
        if p >= first[last] or run.deferred_end[p] < 0:  # a copy's template, or waiting
            for d in graph.deps[p]:
                if d >= first[0] and not deferred[d]:
                    it = iteration_of(first, d)
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


def add_skipped_copies(run: DeferringRun, deferral: Deferral, loop: LoopProgress, times: int, stretch: SkippedStretch,
                       skipped_before: int) -> None:
    """The deferred tasks of the ``times`` skipped iterations, and the real ones still waiting.
    Every real deferred task keeps its own iteration; a waiting one takes the ``stretch``'s
    times for the skipped tasks it waits for, and each skipped iteration gets copies of the
    last iteration's deferred tasks, appended to their streams in order: timed without being
    built while their inputs are known (``_timed_copies``), the rest built (named after the
    iterations skipped before, ``skipped_before``)."""
    graph = run.graph
    first = loop.first
    _release_waiting(run, first, stretch)
    last = len(first) - 1
    template = run.deferred_since(first[last])
    inputs = {q: _inputs(run, first, q) for q in template}
    timed, tails = _timed_copies(run, deferral, template, inputs, times, stretch)
    for m in range(timed + 1, times + 1):
        names: dict[int, str] = {}
        for q in template:
            floor = tails[graph.tasks[q].stream] if timed and m == timed + 1 else 0.0  # after the timed ones
            deps, floor = _copy_inputs(graph, first, inputs[q], names, m, times, stretch, floor)
            task = graph.tasks[q]
            names[q] = graph.add(Task(f"{task.name}~{skipped_before + m}", task.stream, task.phase,
                                      task.category, task.delay, task.size, task.usage, task.rate_cap,
                                      tuple(deps)))
            if floor:
                run.floor[len(graph.tasks) - 1] = floor


def _release_waiting(run: DeferringRun, first: list[int], stretch: SkippedStretch) -> None:
    """The real deferred tasks still waiting take the stretch's ends for the compute-side tasks
    they wait for that the skip jumped over, and are timed once nothing else holds them."""
    graph = run.graph
    waiting = [p for p in run.deferred_since(first[0]) if run.deferred_end[p] < 0]
    for p in waiting:
        for d in graph.deps[p]:
            if d >= first[0] and not run.deferred[d] and run.end[d] < 0:
                it = iteration_of(first, d)
                run.unmet[p] = run.unmet[p] - 1  # ``-=`` on a list item is a generic call compiled
                run.ready[p] = max(run.ready[p], stretch.ended(it, d - first[it]))
                graph.dependents[d].remove(p)
    for p in waiting:
        if not run.unmet[p] and run.stream_before(p) >= 0:
            run.resolve_deferred(p)


def _copy_inputs(graph: TaskGraph, first: list[int], inputs: list[CopyInput], names: dict[int, str], m: int,
                 times: int, stretch: SkippedStretch, floor: float) -> tuple[list[str], float]:
    """Skipped iteration ``m``'s built copy's dependencies, and the time it may not start
    before (s): a skipped compute-side task it waits for ends when the ``stretch`` says."""
    references = stretch.references
    deps: list[str] = []
    for item in inputs:
        if item.source == BEFORE_LOOP:
            deps.append(graph.tasks[item.at].name)
        elif item.source == SAME_ITERATION:
            deps.append(names[item.at])
        elif item.iteration + m <= references[item.at] + times:
            floor = max(floor, stretch.ended(item.iteration + m, item.at))
        else:  # the real task the skip moved to iteration it + m
            deps.append(graph.tasks[first[item.iteration + m - times] + item.at].name)
    return deps, floor


def _inputs(run: DeferringRun, first: list[int], q: int) -> list[CopyInput]:
    """What loop task ``q``'s copies wait for, per dependency."""
    out = []
    for d in run.graph.deps[q]:
        if d < first[0]:
            out.append(CopyInput(BEFORE_LOOP, d, 0))
        elif run.deferred[d]:
            out.append(CopyInput(SAME_ITERATION, d, 0))
        else:
            it = iteration_of(first, d)
            out.append(CopyInput(COMPUTE_SIDE, d - first[it], it))
    return out


def _timed_copies(run: DeferringRun, deferral: Deferral, template: list[int], inputs: dict[int, list[CopyInput]],
                  times: int, stretch: SkippedStretch) -> tuple[int, dict[str, float]]:
    """Time the first skipped iterations' copies of the ``template`` deferred tasks without
    building them, as ``Run`` would (start = the latest of its stream's previous end, its
    dependencies' ends and, for a skipped compute-side one, when the ``stretch`` says it
    ends; end = start + delay + bytes / its own bound), into ``deferral.timed_copies``: each
    iteration whose inputs are all known, up to the last but one (that one is built: later
    tasks follow it on its streams). Returns how many were timed and each template stream's
    end after them (s)."""
    graph = run.graph
    tails = {graph.tasks[q].stream: 0.0 for q in template}
    for stream in tails:
        tails[stream] = run.ended_at(graph.stream_tail(stream))
    streams = list(tails)  # a step's stream by its place (``CopyStep.slot``): no str key to hash
    steps = [_copy_step(run, q, inputs[q], streams) for q in template]
    if any(end < 0 for end in tails.values()) or any(  # ``min`` compiled is a call through Python
            run.ended_at(item.at) < 0 for step in steps for item in step.inputs if item.source == BEFORE_LOOP):
        return 0, tails
    compute_side = [item for step in steps for item in step.inputs if item.source == COMPUTE_SIDE]
    last = times - 1
    """The last skipped iteration whose copies' inputs are all known (a compute-side one of
    iteration ``it + m`` is, up to its reference plus ``times``)."""
    for item in compute_side:
        last = min(last, stretch.references[item.at] + times - item.iteration)
    timed, steady, after = _time_until_steady(run, steps, stretch, compute_side, last, list(tails.values()))
    rest = last - len(timed) if steady else 0  # iterations after the listed ones, in closed form
    _keep_spans(deferral, steps, timed, rest, after)
    return len(timed) + rest, _by_stream(streams, after)


def _by_stream(streams: list[str], ends: list[float]) -> dict[str, float]:
    """The streams' ``ends`` (by ``CopyStep.slot``) by stream (s)."""
    out = {}
    for k in range(len(streams)):  # ``dict(zip(...))`` compiled is calls through Python
        out[streams[k]] = ends[k]
    return out


def _time_until_steady(run: DeferringRun, steps: list[CopyStep], stretch: SkippedStretch, compute_side: list[CopyInput],
                       last: int, tails: list[float]) -> tuple[list[tuple[list[float], list[list[float]]]], bool,
                                                             list[float]]:
    """The copies of skipped iterations 1 to ``last`` timed in turn until they are ``_steady``
    (their starts, what each is the latest of); whether they are; the streams' ends after them
    (by ``CopyStep.slot``)."""
    references = stretch.references
    timed: list[tuple[list[float], list[list[float]]]] = []
    for m in range(1, last + 1):
        began_at, terms, tails = _timed_copy(run, steps, stretch, m, tails)
        timed.append((began_at, terms))
        if m >= 3 and all(item.iteration + m - 2 > references[item.at] for item in compute_side) and _steady(
                timed[-3:], last - m, TIME_TOL * max(1.0, began_at[_latest(began_at)])):
            return timed, True, tails
    return timed, False, tails


def _copy_step(run: DeferringRun, q: int, inputs: list[CopyInput], streams: list[str]) -> CopyStep:
    """Deferred loop task ``q`` as its copies repeat it (its stream one of ``streams``)."""
    task, flow = run.graph.tasks[q], run.graph.flows[q]
    moving = flow.size / flow.bound if flow is not None else 0.0
    return CopyStep(q, streams.index(task.stream), task.delay, moving, inputs)


def _keep_spans(deferral: Deferral, steps: list[CopyStep], timed: list[tuple[list[float], list[list[float]]]],
                rest: int, tails: list[float]) -> None:
    """The timed copies' spans into ``deferral.timed_copies``: one per timed iteration and, for
    the ``rest`` after them (steady), one progression (which moves its stream's tail)."""
    for k, step in enumerate(steps):
        lasting = step.delay + step.moving
        listed = [Spans(began_at[k], lasting, lasting, 1) for began_at, _terms in timed]
        if rest:
            rise = timed[-1][0][k] - timed[-2][0][k]
            listed.append(Spans(timed[-1][0][k] + rise, rise, lasting, rest))
            tails[step.slot] = listed[-1].last  # template order is each stream's order
        if listed:
            deferral.timed_copies[step.task] = listed


def _timed_copy(run: DeferringRun, steps: list[CopyStep], stretch: SkippedStretch, m: int,
                tails: list[float]) -> tuple[list[float], list[list[float]], list[float]]:
    """Skipped iteration ``m``'s copies' starts, in template order, what each start is the
    latest of (its stream's previous end, then its inputs' ends) and the streams' ends after
    them (s, by ``CopyStep.slot``)."""
    ends: dict[int, float] = {}
    after = tails[:]
    began_at, terms = [], []
    for step in steps:
        values = [after[step.slot]]
        for item in step.inputs:
            if item.source == BEFORE_LOOP:
                values.append(run.ended_at(item.at))
            elif item.source == SAME_ITERATION:
                values.append(ends[item.at])
            else:
                values.append(stretch.ended(item.iteration + m, item.at))
        began = values[_latest(values)]  # max of a list compiled is a call through Python
        ends[step.task] = after[step.slot] = began + step.delay + step.moving
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
