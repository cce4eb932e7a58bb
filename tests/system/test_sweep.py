"""Sweeps: same rows in-process, on a process pool and on a Dask cluster; kill + resume gives
the same final file; bad sweep files are one line and exit 2; ``--set`` applies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from clirun import QUICKSTART, ROOT
from clirun import tiersim as tiersim_cli

import tiersim
from tiersim.errors import ConfigError
from tiersim.sweeping.points import load_sweep, plan_sweep
from tiersim.sweeping.runner import run_sweep
from tiersim.sweeping.store import FolderInUse

SMALL = {
    "name": "small",
    "base": str(QUICKSTART),
    "set": ["training.sub_group_size=1e10"],
    "grid": {
        "model.layers": [2, 4],
        "hardware.nvme.count": [1, 2],
        "strategies.nvme.buffer_count": [4, 8],
    },
}

# 600 runs of the full quickstart model (about a second), in many small parts: long enough to
# kill midway (60 finished in 0.1 s once the fast-forward deferred the quickstart's copies).
LONGER = {
    "name": "longer",
    "base": str(QUICKSTART),
    "grid": {
        "strategy": ["nvme", "dram"],
        "hardware.nvme.count": [1, 2, 3],
        "strategies.nvme.buffer_count": [4, 8, 12, 16, 20],
        "strategies.nvme.queue_depth": [4, 16],
        "training.global_batch": [4, 8, 12, 16, 20, 24, 28, 32, 36, 40],
    },
}
LONGER_RUNS = 600


def results(frame: pd.DataFrame) -> pd.DataFrame:
    """A sweep's rows without ``runtime_s`` (the seconds each run took, which vary)."""
    return frame.drop(columns="runtime_s")


def write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return path


def test_plan_is_a_cartesian_product_in_file_order() -> None:
    runs = plan_sweep(load_sweep(SMALL))
    sweep = load_sweep(SMALL)
    assert len(sweep.points) == 8 and len(runs) == 8 * 4  # every base strategy per point
    assert sweep.points[1] == {"model.layers": 2, "hardware.nvme.count": 1, "strategies.nvme.buffer_count": 8}
    assert [r.strategy for r in runs[:4]] == ["gpu", "dram", "cxl", "nvme"]
    assert len({r.point_id for r in runs}) == len(runs)
    nvme = [r for r in runs if r.strategy == "nvme"]
    assert [r.config.options.buffer_count for r in nvme[:2]] == [4, 8]
    assert all(r.config.training.sub_group_size == 10**10 for r in runs)


@pytest.mark.slow
def test_rows_are_the_same_in_process_on_a_pool_and_on_a_dask_cluster() -> None:
    distributed = pytest.importorskip("distributed")
    inline = tiersim.sweep(SMALL, jobs=1)
    pool = tiersim.sweep(SMALL, jobs=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask = tiersim.sweep(SMALL, scheduler=cluster.scheduler_address)
    assert len(inline) == 32
    pd.testing.assert_frame_equal(results(inline), results(pool))
    pd.testing.assert_frame_equal(results(inline), results(dask))
    # one row per run: factors, result fields, error, runtime, seed, version
    for column in ("point", "point_id", "model.layers", "hardware.nvme.count", "strategies.nvme.buffer_count",
                   "strategy", "fits", "iteration_time_s", "peak_dram_bytes", "error", "runtime_s", "seed",
                   "tiersim_version", "config_hash"):
        assert column in inline.columns
    assert inline["error"].isna().all() and (inline["runtime_s"] > 0).all()
    assert (inline["tiersim_version"] == tiersim.__version__).all()
    assert list(inline["point"]) == sorted(inline["point"])


def test_a_pool_plans_the_same_runs_and_stops_at_the_same_bad_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's workers plan the points (``PLAN_CHUNK`` each): the same runs, identities and
    config hashes as planning in-process, and a bad point, or the task limit, past the first
    chunk stops the sweep with the same line before anything runs."""
    monkeypatch.setattr("tiersim.sweeping.points.PLAN_CHUNK", 5)
    spec = {"name": "chunks", "base": str(QUICKSTART), "set": ["model.layers=1", "training.seq_len=128"],
            "grid": {"strategy": ["dram"], "model.hidden": list(range(64, 64 * 13, 64))}}
    alone = plan_sweep(load_sweep(spec))
    pooled = run_sweep(spec, jobs=2)
    assert [(r.index, r.point, r.point_id, r.config_hash) for r in pooled.runs] == [
        (r.index, r.point, r.point_id, r.config_hash) for r in alone]
    assert pooled.frame["iteration_time_s"].tolist() == run_sweep(spec, jobs=1).frame["iteration_time_s"].tolist()
    bad = {**spec, "points": [{"model.hidden": 64 * (i + 1)} for i in range(12)] + [{"model.hidden": -5}]}
    del bad["grid"]
    bad["set"] = [*spec["set"], "strategies=[dram]"]
    with pytest.raises(ConfigError) as serial:
        plan_sweep(load_sweep(bad))
    with pytest.raises(ConfigError) as on_pool:
        run_sweep(bad, jobs=2)
    assert str(on_pool.value) == str(serial.value) and "points[12]" in str(serial.value)
    monkeypatch.setattr("tiersim.sweeping.points.MAX_SWEEP_TASKS", 7 * alone[0].tasks)
    with pytest.raises(ConfigError, match=r"the runs of its first 8 of 12 points already have"):
        run_sweep(spec, jobs=2)


def test_a_pool_stores_the_batches_finished_while_the_parent_was_busy_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the parent stores one part, the batches that finish meanwhile are handed to the
    store together, in the order they finished (one part, not one each); a batch that raised
    stops the run after the others' rows are stored."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tiersim.sweeping import runner

    first_part, last_done = threading.Event(), threading.Event()

    def fake_batch(batch):  # type: ignore[no-untyped-def]
        (index, _config), = batch
        if index > 0:
            assert first_part.wait(10)
        if index == 5:
            raise RuntimeError("worker fell over")
        if index == 9:
            last_done.set()
        return [(index, {"index": index})]

    stored: list[list[int]] = []

    def sink(results: list[tuple[int, dict[str, int]]]) -> None:
        if not stored:  # the first part: every other batch finishes meanwhile
            first_part.set()
            assert last_done.wait(10)
            time.sleep(0.1)
        stored.append([row["index"] for _, row in results])

    monkeypatch.setattr(runner, "run_batch", fake_batch)
    with ThreadPoolExecutor(max_workers=1) as pool, pytest.raises(RuntimeError, match="worker fell over"):
        runner._run_pool(pool, [[(i, None)] for i in range(10)], sink)  # type: ignore[list-item]
    assert stored == [[0], [1, 2, 3, 4, 6, 7, 8, 9]]


@pytest.mark.slow
def test_killed_sweep_resumed_gives_the_same_file(tmp_path: Path) -> None:
    sweep_file = write(tmp_path / "longer.yaml", LONGER)
    full = run_sweep(sweep_file, jobs=1, out=tmp_path / "full")
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "tiersim", "sweep", str(sweep_file), "--jobs", "1",
                             "--chunk-size", "2", "--out", str(out), "--format", "none"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    parts = out / "parts"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(parts.glob("part-*.parquet"))) < 3 and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    saved = len(list(parts.glob("part-*.parquet")))
    assert 3 <= saved < full.total / 2 and not (out / "results.parquet").exists()
    again = tiersim_cli("sweep", str(sweep_file), "--out", str(out), "--resume", "--jobs", "2")
    assert again.returncode == 0, again.stderr
    assert "resumed" in again.stdout
    resumed = pd.read_parquet(out / "results.parquet")
    uninterrupted = pd.read_parquet(tmp_path / "full" / "results.parquet")
    assert len(resumed) == full.total == LONGER_RUNS
    pd.testing.assert_frame_equal(results(resumed), results(uninterrupted))


@pytest.mark.slow
def test_ctrl_c_keeps_parts_exits_130_and_says_how_to_resume(tmp_path: Path) -> None:
    sweep_file = write(tmp_path / "longer.yaml", LONGER)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tiersim", "sweep", str(sweep_file), "--jobs", "2",
                             "--chunk-size", "2", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((out / "parts").glob("part-*.parquet"))) < 2:
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep finished before it could be interrupted"
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "runs saved" in lines[0] and "--resume" in lines[0], err
    finished = run_sweep(sweep_file, jobs=1, out=out, resume=True)
    assert finished.resumed > 0 and finished.resumed + finished.computed == finished.total


def _children(pid: int) -> set[int]:
    proc = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True, check=False)
    return {int(p) for p in proc.stdout.split()}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_killable_sweep(tmp_path: Path, jobs: str) -> tuple[subprocess.Popen[str], Path, Path]:
    sweep_file = write(tmp_path / "longer.yaml", LONGER)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tiersim", "sweep", str(sweep_file), "--jobs", jobs,
                             "--chunk-size", "2", "--out", str(out), "--format", "none"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((out / "parts").glob("part-*.parquet"))) < 2:
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep finished before it could be stopped"
    return proc, sweep_file, out


@pytest.mark.slow
def test_sigterm_keeps_parts_says_how_many_runs_are_saved_and_exits_143(tmp_path: Path) -> None:
    proc, sweep_file, out = _start_killable_sweep(tmp_path, "2")
    workers = _children(proc.pid)
    assert len(workers) >= 2
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    (line,) = err.strip().splitlines()
    assert line.startswith("tiersim: terminated: ") and "--resume" in line
    assert f" of {LONGER_RUNS} runs saved in " in line
    saved = int(line.split("terminated: ")[1].split(" of")[0])
    assert not any(_alive(w) for w in workers)
    finished = run_sweep(sweep_file, jobs=1, out=out, resume=True)
    assert finished.resumed == saved and finished.resumed + finished.computed == LONGER_RUNS


def test_workers_die_with_their_parent_on_kill_9(tmp_path: Path) -> None:
    proc, _sweep_file, _out = _start_killable_sweep(tmp_path, "2")
    workers = _children(proc.pid)
    assert len(workers) >= 2
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)


@pytest.mark.slow
def test_a_worker_killed_from_outside_stops_the_sweep_in_one_line_keeping_its_parts(tmp_path: Path) -> None:
    proc, sweep_file, out = _start_killable_sweep(tmp_path, "2")
    worker = min(_children(proc.pid))
    os.kill(worker, signal.SIGKILL)  # as the out-of-memory killer would
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    (line,) = err.strip().splitlines()
    assert line.startswith("tiersim: error: sweep stopped: a worker process died") and "--resume" in line
    saved = int(line.split("; ")[1].split(" of")[0])
    finished = run_sweep(sweep_file, jobs=1, out=out, resume=True)
    assert finished.resumed == saved and finished.resumed + finished.computed == LONGER_RUNS


def patch_simulate(monkeypatch: pytest.MonkeyPatch, fake: object) -> None:
    """Replace ``tiersim.simulate.simulate`` (what a sweep's runs call) for one test, after the
    CLI's commands have imported the real one (so that no later test gets the fake)."""
    import tiersim.simulate as simulate_module
    from tiersim import cli

    cli.build_parser()
    monkeypatch.setattr(simulate_module, "simulate", fake)


def test_a_failing_run_is_a_row_with_its_error_and_the_sweep_carries_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import tiersim.simulate as simulate_module

    real = simulate_module.simulate

    def flaky(config):  # type: ignore[no-untyped-def]
        if config.model.layers == 4 and config.strategy == "nvme":
            raise RuntimeError("engine fell over")
        return real(config)

    patch_simulate(monkeypatch, flaky)
    sweep_file = write(tmp_path / "s.yaml", SMALL)
    from tiersim import cli

    assert cli.main(["sweep", str(sweep_file), "--jobs", "1", "--out", str(tmp_path / "o")]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == ("tiersim: 4 of 32 runs failed (their error column says why); "
                                    "--resume reruns them")
    assert "ERROR" in captured.out and "RuntimeError: engine fell over" in captured.out
    frame = pd.read_parquet(tmp_path / "o" / "results.parquet")
    failed = frame[frame["error"].notna()]
    assert len(frame) == 32 and len(failed) == 4
    assert set(failed["strategy"]) == {"nvme"} and set(failed["model.layers"]) == {4}
    assert (failed["error"] == "RuntimeError: engine fell over").all() and failed["fits"].isna().all()
    assert (frame["runtime_s"] > 0).all() and frame.loc[frame["error"].isna(), "fits"].notna().all()
    monkeypatch.setattr(simulate_module, "simulate", real)
    again = run_sweep(sweep_file, out=tmp_path / "o", resume=True)
    assert (again.resumed, again.computed, again.failed) == (28, 4, 0)
    assert again.frame["error"].isna().all()


def test_a_sweep_whose_runs_all_fail_still_prints_its_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(config):  # type: ignore[no-untyped-def]
        raise ValueError("no")

    patch_simulate(monkeypatch, broken)
    from tiersim import cli

    sweep_file = write(tmp_path / "s.yaml", {"base": str(QUICKSTART), "grid": {"strategy": ["dram", "nvme"]}})
    assert cli.main(["sweep", str(sweep_file), "--jobs", "1", "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr().out
    assert out.count("ERROR") == 2 and "ValueError: no" in out


@pytest.mark.slow
def test_running_a_finished_sweep_again_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    sweep_file = write(tmp_path / "s.yaml", SMALL)
    first = tiersim_cli("sweep", str(sweep_file), "--jobs", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = tiersim_cli("sweep", str(sweep_file), "--jobs", "1", cwd=tmp_path)
    assert again.returncode == 2
    (line,) = again.stderr.strip().splitlines()
    command = f"tiersim sweep {sweep_file} --out out/sweep-small --jobs 1 --resume"
    assert line == (f"tiersim: error: out/sweep-small: --out: already holds this sweep (complete, 32 runs); "
                    f"to read its results again (nothing is rerun): {command}; to run it afresh: another --out, "
                    f"or delete out/sweep-small")
    resumed = tiersim_cli(*command.split()[1:], cwd=tmp_path)
    assert resumed.returncode == 0 and "32 resumed, 0 computed" in resumed.stdout


@pytest.mark.slow
def test_resume_after_a_factor_changed_from_numbers_to_unit_strings_is_refused(tmp_path: Path) -> None:
    numbers = {"base": str(QUICKSTART), "set": ["model.layers=2"],
               "grid": {"strategy": ["dram"], "hardware.dram_capacity": [274877906944, 549755813888]}}
    strings = {**numbers, "grid": {"strategy": ["dram"], "hardware.dram_capacity": ["256 GiB", "512 GiB"]}}
    sweep_file = write(tmp_path / "s.yaml", numbers)
    out = tmp_path / "o"
    assert tiersim_cli("sweep", str(sweep_file), "--out", str(out), "--jobs", "1").returncode == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    write(sweep_file, strings)
    for _ in range(2):
        proc = tiersim_cli("sweep", str(sweep_file), "--out", str(out), "--jobs", "1", "--resume")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "belongs to sweep 's'" in line and "nothing was changed" in line
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_a_folder_of_parts_without_a_sweep_record_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run_sweep(SMALL, out=out)
    (out / "sweep.json").unlink()
    with pytest.raises(ConfigError, match="without a sweep.json"):
        run_sweep(SMALL, out=out, resume=True)


def test_resume_reuses_this_sweeps_rows_and_refuses_another_sweeps_folder(tmp_path: Path) -> None:
    first = run_sweep(SMALL, out=tmp_path / "o")
    assert first.computed == 32
    again = run_sweep(SMALL, out=tmp_path / "o", resume=True)
    assert (again.resumed, again.computed) == (32, 0)
    pd.testing.assert_frame_equal(first.frame, again.frame)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "o").rglob("*")}
    with pytest.raises(ConfigError, match="belongs to sweep 'small'.*nothing was changed"):
        run_sweep(SMALL, out=tmp_path / "o", resume=True, overrides=["hardware.cxl.count=1"])
    with pytest.raises(FolderInUse, match=r"already holds this sweep \(complete, 32 runs\)"):
        run_sweep(SMALL, out=tmp_path / "o")
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "o").rglob("*")} == before  # nothing touched


def test_the_results_file_is_what_its_parts_consolidate_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``results.parquet`` is consolidated from the rows kept in memory (the parts stored
    before a resume and those written since): the same table, schema and metadata as the
    parts on disk read back and consolidated, for a sweep whose first part is a failed run."""
    import pyarrow.parquet as pq

    import tiersim.simulate as simulate_module
    from tiersim.sweeping.store import concat_tables, final_table, read_parts, stored_rows

    real = simulate_module.simulate

    def flaky(config):  # type: ignore[no-untyped-def]
        if config.strategy in ("gpu", "nvme"):
            raise RuntimeError("engine fell over")
        return real(config)

    out = tmp_path / "o"
    patch_simulate(monkeypatch, flaky)
    assert run_sweep(SMALL, out=out, chunk_size=3).failed == 16
    monkeypatch.setattr(simulate_module, "simulate", real)
    outcome = run_sweep(SMALL, out=out, chunk_size=3, resume=True)
    assert (outcome.resumed, outcome.computed, outcome.failed) == (16, 16, 0)
    parts = concat_tables(read_parts(out / "parts"))
    assert parts is not None and parts.num_rows == 48
    expected = final_table(parts, stored_rows(parts, outcome.runs), outcome.sweep, ())
    assert pq.read_table(out / "results.parquet").equals(expected, check_metadata=True)


@pytest.mark.slow
def test_a_bad_argument_names_the_parameter_from_python_and_the_flag_from_the_cli(tmp_path: Path) -> None:
    for kwargs, name in (({"jobs": 0}, "jobs"), ({"chunk_size": 0}, "chunk_size")):
        with pytest.raises(ConfigError) as raised:
            tiersim.sweep(SMALL, **kwargs)  # type: ignore[arg-type]
        assert str(raised.value) == f"<api>: {name}: must be a whole number of at least 1, got 0"
        assert "--" not in str(raised.value)
    sweep_file = write(tmp_path / "s.yaml", SMALL)
    for flag in ("--jobs", "--chunk-size"):
        proc = tiersim_cli("sweep", str(sweep_file), flag, "0", "--out", str(tmp_path / "o"))
        assert proc.returncode == 2
        assert proc.stderr == f"tiersim: error: {flag}: must be a whole number of at least 1, got 0\n"
    run_sweep(SMALL, out=tmp_path / "p")
    with pytest.raises(ConfigError) as raised:
        run_sweep(SMALL, out=tmp_path / "p")
    assert str(raised.value).startswith(f"{tmp_path / 'p'}: out: already holds this sweep")


def test_points_strategy_factor_and_strategy_options(tmp_path: Path) -> None:
    spec = {"base": str(QUICKSTART), "set": {"model.layers": 2},
            "points": [{"strategy": "nvme", "strategies.nvme.buffer_count": 4},
                       {"strategy": "nvme", "strategies.nvme.buffer_count": 40},
                       {"strategy": "dram", "strategies.nvme.buffer_count": 40}]}
    df = tiersim.sweep(spec)
    assert list(df["strategy"]) == ["nvme", "nvme", "dram"]
    assert df["peak_dram_bytes"].iloc[1] > df["peak_dram_bytes"].iloc[0]  # more pinned swap buffers


@pytest.mark.slow
def test_set_applies_to_every_run(tmp_path: Path) -> None:
    sweep_file = write(tmp_path / "s.yaml", {"base": str(QUICKSTART),
                                             "grid": {"strategy": ["dram"], "model.layers": [2, 4]}})
    base = tiersim_cli("sweep", str(sweep_file), "--out", str(tmp_path / "a"), "--jobs", "1")
    more = tiersim_cli("sweep", str(sweep_file), "--out", str(tmp_path / "b"), "--jobs", "1",
                       "--set", "training.global_batch=8")
    assert base.returncode == 0 and more.returncode == 0, base.stderr + more.stderr
    a = pd.read_parquet(tmp_path / "a" / "results.parquet")
    b = pd.read_parquet(tmp_path / "b" / "results.parquet")
    assert (b["forward_s"] > 1.9 * a["forward_s"]).all()  # twice the micro-batches
    assert (a["config_hash"] != b["config_hash"]).all()


BAD = {
    "malformed YAML": ("base: {q}\ngrid: {{model.layers: [2, 3\n", "line 3"),
    "unknown key": ("base: {q}\ngridd: {{model.layers: [2]}}\n", "gridd"),
    "bad dotted path": ("base: {q}\ngrid: {{hardware.nvme.countt: [1, 2]}}\n", "hardware.nvme.countt"),
    "empty grid": ("base: {q}\ngrid: {{}}\n", "grid"),
    "grid and points": ("base: {q}\ngrid: {{model.layers: [2]}}\npoints: [{{}}]\n", "grid"),
    "bad option value": ("base: {q}\ngrid: {{strategies.nvme.buffer_count: [8, 2]}}\n",
                         "strategies.nvme.buffer_count"),
    "unknown option": ("base: {q}\ngrid: {{strategies.nvme.buffer_countt: [8]}}\n",
                       "strategies.nvme.buffer_countt"),
    "unknown strategy": ("base: {q}\ngrid: {{strategy: [nvme, tape]}}\n", "grid.strategy"),
    "bad point": ("base: {q}\npoints: [{{model.layers: 2}}, {{model.layerz: 2}}]\n", "model.layerz"),
    "missing base": ("grid: {{model.layers: [2]}}\n", "base"),
    "base not found": ("base: nothere.yaml\ngrid: {{model.layers: [2]}}\n", "base"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD))
def test_bad_sweep_files_are_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    text, field = BAD[case]
    sweep_file = write(tmp_path / "bad.yaml", text.format(q=QUICKSTART))
    proc = tiersim_cli("sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--jobs", "1")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"tiersim: error: {sweep_file}: {field}"), lines[0]
    assert not (tmp_path / "out").exists()  # validated up front: nothing ran


@pytest.mark.slow
def test_set_on_a_factor_or_bad_field_is_one_line_and_exit_2(tmp_path: Path) -> None:
    sweep_file = write(tmp_path / "s.yaml", {"base": str(QUICKSTART), "grid": {"model.layers": [2]}})
    for arg, field in (("model.layers=4", "--set: model.layers"), ("model.layerss=2", "--set: model.layerss")):
        proc = tiersim_cli("sweep", str(sweep_file), "--set", arg, "--out", str(tmp_path / "o"))
        assert proc.returncode == 2 and proc.stderr.startswith(f"tiersim: error: {field}"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_import_is_light_and_exports_the_api() -> None:
    code = ("import sys, tiersim; assert 'dask' not in sys.modules and 'pandas' not in sys.modules; "
            "assert callable(tiersim.sweep) and callable(tiersim.simulate) and callable(tiersim.load_scenario); "
            "import tiersim.results; assert tiersim.Result is tiersim.results.Result; "
            "assert 'distributed' not in sys.modules; print(tiersim.__version__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == tiersim.__version__


@pytest.mark.parametrize("name", ["quickstart-nvme", "llama2-70b-tiers"])
def test_every_factor_of_a_bundled_sweep_changes_a_result(name: str) -> None:
    """A bundled sweep shows an effect of each factor: some two runs that differ only in it
    differ in iteration time (or fit)."""
    sweep = load_sweep(ROOT / "sweeps" / f"{name}.yaml")
    frame = tiersim.sweep(ROOT / "sweeps" / f"{name}.yaml", jobs=1)
    factors = [f for f in sweep.factors if f != "strategy"]
    for factor in factors:
        others = [f for f in factors if f != factor] + ["strategy"]
        outcomes = frame.groupby(others, dropna=False).apply(
            lambda g: g[["fits", "iteration_time_s"]].astype(str).drop_duplicates().shape[0], include_groups=False)
        assert (outcomes > 1).any(), f"{factor} changes nothing in {name}"
