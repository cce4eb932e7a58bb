"""The one place where values with units are parsed.

Internally tiersim uses seconds, bytes, bytes/s and FLOP/s everywhere. Files may write
"80 GiB", "25 GB/s", "250 ns", "989 TFLOP/s", "1e8" or plain numbers (already in base units).
Decimal prefixes (k, M, G, T, P) are powers of 1000, binary ones (Ki, Mi, Gi, Ti, Pi) powers of
1024, as in vendor datasheets.
"""

from __future__ import annotations

import math
import re

from tiersim.config.limits import MAX_WHOLE
from tiersim.errors import ConfigError

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-zµ/]*)\s*$")

Where = tuple[str, str]
"""(source file, dotted field) used to word errors."""


def _split(value: object, where: Where) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ConfigError(*where, f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value), ""
    if not isinstance(value, str):
        raise ConfigError(*where, f"expected a number or a string with a unit, got {value!r}")
    match = _PATTERN.match(value)
    if not match:
        raise ConfigError(*where, f"cannot parse {value!r} as a number with a unit")
    return float(match.group(1)), match.group(2)


def _prefix(prefix: str, value: object, where: Where) -> float:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    raise ConfigError(*where, f"unknown unit prefix {prefix!r} in {value!r}")


def _finite(number: float, value: object, where: Where) -> float:
    if not math.isfinite(number):
        raise ConfigError(*where, f"{value!r} is not a finite number")
    return number


def _scaled(value: object, where: Where, suffixes: tuple[str, ...], what: str) -> float:
    number, unit = _split(value, where)
    if unit == "":
        return _finite(number, value, where)
    for suffix in suffixes:
        if unit.endswith(suffix):
            return _finite(number * _prefix(unit[: -len(suffix)], value, where), value, where)
    raise ConfigError(*where, f"expected {what}, got {value!r}")


def whole(number: float, value: object, where: Where) -> int:
    """``number`` as an int when it is whole and at most ``MAX_WHOLE`` in size."""
    if number != int(number):
        raise ConfigError(*where, f"expected a whole number, got {value!r}")
    if abs(number) > MAX_WHOLE:
        raise ConfigError(*where, f"{value!r} is larger than 2^53 ({MAX_WHOLE:,}), the limit for a whole number")
    return int(number)


def parse_bytes(value: object, where: Where) -> int:
    """"80 GiB", "2 TB", "1 MiB", 4096 -> bytes (int, at most ``MAX_WHOLE``)."""
    return whole(round(_scaled(value, where, ("B",), "a size such as '80 GiB'")), value, where)


def parse_rate(value: object, where: Where) -> float:
    """"25 GB/s", "4.8 TB/s", 1e9 -> bytes/s."""
    return _scaled(value, where, ("B/s",), "a rate such as '25 GB/s'")


def parse_flops(value: object, where: Where) -> float:
    """"989 TFLOP/s", "1.2 TFLOPS", 1e12 -> FLOP/s."""
    return _scaled(value, where, ("FLOP/s", "FLOPS", "FLOPs"), "a compute rate such as '989 TFLOP/s'")


def parse_time(value: object, where: Where) -> float:
    """"250 ns", "80 us", "1.5 ms", 0.002 -> seconds."""
    number, unit = _split(value, where)
    if unit == "":
        return _finite(number, value, where)
    if unit not in _TIME:
        raise ConfigError(*where, f"expected a time such as '250 ns', got {value!r}")
    return _finite(number * _TIME[unit], value, where)


def parse_count(value: object, where: Where) -> float:
    """"1e8", "5 G", 100000000, "500 M" -> a plain count (float; callers round when needed)."""
    number, unit = _split(value, where)
    return _finite(number * _prefix(unit, value, where), value, where)
