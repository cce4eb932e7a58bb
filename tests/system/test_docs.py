"""Every code block of ``docs/`` runs, as written; the README stays short.

Each page's fenced blocks are read in order, and the info string says what happens to a block:

- ``bash``: every line runs with bash and must exit 0 with no traceback. A line ending in a
  backslash continues on the next; blank lines and ``#`` lines are skipped.
- ``python``: the block runs as a script and must exit 0.
- ``yaml``: the block must parse. If its first line is ``# file: PATH``, it is written to PATH
  before the page's commands run, so that they can use it.
- ``console`` or ``text``: output or an illustration, not run. Keep these few.

Any other info string, or none, fails: a block either runs or says it does not.

A page's ``bash`` lines and ``python`` blocks run in document order, in a scratch folder of its
own holding copies of ``scenarios/``, ``sweeps/``, ``device_profiles/``, ``systems/`` and the
log excerpts of ``tests/fixtures/logs/`` (the README's commands run the same way, in
``tests/system/test_readme.py``). Beside that folder, ``../shared`` links to the reference material:
the first ``shared/`` holding ``reference/`` next to the checkout or above it, or the folder
``TIERSIM_SHARED`` names. Where there is none, the lines that read ``../shared/`` are skipped;
where there is one, they run. Every step is marked ``slow``: each runs a command in a subprocess
(a second or more; ``tiersim calibrate`` about a minute), after the page's earlier steps.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", flags=re.DOTALL | re.MULTILINE)
RUN = {"bash", "python", "yaml"}
SHOWN = {"console", "text"}
README_LIMIT = 10_000
BUNDLED = ("scenarios", "sweeps", "device_profiles", "systems", "tests/fixtures/logs")


def _shared() -> Path | None:
    """The shared reference material, or None where this checkout has none."""
    named = os.environ.get("TIERSIM_SHARED")
    candidates = [Path(named)] if named else [parent / "shared" for parent in ROOT.parents]
    return next((c.resolve() for c in candidates if (c / "reference").is_dir()), None)


SHARED = _shared()


def _blocks(page: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block of a page, in order."""
    return [(info.strip(), body) for info, body in FENCE.findall(page.read_text())]


def _lines(body: str) -> list[str]:
    """A bash block's commands: continuations joined, blank and comment lines left out."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _steps(page: Path) -> list[tuple[str, str]]:
    """What runs on a page, in order: ("bash", a line) and ("python", a block)."""
    steps: list[tuple[str, str]] = []
    for info, body in _blocks(page):
        if info == "bash":
            steps += [("bash", line) for line in _lines(body)]
        elif info == "python":
            steps.append(("python", body))
    return steps


STEPS = [(page, i, kind, text) for page in PAGES for i, (kind, text) in enumerate(_steps(page))]


def _env() -> dict[str, str]:
    """This interpreter's environment, its scripts (``tiersim``) first on the path."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _run(kind: str, text: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = ["bash", "-c", text] if kind == "bash" else [sys.executable, "-c", text]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, env=_env(), check=False)


@dataclass
class _Page:
    """A page's scratch folder and how many of its steps have run there."""

    page: Path
    folder: Path
    done: int = 0
    results: dict[int, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def run_through(self, index: int) -> subprocess.CompletedProcess[str]:
        """Runs the page's steps up to ``index`` (those not run yet) and returns that one's result."""
        steps = _steps(self.page)
        while self.done <= index:
            kind, text = steps[self.done]
            if not ("../shared/" in text and SHARED is None):
                self.results[self.done] = _run(kind, text, self.folder)
            self.done += 1
        return self.results[index]


def _scratch(page: Path, base: Path) -> Path:
    """A folder with copies of the bundled files and the page's ``# file:`` blocks."""
    folder = base / "work"
    for name in BUNDLED:
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("host-*", "__pycache__"))
    if SHARED is not None:
        (base / "shared").symlink_to(SHARED, target_is_directory=True)
    for info, body in _blocks(page):
        first = body.splitlines()[0] if body else ""
        if info == "yaml" and first.startswith("# file: "):
            target = folder / first.removeprefix("# file: ").strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
    return folder


@pytest.fixture(scope="module")
def pages() -> dict[Path, _Page]:
    """One scratch folder per page, made when its first step runs."""
    return {}


def _page(pages: dict[Path, _Page], page: Path, tmp_path_factory: pytest.TempPathFactory) -> _Page:
    if page not in pages:
        base = tmp_path_factory.mktemp(page.stem)
        pages[page] = _Page(page, _scratch(page, base))
    return pages[page]


def test_the_readme_is_at_most_10000_characters() -> None:
    size = len((ROOT / "README.md").read_text())
    assert size <= README_LIMIT, f"README.md has {size} characters"


def test_the_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    wanted = ["docs/guide/cli.md", "docs/guide/scenarios.md", "docs/guide/sweeps.md", "docs/guide/calibration.md",
              "docs/model.md", "docs/design/fast-forward.md", "docs/validation.md", "docs/performance.md",
              "docs/reference/fields.md", "CHANGELOG.md"]
    assert [link for link in wanted if f"]({link})" not in readme] == []
    for page in PAGES:
        assert f"]({page.relative_to(ROOT)})" in readme or page.parent.name == "reference", page


def test_the_strategies_table_lists_every_option_with_its_deepspeed_key() -> None:
    """docs/guide/scenarios.md's table (the README's links to it) has a row, with a DeepSpeed
    key, for every option of every strategy and every field of ``offload_param``."""
    from dataclasses import fields

    from tiersim.strategies import STRATEGIES
    from tiersim.strategies.param_options import ParamOffload

    text = (DOCS / "guide" / "scenarios.md").read_text()
    section = text.split("## Strategies and their options\n")[1].split("\n## ")[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| `") or
            line.startswith("| any ")]
    covered = set()
    for strategy, option, key, _what in rows:
        assert key.strip(), strategy
        names = re.findall(r"`([a-z]+)`", strategy) or list(STRATEGIES)
        covered |= {(name, opt) for name in names for opt in re.findall(r"`([a-z_.]+)`", option)}
    wanted = {(name, f.name) for name, kind in STRATEGIES.items() for f in fields(kind.Options)
              if f.name != "offload_param"}
    wanted |= {(name, f"offload_param.{f.name}") for name in STRATEGIES for f in fields(ParamOffload)}
    assert wanted - covered == set()
    assert "(docs/guide/scenarios.md#strategies-and-their-options)" in (ROOT / "README.md").read_text()


def _links(page: Path) -> list[str]:
    """The relative targets of a page's markdown links and images, anchors left out."""
    targets = re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", page.read_text()))
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and t.split("#")[0]]


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    """Every link points to a file (the generated reference pages included)."""
    missing = [t for t in _links(page) if not (page.parent / t).exists()]
    assert missing == [], page


def test_there_are_docs_blocks_to_run() -> None:
    assert {p.relative_to(DOCS).as_posix() for p in PAGES} >= {
        "guide/cli.md", "guide/scenarios.md", "guide/sweeps.md", "guide/calibration.md", "model.md",
        "design/fast-forward.md", "validation.md", "performance.md"}
    assert len([s for s in STEPS if s[2] == "bash"]) >= 40
    assert any("../shared/" in text for _page_, _i, _kind, text in STEPS)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_block_runs_or_says_it_does_not(page: Path) -> None:
    infos = [info for info, _body in _blocks(page)]
    assert [info for info in infos if info not in RUN | SHOWN] == [], page
    assert page.read_text().count("```") == 2 * len(infos), f"{page}: a fence that does not close"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_yaml_blocks_parse(page: Path) -> None:
    for info, body in _blocks(page):
        if info == "yaml":
            assert yaml.safe_load(body) is not None, body[:200]


def _param(page: Path, index: int, kind: str, text: str) -> object:
    """A step as a test case, named by its page, index and first words."""
    return pytest.param(page, index, kind, text,
                        id=f"{page.relative_to(DOCS)}:{index}:{' '.join(text.split()[:3])}")


@pytest.mark.slow
@pytest.mark.parametrize(("page", "index", "kind", "text"), [_param(*step) for step in STEPS])
def test_docs_step_runs_as_written(page: Path, index: int, kind: str, text: str, pages: dict[Path, _Page],
                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    if "../shared/" in text and SHARED is None:
        pytest.skip("no shared/reference beside this checkout")
    proc = _page(pages, page, tmp_path_factory).run_through(index)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
