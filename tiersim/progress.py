"""A rich progress bar on stderr with rate and ETA, or nothing when it is off: what a sweep's
planning and runs and a calibration's measured points show while they run."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any


class Bar:
    """Moves one task of a rich ``Progress`` (a no-op without one), showing ``unit``/s."""

    def __init__(self, bar: Any = None, task: Any = None, unit: str = "") -> None:
        self._bar, self._task, self._unit = bar, task, unit
        self._start, self._count = time.perf_counter(), 0

    def advance(self, n: int = 1, label: str | None = None) -> None:
        """``n`` more ``unit`` done; ``label`` (when given) becomes the description."""
        if self._bar is None:
            return
        self._count += n
        elapsed = time.perf_counter() - self._start
        rate = f"{self._count / elapsed:.1f} {self._unit}/s" if elapsed > 0 else ""
        fields = {} if label is None else {"description": label}
        self._bar.update(self._task, advance=n, rate=rate, **fields)

    def reach(self, done: int) -> None:
        """``done`` ``unit`` done in all (counted from when the bar began)."""
        self.advance(done - self._count)


@contextlib.contextmanager
def progress_bar(enabled: bool, total: int, label: str, unit: str, done: int = 0) -> Iterator[Bar]:
    """A bar of ``total`` ``unit`` (``done`` of them before it began) described by ``label``,
    kept on screen when it ends; a ``Bar`` that does nothing when not ``enabled``."""
    if not enabled:
        yield Bar()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=False) as bar:
        yield Bar(bar, bar.add_task(label, total=total, completed=done, rate=""), unit)
