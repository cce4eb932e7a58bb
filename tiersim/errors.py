"""tiersim's errors: ``ConfigError`` for bad input (it carries the file and field it is about, so
the CLI can print one clear line) and ``ModelError`` for a broken invariant of the model or the
engine (a bug in tiersim or in a strategy, not in the user's input). Both are ``TiersimError``s."""

from __future__ import annotations

API = "<api>"
"""The ``source`` of an error about the arguments of a Python call (not a file)."""


class TiersimError(Exception):
    """Every error tiersim raises on purpose; the CLI prints one line for it."""


class ConfigError(TiersimError):
    """Bad input: a malformed file, an unknown field or profile, an impossible value.

    ``source`` names the file (or "--set", or ``API`` for a Python call), ``field`` the dotted
    path inside it, or the parameter of the call (the command line maps it to its flag).
    """

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return one_line(f"{where}: {self.message}")

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str, str]]:
        """Pickled as its source, field and message (from a sweep's planning workers); a
        subclass comes back as a plain ``ConfigError``."""
        return ConfigError, (self.source, self.field, self.message)


class ModelError(TiersimError):
    """A broken invariant of the model or the engine: a task graph that cannot be built or run
    (a duplicate task, an unknown link, a deadlock), or a schedule asked of hardware it needs
    and lacks."""

    def __str__(self) -> str:
        return one_line(super().__str__())


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (line breaks, control characters)
    written as its escape, so that an error about any input is one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
