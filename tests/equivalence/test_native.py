"""The compiled engine (tiersim._native): used where it was built from the sources beside it,
never beside a source edited since, and giving the results the sources give."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tiersim import _native
from tiersim.config.document import load_scenario
from tiersim.simulate import simulate
from tiersim.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["quickstart", "llama2-70b-offload", "seed-20b"]
SETTINGS = [[], ["training.global_batch=64"], ["hardware.nvme.count=2", "strategies.nvme.pipeline_read=true"]]


def summaries() -> list[dict[str, object]]:
    """Every strategy of the bundled scenarios under a few settings, as ``tiersim run --format json``
    gives them, and the events each took."""
    out = []
    for name in SCENARIOS:
        for settings in SETTINGS:
            for config in load_scenario(ROOT / "scenarios" / f"{name}.yaml", settings):
                result = simulate(config)
                out.append({**result.summary(), "events": result.events})
    return out


def test_the_sources_give_what_the_compiled_engine_gives() -> None:
    """The same summaries, every number of them, from the modules imported from their sources
    (``TIERSIM_PURE_PYTHON``) as from this process's engine (compiled where it was built)."""
    code = ("import json, tiersim, tiersim._native as n, tiersim.engine.flows as f, "
            "tests.equivalence.test_native as t; "
            "print(json.dumps({'active': n.ACTIVE, 'flows': f.__file__, 'summaries': t.summaries()}))")
    env = {**os.environ, _native.PURE_ENV: "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=600)
    pure = json.loads(done.stdout)
    assert not pure["active"] and pure["flows"].endswith(".py")
    assert pure["summaries"] == json.loads(json.dumps(summaries()))


def test_the_compiled_engine_is_used_where_it_was_built() -> None:
    """Where ``pip install`` compiled the engine (it wrote the manifest), this process runs it."""
    if not _native.MANIFEST.exists() or os.environ.get(_native.PURE_ENV):
        pytest.skip("no compiled engine here (installed with TIERSIM_PURE_PYTHON, or no C compiler)")
    import tiersim.engine.flows
    import tiersim.strategies.nvme

    assert _native.ACTIVE, "the manifest does not match the sources: rebuild with pip install -e ."
    assert not tiersim.engine.flows.__file__.endswith(".py")
    assert not tiersim.strategies.nvme.__file__.endswith(".py")


def test_an_edited_source_or_the_switch_means_the_sources() -> None:
    """A module whose source changed since the build, a missing manifest or ``TIERSIM_PURE_PYTHON``
    each mean every compiled module is imported from its source."""
    now = _native.manifest()
    edited = {**now, "tiersim.engine.graph": {**now["tiersim.engine.graph"], "sha256": "0" * 64, "mtime_ns": 0}}
    assert not _native.usable(edited, {})
    assert not _native.usable(None, {})
    assert not _native.usable(now, {_native.PURE_ENV: "1"})


def test_a_source_is_hashed_only_when_its_size_or_time_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The import-time check: a source with its recorded size and modification time is taken
    unread; one with another time is hashed (a touched copy passes, an edit does not); a manifest
    of an older build (a bare hash per module) passes none."""
    module = "tiersim.engine.graph"
    entry = _native.manifest()[module]
    assert set(entry) == {"sha256", "size", "mtime_ns"} and entry["size"] > 0
    touched = {**entry, "mtime_ns": entry["mtime_ns"] - 1}
    edited = {**touched, "sha256": "0" * 64}
    assert _native.unchanged(module, touched) and not _native.unchanged(module, edited)
    assert not _native.unchanged(module, {**entry, "size": entry["size"] + 1, "mtime_ns": 0})
    assert not _native.unchanged(module, entry["sha256"])

    def no_hashing(path: Path) -> str:
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(_native, "digest", no_hashing)
    assert _native.unchanged(module, entry)


def test_results_and_configs_cross_processes() -> None:
    """A config and its result (trace, utilisation and the re-simulation it can do included)
    pickle and come back equal, compiled or not: pools and Dask send them between processes."""
    for config in load_scenario(ROOT / "scenarios" / "quickstart.yaml"):
        result = simulate(config)
        back = pickle.loads(pickle.dumps(result))
        assert pickle.loads(pickle.dumps(config)) == config
        assert back.summary() == result.summary()
        if result.fits:
            assert back.utilisation.equals(result.utilisation)
            assert back.trace.equals(result.trace)


def test_the_options_the_schema_reads_stay_python() -> None:
    """mypyc keeps no ``Literal`` or class annotations for the scenario schema to read at run
    time (a compiled ``policy: Literal[...]`` reads as ``type``): every strategy's options with
    fields live in a module that is not compiled."""
    for strategy in STRATEGIES.values():
        if dataclasses.fields(strategy.Options):
            assert strategy.Options.__module__ not in _native.COMPILED, strategy.name
