"""Numbers, booleans and configuration objects as DeepSpeed and Megatron print them.

DeepSpeed 0.10 to 0.16 prints its engine configuration with ``str()`` of pydantic models:
``stage=3 reduce_bucket_size=500,000,000 offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(
device='cpu', buffer_count=4, ...)``. A default it never validated keeps DeepSpeed's ``pp_int``
type, which prints with thousands separators ("500,000,000"); a value from the user's JSON prints
plainly ("100000000"), or in exponent form when the JSON wrote it so ("1.000000e+08"). Booleans
print as Python's ``True``/``False``; a user's JSON writes ``true``/``false`` or ``1``/``0``.

Every reader here either returns the value or raises a ``ConfigError`` naming the field: a
value it cannot read is never replaced by a default.
"""

from __future__ import annotations

import math
import re

from tiersim.errors import ConfigError

_NUMBER = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
"""A decimal number, its integer part plain (``500000000``) or grouped by threes with commas
(``500,000,000``), with an optional fraction and exponent. Anchored by ``fullmatch``: no nested
quantifiers that could backtrack."""

_TRUE = frozenset({"True", "true", "1"})
_FALSE = frozenset({"False", "false", "0"})


def number(text: object, source: str, field: str) -> float:
    """A printed number (``9195.7``, ``500,000,000``, ``1.000000e+08``) as a float; anything
    else (a unit suffix, ``nan``, words) is a ConfigError naming ``field``."""
    raw = str(text).strip()
    if _NUMBER.fullmatch(raw) is None:
        what = "NaN" if raw.lower().lstrip("+-") == "nan" else f"{raw!r}"
        raise ConfigError(source, field, f"expected a number, got {what}")
    return float(raw.replace(",", ""))


def whole(text: object, source: str, field: str) -> int:
    """A printed whole number (``1e8`` and ``1.000000e+08`` allowed, ``1.5`` and ``1M`` not)."""
    raw = str(text).strip()
    if _NUMBER.fullmatch(raw) is None:
        raise ConfigError(source, field, f"expected a whole number, got {raw!r}")
    plain = raw.replace(",", "")
    if re.fullmatch(r"[+-]?\d+", plain):
        return int(plain)
    value = float(plain)
    if not math.isfinite(value) or value != int(value):
        raise ConfigError(source, field, f"expected a whole number, got {raw!r}")
    return int(value)


def duration(text: object, source: str, field: str) -> float:
    """A printed time (any unit) that must be a finite number at least 0: a NaN or negative timer
    means the log is corrupt, and is refused rather than averaged."""
    value = number(text, source, field)
    if value < 0:
        raise ConfigError(source, field, f"negative time {str(text).strip()!r}")
    return value


def boolean(text: object, source: str, field: str) -> bool:
    """``True``/``true``/``1`` or ``False``/``false``/``0`` (Python's print, JSON, or an integer
    flag); anything else is a ConfigError naming ``field``."""
    raw = str(text).strip()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(source, field, f"expected True or False, got {raw!r}")


def model_fields(text: str, source: str, field: str) -> dict[str, str]:
    """A printed pydantic model (``a=1 b=Name(c='x', d=2,000) e=None``) as a flat mapping
    (``{"a": "1", "b.c": "x", "b.d": "2,000", "e": "None"}``): nested models become dotted keys,
    quotes and enum reprs (``<OffloadDeviceEnum.cpu: 'cpu'>``) give their value, anything else
    keeps its printed text. One pass over ``text``; a malformed print is a ConfigError."""
    out: dict[str, str] = {}
    try:
        end = _fields(text, 0, "", out)
    except ValueError as exc:
        raise ConfigError(source, field, f"unreadable printed value: {exc}") from None
    if end != len(text):
        raise ConfigError(source, field, f"unreadable printed value: unexpected {text[end:end + 30]!r}")
    return out


def _fields(text: str, start: int, prefix: str, out: dict[str, str]) -> int:
    """Read ``name=value`` pairs from ``start`` up to the end or a closing parenthesis; returns
    where it stopped."""
    i, n = start, len(text)
    while True:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n or text[i] == ")":
            return i
        j = i
        while j < n and (text[j].isalnum() or text[j] == "_"):
            j += 1
        if j == i or j >= n or text[j] != "=":
            raise ValueError(f"expected name=value at {text[i:i + 30]!r}")
        i = _value(text, j + 1, prefix + text[i:j], out)


def _value(text: str, i: int, key: str, out: dict[str, str]) -> int:
    """Read the value of ``key`` starting at ``i`` into ``out``; returns the index after it."""
    n = len(text)
    if i < n and text[i] in "'\"":
        end = _quoted_end(text, i)
        out[key] = text[i + 1:end - 1]
        return end
    if i < n and text[i] in "<[{":
        end = _balanced_end(text, i)
        enum = re.fullmatch(r"<[\w.]+: '([^']*)'>", text[i:end])
        out[key] = enum.group(1) if enum else text[i:end]
        return end
    j = i
    while j < n and text[j] not in " \t()":
        j += 1
    if j < n and text[j] == "(":
        end = _balanced_end(text, j)
        if re.match(r"\s*\w+=", text[j + 1:j + 64]):
            if _fields(text[:end - 1], j + 1, key + ".", out) != end - 1:
                raise ValueError(f"unbalanced ')' in {text[i:end][:60]!r}")
        else:
            out[key] = text[i:end]
        return end
    out[key] = text[i:j].rstrip(",")
    return j


def _quoted_end(text: str, i: int) -> int:
    """The index after the string literal opened at ``i`` (backslash escapes honoured)."""
    quote, j, n = text[i], i + 1, len(text)
    while j < n:
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            return j + 1
        j += 1
    raise ValueError(f"unbalanced quote at {text[i:i + 30]!r}")


def _balanced_end(text: str, i: int) -> int:
    """The index after the bracket opened at ``i`` and its match (strings skipped)."""
    closing = {"(": ")", "[": "]", "{": "}", "<": ">"}
    stack = [closing[text[i]]]
    j, n = i + 1, len(text)
    while j < n and stack:
        char = text[j]
        if char in "'\"":
            j = _quoted_end(text, j)
            continue
        if char in "([{" and stack[-1] != ">":
            stack.append(closing[char])
        elif char == stack[-1]:
            stack.pop()
        j += 1
    if stack:
        raise ValueError(f"unbalanced {text[i]!r} at {text[i:i + 30]!r}")
    return j
