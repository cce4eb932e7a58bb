"""notebooks/capacity_planning.ipynb executes end to end and answers its question with figures."""

from __future__ import annotations

import pytest
from nbrun import execute_notebook, is_plotly


@pytest.mark.slow
def test_capacity_planning_notebook_executes() -> None:
    outputs = execute_notebook("capacity_planning.ipynb")
    assert sum(is_plotly(o) for o in outputs) >= 4
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "70B does not fit 1 TiB of DRAM" in text
    assert "Cheapest per iteration at 70B:" in text
    assert text.count("fits up to") == 3
