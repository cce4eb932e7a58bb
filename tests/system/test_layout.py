"""The package's layout: modules import downward, never the ``tiersim`` facade, and without
cycles, counting a function's own imports too (a late import is no way around a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import tiersim

ROOT = Path(tiersim.__file__).parent
DATA_PACKAGES = ("device_profiles", "scenarios", "sweeps")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[1:2] and parts[1] in DATA_PACKAGES:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(tree: ast.Module, module_level: bool) -> list[tuple[str, list[str]]]:
    """(module, names) of each ``import``/``from ... import`` (top level only when asked,
    leaving out ``if TYPE_CHECKING:`` blocks)."""
    out: list[tuple[str, list[str]]] = []
    nodes: list[ast.stmt] = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        elif not module_level or isinstance(node, (ast.If, ast.Try, ast.With)):
            nodes.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return out


def _edges(name: str, module_level: bool) -> set[str]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    targets = set()
    for module, names in _imports(tree, module_level):
        if not module.startswith("tiersim"):
            continue
        subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
        targets.update(subs or [module])
    targets.discard(name)
    return targets


def test_no_module_imports_the_facade() -> None:
    offenders = sorted(name for name in MODULES if name != "tiersim" and "tiersim" in _edges(name, False))
    assert offenders == []


def test_no_import_cycles() -> None:
    graph = {name: _edges(name, False) & MODULES.keys() for name in MODULES}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_model_does_not_import_the_floors_above_it() -> None:
    """The engine, strategies and workload read config objects, never analysis, sweeps or the CLI."""
    above = ("tiersim.analysis", "tiersim.sweeping", "tiersim.commands", "tiersim.cli", "tiersim.calibration",
             "tiersim.validation", "tiersim.ingest", "tiersim.fitting")
    model = [n for n in MODULES if n.startswith(("tiersim.engine", "tiersim.strategies", "tiersim.workload"))]
    offenders = {n: sorted(t for t in _edges(n, False) if t.startswith(above)) for n in model}
    assert {n: t for n, t in offenders.items() if t} == {}


def test_the_engine_and_the_strategies_do_not_import_the_fast_forward() -> None:
    """The accelerator attaches through the schedule interface (``tiersim.engine.schedule``):
    the physics and the strategies never name it, even in a function's own imports."""
    model = [n for n in MODULES if n.startswith(("tiersim.engine", "tiersim.strategies"))]
    offenders = {n: sorted(t for t in _edges(n, False) if t.startswith("tiersim.fastforward")) for n in model}
    assert {n: t for n, t in offenders.items() if t} == {}


def test_only_the_clock_touches_simpy() -> None:
    """SimPy is the engine's clock and queue, wrapped in one module (``tiersim.engine.clock``)."""
    users = set()
    for name, path in MODULES.items():
        for module, _names in _imports(ast.parse(path.read_text(encoding="utf-8")), False):
            if module == "simpy" or module.startswith("simpy."):
                users.add(name)
    assert users == {"tiersim.engine.clock"}
