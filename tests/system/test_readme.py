"""Every code block of the README runs, as written.

- The Quickstart's first command runs verbatim in a copy of the repository (a fresh venv, an
  editable install, the bundled scenario); its second command is the whole test suite, which
  ``.ci/run`` runs verbatim (checked here) rather than this suite running itself.
- Every other ``bash`` block runs line by line from a folder holding copies of the repository's
  ``scenarios/``, ``sweeps/``, ``device_profiles/``, ``systems/`` and the training-log excerpts
  of ``tests/fixtures/logs/`` (so the outputs stay out of the checkout); each line must exit 0.
- The ``yaml`` block is a sweep file: it is run, and it is the bundled sweep it says it is.
- The ``python`` block runs in that folder too.

The README shows one example per main job (run, plan, sweep, replay a log, read a DeepSpeed
config, import a log, fit); the rest of the command line, calibration included, is in
``docs/guide/``, whose blocks ``tests/system/test_docs.py`` runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE)
QUICKSTART = BLOCKS[0][1]
BASH_LINES = [line for lang, body in BLOCKS[1:] if lang == "bash" for line in body.splitlines()
              if line.strip() and not line.lstrip().startswith("#")]


def _env() -> dict[str, str]:
    """This interpreter's environment, its scripts (``tiersim``) first on the path."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with copies of the bundled files, where the README's commands run in order."""
    folder = tmp_path_factory.mktemp("readme")
    for name in ("scenarios", "sweeps", "device_profiles", "systems", "tests/fixtures/logs"):
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("host-*", "__pycache__"))
    return folder


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert [lang for lang, _body in BLOCKS] == ["bash"] * 4 + ["yaml"] + ["bash"] * 4 + ["python"]
    assert len(BASH_LINES) >= 15
    jobs = ["tiersim run ", "tiersim plan ", "tiersim sweep ", "tiersim import-log ", "tiersim fit ", " --ds-config "]
    assert [job for job in jobs if not any(job in line for line in BASH_LINES)] == []
    assert "tiersim replay tests/fixtures/logs/polaris-13B-dp4-mb4.log --system systems/polaris.yaml" in BASH_LINES


def test_quickstart_second_command_is_what_ci_runs() -> None:
    commands = [line for line in QUICKSTART.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.slow
def test_quickstart_first_command_runs_as_written(tmp_path: Path) -> None:
    commands = [line for line in QUICKSTART.splitlines() if line and not line.startswith("#")]
    copy = tmp_path / "tiersim"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "out",
                                                              "__pycache__", ".hypothesis", "*_cache"))
    proc = subprocess.run(["bash", "-c", commands[0]], cwd=copy, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    table = proc.stdout[proc.stdout.index("scenario: quickstart"):].splitlines()
    assert [line.split()[0] for line in table[3:] if not line.startswith(" ")] == ["gpu", "dram", "cxl", "nvme"]


@pytest.mark.slow
@pytest.mark.parametrize("line", BASH_LINES, ids=lambda line: " ".join(line.split()[:4]))
def test_bash_line_runs_as_written(line: str, workdir: Path) -> None:
    proc = subprocess.run(["bash", "-c", line], cwd=workdir, capture_output=True, text=True, timeout=900,
                          env=_env(), check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_yaml_block_is_the_bundled_sweep_and_runs(workdir: Path) -> None:
    (body,) = [b for lang, b in BLOCKS if lang == "yaml"]
    shown = yaml.safe_load(body)
    bundled = yaml.safe_load((ROOT / "sweeps" / "quickstart-nvme.yaml").read_text())
    assert {k: v for k, v in bundled.items() if k != "name"} == shown
    (workdir / "sweeps" / "readme.yaml").write_text(body)
    proc = subprocess.run(["tiersim", "sweep", "sweeps/readme.yaml", "--jobs", "1", "--format", "none"],
                          cwd=workdir, capture_output=True, text=True, timeout=300, env=_env(), check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_python_block_runs_as_written(workdir: Path) -> None:
    (body,) = [b for lang, b in BLOCKS if lang == "python"]
    proc = subprocess.run([sys.executable, "-c", body], cwd=workdir, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'strategy': 'nvme'" in proc.stdout
