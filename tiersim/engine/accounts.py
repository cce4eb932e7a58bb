"""What a run's summaries need, integrated over time as the run goes (no per-task records).

The current phase is the phase of the last phase marker that finished. Kept per phase: its
seconds; per stream, the seconds one of its tasks runs and the bytes its flows move; per
link, the seconds a flow is on it and the link units its flows use; over the whole run, each
stream's busy seconds and bytes and the seconds in which no compute task runs (time is s,
sizes bytes). A flow's bytes count in the phase in which they move: at a phase change every
active flow is brought to that moment (``flush``). Every total is a plain number in a dict
whose keys are only ever added (``counters`` lists those dicts), so a fast-forward over ``m``
identical periods can add ``m`` times one period's increase, reading each dict's values at
the period's ends as lists. Busy seconds and units moved are kept per phase, by resource
(``busy_in``, ``moved_in``, with the same phases in the same order); ``busy`` and ``moved``
give them by (resource, phase).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.engine.flows import Flow


COMPUTE_CATEGORIES = ("compute", "adam")
"""Task categories that compute (GPU kernels, CPU Adam); the rest move data or mark phases."""


class Accounts:
    """Time integrals of one run, updated at each start, end and phase change."""

    def __init__(self, compute_categories: Iterable[str] = COMPUTE_CATEGORIES) -> None:
        self.compute_categories = frozenset(compute_categories)
        self.phase: str | None = None
        self.phase_since = 0.0
        self.spans: dict[str, float] = {}
        """Seconds per phase."""
        self.busy_in: dict[str, dict[str, float]] = {"": {}}
        """Phase -> stream or link -> busy seconds (the phase before the first marker: "")."""
        self.moved_in: dict[str, dict[str, float]] = {"": {}}
        """Phase -> stream or link -> bytes (stream) or link units (link) moved."""
        self._busy_now = self.busy_in[""]
        self._moved_now = self.moved_in[""]
        self.stream_busy: dict[str, float] = {}
        """Stream -> seconds its tasks ran, over the run."""
        self.stream_bytes: dict[str, float] = {}
        """Stream -> bytes its tasks moved, over the run."""
        self.exposed = 0.0
        """Seconds in which no compute task ran."""
        self.computing = 0
        self.idle_since = 0.0
        self.since: dict[str, float] = {}
        """Streams and links busy now -> when their busy stretch in this phase began (s)."""
        self.changes: list[tuple[float, str]] = []
        """When each phase began (s) and its name, in order (those a fast-forward skips over
        are not here: a skipped span ends in the phase it began in)."""

    @property
    def busy(self) -> dict[tuple[str, str], float]:
        """(stream or link, phase) -> busy seconds."""
        return _by_key(self.busy_in)

    @property
    def moved(self) -> dict[tuple[str, str], float]:
        """(stream or link, phase) -> bytes (stream) or link units (link) moved."""
        return _by_key(self.moved_in)

    def add_busy(self, resource: str, phase: str, seconds: float) -> None:
        """Count ``seconds`` of ``resource`` busy in ``phase``."""
        values = self._phase_counters(phase)[0]
        values[resource] = values.get(resource, 0.0) + seconds

    def add_moved(self, resource: str, phase: str, amount: float) -> None:
        """Count ``amount`` bytes (stream) or link units (link) moved in ``phase``."""
        values = self._phase_counters(phase)[1]
        values[resource] = values.get(resource, 0.0) + amount

    def _phase_counters(self, phase: str) -> tuple[dict[str, float], dict[str, float]]:
        """``phase``'s busy seconds and units moved, by resource (added to both together, so
        that ``busy_in`` and ``moved_in`` hold the same phases in the same order)."""
        busy = self.busy_in.get(phase)
        if busy is None:
            busy = self.busy_in[phase] = {}
            self.moved_in[phase] = {}
        return busy, self.moved_in[phase]

    def task_started(self, stream: str, category: str, now: float) -> None:
        """A task of ``category`` began on ``stream`` at ``now`` (s)."""
        self.since[stream] = now
        if category in self.compute_categories:
            if not self.computing:
                self.exposed += now - self.idle_since
            self.computing += 1

    def task_ended(self, stream: str, category: str, began: float, size: float, now: float) -> None:
        """A task that began at ``began`` ended at ``now`` (s), having moved ``size`` bytes
        (phase markers are not tasks here: they end in ``phase_begins``)."""
        busy = self._busy_now
        busy[stream] = busy.get(stream, 0.0) + now - self.since.pop(stream)
        self.stream_busy[stream] = self.stream_busy.get(stream, 0.0) + now - began
        self.stream_bytes[stream] = self.stream_bytes.get(stream, 0.0) + size
        if category in self.compute_categories:
            self.computing -= 1
            if not self.computing:
                self.idle_since = now

    def link_busy(self, link: str, now: float) -> None:
        """A flow came onto the idle ``link`` at ``now``."""
        self.since[link] = now

    def link_idle(self, link: str, now: float) -> None:
        """The last flow left ``link`` at ``now``."""
        busy = self._busy_now
        busy[link] = busy.get(link, 0.0) + now - self.since.pop(link)

    def flow_ended(self, flow: Flow) -> None:
        """A flow moved its last byte: the bytes not yet counted count in this phase."""
        self._credit(flow, flow.size - flow.attributed)

    def _credit(self, flow: Flow, num_bytes: float) -> None:
        moved = self._moved_now
        stream = flow.stream
        moved[stream] = moved.get(stream, 0.0) + num_bytes
        for link, units in flow.usage:
            moved[link] = moved.get(link, 0.0) + num_bytes * units

    def flush(self, now: float, flows: Iterable[Flow]) -> None:
        """Count everything in progress up to ``now`` in the current phase."""
        busy, since = self._busy_now, self.since
        for resource, began in since.items():
            if now > began:
                busy[resource] = busy.get(resource, 0.0) + now - began
                since[resource] = now
        if self.phase is not None:
            self.spans[self.phase] = self.spans.get(self.phase, 0.0) + now - self.phase_since
        self.phase_since = now
        if not self.computing:
            self.exposed += now - self.idle_since
            self.idle_since = now
        for flow in flows:
            done = flow.size - max(flow.remaining - flow.rate * (now - flow.last), 0.0)
            if done > flow.attributed:
                self._credit(flow, done - flow.attributed)
                flow.attributed = done

    def phase_begins(self, phase: str, now: float, flows: Iterable[Flow]) -> None:
        """A phase marker finished at ``now``: what ran so far counts in the phase before."""
        self.flush(now, flows)
        self.phase = phase
        self._busy_now, self._moved_now = self._phase_counters(phase)
        self.changes.append((now, phase))

    def counters(self) -> list[dict[str, float]]:
        """Every running total but ``exposed``, as dicts in a fixed order: seconds per phase,
        each stream's busy seconds and bytes, then each phase's busy seconds and units moved.
        Dicts and keys are only ever added (dicts and keys alike after those there before), so
        the values of each, read as lists at one moment, line up with the same dicts and keys
        later (a fast-forward's snapshots)."""
        out = [self.spans, self.stream_busy, self.stream_bytes]
        moved_in = self.moved_in
        for phase, busy in self.busy_in.items():
            out.append(busy)
            out.append(moved_in[phase])
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Accounts) and self._compared() == other._compared()

    def _compared(self) -> tuple[object, ...]:
        return self.exposed, self.spans, self.busy_in, self.moved_in, self.stream_busy, self.stream_bytes

    __hash__ = None  # type: ignore[assignment]


def _by_key(by_phase: dict[str, dict[str, float]]) -> dict[tuple[str, str], float]:
    """Phase -> resource -> value as (resource, phase) -> value."""
    return {(resource, phase): value for phase, values in by_phase.items() for resource, value in values.items()}
