"""Fixtures shared by the test modules (helpers to import are in ``clirun``)."""

from __future__ import annotations

import pytest
from clirun import QUICKSTART, SMALL


@pytest.fixture(scope="module")
def results() -> list:
    """Every strategy of the small quickstart, simulated (once per test module)."""
    from tiersim.config.document import load_scenario
    from tiersim.simulate import simulate

    return [simulate(c) for c in load_scenario(QUICKSTART, SMALL)]
