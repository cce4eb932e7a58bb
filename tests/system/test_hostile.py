"""Hostile paths and inputs (issue 38): named pipes, devices, /proc, folders that cannot be
written, input nested 100,000 deep, malformed training logs, a sweep's workers, scheduler and
folder. Each is a ``tiersim`` process that must end within ``SECONDS`` with exit status 0 or 2
and, for 2, one line on stderr naming what was wrong: never a traceback, a hang or a read
without end. One test per kind of input, a case per parameter."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tiersim.sweeping.store import LOCK_FILE, folder_lock

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
LOG = LOGS / "70B-nvme.log"
SYSTEM = ROOT / "systems" / "seed-node.yaml"
SECONDS = 60
"""No input may take longer: a hang fails the test instead of stalling the suite."""
DEEP = 100_000
"""Levels of nesting in the deep inputs (the issue's --ds-config case)."""


def tiersim(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m tiersim ARGS``, stopped after ``SECONDS`` (a ``TimeoutExpired`` is a hang)."""
    return subprocess.run([sys.executable, "-m", "tiersim", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=SECONDS, env=env, check=False)


def refused(proc: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The one stderr line of a run that exited 2, checked to hold each of ``expected``."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tiersim: error: "), proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def _pipe(tmp_path: Path, name: str = "pipe.yaml") -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _sweep_on(tmp_path: Path, base: Path) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {base}\ngrid: {{model.layers: [1, 2]}}\n")
    return path


PIPED: dict[str, Callable[[Path, Path], list[str]]] = {
    "scenario": lambda pipe, tmp: ["run", str(pipe)],
    "sweep file": lambda pipe, tmp: ["sweep", str(pipe), "--out", str(tmp / "o")],
    "sweep base": lambda pipe, tmp: ["sweep", str(_sweep_on(tmp, pipe)), "--out", str(tmp / "o"), "--jobs", "1"],
    "plan scenario": lambda pipe, tmp: ["plan", str(pipe), "--objective", "largest-model"],
    "ds-config": lambda pipe, tmp: ["run", "quickstart", "--ds-config", str(pipe)],
    "import-log log": lambda pipe, tmp: ["import-log", str(pipe)],
    "replay system": lambda pipe, tmp: ["replay", str(LOG), "--system", str(pipe)],
    "fit system": lambda pipe, tmp: ["fit", str(pipe), "--log", str(LOG)],
    "fit log": lambda pipe, tmp: ["fit", str(SYSTEM), "--log", str(pipe)],
    "compare results": lambda pipe, tmp: ["compare", str(pipe), str(pipe)],
    "hf config": lambda pipe, tmp: ["run", "quickstart", "--set", f"model.hf_config={pipe}"],
    "profile by path": lambda pipe, tmp: ["run", "quickstart", "--set", f"hardware.gpu={pipe}"],
    "profile path": lambda pipe, tmp: ["run", "quickstart", "--set", "hardware.gpu=no-such-gpu",
                                       "--profile-path", str(tmp)],
}
"""Where a named pipe is given: (pipe, folder) -> command line. "profile path": a pipe among the
profiles that an unknown name's error lists."""


@pytest.mark.parametrize("case", list(PIPED))
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path, case: str) -> None:
    pipe = _pipe(tmp_path)
    argv = PIPED[case](pipe, tmp_path)
    expected = "no-such-gpu" if case == "profile path" else str(pipe)
    refused(tiersim(*argv), expected)


SPECIAL_PATHS = {
    "scenario /dev/zero": (["run", "/dev/zero"], "a device"),
    "scenario /dev/null": (["run", "/dev/null"], "a device"),
    "scenario /dev/urandom": (["run", "/dev/urandom"], "a device"),
    "scenario /proc": (["run", "/proc"], "a directory"),
    "scenario /proc/self/status": (["run", "/proc/self/status"], "/proc/self/status"),
    "sweep /dev/zero": (["sweep", "/dev/zero"], "a device"),
    "plan /dev/zero": (["plan", "/dev/zero", "--objective", "largest-model"], "a device"),
    "ds-config /dev/zero": (["run", "quickstart", "--ds-config", "/dev/zero"], "a device"),
    "compare /dev/zero": (["compare", "/dev/zero", "/dev/zero"], "/dev/zero"),
    "hf config /dev/zero": (["run", "quickstart", "--set", "model.hf_config=/dev/zero"], "a device"),
    "import-log /dev/zero": (["import-log", "/dev/zero"], "a device"),
    "import-log /proc/self/status": (["import-log", "/proc/self/status"], "/proc/self/status"),
    "replay --system /dev/zero": (["replay", str(LOG), "--system", "/dev/zero"], "a device"),
    "fit --log /dev/zero": (["fit", str(SYSTEM), "--log", "/dev/zero"], "a device"),
    "run --out /proc": (["run", "quickstart", "--out", "/proc"], "/proc: --out: cannot write files there"),
    "run --out /proc/self": (["run", "quickstart", "--out", "/proc/self"], "--out: cannot write files there"),
    "run --out /dev/null": (["run", "quickstart", "--out", "/dev/null"], "/dev/null: --out"),
    "run --out /proc/x/y": (["run", "quickstart", "--out", "/proc/x/y"], "--out: cannot create directory"),
    "run --plot /proc/x.html": (["run", "quickstart", "--plot", "/proc/x.html"], "--plot: cannot write file"),
    "import-log --out /proc": (["import-log", str(LOG), "--out", "/proc"], "/proc: --out: cannot write"),
    "reproduce --out /proc": (["reproduce", "seed", "--out", "/proc"], "/proc: --out: cannot write"),
    "sweep --out /proc": (["sweep", "quickstart-nvme", "--jobs", "1", "--out", "/proc"], "/proc: --out: cannot"),
}
"""/dev and /proc as inputs and outputs: command line, what the line must say."""


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SPECIAL_PATHS))
def test_dev_and_proc_paths_are_one_line(case: str) -> None:
    argv, expected = SPECIAL_PATHS[case]
    refused(tiersim(*argv), expected)


@pytest.mark.slow
def test_calibrate_checks_its_out_before_measuring() -> None:
    proc = tiersim("calibrate", "--quick", "--out", "/proc/host.yaml")
    refused(proc)
    assert "torch" in proc.stderr or "/proc: --out: cannot write files there" in proc.stderr


def _deep_json() -> str:
    return '{"zero_optimization": ' + "[" * DEEP + "]" * DEEP + "}"


def _deep_log(tmp_path: Path) -> Path:
    """A training log whose DeepSpeed user config block nests ``DEEP`` lists."""
    text = (LOGS / "70B-dram.log").read_text()
    start = text.index("json = {\n") + len("json = {\n")
    path = tmp_path / "deep.log"
    path.write_text(text[:start] + '    "deep": ' + "[" * DEEP + "]" * DEEP + ",\n" + text[start:])
    return path


DEEPLY: dict[str, Callable[[Path], list[str]]] = {
    "scenario": lambda tmp: ["run", str(_write(tmp / "s.yaml", "[" * DEEP + "]" * DEEP))],
    "scenario of mappings": lambda tmp: ["run", str(_write(tmp / "s.yaml", "{a: " * DEEP + "1" + "}" * DEEP))],
    "sweep grid": lambda tmp: ["sweep", str(_write(tmp / "w.yaml", "base: quickstart\ngrid: " + "[" * DEEP
                                                   + "]" * DEEP)), "--out", str(tmp / "o")],
    "--set value": lambda tmp: ["run", "quickstart", "--set", "model.layers=" + "[" * 50_000 + "]" * 50_000],
    "ds-config": lambda tmp: ["run", "quickstart", "--ds-config", str(_write(tmp / "ds.json", _deep_json()))],
    "hf config.json": lambda tmp: ["run", "--model", str(_write(tmp / "config.json", _deep_json()))],
    "import-log user config": lambda tmp: ["import-log", str(_deep_log(tmp))],
    "replay user config": lambda tmp: ["replay", str(_deep_log(tmp)), "--system", str(SYSTEM)],
    "sweep record": lambda tmp: ["sweep", "quickstart-nvme", "--jobs", "1", "--resume",
                                 "--out", str(_write(tmp / "o" / "sweep.json", "[" * DEEP + "]" * DEEP).parent)],
}
"""Inputs nested 100,000 deep (50,000 for ``--set``: one argument may hold 128 KiB)."""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", list(DEEPLY))
def test_input_nested_100000_deep_is_one_line(tmp_path: Path, case: str) -> None:
    refused(tiersim(*DEEPLY[case](tmp_path)))


MALFORMED_LOGS = {
    "numactl -m all": ("'numactl', '-m', '0'", "'numactl', '-m', 'all'"),
    "numactl -i all": ("'numactl', '-m', '0'", "'numactl', '-i', 'all'"),
    "numactl -C with a stride": ("'-C', '0-55'", "'-C', '0-55:2'"),
    "numactl -C reversed": ("'-C', '0-55'", "'-C', '55-0'"),
    "unbalanced quote": ("cmd = /root", "cmd = '/root"),
    "--adam-beta1 zero.nine": ("--adam-beta1 0.9", "--adam-beta1 zero.nine"),
    "aio block_size 1M": ("'block_size': 1048576", "'block_size': '1M'"),
    "--num-layers 8x0": ("--num-layers 80", "--num-layers 8x0"),
    "--hidden-size 1e999": ("--hidden-size 8192", "--hidden-size 1e999"),
    "aio queue_depth 8.5": ("'queue_depth': 8", "'queue_depth': 8.5"),
    "NaN timer": ("'queue_depth': 8", "'queue_depth': nan"),
    "a NUL byte": ("--num-layers 80", "--num-layers 8\x000"),
}
"""The issue's malformed training logs and more of their kind: (text in 70B-nvme.log, replacement)."""


@pytest.mark.slow
@pytest.mark.parametrize("case", [*MALFORMED_LOGS, "binary", "empty", "truncated", "header only"])
@pytest.mark.parametrize("command", ["import-log", "replay"])
def test_a_malformed_log_is_read_or_refused_in_one_line(tmp_path: Path, case: str, command: str) -> None:
    text = LOG.read_text()
    if case in MALFORMED_LOGS:
        old, new = MALFORMED_LOGS[case]
        assert old in text
        text = text.replace(old, new)
    else:
        text = {"binary": bytes(range(256)).decode("latin-1") * 64, "empty": "",
                "truncated": text[: len(text) // 3], "header only": "\n".join(text.splitlines()[:5])}[case]
    log = _write(tmp_path / "bad.log", text)
    proc = tiersim(command, str(log), *(["--system", str(SYSTEM)] if command == "replay" else []))
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        refused(proc, str(log))


SWEEP_OPTIONS = {
    "--jobs 1000": (["--jobs", "1000"], "--jobs: 1000 worker processes for the"),
    "--jobs 0": (["--jobs", "0"], "--jobs: must be a whole number of at least 1"),
    "--scheduler 'not a url'": (["--scheduler", "not a url"], "--scheduler: cannot use the Dask scheduler address"),
    "--scheduler ':'": (["--scheduler", ":"], "--scheduler: cannot use the Dask scheduler address"),
}


@pytest.mark.parametrize("case", list(SWEEP_OPTIONS))
def test_sweep_workers_and_scheduler_are_checked_before_anything_runs(tmp_path: Path, case: str) -> None:
    args, expected = SWEEP_OPTIONS[case]
    refused(tiersim("sweep", "quickstart-nvme", "--out", str(tmp_path / "o"), *args), expected)
    assert not (tmp_path / "o").exists()


def test_a_sweep_folder_takes_one_writer_and_a_stale_lock_file_locks_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with folder_lock(out):  # as a sweep running in another process holds it
        line = refused(tiersim("sweep", "quickstart-nvme", "--jobs", "1", "--out", str(out), "--format", "none"),
                       f"{out}: --out: another sweep is writing there now (it holds {LOCK_FILE})")
        assert "--resume" not in line
        refused(tiersim("sweep", "quickstart-nvme", "--jobs", "1", "--out", str(out), "--resume"), "another sweep")
    assert (out / LOCK_FILE).exists() and not (out / "results.parquet").exists()
    done = tiersim("sweep", "quickstart-nvme", "--jobs", "1", "--out", str(out), "--format", "none")
    assert done.returncode == 0 and (out / "results.parquet").exists(), done.stderr
