"""Python's cyclic garbage collector paused around work that makes no cyclic garbage."""

from __future__ import annotations

import gc


class cyclic_gc_paused:
    """The cyclic garbage collector off for the block, and as it was after. A run, or a sweep's
    planning, makes no reference cycle (reference counting frees what it drops at once), but it
    allocates thousands of objects that live through it, and the collections they set off find
    nothing to free: over random draws a fifth of a run's CPU, the slowest of them in full
    passes over the heap. A class, not a ``contextlib.contextmanager`` generator: ``simulate``
    enters it every run, and the generator's way in and out cost several thousand instructions."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()
