"""Python's cyclic garbage collector paused around work that makes no cyclic garbage."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, and as it was after. A run, or a sweep's
    planning, makes no reference cycle (reference counting frees what it drops at once), but it
    allocates thousands of objects that live through it, and the collections they set off find
    nothing to free: over random draws a fifth of a run's CPU, the slowest of them in full
    passes over the heap."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
