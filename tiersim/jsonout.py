"""Plain values for JSON and YAML output: numpy and pandas scalars, arrays, tuples and paths
become the Python values ``json``/``yaml.safe_dump`` write, and NaN or an infinity becomes None
(null), which JSON has no number for."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def plain(value: Any) -> Any:
    """``value`` as plain data: mappings (keys as strings) and lists element by element, numpy
    scalars and arrays as Python numbers and lists, non-finite floats as None, any other
    object as its ``str``."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):  # a numpy scalar or array
        return plain(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    return str(value)


def plain_records(frame: Any) -> list[dict[str, Any]]:
    """The rows of a DataFrame as plain records (column -> value)."""
    return [plain(row) for row in frame.to_dict(orient="records")]
