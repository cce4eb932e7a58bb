"""Golden results: the bundled scenarios, fixed seed, must reproduce their recorded summaries.

A deliberate model change updates them with ``python tests/equivalence/test_golden.py --update`` (and the
commit says why the numbers moved).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SCENARIOS = ["quickstart", "llama2-70b-offload", "seed-20b"]


def summaries(name: str) -> dict[str, object]:
    """The JSON summary of every strategy of a bundled scenario, as ``tiersim run`` prints it."""
    from tiersim.config.document import load_scenario
    from tiersim.simulate import simulate

    results = [simulate(c).summary() for c in load_scenario(ROOT / "scenarios" / f"{name}.yaml")]
    return {"scenario": name, "results": results}


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_matches_golden(name: str) -> None:
    expected = json.loads((GOLDEN / f"{name}.json").read_text())
    actual = summaries(name)
    assert [r["strategy"] for r in actual["results"]] == [r["strategy"] for r in expected["results"]]
    for got, want in zip(actual["results"], expected["results"]):
        assert got["fits"] == want["fits"]
        assert got["peak_bytes"] == want["peak_bytes"]
        assert got.get("reason") == want.get("reason")
        if want["fits"]:
            assert got["iteration_time_s"] == pytest.approx(want["iteration_time_s"], rel=1e-9)
            for phase, seconds in want["phases"].items():
                assert got["phases"][phase] == pytest.approx(seconds, rel=1e-9, abs=1e-12)
            assert got["bottleneck"] == want["bottleneck"]


def test_70b_ordering_comes_out_of_the_models() -> None:
    by_strategy = {r["strategy"]: r for r in summaries("llama2-70b-offload")["results"]}
    assert not by_strategy["gpu"]["fits"] and "hbm" in by_strategy["gpu"]["reason"]
    times = [by_strategy[s]["iteration_time_s"] for s in ("dram", "cxl", "nvme")]
    assert times[0] < times[1] < times[2]


if __name__ == "__main__" and "--update" in sys.argv:
    sys.path.insert(0, str(ROOT))
    for scenario in SCENARIOS:
        (GOLDEN / f"{scenario}.json").write_text(json.dumps(summaries(scenario), indent=2) + "\n")
        print(f"wrote {GOLDEN / scenario}.json")
