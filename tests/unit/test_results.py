"""Metrics that add up, over random scenarios: every utilisation is in [0, 1], busy seconds
never exceed the phase's length (and are never NaN), the phases' busy seconds and units add up
to the iteration's, and the critical path's segments sum to the iteration time phase by phase."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim.analysis.explain import explain
from tiersim.analysis.plots import write_report
from tiersim.config.document import load_scenario
from tiersim.results import PHASES, Result, utilisation_rows
from tiersim.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SEVENTY_B = ROOT / "scenarios" / "llama2-70b-offload.yaml"
FLOAT = 1e-9
"""Relative float residue allowed (rates come from progressive filling in floats)."""


def check_metrics(result: Result) -> None:
    """The invariants, for one result that fits."""
    assert result.phases is not None and result.iteration_time_s is not None
    util = result.utilisation
    assert not util.isna().any().any()
    assert ((util["utilisation"] >= 0) & (util["utilisation"] <= 1 + FLOAT)).all(), util[util["utilisation"] > 1]
    for row in util.itertuples(index=False):
        length = result.iteration_time_s if row.phase == "iteration" else result.phases[row.phase]
        assert 0 <= row.busy_s <= length * (1 + FLOAT) + 1e-15, row
    for (_resource, column), parts in ((key, util[util["resource"] == key[0]])
                                      for key in {(r, c) for r in util["resource"] for c in ("busy_s", "units_moved")}):
        whole = float(parts.loc[parts["phase"] == "iteration", column].iloc[0])
        assert float(parts.loc[parts["phase"] != "iteration", column].sum()) == pytest.approx(
            whole, rel=1e-6, abs=1e-12
        )
    explanation = explain(result)
    on_path = explanation.breakdown.groupby("phase")["seconds"].sum()
    for phase in PHASES:
        assert float(on_path.get(phase, 0.0)) == pytest.approx(result.phases[phase], rel=1e-9, abs=1e-12), phase
    assert float(explanation.path["seconds"].sum()) == pytest.approx(result.iteration_time_s, rel=1e-9)
    assert result.bottleneck() == busiest_row(result)


def busiest_row(result: Result) -> str | None:
    """``Result.bottleneck`` read off the optimizer step's utilisation rows: the highest, the
    first in table order of those within 1e-9 of it."""
    assert result.engine is not None and result.phases is not None
    rows = utilisation_rows(result.engine, result.phases, "optimizer_step")
    if not rows:
        return None
    top = max(row["utilisation"] for row in rows)
    return next(row["resource"] for row in rows if row["utilisation"] >= top * (1 - 1e-9))


@pytest.mark.parametrize("scenario", [QUICKSTART, SEVENTY_B])
def test_bundled_scenarios_add_up(scenario: Path) -> None:
    fitted = [r for r in (simulate(c) for c in load_scenario(scenario)) if r.fits]
    assert len(fitted) == 3
    for result in fitted:
        check_metrics(result)
        copies = result.utilisation[
            (result.utilisation["resource"] == "partition_grads") & (result.utilisation["phase"] == "backward")
        ]
        assert float(copies["utilisation"].iloc[0]) <= 1.0  # was 1.06-1.14 when counted by label


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from([QUICKSTART, SEVENTY_B]),
    strategy=st.sampled_from(["gpu", "dram", "cxl", "nvme"]),
    layers=st.integers(1, 8),
    micro_steps=st.integers(1, 5),
    gpus=st.sampled_from([1, 2, 4]),
    zero_stage=st.integers(0, 3),
    sub_group=st.sampled_from(["2e7", "1e8", "5e8"]),
    pipelined=st.tuples(st.booleans(), st.booleans()),
    buffers=st.sampled_from([4, 8, 12]),
    weights=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    pinned=st.booleans(),
)
def test_metrics_add_up_in_random_scenarios(
    scenario: Path,
    strategy: str,
    layers: int,
    micro_steps: int,
    gpus: int,
    zero_stage: int,
    sub_group: str,
    pipelined: tuple[bool, bool],
    buffers: int,
    weights: tuple[int, int],
    pinned: bool,
) -> None:
    overrides = [
        f"model.layers={layers}",
        f"hardware.gpus={gpus}",
        "hardware.sockets=2",
        "hardware.cores_per_rank=8",
        "hardware.gpu=h200",
        f"training.global_batch={gpus * micro_steps}",
        f"training.zero_stage={max(zero_stage, {'gpu': 0, 'nvme': 3}.get(strategy, 1))}",
        f"training.sub_group_size={sub_group}",
        f"hardware.pinned={str(pinned).lower()}",
    ]
    if strategy == "nvme":
        overrides += [
            f"strategies.nvme.pipeline_read={str(pipelined[0]).lower()}",
            f"strategies.nvme.pipeline_write={str(pipelined[1]).lower()}",
            f"strategies.nvme.buffer_count={buffers}",
        ]
    if strategy == "cxl":
        overrides += [f"strategies.cxl.dram_weight={weights[0]}", f"strategies.cxl.cxl_weight={weights[1]}"]
    (config,) = load_scenario(scenario, overrides, [strategy])
    result = simulate(config)
    if result.fits:
        check_metrics(result)


def test_plot_report_path_seconds_agree_with_the_phase_table(tmp_path: Path) -> None:
    results = [simulate(c) for c in load_scenario(QUICKSTART)]
    page = write_report(results, tmp_path / "out.html").read_text()
    for result in results:
        if not result.fits:
            continue
        assert result.phases is not None
        block = page.split(f"<h2>{result.strategy}</h2>")[1].split("</pre>")[0]
        for phase in PHASES:
            seconds = float(re.search(rf"{phase} \(([\d.e+-]+) s on the path\)", block).group(1))  # type: ignore[union-attr]
            assert math.isclose(seconds, result.phases[phase], rel_tol=5e-4), (result.strategy, phase)


def test_placement_sums_every_tier_in_order_and_refuses_an_unknown_one() -> None:
    """``Placement.totals`` and ``reserved`` list every tier of ``TIERS`` in its order, sum
    each tier's items (allocated, held), and name a tier that is not one."""
    from tiersim.config.hardware import TIERS
    from tiersim.strategies.placement import Placement

    placement = Placement()
    placement.put("nvme", "a", 3, 5)
    placement.put("hbm", "b", 2**40, 2**41)
    placement.put("nvme", "c", 7)
    assert list(placement.totals()) == list(placement.reserved()) == list(TIERS)
    assert placement.totals() == {"hbm": 2**40, "dram": 0, "cxl": 0, "nvme": 10}
    assert placement.reserved() == {"hbm": 2**41, "dram": 0, "cxl": 0, "nvme": 12}
    placement.put("tape", "d", 1)
    with pytest.raises(KeyError, match="tape"):
        placement.totals()


def test_result_init_takes_the_fields_in_order_and_stays_frozen() -> None:
    """``Result.__init__`` (written out: one write of the instance's dict) takes the dataclass's
    fields, in order, with their defaults, and sets each; the result stays frozen."""
    fields = dataclasses.fields(Result)
    params = list(inspect.signature(Result.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
                                           for f in fields]
    values = [object() for _ in fields]
    result = Result(*values)  # type: ignore[arg-type]
    assert [getattr(result, f.name) for f in fields] == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.fits = False  # type: ignore[misc]
