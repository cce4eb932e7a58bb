"""Typed, validated config objects built from YAML mappings.

Config classes are frozen dataclasses whose fields declare how a file value is read through
``field(metadata=...)`` made by the helpers below (``size()``, ``rate()``, ``duration()``, ...).
``build(cls, data, source, path)`` checks for unknown and missing fields, parses units via
``tiersim.config.units`` and enforces bounds, raising ``ConfigError`` naming the file and dotted field.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from tiersim.config.units import Where, parse_bytes, parse_count, parse_flops, parse_rate, parse_time, whole
from tiersim.errors import ConfigError

T = TypeVar("T")

UNKNOWN = "unknown"
"""A value ``tiersim import-log`` could not read from a training log; validating it is an
error that names the field."""
Parser = Callable[[object, Where], Any]

_MISSING = dataclasses.MISSING


def _plain_number(value: object, where: Where) -> float:
    return parse_count(value, where)


def _integer(value: object, where: Where) -> int:
    return whole(parse_count(value, where), value, where)


def _spec(
    parser: Parser,
    default: object,
    *,
    gt: float | None,
    ge: float | None,
    le: float | None,
    doc: str,
) -> Any:
    metadata = {"parser": parser, "gt": gt, "ge": ge, "le": le, "doc": doc}
    if default is _MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def size(default: object = _MISSING, *, gt: float | None = None, ge: float | None = 0, doc: str = "") -> Any:
    """A size in bytes ("80 GiB")."""
    return _spec(parse_bytes, default, gt=gt, ge=ge, le=None, doc=doc)


def rate(default: object = _MISSING, *, gt: float | None = 0, ge: float | None = None, doc: str = "") -> Any:
    """A bandwidth in bytes/s ("25 GB/s"); positive unless told otherwise."""
    return _spec(parse_rate, default, gt=gt, ge=ge, le=None, doc=doc)


def flops(default: object = _MISSING, *, gt: float | None = 0, doc: str = "") -> Any:
    """A compute rate in FLOP/s ("989 TFLOP/s")."""
    return _spec(parse_flops, default, gt=gt, ge=None, le=None, doc=doc)


def duration(default: object = _MISSING, *, ge: float | None = 0, doc: str = "") -> Any:
    """A time in seconds ("250 ns")."""
    return _spec(parse_time, default, gt=None, ge=ge, le=None, doc=doc)


def number(
    default: object = _MISSING,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    doc: str = "",
) -> Any:
    """A plain float ("1e8" allowed)."""
    return _spec(_plain_number, default, gt=gt, ge=ge, le=le, doc=doc)


def integer(
    default: object = _MISSING,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    doc: str = "",
) -> Any:
    """A whole number ("1e8" allowed when it is whole)."""
    return _spec(_integer, default, gt=gt, ge=ge, le=le, doc=doc)


def _check_bounds(value: float, meta: typing.Mapping[str, Any], where: Where) -> None:
    if meta.get("gt") is not None and not value > meta["gt"]:
        raise ConfigError(*where, f"must be greater than {meta['gt']:g}, got {value:g}")
    if meta.get("ge") is not None and not value >= meta["ge"]:
        raise ConfigError(*where, f"must be at least {meta['ge']:g}, got {value:g}")
    if meta.get("le") is not None and not value <= meta["le"]:
        raise ConfigError(*where, f"must be at most {meta['le']:g}, got {value:g}")


def _convert(tp: Any, value: object, where: Where) -> Any:
    """Convert a YAML value to the annotated type ``tp`` (no unit metadata)."""
    origin = typing.get_origin(tp)
    if origin is not None:
        return _convert_generic(origin, typing.get_args(tp), value, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, where[0], where[1])
    return _convert_scalar(tp, value, where)


def _convert_generic(origin: Any, args: tuple[Any, ...], value: object, where: Where) -> Any:
    """Convert to a ``Literal``, an optional, a list, a tuple or a dict of the types ``args``."""
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(*where, f"must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        return _convert(next(a for a in args if a is not type(None)), value, where)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(*where, f"expected a list, got {value!r}")
        items = [_convert(args[0], v, (where[0], f"{where[1]}[{i}]")) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(*where, f"expected a mapping, got {value!r}")
        return {str(k): _convert(args[1], v, (where[0], f"{where[1]}.{k}")) for k, v in value.items()}
    raise TypeError(f"schema cannot convert to {origin!r}{list(args)!r}")


def _convert_scalar(tp: Any, value: object, where: Where) -> Any:
    """Convert to ``bool``, ``str``, ``int``, ``float`` or (unchecked) ``Any``."""
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(*where, f"expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(*where, f"expected a string, got {value!r}")
        return value
    if tp is int:
        return _integer(value, where)
    if tp is float:
        return _plain_number(value, where)
    if tp is Any or tp is object:
        return value
    raise TypeError(f"schema cannot convert to {tp!r}")


@functools.cache
def _schema(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """Resolved type hints and init fields of a config class (computed once per class)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    return typing.get_type_hints(cls), fields


def build(cls: type[T], data: object, source: str, path: str = "") -> T:
    """Build dataclass ``cls`` from mapping ``data``; errors name ``source`` and the dotted path."""
    if not isinstance(data, dict):
        raise ConfigError(source, path or "(top level)", f"expected a mapping, got {data!r}")
    hints, fields = _schema(cls)  # type: ignore[arg-type]  # classes are hashable
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(source, _join(path, str(key)), f"unknown field (known: {known})")
    kwargs: dict[str, Any] = {}
    for name, fld in fields.items():
        where = (source, _join(path, name))
        if name in data:
            kwargs[name] = _field_value(fld, hints[name], data[name], where)
        elif fld.default is _MISSING and fld.default_factory is _MISSING:
            raise ConfigError(*where, "required field is missing")
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if callable(check):
        check(source, path)
    return obj


def _field_value(fld: dataclasses.Field[Any], hint: Any, raw: object, where: Where) -> Any:
    """The file value ``raw`` of one field read through its parser or its type, bounds checked."""
    if isinstance(raw, str) and raw == UNKNOWN:
        raise ConfigError(*where, "left unknown (a training log does not say it): set it in the file, "
                          "with --set, or from a profile")
    parser = fld.metadata.get("parser")
    if parser is not None:
        if raw is None and _allows_none(hint):
            return None
        value = parser(raw, where)
        _check_bounds(value, fld.metadata, where)
        return value
    value = _convert(hint, raw, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_bounds(value, fld.metadata, where)
    return value


def _allows_none(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def to_plain(obj: Any) -> Any:
    """A config object -> plain dicts/lists/numbers (base units), for JSON and the resolved config."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    return obj
