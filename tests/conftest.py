"""Fixtures shared by the test modules (helpers to import are in ``clirun``), and the marker of
each test's purpose, from its folder: ``unit``, ``equivalence`` or ``system`` (docs/guide/testing.md)."""

from __future__ import annotations

import pytest
from clirun import QUICKSTART, SMALL

PURPOSES = ("unit", "equivalence", "system")
"""The folders under tests/, each also the marker its tests carry."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the purpose its folder names."""
    for item in items:
        folder = item.path.parent.name
        if folder in PURPOSES:
            item.add_marker(folder)


@pytest.fixture(scope="module")
def results() -> list:
    """Every strategy of the small quickstart, simulated (once per test module)."""
    from tiersim.config.document import load_scenario
    from tiersim.simulate import simulate

    return [simulate(c) for c in load_scenario(QUICKSTART, SMALL)]
