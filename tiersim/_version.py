"""The package version, in one place: ``pyproject.toml`` reads it, modules import it from here
(never from the ``tiersim`` facade, which imports nothing of its own)."""

__version__ = "0.1.0"
