"""What a run's summaries need, integrated over time as the run goes (no per-task records).

The current phase is the phase of the last phase marker that finished. Kept per phase: its
seconds; per stream, the seconds one of its tasks runs and the bytes its flows move; per
link, the seconds a flow is on it and the link units its flows use; over the whole run, each
stream's busy seconds and bytes and the seconds in which no compute task runs (time is s,
sizes bytes). A flow's bytes count in the phase in which they move: at a phase change every
active flow is brought to that moment (``flush``). Every total but the exposed seconds is a
plain number in one list, ``values``, at a slot given to it when it is first counted and
only ever appended to: a copy of the list at one moment lines up with the list later, so a
fast-forward over ``m`` identical periods can add ``m`` times one period's increase to each.
``spans``, ``busy``, ``moved``, ``stream_busy`` and ``stream_bytes`` read them by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.engine.flows import Flow


COMPUTE_CATEGORIES = ("compute", "adam")
"""Task categories that compute (GPU kernels, CPU Adam); the rest move data or mark phases."""

Slots = dict[str, int]
"""Name -> slot in ``Accounts.values``."""


class Resource:
    """One stream or link as the accounts see it: whether it is ``busy`` now and ``since`` when
    in this phase (s), the ``started``-th busy stretch to begin, and its slots in
    ``Accounts.values`` (-1: not read yet): its busy seconds and (a link) units moved in the
    phase it was last read in (the ``phase``-th: looked up by name once a phase) and, for a
    stream, its seconds and bytes over the run. Held by the engine's streams and links, so that
    a start or end finds its account without a lookup by name."""

    __slots__ = ("busy", "busy_slot", "moved_slot", "name", "phase", "run_slot", "since", "started")

    def __init__(self, name: str = "") -> None:  # (a default: unpickling makes one without arguments)
        self.name = name
        self.busy = False
        self.since = 0.0
        self.started = 0
        self.phase = -1
        self.busy_slot = -1
        self.moved_slot = -1
        self.run_slot = -1


class Accounts:
    """Time integrals of one run, updated at each start, end and phase change."""

    def __init__(self, compute_categories: Iterable[str] = COMPUTE_CATEGORIES) -> None:
        self.compute_categories = frozenset(compute_categories)
        self.phase: str | None = None
        self.phase_since = 0.0
        self.values: list[float] = []
        """Every running total but ``exposed``, by slot (slots are only appended)."""
        self._spans: Slots = {}
        """Phase -> slot of its seconds."""
        self._busy_in: dict[str, Slots] = {}
        """Phase -> stream or link -> slot of its busy seconds (before the first marker: "")."""
        self._moved_in: dict[str, Slots] = {}
        """Phase -> stream or link -> slot of the bytes (stream) or link units (link) moved."""
        self._busy_now, self._moved_now = self._phase_slots("")
        self._streams: Slots = {}
        """Stream -> slot of the seconds its tasks ran over the run; the next slot: their bytes."""
        self._resources: dict[str, Resource] = {}
        """Stream or link -> its ``Resource``."""
        self._every: list[Resource] = []
        """Every ``Resource``, in the order they were made."""
        self._phases = 0
        """Phase changes so far (``Resource.phase``)."""
        self._starts = 0
        """Busy stretches begun so far (``Resource.started``)."""
        self.exposed = 0.0
        """Seconds in which no compute task ran."""
        self.computing = 0
        self.idle_since = 0.0
        self.changes: list[tuple[float, str]] = []
        """When each phase began (s) and its name, in order (those a fast-forward skips over
        are not here: a skipped span ends in the phase it began in)."""

    @property
    def spans(self) -> dict[str, float]:
        """Phase -> seconds."""
        values = self.values
        return {phase: values[slot] for phase, slot in self._spans.items()}

    @property
    def busy(self) -> dict[tuple[str, str], float]:
        """(stream or link, phase) -> busy seconds."""
        return self._by_key(self._busy_in)

    @property
    def moved(self) -> dict[tuple[str, str], float]:
        """(stream or link, phase) -> bytes (stream) or link units (link) moved."""
        return self._by_key(self._moved_in)

    def in_phase(self, phase: str) -> tuple[dict[str, float], dict[str, float]]:
        """``phase``'s busy seconds and its bytes (stream) or link units (link) moved, by stream
        or link (empty for a phase with none; the phase before the first marker: "")."""
        values = self.values
        return ({name: values[slot] for name, slot in self._busy_in.get(phase, {}).items()},
                {name: values[slot] for name, slot in self._moved_in.get(phase, {}).items()})

    @property
    def stream_busy(self) -> dict[str, float]:
        """Stream -> seconds its tasks ran, over the run."""
        values = self.values
        return {stream: values[slot] for stream, slot in self._streams.items()}

    @property
    def stream_bytes(self) -> dict[str, float]:
        """Stream -> bytes its tasks moved, over the run."""
        values = self.values
        return {stream: values[slot + 1] for stream, slot in self._streams.items()}

    def _by_key(self, by_phase: dict[str, Slots]) -> dict[tuple[str, str], float]:
        """Phase -> resource -> slot as (resource, phase) -> value."""
        values = self.values
        return {(resource, phase): values[slot] for phase, slots in by_phase.items()
                for resource, slot in slots.items()}

    def _slot(self, slots: Slots, name: str, width: int = 1) -> int:
        """``name``'s slot in ``slots``, given the next ``width`` ones (at 0) if it has none."""
        slot = slots.get(name)
        if slot is None:
            values = self.values
            slot = slots[name] = len(values)
            for _ in range(width):
                values.append(0.0)
        return slot

    def _add(self, slots: Slots, name: str, amount: float) -> None:
        """Add ``amount`` to ``name``'s total in ``slots`` (a slot given it if it has none)."""
        slot = self._slot(slots, name)
        self.values[slot] = self.values[slot] + amount

    def _elapse(self, slots: Slots, name: str, now: float, began: float) -> None:
        """Add the seconds from ``began`` to ``now`` to ``name``'s total in ``slots``, summed as
        ``total + now - began`` (the order every busy total has always been summed in)."""
        slot = self._slot(slots, name)
        self.values[slot] = self.values[slot] + now - began

    def resource(self, name: str) -> Resource:
        """The stream or link ``name``'s ``Resource`` (made when first asked for)."""
        found = self._resources.get(name)
        if found is None:
            found = self._resources[name] = Resource(name)
            self._every.append(found)
        return found

    def busy_now(self) -> list[Resource]:
        """The resources busy now, in the order their stretches began (each put in its place
        as it is found: a handful, and no sort's key called through Python)."""
        busy: list[Resource] = []
        for resource in self._every:
            if resource.busy:
                k = len(busy)
                busy.append(resource)
                while k > 0 and busy[k - 1].started > resource.started:
                    busy[k] = busy[k - 1]
                    k -= 1
                busy[k] = resource
        return busy

    def _begin(self, resource: Resource, now: float) -> None:
        """``resource``'s busy stretch begins at ``now``."""
        resource.busy = True
        resource.since = now
        resource.started = self._starts
        self._starts += 1

    def _end_busy(self, resource: Resource, now: float) -> None:
        """``resource``'s busy stretch ends at ``now``: its seconds count in this phase."""
        resource.busy = False
        self._current(resource)
        if resource.busy_slot < 0:
            resource.busy_slot = self._slot(self._busy_now, resource.name)
        slot = resource.busy_slot
        self.values[slot] = self.values[slot] + now - resource.since

    def _current(self, resource: Resource) -> None:
        """Forget ``resource``'s slots of an earlier phase."""
        if resource.phase != self._phases:
            resource.phase = self._phases
            resource.busy_slot = resource.moved_slot = -1

    def _phase_slots(self, phase: str) -> tuple[Slots, Slots]:
        """``phase``'s slots of busy seconds and of units moved, by resource."""
        busy = self._busy_in.get(phase)
        if busy is None:
            busy = self._busy_in[phase] = {}
            self._moved_in[phase] = {}
        return busy, self._moved_in[phase]

    def add_busy(self, resource: str, phase: str, seconds: float) -> None:
        """Count ``seconds`` of ``resource`` busy in ``phase``."""
        self._add(self._phase_slots(phase)[0], resource, seconds)

    def add_moved(self, resource: str, phase: str, amount: float) -> None:
        """Count ``amount`` bytes (stream) or link units (link) moved in ``phase``."""
        self._add(self._phase_slots(phase)[1], resource, amount)

    def add_stream(self, stream: str, seconds: float, size: float) -> None:
        """Count ``seconds`` of ``stream``'s tasks running and ``size`` bytes moved, over the run."""
        values = self.values
        slot = self._slot(self._streams, stream, 2)
        values[slot] = values[slot] + seconds
        values[slot + 1] = values[slot + 1] + size

    def task_started(self, stream: Resource, category: str, now: float) -> None:
        """A task of ``category`` began on ``stream`` at ``now`` (s)."""
        self._begin(stream, now)
        if category in self.compute_categories:
            if not self.computing:
                self.exposed += now - self.idle_since
            self.computing += 1

    def task_ended(self, stream: Resource, category: str, began: float, size: float, now: float) -> None:
        """A task that began at ``began`` ended at ``now`` (s), having moved ``size`` bytes
        (phase markers are not tasks here: they end in ``phase_begins``)."""
        self._end_busy(stream, now)
        values = self.values
        if stream.run_slot < 0:
            stream.run_slot = self._slot(self._streams, stream.name, 2)
        slot = stream.run_slot  # as add_stream, but summed as total + now - began
        values[slot] = values[slot] + now - began
        values[slot + 1] = values[slot + 1] + size
        if category in self.compute_categories:
            self.computing -= 1
            if not self.computing:
                self.idle_since = now

    def link_busy(self, link: Resource, now: float) -> None:
        """A flow came onto the idle ``link`` at ``now``."""
        self._begin(link, now)

    def link_idle(self, link: Resource, now: float) -> None:
        """The last flow left ``link`` at ``now``."""
        self._end_busy(link, now)

    def flow_ended(self, flow: Flow) -> None:
        """A flow moved its last byte: the bytes not yet counted count in this phase, on its
        stream (its ``account``, or found by name) and on each of its links (``link_moved``)."""
        stream = flow.account if flow.account is not None else self.resource(flow.stream)
        self.link_moved(stream, flow.size - flow.attributed)

    def link_moved(self, link: Resource, units: float) -> None:
        """A flow that ended moved ``units`` link units over ``link`` (or bytes, over a stream)
        not yet counted: they count in this phase."""
        self._current(link)
        if link.moved_slot < 0:
            link.moved_slot = self._slot(self._moved_now, link.name)
        slot = link.moved_slot
        self.values[slot] = self.values[slot] + units

    def _credit(self, flow: Flow, num_bytes: float) -> None:
        moved = self._moved_now
        self._add(moved, flow.stream, num_bytes)
        for link, units in flow.usage:
            self._add(moved, link, num_bytes * units)

    def flush(self, now: float, flows: Iterable[Flow]) -> None:
        """Count everything in progress up to ``now`` in the current phase."""
        busy = self._busy_now
        for resource in self.busy_now():
            if now > resource.since:
                self._elapse(busy, resource.name, now, resource.since)
                resource.since = now
        if self.phase is not None:
            self._elapse(self._spans, self.phase, now, self.phase_since)
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
        self._busy_now, self._moved_now = self._phase_slots(phase)
        self._phases += 1
        self.changes.append((now, phase))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Accounts) and self._compared() == other._compared()

    def _compared(self) -> tuple[object, ...]:
        return self.exposed, self.spans, self.busy, self.moved, self.stream_busy, self.stream_bytes

    __hash__ = None  # type: ignore[assignment]
