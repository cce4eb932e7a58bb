"""The CLI as a user runs it, for the tests: ``python -m tiersim ARGS`` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
