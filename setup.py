"""Builds the engine and the strategies (``tiersim._native.COMPILED``) as C extensions with mypyc.

Everything else about the package is in pyproject.toml. ``TIERSIM_PURE_PYTHON=1 pip install .``
builds none; a build that fails (no C compiler) installs the sources alone, which give the same
results more slowly. The build records the hash, size and modification time of every source it
compiled in ``tiersim/_native.json``, so that an extension is never used beside a source edited
since (``tiersim/_native.py``). mypyc runs in ``build_ext`` only (the other setup commands pip runs see a placeholder).

The C is written one file per module (mypyc's ``multi_file``) and compiled on every CPU at once,
so that installing on two cores takes well under a minute (docs/performance.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_native", HERE / "tiersim" / "_native.py")
assert _spec is not None and _spec.loader is not None
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)
JOBS = os.cpu_count() or 1


def in_parallel(compile_sources: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """A compiler's ``compile`` that compiles each source on its own, ``JOBS`` at a time (each is
    a compiler process, so threads suffice), and returns the objects in the sources' order."""

    def compile_each(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
        with ThreadPoolExecutor(JOBS) as pool:
            done = pool.map(lambda one: compile_sources([one], *args, **kwargs), sources)
            return [obj for objects in done for obj in objects]

    return compile_each


class BuildNative(build_ext):
    """build_ext that compiles ``COMPILED`` with mypyc and writes ``tiersim/_native.json`` (the
    hash, size and time of each source, taken before compiling) beside the extensions."""

    def finalize_options(self) -> None:
        from mypyc.build import mypycify

        self.record = native.manifest(HERE)
        paths = [str(native.source(module, Path("."))) for module in native.COMPILED]
        extensions = mypycify(["--ignore-missing-imports", "--no-warn-unused-ignores", "--follow-imports=skip", *paths],
                              opt_level="3", group_name="tiersim", multi_file=True)
        for extension in extensions:
            extension.optional = True  # no C compiler: the sources alone
        self.distribution.ext_modules = extensions
        self.parallel = self.parallel or JOBS  # the small per-module extensions, JOBS at a time
        super().finalize_options()

    def build_extensions(self) -> None:
        self.compiler.compile = in_parallel(self.compiler.compile)  # the shared library's C files
        super().build_extensions()

    def run(self) -> None:
        super().run()
        target = HERE if self.inplace else Path(self.build_lib)
        (target / "tiersim" / "_native.json").write_text(json.dumps(self.record, indent=1) + "\n")


compiled = not os.environ.get(native.PURE_ENV)
setup(ext_modules=[Extension("tiersim__mypyc", [])] if compiled else [],
      cmdclass={"build_ext": BuildNative} if compiled else {})
