"""Run a bundled notebook top to bottom as the tests do (nbclient, kernel python3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def execute_notebook(name: str) -> list[dict[str, Any]]:
    """Execute ``notebooks/NAME`` from that folder; return every code cell output, and fail the
    test on any error output."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return outputs


def is_plotly(output: dict[str, Any]) -> bool:
    """Whether a cell output is a plotly figure."""
    data = output.get("data", {})
    return "application/vnd.plotly.v1+json" in data or "plotly" in data.get("text/html", "")
