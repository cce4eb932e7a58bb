"""Errors that carry the file and field they are about, so the CLI can print one clear line."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad input: a malformed file, an unknown field or profile, an impossible value.

    ``source`` names the file (or "--set", "<api>"), ``field`` the dotted path inside it.
    """

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return one_line(f"{where}: {self.message}")


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (line breaks, control characters)
    written as its escape, so that an error about any input is one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
