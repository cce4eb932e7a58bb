"""Deferred tasks: fixed-rate work taken out of the event run and timed by recursion.

A schedule may ask its session to defer the tasks of some streams for a stretch
(``Session.defer``): copy streams that fall behind the compute, whose growing queues keep a
loop's state from ever repeating. A deferred task takes no event: ``Run`` gives it start =
the later of its stream's previous end and its dependencies' ends, and end = start + delay +
bytes / its flow's own bound, as soon as those are known; an event task that waits for one
gets a timeout at its end. That is the full simulation's answer only if each deferred flow
really moved at its own bound, so ``settle`` checks after the run that no link a deferred
flow used could saturate while it ran (every deferred flow on it at its bound plus the event
run's flows on that link then, each at its own bound), that no fast-forwarded span whose event
tasks use one of its links overlaps a deferred flow and that none moved before the event run's
flows were recorded; otherwise
``NotQuiet`` (the caller then simulates in full). It then adds the deferred tasks to the
run's time integrals: stream busy seconds and bytes per phase, link units per phase, and link
busy seconds as the union with the event run's own flows on each link. Times are s, sizes
bytes, rates bytes/s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from tiersim.engine.graph import Usage

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.engine.runner import Run

Span = tuple[float, float]
"""From, to (s)."""

_OVERLOAD = 1e-12
"""Fraction of a link's capacity the summed bounds on it may exceed (float residue)."""


class NotQuiet(Exception):
    """A deferred flow shared a link that could saturate, or a skipped span: its times are not
    the full simulation's."""


def settle(run: Run, skipped: list[tuple[float, float, frozenset[str]]]) -> None:
    """Check the deferred tasks of a finished ``run`` and add them to its counters (see the
    module docstring); ``skipped`` are the spans a fast-forward jumped over (s) and the links
    the event tasks skipped there use."""
    graph, accounts, network = run.graph, run.accounts, run.network
    if graph.last_deferred < 0:
        return
    deferred = [p for p, flag in enumerate(graph.deferred) if flag]
    if any(p not in run.deferred_end for p in deferred):
        raise NotQuiet("a deferred task never had its inputs")
    windows = _phase_windows(accounts.changes, max(max(run.end, default=0.0), max(run.deferred_end.values())))
    groups: dict[tuple[str, tuple[Usage, float, float, str] | None, float], list[int]] = {}
    for p in deferred:  # tasks alike but for their size, credited together
        run.start[p], run.end[p] = run.deferred_start[p], run.deferred_end[p]
        task, flow = graph.tasks[p], graph.flows[p]
        kind = None if flow is None else (flow[1], flow[2], flow[3], flow[4])
        groups.setdefault((task.stream, kind, task.delay), []).append(p)
    flows_on: dict[str, list[tuple[float, float, float]]] = {}
    peaks: dict[str, dict[str, float]] = {}
    """Per link, per stream: the largest load (units/s) one of its flows puts on it."""
    for (stream, kind, delay), members in groups.items():
        began = np.array([run.deferred_start[p] for p in members])
        ends = np.array([run.deferred_end[p] for p in members])
        sizes = [graph.tasks[p].size for p in members]
        for phase, seconds in _per_phase(began, ends, windows):
            _add(accounts.busy, (stream, phase), seconds)
        accounts.stream_busy[stream] = accounts.stream_busy.get(stream, 0.0) + float((ends - began).sum())
        total = math.fsum(sizes)
        accounts.stream_bytes[stream] = accounts.stream_bytes.get(stream, 0.0) + total
        if kind is None:
            continue
        usage, _cap, bound, _stream = kind
        moving = began + delay
        for start, until, links in skipped:
            if links.intersection(link for link, _units in usage) and np.any((moving < until) & (ends > start)):
                raise NotQuiet(f"a deferred {stream} task overlaps a fast-forwarded span on its links")
        if float(moving.min()) < network.pieces_since:
            raise NotQuiet(f"a deferred {stream} task moves before the event run's flows were recorded")
        for phase, seconds in _per_phase(moving, ends, windows):
            _add(accounts.moved, (stream, phase), bound * seconds)
            for link, units in usage:
                _add(accounts.moved, (link, phase), bound * units * seconds)
        for link, units in usage:
            network.moved[link] += total * units
            flows_on.setdefault(link, []).extend(
                zip(moving.tolist(), ends.tolist(), [bound * units] * len(members)))
            on_link = peaks.setdefault(link, {})
            on_link[stream] = max(on_link.get(stream, 0.0), bound * units)
    ran: dict[str, list[tuple[float, float, float]]] = {}
    for start, until, usage, bound, stream in network.pieces or ():
        if until > start:
            for link, units in usage:
                if link in flows_on:
                    ran.setdefault(link, []).append((start, until, bound * units))
                    on_link = peaks[link]
                    on_link[stream] = max(on_link.get(stream, 0.0), bound * units)
    for link, flows in flows_on.items():
        events = ran.get(link, [])
        capacity = network.capacity[link]
        if sum(peaks[link].values()) > capacity * (1 + _OVERLOAD):  # a stream runs one flow at a time
            _check_quiet(link, flows, events, capacity)
        alone = _minus(_union([(start, until) for start, until, _load in flows]),
                       _union([(start, until) for start, until, _load in events]))
        if alone:
            starts, ends = np.array(alone).T
            network.busy[link] += float((ends - starts).sum())
            for phase, seconds in _per_phase(starts, ends, windows):
                _add(accounts.busy, (link, phase), seconds)


def _add(target: dict[tuple[str, str], float], key: tuple[str, str], value: float) -> None:
    target[key] = target.get(key, 0.0) + value


def _per_phase(starts: np.ndarray, ends: np.ndarray,
               windows: list[tuple[float, float, str]]) -> list[tuple[str, float]]:
    """Seconds of the spans ``starts``-``ends`` in each phase window they overlap."""
    lo, hi = float(starts.min()), float(ends.max())
    out = []
    for begin, end, phase in windows:
        if begin >= hi or end <= lo:
            continue
        if begin <= lo and hi <= end:
            seconds = float((ends - starts).sum())
        else:
            seconds = float(np.clip(np.minimum(ends, end) - np.maximum(starts, begin), 0.0, None).sum())
        if seconds > 0:
            out.append((phase, seconds))
    return out


def _check_quiet(link: str, flows: list[tuple[float, float, float]], events: list[tuple[float, float, float]],
                 capacity: float) -> None:
    """``NotQuiet`` if at some moment the deferred ``flows`` on ``link`` (from, to, units/s at
    their own bounds) and the event run's flows on it then (the same, ``events``) could take
    more than its ``capacity``."""
    marks: list[tuple[float, int, float, int]] = []  # (time, 0 = leave before 1 = join, load, deferred)
    for start, until, load in flows:
        marks += [(start, 1, load, 1), (until, 0, -load, -1)]
    for start, until, load in events:
        marks += [(start, 1, load, 0), (until, 0, -load, 0)]
    marks.sort()
    load, active = 0.0, 0
    for i, (time, _kind, change, count) in enumerate(marks):
        load += change
        active += count
        if i + 1 < len(marks) and marks[i + 1][0] == time:
            continue
        if active and load > capacity * (1 + _OVERLOAD):
            raise NotQuiet(f"link {link!r} could saturate under a deferred flow at {time:.6g} s")


def _phase_windows(changes: list[tuple[float, str]], until: float) -> list[tuple[float, float, str]]:
    """The run's phases as (from, to, phase) (s), the phase before the first marker ""."""
    windows = []
    start, phase = 0.0, ""
    for time, name in changes:
        if time > start:
            windows.append((start, time, phase))
        start, phase = time, name
    windows.append((start, max(until, start), phase))
    return windows


def _union(spans: list[Span]) -> list[Span]:
    """Sorted, disjoint spans covering the same time as ``spans``."""
    merged: list[Span] = []
    for start, until in sorted(spans):
        if merged and start <= merged[-1][1]:
            if until > merged[-1][1]:
                merged[-1] = (merged[-1][0], until)
        else:
            merged.append((start, until))
    return merged


def _minus(spans: list[Span], other: list[Span]) -> list[Span]:
    """The parts of sorted disjoint ``spans`` outside sorted disjoint ``other``."""
    out: list[Span] = []
    j = 0
    for start, until in spans:
        while j < len(other) and other[j][1] <= start:
            j += 1
        k = j
        while start < until:
            if k >= len(other) or other[k][0] >= until:
                out.append((start, until))
                break
            if other[k][0] > start:
                out.append((start, other[k][0]))
            start = max(start, other[k][1])
            k += 1
    return out
