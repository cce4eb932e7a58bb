"""Pickling the frozen dataclasses of the modules mypyc compiles (``tiersim._native``).

A compiled object has no ``__dict__`` for pickle to fill, and a frozen one refuses the
``setattr`` pickle falls back to; such a class pickles as a call of itself on its fields
(``def __reduce__(self): return by_fields(self)``), so configs and results still cross
process boundaries (a sweep's pool, Dask) whichever way tiersim was installed.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def by_fields(obj: Any) -> tuple[type, tuple[Any, ...]]:
    """``obj``'s class and its fields' values, in order (what ``__reduce__`` returns)."""
    return type(obj), tuple(getattr(obj, field.name) for field in dataclasses.fields(obj))
