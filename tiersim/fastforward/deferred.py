"""Deferred tasks: fixed-rate work taken out of the event run and timed by recursion.

A schedule may say that the tasks of some streams are copies in the background for a stretch
(``Session.background_copies``); the fast-forward then defers them: copy streams that fall
behind the compute, whose growing queues keep a loop's state from ever repeating. A deferred
task takes no event: ``DeferringRun`` gives it start = the later of its stream's previous end and its
dependencies' ends, and end = start + delay + bytes / its flow's own bound, as soon as those are
known; an event task that waits for one gets a timeout at its end. That is the full simulation's
answer only if each deferred flow really moved at its own bound, so ``credit_deferred`` checks
after the run (or mid-run, once the deferred tasks so far have ended) that no link a deferred
flow used could saturate while it ran (every deferred flow on it at its bound plus the event
run's flows on that link then, each at its own bound: those it recorded, and over a
fast-forwarded span the flows of the period it repeats, ``SkippedSpan``) and that none moved
before the event run's flows were recorded; otherwise ``DeferredFlowContended``, naming the
deferred streams that contended (the caller then runs again with those in the event run);
``refuse_early`` makes the same check at a state, of the deferred flows timed so far against
the flows recorded so far, so that a refusal spares simulating the rest of the run.
It then adds the deferred tasks (and the copies a fast-forward timed without building,
``Deferral.timed_copies``) to the run's time integrals: stream busy seconds and bytes
per phase, link units per phase, and link busy seconds as the union with the event run's own
flows on each link. Times are s, sizes bytes, rates bytes/s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from tiersim.engine.graph import Task, Usage
from tiersim.fastforward import cycles
from tiersim.fastforward.cycles import Load
from tiersim.fastforward.spans import Intervals, Spans, Window, union

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.engine.flows import FlowNetwork, FlowSpan
    from tiersim.fastforward.deferred_run import DeferringRun

_OVERLOAD: Final = 1e-12
"""Fraction of a link's capacity the summed bounds on it may exceed (float residue)."""
_RESIDUE: Final = 1e-12
"""Seconds per second of the run below which a stretch is float residue, not one at all."""


class DeferredFlowContended(Exception):
    """A deferred flow shared a link that could saturate: its times are not the full
    simulation's. ``streams``: the deferred streams whose flows did (empty: not known)."""

    def __init__(self, message: str, streams: frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.streams = streams


class SkippedSpan:
    """A stretch a fast-forward jumped over: ``times`` periods of ``period`` s, each repeating
    the event run's ``flows`` recorded over the period before it (``FlowNetwork.recorded``),
    shifted by one more period; a deferred flow on their links is checked against them."""

    __slots__ = ("flows", "period", "times")

    def __init__(self, flows: list[FlowSpan], period: float, times: int) -> None:
        self.flows = flows
        self.period = period
        self.times = times

    def progressions(self) -> Iterator[tuple[FlowSpan, Spans]]:
        """Each recorded flow that takes time and its copies in the skipped periods, one step of
        ``period`` apart (none over a period of no time)."""
        period = self.period
        if period <= 0.0:
            return
        for flow in self.flows:
            if flow.until > flow.since:
                yield flow, Spans(flow.since + period, period, flow.until - flow.since, self.times)


class Deferral:
    """What a fast-forward keeps of a run's deferred tasks: the positions before ``credited``
    are in the counters; ``timed_copies``: the copies of deferred tasks it timed without
    building (by the position of the task they copy, their spans, s); ``skipped``: the spans it
    jumped over; ``early``: what ``refuse_early`` has taken in so far."""

    __slots__ = ("credited", "early", "skipped", "timed_copies")

    def __init__(self) -> None:
        self.credited = 0
        self.timed_copies: dict[int, list[Spans]] = {}
        self.skipped: list[SkippedSpan] = []
        self.early: _EarlyCheck | None = None


def credit_deferred(run: DeferringRun, deferral: Deferral, now: float | None = None) -> None:
    """Check the deferred tasks of ``run`` not credited yet (from ``deferral.credited`` on, and
    its timed copies) and add them to its counters (see the module docstring). Of a finished
    run (``now`` None) every one; mid-run, at ``now`` (s, after the network's ``flush_busy``,
    with no stream deferring), only if every one has ended by then, and then the network stops
    recording its flows until a stream defers again."""
    deferred = _to_credit(run, deferral, now)
    if deferred is None:
        return
    groups = _groups(run, deferral, deferred)
    hi = _latest_end(run)
    windows = _phase_windows(run.accounts.changes, hi)
    least = _RESIDUE * hi
    loads = _LinkLoads()
    for group in groups:
        _credit_group(run, deferral, group, windows, least, loads)
    _credit_links(run, loads, deferral.skipped, windows, least)
    deferral.credited = len(run.graph.tasks)
    deferral.timed_copies = {}
    if now is not None:
        run.network.recorded, run.network.recorded_since = None, math.inf


def refuse_early(run: DeferringRun, deferral: Deferral) -> None:
    """``DeferredFlowContended`` now where ``credit_deferred`` would refuse later: should a
    deferred task timed so far (and not credited) have moved before the event run's flows were
    recorded, or its flow, the other deferred flows timed so far and the event run's flows
    recorded so far, each at its own bound, be able to saturate a link (the credit checks the
    same with more flows, which only add load). The flows are listed only on a link their
    streams' peaks could saturate. What earlier states took in is kept (``_EarlyCheck``): each
    takes in only the tasks timed and the flows recorded since."""
    network, tasks, graph_flows = run.network, run.graph.tasks, run.graph.flows
    early = deferral.early
    if early is None or early.credited != deferral.credited or early.recorded is not network.recorded:
        early = deferral.early = _EarlyCheck(deferral.credited, network.recorded)
    resolved = run.resolved
    for k in range(early.resolved, len(resolved)):
        p = resolved[k]
        flow = graph_flows[p]
        if p < early.credited or flow is None:
            continue
        task = tasks[p]
        if run.deferred_start[p] + task.delay < network.recorded_since:
            raise DeferredFlowContended(f"a deferred {task.stream} task moves before the event run's flows were "
                                        "recorded", frozenset({task.stream}))
        early.timed.append(p)
        early.ours.peak_flow(task.stream, flow.usage, flow.bound)
    early.resolved = len(resolved)
    recorded = network.recorded or []
    for k in range(early.spans, len(recorded)):
        span = recorded[k]
        early.theirs.peak_flow(span.stream, span.usage, span.bound)
    early.spans = len(recorded)
    for link, ours in early.ours.peaks.items():
        capacity = network.capacity[link]
        if _peaks_exceed(ours, early.theirs.peaks.get(link), capacity):
            _check_timed(run, link, early.timed, capacity)


class _EarlyCheck:
    """What ``refuse_early`` has taken in of the deferred tasks not credited (from ``credited``)
    and of one record of the event run's flows (``recorded``): the tasks of ``run.resolved``
    before ``resolved`` and the spans before ``spans``; the deferred tasks timed (positions, in
    the order they were) and their flows' peaks (``ours``), and the recorded flows' peaks on
    every link (``theirs``)."""

    __slots__ = ("credited", "ours", "recorded", "resolved", "spans", "theirs", "timed")

    def __init__(self, credited: int, recorded: list[FlowSpan] | None) -> None:
        self.credited = credited
        self.recorded = recorded
        self.resolved = 0
        self.spans = 0
        self.timed: list[int] = []
        self.ours = _LinkLoads()
        self.theirs = _LinkLoads()


def _peaks_exceed(ours: dict[str, float], theirs: dict[str, float] | None, capacity: float) -> bool:
    """Whether a link's peaks per stream add up to more than its ``capacity`` (units/s): each
    stream's the larger of the deferred flows' (``ours``) and the recorded flows' (``theirs``,
    None: ours alone), summed in the order one ``_LinkLoads`` taking the deferred flows first
    would hold them (the same float sum)."""
    total = 0.0
    for stream, load in ours.items():
        other = theirs.get(stream) if theirs is not None else None
        total += other if other is not None and other > load else load
    if theirs is not None:
        for stream, load in theirs.items():
            if stream not in ours:
                total += load
    return total > capacity * (1 + _OVERLOAD)


def _check_timed(run: DeferringRun, link: str, timed: list[int], capacity: float) -> None:
    """``_check_load`` of the deferred tasks ``timed`` (positions) and the event run's flows
    recorded so far on ``link``."""
    ours: list[Load] = []
    streams: set[str] = set()
    for p in timed:
        flow = run.graph.flows[p]
        if flow is not None:
            for on, units in flow.usage:
                if on == link:
                    ours.append((run.deferred_start[p] + run.graph.tasks[p].delay, run.deferred_end[p],
                                 flow.bound * units))
                    streams.add(run.graph.tasks[p].stream)
    theirs = [(span.since, span.until, span.bound * units) for span in run.network.recorded or ()
              for on, units in span.usage if on == link]
    _check_load(link, ours, theirs, capacity, frozenset(streams))


def _latest_end(run: DeferringRun) -> float:
    """The latest end of a task of ``run`` (s; 0.0 of none, the event run's before its deferred
    ones: ``max`` compiled is a call through Python)."""
    latest = 0.0 if not run.end else -math.inf
    for end in run.end:
        if end > latest:
            latest = end
    deferred_end = run.deferred_end
    for p in run.resolved:
        end = deferred_end[p]
        if end > latest:
            latest = end
    return latest


def _to_credit(run: DeferringRun, deferral: Deferral, now: float | None) -> list[int] | None:
    """The deferred tasks to credit (positions), or None when there is nothing to credit yet:
    none, or (mid-run, at ``now``) one that has not ended."""
    if run.last_deferred < deferral.credited and not deferral.timed_copies:
        return None
    ends = run.deferred_end
    deferred = run.deferred_since(deferral.credited)
    if now is not None:
        for p in deferred:
            ended = ends[p]
            if ended < 0 or ended > now:
                return None  # the first not ended (or not timed) is enough
    if now is not None and any(span.last > now for spans in deferral.timed_copies.values() for span in spans):
        return None
    if any(ends[p] < 0 for p in deferred):
        raise DeferredFlowContended("a deferred task never had its inputs")
    return deferred


class _AlikeTasks:
    """Deferred tasks alike but for their size (``_group``), credited together: their single
    intervals and progressions (s), the bytes of each, and one of them (``task``: its position)."""

    __slots__ = ("like", "sizes", "spans", "singles", "task")

    def __init__(self, task: int, like: Task) -> None:
        self.singles: list[tuple[float, float]] = []
        self.spans: list[Spans] = []
        self.sizes: list[float] = []
        self.task = task
        self.like = like


def _groups(run: DeferringRun, deferral: Deferral, deferred: list[int]) -> list[_AlikeTasks]:
    """The deferred tasks and timed copies to credit, grouped (``_group``), in the order their
    groups first appear; each task's start and end join the run's."""
    groups: list[_AlikeTasks] = []
    of_stream: dict[str, list[_AlikeTasks]] = {}
    start, end, tasks = run.start, run.end, run.graph.tasks
    deferred_start, deferred_end = run.deferred_start, run.deferred_end
    for p in deferred:
        began, ended, task = deferred_start[p], deferred_end[p], tasks[p]
        start[p], end[p] = began, ended
        group = _group(groups, of_stream, task, p)
        group.singles.append((began, ended))
        group.sizes.append(task.size)
    for q, copies in deferral.timed_copies.items():
        task = tasks[q]
        group = _group(groups, of_stream, task, q)
        group.spans += copies
        group.sizes += [task.size * span.times for span in copies]
    return groups


class _LinkLoads:
    """Per link, the deferred flows on it and the load each puts on it (units/s), and per link
    and stream the largest load (units/s) one of the stream's flows puts on it."""

    def __init__(self) -> None:
        self.flows_on: dict[str, list[tuple[Intervals, float]]] = {}
        self.peaks: dict[str, dict[str, float]] = {}
        self.deferred: dict[str, set[str]] = {}
        """Per link, the deferred streams with a flow on it."""
        self.seen: dict[str, list[tuple[Usage, float]]] = {}
        """Per stream, the usages and bounds ``peak_flow`` has taken."""

    def peak_flow(self, stream: str, usage: Usage, bound: float) -> None:
        """``peak`` on each link of ``usage`` of a flow of ``stream`` at its ``bound`` (bytes/s);
        once per stream, usage (shared by kind: told apart by identity) and bound, as the loads
        of another such flow are the same."""
        seen = self.seen.get(stream)
        if seen is None:
            seen = self.seen[stream] = []
        for had, at in seen:
            if had is usage and at == bound:
                return
        seen.append((usage, bound))
        for link, units in usage:
            self.peak(link, stream, bound * units)

    def may_saturate(self, link: str, capacity: float) -> bool:
        """Whether the peaks on ``link`` add up to more than its ``capacity`` (units/s; a stream
        runs one flow at a time: below it, its flows cannot saturate the link)."""
        return _peaks_exceed(self.peaks[link], None, capacity)

    def peak(self, link: str, stream: str, load: float) -> None:
        on_link = self.peaks.get(link)
        if on_link is None:
            on_link = self.peaks[link] = {}
        had = on_link.get(stream)  # a default would be a float boxed each call compiled
        if had is None:
            on_link[stream] = load if load > 0.0 else 0.0
        elif load > had:  # ``max``, without a call through Python (nor a store where it holds)
            on_link[stream] = load


def _credit_group(run: DeferringRun, deferral: Deferral, group: _AlikeTasks, windows: list[Window], least: float,
                  loads: _LinkLoads) -> None:
    """Credit a group of alike deferred tasks: its stream's busy seconds and bytes and, for a
    flow, the units it moves on each link (``DeferredFlowContended`` where it met a skipped span
    on its links or moved before the event run's flows were recorded); its flows join
    ``loads``."""
    accounts, network = run.accounts, run.network
    intervals, task, flow = Intervals(group.singles, group.spans), run.graph.tasks[group.task], run.graph.flows[
        group.task]
    stream = task.stream
    for phase, seconds in intervals.per_window(windows, least):
        accounts.add_busy(stream, phase, seconds)
    total = math.fsum(group.sizes)
    accounts.add_stream(stream, intervals.total, total)
    if flow is None:
        return
    usage, bound = flow.usage, flow.bound
    moving = intervals.later(task.delay)
    if moving.lo < network.recorded_since:
        raise DeferredFlowContended(f"a deferred {stream} task moves before the event run's flows were recorded",
                                    frozenset({stream}))
    for phase, seconds in moving.per_window(windows, least):
        accounts.add_moved(stream, phase, bound * seconds)
        for link, units in usage:
            accounts.add_moved(link, phase, bound * units * seconds)
    for link, units in usage:
        network.links[link].moved += total * units
        loads.flows_on.setdefault(link, []).append((moving, bound * units))
        loads.deferred.setdefault(link, set()).add(stream)
        loads.peak(link, stream, bound * units)


def _credit_links(run: DeferringRun, loads: _LinkLoads, skipped: list[SkippedSpan], windows: list[Window],
                  least: float) -> None:
    """Each link a deferred flow used: ``DeferredFlowContended`` if it could saturate, and its busy
    seconds while deferred flows and none of the event run's (``skipped`` spans' too) are on it."""
    accounts, network = run.accounts, run.network
    ran = _event_flows(network, loads, skipped)
    for link, flows in loads.flows_on.items():
        capacity = network.capacity[link]
        check = capacity if loads.may_saturate(link, capacity) else None
        events, repeats = ran.get(link, ([], []))
        step = _one_step(flows, repeats)
        if step is not None:
            seconds = _by_cycles(link, flows, events, repeats, step, windows, check, frozenset(loads.deferred[link]))
        else:
            if check is not None:
                listed = [(a, b, load) for intervals, load in flows for a, b in intervals.listed()]
                _check_load(link, listed, events + [(a, b, load) for span, load in repeats for a, b in span.listed()],
                            check, frozenset(loads.deferred[link]))
            off = (union([Intervals([(a, b) for a, b, _load in events], [span for span, _load in repeats])])
                   if events or repeats else None)
            seconds = _alone(_on_link(flows), off, windows)
        for (_begin, _end, phase), alone in zip(windows, seconds):
            if alone > least:
                network.links[link].busy += alone
                accounts.add_busy(link, phase, alone)


def _on_link(flows: list[tuple[Intervals, float]]) -> Intervals:
    """What the deferred ``flows`` on a link cover, as disjoint intervals: those of one group
    (one stream, which runs one task at a time) are already; several are joined (``union``)."""
    if len(flows) == 1:
        return flows[0][0]
    return union(intervals for intervals, _load in flows)


def _event_flows(network: FlowNetwork, loads: _LinkLoads,
                 skipped: list[SkippedSpan]) -> dict[str, tuple[list[Load], list[tuple[Spans, float]]]]:
    """Per link, the event run's flows on it while deferred ones are: those it recorded (from,
    to, load) and the progressions of the ``skipped`` spans' copies of them (with their loads);
    their streams' peaks join ``loads``."""
    reach: dict[str, tuple[float, float]] = {}
    for link, flows in loads.flows_on.items():
        lo, hi = math.inf, -math.inf  # ``min`` and ``max`` of a generator compiled are calls through Python
        for part, _load in flows:
            lo, hi = min(lo, part.lo), max(hi, part.hi)
        reach[link] = (lo, hi)
    ran: dict[str, tuple[list[Load], list[tuple[Spans, float]]]] = {}
    for span in network.recorded or ():
        since, until = span.since, span.until
        for link, units in span.usage:
            bounds = reach.get(link)
            if bounds is not None and since < bounds[1] and until > max(since, bounds[0]):
                _on(ran, link)[0].append((since, until, span.bound * units))
                loads.peak(link, span.stream, span.bound * units)
    for skip in skipped:
        for flow, copies in skip.progressions():
            for link, units in flow.usage:
                bounds = reach.get(link)
                if bounds is not None:
                    k0, k1 = copies.meeting(bounds[0], bounds[1])
                    if k0 <= k1:
                        met = Spans(copies.first + k0 * copies.step, copies.step, copies.length, k1 - k0 + 1)
                        _on(ran, link)[1].append((met, flow.bound * units))
                        loads.peak(link, flow.stream, flow.bound * units)
    return ran


def _on(ran: dict[str, tuple[list[Load], list[tuple[Spans, float]]]],
        link: str) -> tuple[list[Load], list[tuple[Spans, float]]]:
    """``ran``'s lists of ``link``, made the first time (``setdefault`` compiled would make a
    tuple of two lists each call)."""
    lists = ran.get(link)
    if lists is None:
        lists = ran[link] = ([], [])
    return lists


def _one_step(flows: list[tuple[Intervals, float]], repeats: list[tuple[Spans, float]]) -> float | None:
    """The step of the copies of skipped flows on a link (``repeats``) if they and the deferred
    ``flows``' progressions share one, else None (none, or two that drift apart)."""
    if not repeats:
        return None
    steps = {span.step for span, _load in repeats}
    steps.update(span.step for intervals, _load in flows for span in intervals.spans)
    return steps.pop() if len(steps) == 1 else None


def _by_cycles(link: str, flows: list[tuple[Intervals, float]], events: list[Load], repeats: list[tuple[Spans, float]],
               step: float, windows: list[Window], check: float | None, streams: frozenset[str]) -> list[float]:
    """What ``_credit_links`` finds of a link with copies of skipped flows on it (``repeats``)
    whose progressions share one ``step``, by cycles of it (``tiersim.fastforward.cycles``):
    ``DeferredFlowContended`` if it could saturate (with ``check``, its capacity), and per
    window the seconds the deferred ``flows`` are on it alone."""
    ours = [(a, b, load) for intervals, load in flows for a, b in intervals.singles]
    ours_spans = [(span, load) for intervals, load in flows for span in intervals.spans]
    lo, hi = min(intervals.lo for intervals, _load in flows), max(intervals.hi for intervals, _load in flows)
    cut = cycles.pieces(lo, hi, step, repeats[0][0].first, _edges_of(ours + events, windows, lo, hi),
                        [span for span, _load in ours_spans + repeats])
    on, off = cycles.clipped(cut, ours, ours_spans), cycles.clipped(cut, events, repeats)
    if check is not None:
        _check_load(link, [flow for piece in on for flow in piece], [flow for piece in off for flow in piece], check,
                    streams)
    return cycles.alone(cut, on, off, [(begin, end) for begin, end, _phase in windows])


def _edges_of(singles: list[Load], windows: list[Window], lo: float, hi: float) -> list[float]:
    """Where the ``singles`` start and end, and the bounds of the ``windows`` between ``lo`` and
    ``hi`` (s)."""
    edges = [time for a, b, _load in singles for time in (a, b)]
    return edges + [time for begin, end, _phase in windows for time in (begin, end) if lo < time < hi]


def _group(groups: list[_AlikeTasks], of_stream: dict[str, list[_AlikeTasks]], task: Task, p: int) -> _AlikeTasks:
    """The group of ``task``, at position ``p``: tasks alike but for their size (stream, usage,
    rate cap and delay; usages are shared by kind, so told apart by identity), found among its
    stream's groups (``of_stream``: a stream holds a few, in turn; no key to build and hash), or
    a new one, appended to ``groups``."""
    alike = of_stream.get(task.stream)
    if alike is None:
        alike = of_stream[task.stream] = []
    for found in alike:
        like = found.like
        if like.usage is task.usage and like.rate_cap == task.rate_cap and like.delay == task.delay:
            return found
    found = _AlikeTasks(p, task)
    alike.append(found)
    groups.append(found)
    return found


def _alone(on: Intervals, off: Intervals | None, windows: list[Window]) -> list[float]:
    """Per phase window, the seconds in which the disjoint intervals ``on`` (deferred flows on a
    link) are on it and none of the disjoint ``off`` (the event run's flows there; None: none)
    is: each of ``on``'s intervals, in order, but what ``off`` covers of it (its single
    intervals met in order too, its progressions in closed form)."""
    if off is None or (not off.singles and not off.spans):
        return [on.covered(begin, end) if begin < on.hi and end > on.lo else 0.0 for begin, end, _phase in windows]
    seconds = [0.0] * len(windows)
    bounds = ([begin for begin, _end, _phase in windows], [end for _begin, end, _phase in windows])
    singles = sorted(off.singles)
    for part in [sorted(on.singles), *(span.listed() for span in on.spans)]:  # each in order
        _less_covered(part, singles, off.spans, bounds, seconds)
    return seconds


def _less_covered(on: list[tuple[float, float]], singles: list[tuple[float, float]], spans: list[Spans],
                  bounds: tuple[list[float], list[float]], seconds: list[float]) -> None:
    """Add to ``seconds`` (per phase window, whose starts and ends are ``bounds``) the seconds
    of the disjoint, ordered intervals ``on`` that the disjoint ``singles`` (in order) and
    ``spans`` do not cover."""
    begins, ends = bounds
    i = j = 0
    for a, b in on:
        while i < len(ends) - 1 and ends[i] <= a:
            i += 1
        while j < len(singles) and singles[j][1] <= a:
            j += 1
        k = i
        while k < len(begins) and begins[k] < b:
            lo, hi = max(a, begins[k]), min(b, ends[k])
            if hi > lo:
                seconds[k] += (hi - lo) - _covered_from(singles, j, lo, hi, spans)
            k += 1


def _covered_from(singles: list[tuple[float, float]], j: int, lo: float, hi: float, spans: list[Spans]) -> float:
    """Seconds inside ``[lo, hi]`` of the disjoint, ordered ``singles`` from the ``j``-th on and
    of the progressions ``spans`` (all disjoint)."""
    seconds = sum((span.covered(lo, hi) for span in spans), 0.0)
    while j < len(singles) and singles[j][0] < hi:
        start, end = singles[j]
        if end > lo:
            seconds += min(end, hi) - max(start, lo)
        j += 1
    return seconds


def _check_load(link: str, ours: list[Load], theirs: list[Load], capacity: float, streams: frozenset[str]) -> None:
    """``DeferredFlowContended`` if at some moment the deferred flows on ``link`` (``ours``, of
    ``streams``: from, to, load at their own bounds) and the event run's flows then (``theirs``)
    could take more than its ``capacity`` (units/s): a sweep over their starts and ends, each
    moment judged once all its changes are in."""
    changes = sorted([(a, 1, load) for a, _b, load in ours] + [(b, -1, -load) for _a, b, load in ours]
                     + [(a, 0, load) for a, _b, load in theirs] + [(b, 0, -load) for _a, b, load in theirs])
    limit, on, load, last = capacity * (1 + _OVERLOAD), 0, 0.0, len(changes) - 1
    for k, (time, count, change) in enumerate(changes):
        on += count
        load += change
        if on > 0 and load > limit and (k == last or changes[k + 1][0] != time):
            raise DeferredFlowContended(f"link {link!r} could saturate under a deferred flow at {time:.6g} s", streams)


def _phase_windows(changes: list[tuple[float, str]], until: float) -> list[Window]:
    """The run's phases as (from, to, phase) (s), the phase before the first marker ""."""
    windows = []
    start, phase = 0.0, ""
    for time, name in changes:
        if time > start:
            windows.append((start, time, phase))
        start, phase = time, name
    windows.append((start, max(until, start), phase))
    return windows
