"""How busy a run kept its streams and links, over the run and per phase, from its time
integrals (``tiersim.engine.accounts``): no trace needed. Seconds, bytes and link units.

Compiled with the engine: a sweep reads one phase's rows of every run (its busiest resource),
which in Python cost as much as planning the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from tiersim.engine.runner import EngineRun

UsageRow = tuple[str, str, str, float, float, float]
"""(resource, kind, phase, busy seconds, utilisation, units moved): kind ``"stream"`` or
``"link"``, phase ``"iteration"`` for the whole run."""

PhaseTotals = tuple[str, dict[str, float], dict[str, float]]
"""A phase, its busy seconds and its units moved, by stream or link."""


def usage_table(run: EngineRun, spans: dict[str, float], phases: Sequence[str], iteration: bool) -> list[UsageRow]:
    """The streams (by name) then the links (in the order the run declared them): over the run
    when ``iteration``, then in each of ``phases`` (``spans``: their seconds) in which they
    were busy. A stream's utilisation is its busy seconds over the span, its units the bytes its
    flows moved; a link's utilisation is the units its flows used over capacity x span."""
    acc = run.accounts
    totals: list[PhaseTotals] = []
    for phase in phases:
        busy, moved = acc.in_phase(phase)
        totals.append((phase, busy, moved))
    stream_busy = acc.stream_busy
    whole: dict[str, tuple[float, float]] = {}
    if iteration:
        stream_bytes = acc.stream_bytes
        whole = {stream: (seconds, stream_bytes[stream]) for stream, seconds in stream_busy.items()}
        streams = sorted(stream_busy)
    else:
        streams = sorted([stream for stream in stream_busy if any(stream in busy for _p, busy, _m in totals)])
    return _stream_rows(run, spans, totals, streams, whole) + _link_rows(run, spans, totals, iteration)


def _stream_rows(run: EngineRun, spans: dict[str, float], totals: list[PhaseTotals], streams: list[str],
                 whole: dict[str, tuple[float, float]]) -> list[UsageRow]:
    """``usage_table`` of the ``streams`` (``whole``: each one's seconds and bytes over the run,
    where the table has the run)."""
    rows: list[UsageRow] = []
    for stream in streams:
        if stream in whole:
            seconds, bytes_moved = whole[stream]
            rows.append((stream, "stream", "iteration", seconds, _ratio(seconds, run.makespan), bytes_moved))
        for phase, busy, moved in totals:
            if stream in busy:
                seconds = busy[stream]
                rows.append((stream, "stream", phase, seconds, _ratio(seconds, spans[phase]), moved.get(stream, 0.0)))
    return rows


def _link_rows(run: EngineRun, spans: dict[str, float], totals: list[PhaseTotals], iteration: bool) -> list[UsageRow]:
    """``usage_table`` of the links."""
    rows: list[UsageRow] = []
    for link, capacity in run.link_capacity.items():
        if iteration:
            units_moved = run.link_units_moved[link]
            rows.append((link, "link", "iteration", run.link_busy[link],
                         _ratio(units_moved, capacity * run.makespan), units_moved))
        for phase, busy, moved in totals:
            if link in busy:
                units_used = moved.get(link, 0.0)
                rows.append((link, "link", phase, busy[link], _ratio(units_used, capacity * spans[phase]),
                             units_used))
    return rows


def busiest(run: EngineRun, spans: dict[str, float], phase: str) -> str | None:
    """The stream or link of ``usage_table``'s rows for ``phase`` alone with the highest
    utilisation, the first in table order among those within 1e-9 of it (a stream and the link
    it saturates differ by float residue); None where nothing was busy in ``phase``. What a
    sweep's row reads of every run, without building the rows."""
    acc = run.accounts
    busy, moved = acc.in_phase(phase)
    span = spans[phase]
    names = sorted([stream for stream in acc.stream_busy if stream in busy])
    shares = [_ratio(busy[stream], span) for stream in names]
    for link, capacity in run.link_capacity.items():
        if link in busy:
            names.append(link)
            shares.append(_ratio(moved.get(link, 0.0), capacity * span))
    if not shares:
        return None
    top = max(shares)
    return next(name for name, share in zip(names, shares) if share >= top * (1 - 1e-9))


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0
