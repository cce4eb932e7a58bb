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
flows were recorded; otherwise ``NotQuiet`` (the caller then simulates in full). It then adds
the deferred tasks (and the copies a fast-forward timed without building, ``Run.images``) to
the run's time integrals: stream busy seconds and bytes per phase, link units per phase, and
link busy seconds as the union with the event run's own flows on each link. Times are s, sizes
bytes, rates bytes/s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from tiersim.engine.graph import Usage

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.engine.runner import Run

_Kind = tuple[str, tuple[Usage, float, float, str] | None, float]
"""Stream, flow (usage, rate cap, own bound, stream; None without one) and delay (s)."""


class _Spans(NamedTuple):
    """Flows on one link: starts and ends (s) and the load each puts on it (units/s)."""

    starts: np.ndarray
    ends: np.ndarray
    loads: np.ndarray

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
    groups: dict[_Kind, tuple[list[float], list[float], list[float]]] = {}
    """Tasks alike but for their size, credited together: their starts, ends and sizes."""

    def group(q: int) -> tuple[list[float], list[float], list[float]]:
        task, flow = graph.tasks[q], graph.flows[q]
        kind = (task.stream, None if flow is None else (flow[1], flow[2], flow[3], flow[4]), task.delay)
        found = groups.get(kind)
        if found is None:
            found = groups[kind] = ([], [], [])
        return found

    for p in deferred:
        run.start[p], run.end[p] = run.deferred_start[p], run.deferred_end[p]
        began_at, ended_at, sizes = group(p)
        began_at.append(run.start[p])
        ended_at.append(run.end[p])
        sizes.append(graph.tasks[p].size)
    for q, (image_starts, image_ends) in run.images.items():
        began_at, ended_at, sizes = group(q)
        began_at += image_starts
        ended_at += image_ends
        sizes += [graph.tasks[q].size] * len(image_starts)
    windows = _phase_windows(accounts.changes, max(max(run.end, default=0.0), max(run.deferred_end.values())))
    flows_on: dict[str, list[tuple[np.ndarray, np.ndarray, float]]] = {}
    peaks: dict[str, dict[str, float]] = {}
    """Per link, per stream: the largest load (units/s) one of its flows puts on it."""
    for (stream, flow_kind, delay), (start_list, end_list, sizes) in groups.items():
        began, ends = np.array(start_list), np.array(end_list)
        for phase, seconds in _per_phase(began, ends, windows):
            _add(accounts.busy, (stream, phase), seconds)
        accounts.stream_busy[stream] = accounts.stream_busy.get(stream, 0.0) + float((ends - began).sum())
        total = math.fsum(sizes)
        accounts.stream_bytes[stream] = accounts.stream_bytes.get(stream, 0.0) + total
        if flow_kind is None:
            continue
        usage, _cap, bound, _stream = flow_kind
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
            flows_on.setdefault(link, []).append((moving, ends, bound * units))
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
    for link, chunks in flows_on.items():
        flows = _Spans(np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]),
                       np.concatenate([np.full(len(c[0]), c[2]) for c in chunks]))
        events = _Spans(*np.array(ran.get(link, []), dtype=float).reshape(-1, 3).T)
        capacity = network.capacity[link]
        could_saturate = sum(peaks[link].values()) > capacity * (1 + _OVERLOAD)  # a stream runs one flow at a time
        starts, ends = _sweep_link(link, flows, events, capacity if could_saturate else None)
        if len(starts):
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


def _sweep_link(link: str, flows: _Spans, events: _Spans, capacity: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The stretches (starts, ends, s) in which the deferred ``flows`` on ``link`` are on it and
    none of the event run's flows (``events``) is: disjoint pieces between consecutive moments
    either begins or ends. Given ``capacity`` (units/s), also ``NotQuiet`` if at some moment
    the deferred flows on it, at their own bounds, and the event flows then could take more."""
    count, others = len(flows.starts), len(events.starts)
    times = np.concatenate([flows.starts, flows.ends, events.starts, events.ends])
    order = np.argsort(times, kind="stable")
    times = times[order]
    on = np.cumsum(_edges(0, count, 2 * others)[order])  # deferred flows on the link
    if capacity is not None:
        load = np.cumsum(np.concatenate([flows.loads, -flows.loads, events.loads, -events.loads])[order])
        settled = np.append(times[1:] != times[:-1], True)  # the last change at each moment
        over = settled & (on > 0) & (load > capacity * (1 + _OVERLOAD))
        if over.any():
            raise NotQuiet(f"link {link!r} could saturate under a deferred flow at {times[over][0]:.6g} s")
    running = np.cumsum(_edges(2 * count, others, 0)[order])  # event flows on it
    alone = (on[:-1] > 0) & (running[:-1] == 0)
    return times[:-1][alone], times[1:][alone]


def _edges(before: int, count: int, after: int) -> np.ndarray:
    """+1 for ``count`` starts then -1 for their ends, ``before`` zeros ahead and ``after`` behind."""
    return np.concatenate([np.zeros(before, dtype=np.int64), np.ones(count, dtype=np.int64),
                           np.full(count, -1, dtype=np.int64), np.zeros(after, dtype=np.int64)])


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
