"""Start-up: the CLI imports only what the command it runs needs (docs/performance.md, CLI
latency), and every command in its table registers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiersim import cli

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "scipy", "plotly", "numpy", "pyarrow", "hashlib")
"""Modules no quick command may import: the data-frame, fitting and figure libraries, and the
hashing the compiled engine's check needs only where something was built and since changed."""


def imported(argv: list[str]) -> set[str]:
    """The modules a ``tiersim ARGV`` process has imported when it ends (its stdout dropped)."""
    code = ("import contextlib, io, json, sys\n"
            "from tiersim.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            f"        main({argv!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_help_imports_no_command() -> None:
    modules = imported(["--help"])
    assert not {m for m in modules if m.startswith("tiersim.commands.") or m.split(".")[0] in (*HEAVY, "yaml")}


@pytest.mark.parametrize("argv", [["run", "scenarios/quickstart.yaml"], ["run", "--help"], ["profiles"],
                                  ["sweep", "--help"], ["models"], ["run", "--model", "mistralai/Mixtral-8x7B-v0.1"]])
def test_a_quick_command_imports_no_heavy_library(argv: list[str]) -> None:
    modules = imported(argv)
    assert not {m.split(".")[0] for m in modules} & set(HEAVY)
    others = {f"tiersim.commands.{name.replace('-', '_')}" for name in cli.COMMANDS if name != argv[0]}
    assert not modules & others, "only the command named is imported"


def test_every_command_registers_and_is_listed(capsys: pytest.CaptureFixture[str]) -> None:
    full = cli.build_parser()
    for argv in [["--help"], *([name, "--help"] for name in cli.COMMANDS)]:
        with pytest.raises(SystemExit) as exit:
            full.parse_args(argv)
        assert exit.value.code == 0
    out = capsys.readouterr().out
    for name, summary in cli.COMMANDS.items():
        assert f"    {name}" in out and summary.split()[0] in out
        assert f"usage: tiersim {name} [-h]" in out
    assert out.count("--profile-path DIR") == 2 * len(cli.COMMANDS), "every command has its arguments"  # usage, list
    lazy = cli.build_parser(["run", "x"])
    assert lazy.parse_args(["run", "x"]).func.__module__ == "tiersim.commands.run"
    with pytest.raises(SystemExit):
        lazy.parse_args(["profiles", "--help"])
    assert "--profile-path" not in capsys.readouterr().out, "only the command named has its arguments"
