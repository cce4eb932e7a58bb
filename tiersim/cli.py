"""The ``tiersim`` command line: one subcommand per module in ``tiersim.commands``.

Every command module exposes ``register(subparsers)``, which adds its parser and sets
``func=handler`` where ``handler(args) -> int`` is the exit status. Bad input (a
``ConfigError``) becomes one line on stderr and exit status 2, a broken invariant of the model
(a ``ModelError``, any other ``TiersimError``) one line and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence

from tiersim._version import __version__
from tiersim.errors import ConfigError, TiersimError

COMMAND_MODULES = ("run", "profiles", "import-log", "replay", "fit", "calibrate", "validate", "reproduce", "sweep",
                   "plan", "compare")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="tiersim", description="Simulate memory tiers for transformer training.")
    parser.add_argument("--version", action="version", version=f"tiersim {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"tiersim.commands.{name.replace('-', '_')}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tiersim.commands.{name.replace('-', '_')}":
                continue
            raise
        module.register(subparsers)
    for command in subparsers.choices.values():
        command.add_argument("--profile-path", action="append", default=[], metavar="DIR",
                             help="also look for device profiles in DIR (repeatable; before $TIERSIM_PROFILE_PATH, "
                                  "./device_profiles and the bundled ones)")
    return parser


@contextlib.contextmanager
def _profile_path(dirs: Sequence[str]) -> Iterator[None]:
    """``--profile-path`` folders in front of ``$TIERSIM_PROFILE_PATH`` while a command runs."""
    if not dirs:
        yield
        return
    before = os.environ.get("TIERSIM_PROFILE_PATH")
    os.environ["TIERSIM_PROFILE_PATH"] = os.pathsep.join([*dirs, *([before] if before else [])])
    try:
        yield
    finally:
        if before is None:
            del os.environ["TIERSIM_PROFILE_PATH"]
        else:
            os.environ["TIERSIM_PROFILE_PATH"] = before



def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None) -> None:
    """Warnings as one line on stderr (no source location)."""
    print(f"tiersim: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, dispatch, and turn bad input into one line and exit 2 (a model
    error: one line and exit 1)."""
    warnings.showwarning = _warning_line
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _profile_path(args.profile_path):
            return int(args.func(args))
    except ConfigError as exc:
        print(f"tiersim: error: {exc}", file=sys.stderr)
        return 2
    except TiersimError as exc:
        print(f"tiersim: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print("tiersim: error: out of memory (the limits in tiersim.config.limits keep runs small; --force lifts them)",
              file=sys.stderr)
        return 1
    except BrokenPipeError:
        sys.stdout = None  # the reader left (e.g. `| head`): stop quietly
        return 0
    except KeyboardInterrupt:
        print("tiersim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
