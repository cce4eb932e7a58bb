"""The CLI as a user runs it, for the tests: ``python -m tiersim ARGS`` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
"""The checkout."""
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
"""The scenario most tests start from."""
SMALL = ["model.layers=6", "training.global_batch=2"]
"""``--set`` values that cut quickstart down to a few seconds of simulation for every strategy."""


def tiersim(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tiersim ARGS`` in ``cwd`` (``env``: the whole environment, default this
    one's) and capture its output; at most 180 s."""
    return subprocess.run([sys.executable, "-m", "tiersim", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180, env=env, check=False)


def refused_in_process(capsys: pytest.CaptureFixture[str], args: Sequence[str], *overrides: str) -> str:
    """``tiersim ARGS --set OVERRIDE ...`` run in this process: it must exit 2 with one line on
    stderr, which is returned."""
    from tiersim import cli

    command = list(args)
    for item in overrides:
        command += ["--set", item]
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err
