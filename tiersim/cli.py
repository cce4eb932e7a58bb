"""The ``tiersim`` command line: one subcommand per module in ``tiersim.commands``.

Every command module exposes ``register(parser)``, which adds its arguments to its parser and
sets ``func=handler`` where ``handler(args) -> int`` is the exit status. Bad input (a
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

COMMANDS = {
    "run": "simulate a scenario under its strategies",
    "profiles": "list or show device profiles",
    "models": "list the bundled models (Hugging Face config.json fields), or show one",
    "import-log": "read DeepSpeed training logs into scenarios and measurements",
    "replay": "predict measured training runs and show the error per phase",
    "fit": "fit a node's unknown figures to DeepSpeed training logs",
    "calibrate": "measure this host (memory copy, CPU Adam, file I/O, PCIe) and write a host profile",
    "validate": "time the real offloaded optimizer step per strategy and compare with the simulator",
    "reproduce": "reproduce a bundled study (seed, whatif)",
    "sweep": "run a scenario over a grid or list of factor values",
    "plan": "largest model, fastest sizing or cheapest hardware",
    "compare": "compare two sweep result tables (parquet)",
}
"""Each subcommand and its one line in ``tiersim --help``. Its module, ``tiersim.commands.NAME``
(``-`` as ``_``), is imported only when the command is named: start-up stays light."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser. Given the command line ``argv``, only the command it names gets its
    arguments (the others are listed by name and summary alone); without one, every command does."""
    parser = argparse.ArgumentParser(prog="tiersim", description="Simulate memory tiers for transformer training.")
    parser.add_argument("--version", action="version", version=f"tiersim {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = None if argv is None else next((arg for arg in argv if not arg.startswith("-")), "")
    for name, summary in COMMANDS.items():
        if named is not None and name != named:
            subparsers.add_parser(name, help=summary)
            continue
        module = importlib.import_module(f"tiersim.commands.{name.replace('-', '_')}")
        command = subparsers.add_parser(name, help=summary, description=module.__doc__)
        module.register(command)
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
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        with _profile_path(args.profile_path):
            return int(args.func(args))
    except ConfigError as exc:
        print(f"tiersim: error: {exc}", file=sys.stderr)
        return 2
    except TiersimError as exc:
        print(f"tiersim: error: {exc}", file=sys.stderr)
        return 1
    except RecursionError:  # a reader that missed its own depth check: still one line
        print("tiersim: error: an input is nested too deeply to read (thousands of levels)", file=sys.stderr)
        return 2
    except MemoryError:
        print("tiersim: error: out of memory (the limits in tiersim.config.limits keep runs small; --force lifts them)",
              file=sys.stderr)
        return 1
    except BrokenPipeError:
        sys.stdout = None  # the reader left (e.g. `| head`): stop quietly
        return 0
    except OSError as exc:  # (after BrokenPipeError, one of them) a file that failed past its checks: disk full
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"tiersim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tiersim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
