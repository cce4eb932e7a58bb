"""notebooks/capacity_planning.ipynb executes end to end and answers its question with figures."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_capacity_planning_notebook_executes() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebooks = ROOT / "notebooks"
    nb = nbformat.read(notebooks / "capacity_planning.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(notebooks)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    data = [o.get("data", {}) for o in outputs]
    figures = [d for d in data if "application/vnd.plotly.v1+json" in d or "plotly" in d.get("text/html", "")]
    assert len(figures) >= 4
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "70B does not fit 1 TiB of DRAM" in text
    assert "Cheapest per iteration at 70B:" in text
    assert text.count("fits up to") == 3
