"""What a run's summaries need, integrated over time as the run goes (no per-task records).

The current phase is the phase of the last phase marker that finished. Kept per phase: its
seconds; per stream, the seconds one of its tasks runs and the bytes its flows move; per
link, the seconds a flow is on it and the link units its flows use; over the whole run, each
stream's busy seconds and bytes and the seconds in which no compute task runs (time is s,
sizes bytes). A flow's bytes count in the phase in which they move: at a phase change every
active flow is brought to that moment (``flush``). Every total is a plain number in a dict,
so a fast-forward over ``m`` identical periods adds ``m`` times one period's increase
(``scaled``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from tiersim.engine.graph import Usage


class ActiveFlow(Protocol):
    """What accounting reads of a flow in progress (``tiersim.engine.flows.Flow``)."""

    stream: str
    usage: Usage
    size: float
    remaining: float
    rate: float
    last: float
    attributed: float


COMPUTE_CATEGORIES = ("compute", "adam")
"""Task categories that compute (GPU kernels, CPU Adam); the rest move data or mark phases."""

Totals = dict[str, dict]
"""A copy of every accumulator (see ``Accounts.totals``)."""


class Accounts:
    """Time integrals of one run, updated at each start, end and phase change."""

    def __init__(self, compute_categories: Iterable[str] = COMPUTE_CATEGORIES) -> None:
        self.compute_categories = frozenset(compute_categories)
        self.phase: str | None = None
        self.phase_since = 0.0
        self.spans: dict[str, float] = {}
        """Seconds per phase."""
        self.busy: dict[tuple[str, str], float] = {}
        """(stream or link, phase) -> busy seconds."""
        self.moved: dict[tuple[str, str], float] = {}
        """(stream or link, phase) -> bytes (stream) or link units (link) moved."""
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
        key = (stream, self.phase or "")
        self.busy[key] = self.busy.get(key, 0.0) + now - self.since.pop(stream)
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
        key = (link, self.phase or "")
        self.busy[key] = self.busy.get(key, 0.0) + now - self.since.pop(link)

    def flow_ended(self, flow: ActiveFlow) -> None:
        """A flow moved its last byte: the bytes not yet counted count in this phase."""
        self._credit(flow, flow.size - flow.attributed)

    def _credit(self, flow: ActiveFlow, num_bytes: float) -> None:
        phase = self.phase or ""
        moved = self.moved
        key = (flow.stream, phase)
        moved[key] = moved.get(key, 0.0) + num_bytes
        for link, units in flow.usage:
            key = (link, phase)
            moved[key] = moved.get(key, 0.0) + num_bytes * units

    def flush(self, now: float, flows: Iterable[ActiveFlow]) -> None:
        """Count everything in progress up to ``now`` in the current phase."""
        phase = self.phase or ""
        busy = self.busy
        for resource, since in self.since.items():
            if now > since:
                key = (resource, phase)
                busy[key] = busy.get(key, 0.0) + now - since
                self.since[resource] = now
        if self.phase is not None:
            self.spans[phase] = self.spans.get(phase, 0.0) + now - self.phase_since
        self.phase_since = now
        if not self.computing:
            self.exposed += now - self.idle_since
            self.idle_since = now
        for flow in flows:
            done = flow.size - max(flow.remaining - flow.rate * (now - flow.last), 0.0)
            if done > flow.attributed:
                self._credit(flow, done - flow.attributed)
                flow.attributed = done

    def phase_begins(self, phase: str, now: float, flows: Iterable[ActiveFlow]) -> None:
        """A phase marker finished at ``now``: what ran so far counts in the phase before."""
        self.flush(now, flows)
        self.phase = phase
        self.changes.append((now, phase))

    def totals(self) -> Totals:
        """A copy of every accumulator (after ``flush``)."""
        return {"spans": dict(self.spans), "busy": dict(self.busy), "moved": dict(self.moved),
                "stream_busy": dict(self.stream_busy), "stream_bytes": dict(self.stream_bytes),
                "exposed": {"": self.exposed}}

    def scaled(self, before: Totals, after: Totals, times: int) -> None:
        """Add ``times`` the increase from ``before`` to ``after`` (two ``totals``) to every
        accumulator: ``times`` more periods like the one between them."""
        for name, now_values in after.items():
            then = before[name]
            if name == "exposed":
                self.exposed += times * (now_values[""] - then[""])
                continue
            target = getattr(self, name)
            for key, value in now_values.items():
                target[key] = target.get(key, 0.0) + times * (value - then.get(key, 0.0))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Accounts) and self.totals() == other.totals()

    __hash__ = None  # type: ignore[assignment]

    def shift(self, seconds: float) -> None:
        """Move every start time held by ``seconds`` (a fast-forward)."""
        for resource in self.since:
            self.since[resource] += seconds
        self.phase_since += seconds
        self.idle_since += seconds
