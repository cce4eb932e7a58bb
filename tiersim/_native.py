"""The compiled engine: which modules ``setup.py`` builds with mypyc, and whether they are used.

Installing tiersim (``pip install .`` or ``-e .``) compiles ``COMPILED`` (the engine, the
fast-forward and the strategies, where a run spends its time, and the rank layout they read)
with mypyc into C extensions beside their sources, and writes ``_native.json``: for each
source it compiled, its hash, size (bytes) and modification time (ns). The extensions are used
only when every one of them was built from the source now beside it, their shared library is
there and ``TIERSIM_PURE_PYTHON`` is not set; otherwise all of them are imported from their
sources (the compiled modules call one another directly, so it is all or none): an edited
source is never shadowed by an extension built from the old one. Both ways give the same
results (tests/equivalence/test_native.py); the compiled one costs about half the instructions
per run.

The check costs little at import: nothing is read where no extension was built; where one was,
a source whose size and modification time are those recorded is taken as the one built, and
only a source with other ones (copied, touched or edited) is hashed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

COMPILED = (
    "tiersim.config.ranks",
    "tiersim.engine.accounts",
    "tiersim.engine.clock",
    "tiersim.engine.flows",
    "tiersim.engine.graph",
    "tiersim.engine.runner",
    "tiersim.engine.schedule",
    "tiersim.engine.usage",
    "tiersim.fastforward.counters",
    "tiersim.fastforward.cycles",
    "tiersim.fastforward.deferred",
    "tiersim.fastforward.deferred_copies",
    "tiersim.fastforward.deferred_run",
    "tiersim.fastforward.loops",
    "tiersim.fastforward.probe",
    "tiersim.fastforward.session",
    "tiersim.fastforward.shift",
    "tiersim.fastforward.spans",
    "tiersim.fastforward.state",
    "tiersim.fastforward.transient",
    "tiersim.strategies.base",
    "tiersim.strategies.builder",
    "tiersim.strategies.estimator",
    "tiersim.strategies.footprint",
    "tiersim.strategies.gpu",
    "tiersim.strategies.gpu_kernels",
    "tiersim.strategies.gradients",
    "tiersim.strategies.host",
    "tiersim.strategies.host_layout",
    "tiersim.strategies.iteration",
    "tiersim.strategies.kinds",
    "tiersim.strategies.memory",
    "tiersim.strategies.nvme",
    "tiersim.strategies.param_offload",
    "tiersim.strategies.placement",
    "tiersim.strategies.swap",
)
"""The modules mypyc compiles (package ``__init__`` files stay Python)."""

SHARED = "tiersim__mypyc"
"""The shared library mypyc builds for them (a top-level module)."""

PURE_ENV = "TIERSIM_PURE_PYTHON"
"""Set (to anything but empty) to import the compiled modules from their sources (and, at
install time, to build none)."""

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = Path(__file__).resolve().parent / "_native.json"


def source(module: str, root: Path = ROOT) -> Path:
    """The source file of one of ``COMPILED`` under ``root`` (the folder holding ``tiersim``)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """What ``_native.json`` records for the sources under ``root`` (taken at build time): each
    module's ``sha256``, ``size`` (bytes) and ``mtime_ns``."""
    record = {}
    for module in COMPILED:
        path = source(module, root)
        stat = path.stat()
        record[module] = {"sha256": digest(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return record


def _built(module: str) -> bool:
    """Whether an extension of ``module`` lies beside its source."""
    path = source(module)
    return any(path.with_name(path.stem + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def unchanged(module: str, entry: object) -> bool:
    """Whether the source of ``module`` is the one its manifest ``entry`` records: the same size
    and modification time (one ``stat``), or else the same hash. Raises ``OSError`` when the
    source cannot be read."""
    if not isinstance(entry, dict):
        return False  # no entry, or a manifest of an older build: rebuild to use the extensions
    path = source(module)
    stat = path.stat()
    if stat.st_size != entry.get("size"):
        return False
    return stat.st_mtime_ns == entry.get("mtime_ns") or digest(path) == entry.get("sha256")


def usable(recorded: Mapping[str, object] | None, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the compiled modules may be used: not asked for the sources, every module built
    from the source beside it (``recorded``: the manifest, None without one), and the shared
    library importable."""
    if environ.get(PURE_ENV) or recorded is None:
        return False
    try:
        if not all(_built(module) and unchanged(module, recorded.get(module)) for module in COMPILED):
            return False
    except OSError:
        return False
    return importlib.util.find_spec(SHARED) is not None


def _recorded() -> dict[str, object] | None:
    """The manifest, or None where there is none (or it cannot be read)."""
    import json

    try:
        recorded = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


class _FromSources:
    """Finds the compiled modules' sources ahead of their extensions (a ``sys.meta_path`` finder)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


ACTIVE = False
"""Whether this process uses the compiled modules (set by ``install``)."""


def install() -> None:
    """Decide, once per process, whether the compiled modules are used (reading the manifest only
    where an extension was built); if not, import them from their sources from now on."""
    global ACTIVE
    ACTIVE = not os.environ.get(PURE_ENV) and _built(COMPILED[0]) and usable(_recorded())
    if not ACTIVE and not any(isinstance(finder, _FromSources) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FromSources())


def describe() -> str:
    """One line saying which engine this process runs (for benchmarks)."""
    return "engine: compiled (mypyc)" if ACTIVE else "engine: Python sources"
