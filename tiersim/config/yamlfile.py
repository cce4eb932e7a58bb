"""Reading YAML input: files and ``--set`` values, checked before anything else reads them.

A file must be readable, at most ``limits.MAX_FILE_BYTES`` long and UTF-8 text; its YAML must
parse and, with aliases followed, hold at most ``limits.MAX_YAML_NODES`` values nested at most
``limits.MAX_YAML_DEPTH`` deep, with no alias inside itself. Anything else is a ``ConfigError``
naming the file (and the line where YAML gives one), so a malformed, binary, endless
(``/dev/zero``) or exponential ("billion laughs") input is one line and exit status 2.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from tiersim.config.limits import MAX_FILE_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES
from tiersim.errors import ConfigError

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (about three times faster), else PyYAML's own."""


def read_input(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of an input file of at most ``limit`` bytes (read no further than that). It is
    opened without blocking and must be a regular file, so a named pipe, socket, device
    (``/dev/zero``, a terminal) or directory is refused instead of waited on or read forever."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read file ({exc.strerror or exc})") from None
    mode = os.fstat(handle).st_mode
    if not stat.S_ISREG(mode):
        os.close(handle)
        raise ConfigError(str(path), "", f"cannot read file ({_kind(mode)}, not a regular file)")
    with os.fdopen(handle, "rb") as stream:
        try:
            raw = stream.read(limit + 1)
        except OSError as exc:
            raise ConfigError(str(path), "", f"cannot read file ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise ConfigError(str(path), "", f"is larger than {limit // 2**20} MiB, the limit for an input file")
    return raw


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, for ``read_input``'s error."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return "a named pipe or socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def read_text(path: Path) -> str:
    """The UTF-8 text of a file of at most ``MAX_FILE_BYTES`` (``read_input``)."""
    raw = read_input(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(str(path), f"line {line}",
                          f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def read_yaml(path: Path) -> object:
    """Read and check a YAML file (see the module docstring)."""
    return parse_yaml(read_text(path), str(path))


def parse_yaml(text: str, source: str, where: str = "") -> object:
    """Parse and check YAML ``text``; errors name ``source`` and ``where`` (or the line)."""
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark is not None else where
        raise ConfigError(source, line, f"malformed YAML: {_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(source, where, f"YAML nested deeper than {MAX_YAML_DEPTH} levels") from None
    check_tree(data, source, where)
    return data


def parse_value(text: str, source: str, where: str) -> object:
    """A ``--set`` value: ``text`` read as YAML (and checked), or ``text`` itself when it is not
    YAML (``--set name=a: b``)."""
    try:
        value = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise ConfigError(source, where, f"YAML nested deeper than {MAX_YAML_DEPTH} levels") from None
    check_tree(value, source, where)
    return value


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None)
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x}" if isinstance(exc.character, int) else str(problem)
    return str(problem or "cannot parse")


def check_tree(data: object, source: str, where: str = "") -> None:
    """Refuse a loaded YAML value that is self-referencing, too large or too deep once its
    aliases are followed. Shared (aliased) parts are sized once, so this is linear in the
    document's own size however far the aliases would expand."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (expanded values, depth)
    open_ids: set[int] = set()
    stack: list[tuple[object, bool]] = [(data, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        ident = id(node)
        if children_done:
            items = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
            count, depth = 1, 1
            for item in items:
                if isinstance(item, (dict, list)):
                    sub_count, sub_depth = sizes[id(item)]
                    count += sub_count
                    depth = max(depth, sub_depth + 1)
                else:
                    count += 1
            open_ids.discard(ident)
            sizes[ident] = (count, depth)
            if count > MAX_YAML_NODES:
                raise ConfigError(source, where, f"YAML expands to more than {MAX_YAML_NODES:,} values "
                                                 "(aliases followed); the limit for one document")
            if depth > MAX_YAML_DEPTH:
                raise ConfigError(source, where, f"YAML nested deeper than {MAX_YAML_DEPTH} levels")
            continue
        if ident in sizes:
            continue
        if ident in open_ids:
            raise ConfigError(source, where, "YAML alias refers to a value that contains it (self-referencing)")
        open_ids.add(ident)
        stack.append((node, True))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, False) for child in children if isinstance(child, (dict, list)))
