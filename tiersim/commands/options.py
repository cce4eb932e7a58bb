"""What the commands share about their options: library errors reported under the command's
flags (``flags``) and output folders made or refused in one line (``output_folder``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tiersim.errors import API, ConfigError


@contextlib.contextmanager
def flags(**flag_of: str) -> Iterator[None]:
    """Report a library ``ConfigError`` about a parameter (its ``field`` is the parameter's name)
    under the command's flag for it, e.g. ``flags(jobs="--jobs")``: an error from the API
    (source ``<api>``) then reads ``--jobs: ...``, one about a file ``out/x: --out: ...``."""
    try:
        yield
    except ConfigError as exc:
        flag = flag_of.get(exc.field)
        if flag is None:
            raise
        if exc.source == API:
            raise ConfigError(flag, "", exc.message) from None
        raise ConfigError(exc.source, flag, exc.message) from None


def output_folder(path: Path, flag: str = "--out") -> Path:
    """``path``, made (with its parents) when missing; a ``ConfigError`` naming it and the
    ``flag`` that gave it when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(str(path), flag, f"cannot create directory ({exc.strerror})") from None
    return path
