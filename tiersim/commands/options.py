"""What the commands share about their options: the common ones, defined once (``--set``,
``--strategy``, ``--format``; each command names its own ``--out``), library errors reported
under the command's flags (``flags``) and output folders made or refused in one line
(``output_folder``)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tiersim.errors import API, ConfigError


def add_overrides(parser: argparse.ArgumentParser, what: str = "a scenario field") -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``; ``what`` it overrides."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help=f"override {what} by dotted path (repeatable), e.g. training.global_batch=64")


def add_model(parser: argparse.ArgumentParser) -> None:
    """``--model NAME`` into ``args.model``: the scenario's model replaced by a catalogue model, a
    Hugging Face Hub name or a local config.json."""
    parser.add_argument("--model", metavar="NAME", default=None,
                        help="replace the scenario's model: a name from the bundled catalogue (tiersim models), "
                             "e.g. meta-llama/Llama-3.1-8B, or a Hugging Face config.json (--set still wins)")


def add_strategy(parser: argparse.ArgumentParser) -> None:
    """``--strategy NAME`` (repeatable) into ``args.strategy``; the help lists the strategies."""
    from tiersim.strategies import STRATEGIES

    known = "; ".join(f"{name}: {cls.summary}" for name, cls in STRATEGIES.items())
    parser.add_argument("--strategy", action="append", default=[], metavar="NAME",
                        help=f"only this strategy (repeatable); default: all in the scenario ({known})")


def add_format(parser: argparse.ArgumentParser, *choices: str, help: str | None = None) -> None:
    """``--format`` among ``choices`` (the first is the default) into ``args.format``."""
    parser.add_argument("--format", choices=choices, default=choices[0], help=help)


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
    """``path``, made (with its parents) when missing and checked by making a file there; a
    ``ConfigError`` naming it and the ``flag`` that gave it when it cannot be made or written in
    (``/proc``, a read-only folder, a file)."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(str(path), flag, f"cannot create directory ({exc.strerror})") from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".tiersim-", dir=path)
    except OSError as exc:
        raise ConfigError(str(path), flag, f"cannot write files there ({exc.strerror})") from None
    os.close(handle)
    os.unlink(probe)
    return path
