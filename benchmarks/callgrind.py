"""Instructions counted by valgrind's callgrind inside one call of a child process.

Wall and CPU time on the development VM drift by tens of percent within an hour, so the
engine's cost is measured in instructions. Callgrind counts only while the child is inside
``sys.call_tracing`` (``--collect-atstart=no --toggle-collect``), which the child calls around
the work to count and nothing else calls: imports, planning and warm-up stay out, and the
count repeats to about 0.01% (the difference of two whole-process counts, as these
benchmarks took before, moved by several percent from one process to the next).

    counted(["benchmarks/instructions_per_run.py", "--child", "20"])
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def counted(argv: list[str]) -> int:
    """Instructions callgrind counts in ``python ARGV...`` within its ``sys.call_tracing`` calls."""
    with tempfile.TemporaryDirectory() as workdir:
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
        done = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                               "--toggle-collect=*call_tracing*", f"--callgrind-out-file={workdir}/callgrind.out",
                               sys.executable, *argv], env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if not found:
        raise SystemExit("callgrind printed no instruction count:\n" + done.stderr[-2000:])
    return int(found.group(1))
