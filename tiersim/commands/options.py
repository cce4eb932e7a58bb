"""What the commands share about their options: library errors reported under the command's
flags (``flags``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
