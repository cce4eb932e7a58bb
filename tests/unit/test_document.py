"""The scenario document: one spelling per field, variants that leave their parent alone, and
errors that name the same canonical path whether the value came from the file, ``--set`` or a
sweep factor."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tiersim.analysis.plan import Sizing, read_scenario, sized, with_model
from tiersim.config.document import SET, Origin, load_document
from tiersim.errors import ConfigError
from tiersim.sweeping.points import load_sweep, plan_sweep

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"

BAD_VALUES = [
    ("strategies.nvme.buffer_count", 0),
    ("strategies.nvme.buffer_count", -1),
    ("hardware.nvme.count", 0),
    ("training.global_batch", -4),
]


def _set_in_file(tmp_path: Path, path: str, value: object) -> Path:
    """quickstart with ``path`` written as ``value`` in the file itself."""
    data = yaml.safe_load(QUICKSTART.read_text())
    parts = path.split(".")
    if parts[0] == "strategies":
        (entry,) = [e for e in data["strategies"] if isinstance(e, dict) and e["name"] == parts[1]]
        entry[parts[2]] = value
    else:
        node = data
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    out = tmp_path / "bad.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def _error(call: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        call()  # type: ignore[operator]
    return caught.value


@pytest.mark.parametrize(("path", "value"), BAD_VALUES)
def test_file_set_and_sweep_factor_name_the_same_path(tmp_path: Path, path: str, value: object) -> None:
    from_file = _error(lambda: load_document(_set_in_file(tmp_path, path, value)).configs())
    from_set = _error(lambda: load_document(QUICKSTART).with_overrides([f"{path}={value}"]).configs())
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": str(QUICKSTART), "grid": {path: [value]}}))
    from_grid = _error(lambda: plan_sweep(load_sweep(sweep_file)))
    sweep_file.write_text(yaml.safe_dump({"base": str(QUICKSTART), "points": [{"model.layers": 2, path: value}]}))
    from_point = _error(lambda: plan_sweep(load_sweep(sweep_file)))
    assert {e.field for e in (from_file, from_set, from_grid, from_point)} == {path}
    assert from_file.source == str(tmp_path / "bad.yaml")
    assert from_set.source == "--set"
    assert from_grid.source == from_point.source == str(sweep_file)
    assert from_grid.message.endswith(f"(value {value}, from grid)")
    assert from_point.message.endswith(f"(value {value}, from points[0])")
    assert from_file.message == from_set.message  # the same check, only blamed elsewhere


def test_a_sweep_level_set_names_the_path_too(tmp_path: Path) -> None:
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": str(QUICKSTART), "set": ["strategies.nvme.buffer_count=0"],
                                          "grid": {"model.layers": [2]}}))
    error = _error(lambda: plan_sweep(load_sweep(sweep_file)))
    assert (error.source, error.field) == (str(sweep_file), "strategies.nvme.buffer_count")
    error = _error(lambda: plan_sweep(load_sweep(ROOT / "sweeps" / "quickstart-nvme.yaml",
                                                 ["strategies.nvme.buffer_count=0"])))
    assert (error.source, error.field) == ("--set", "strategies.nvme.buffer_count")


def test_the_planner_blames_its_candidate() -> None:
    scenario = read_scenario(QUICKSTART)
    error = _error(lambda: with_model(scenario, layers=0).configs(["dram"]))
    assert (error.source, error.field) == ("plan", "model.layers")
    assert "a model size tried" in error.message


def test_with_values_leaves_the_parent_alone_and_shares_untouched_branches() -> None:
    doc = load_document(QUICKSTART)
    before = yaml.safe_dump(doc.data)
    child = doc.with_values({"hardware.nvme.count": 4, "strategies.nvme.buffer_count": 8,
                             "training.global_batch": 16}, Origin("test", "here"))
    assert yaml.safe_dump(doc.data) == before and doc.origins == {}
    assert child.get("hardware.nvme.count") == 4 and doc.get("hardware.nvme.count") != 4
    assert child.get("strategies.nvme.buffer_count") == 8
    assert child.get("strategies.nvme.block_size") == doc.get("strategies.nvme.block_size")
    assert child.data["model"] is doc.data["model"]  # copy on write: untouched branches shared
    assert child.data["hardware"]["gpu"] == doc.data["hardware"]["gpu"]
    assert child.data["hardware"] is not doc.data["hardware"]
    # the other strategy entries are the parent's own
    assert [e for e in child.data["strategies"] if e != "nvme" and not (isinstance(e, dict) and e["name"] == "nvme")] \
        == [e for e in doc.data["strategies"] if e != "nvme" and not (isinstance(e, dict) and e["name"] == "nvme")]
    (config,) = child.configs(["nvme"])
    assert (config.hardware.nvme_count, config.options.buffer_count, config.training.global_batch) == (4, 8, 16)


def test_origins_are_remembered_per_path_and_the_latest_wins() -> None:
    doc = load_document(QUICKSTART)
    grid, candidate = Origin("s.yaml", "grid"), Origin("plan", "a candidate's tier sizing")
    child = doc.with_values({"hardware.nvme.count": 2}, grid).with_overrides(["training.global_batch=8"])
    assert child.origins == {"hardware.nvme.count": grid, "training.global_batch": SET}
    assert child.origin("hardware.nvme.count") == ("hardware.nvme.count", grid)
    assert child.origin("hardware.nvme") == ("hardware.nvme.count", grid)  # a field inside it
    assert child.origin("model.layers") is None  # the file's own value
    again = child.with_values({"hardware.nvme": {"device": "samsung-pm9a3", "count": 1}}, candidate)
    assert again.origins == {"training.global_batch": SET, "hardware.nvme": candidate}
    assert again.origin("hardware.nvme.count") == ("hardware.nvme", candidate)
    assert child.origins["hardware.nvme.count"] == grid  # the parent keeps its own


def test_strategies_are_addressed_by_name() -> None:
    doc = load_document(QUICKSTART)
    error = _error(lambda: doc.with_overrides(["strategies.tape.buffer_count=8"]))
    assert (error.source, error.field) == ("--set", "strategies.tape.buffer_count")
    error = _error(lambda: doc.with_values({"strategies.nvme": 1}, SET))
    assert "strategies.NAME.OPTION" in error.message
    error = _error(lambda: doc.with_values({"strategies.nvme.buffer_count.x": 1}, SET))
    assert "strategies.nvme.buffer_count is not a mapping" in error.message
    block = doc.with_values({"strategies.dram.offload_param.device": "cpu"}, SET)  # a field of a block
    assert block.get("strategies.dram.offload_param") == {"device": "cpu"}
    assert block.with_values({"strategies.dram.offload_param.buffer_count": 8}, SET).get(
        "strategies.dram.offload_param") == {"device": "cpu", "buffer_count": 8}
    only = doc.with_strategy("nvme")
    assert only.strategy_names() == ["nvme"] and only.get("strategies.nvme") == doc.get("strategies.nvme")
    assert doc.with_strategy("gpu").data["strategies"] == [{"name": "gpu"}]
    assert doc.strategy_names() == ["gpu", "dram", "cxl", "nvme"]


def test_sized_candidates_derive_from_the_document() -> None:
    scenario = read_scenario(QUICKSTART)
    candidate = sized(scenario, Sizing(256 * 2**30, 0, 2))
    assert candidate.document.get("hardware.cxl") is None and candidate.document.get("hardware.nvme.count") == 2
    assert scenario.document.get("hardware.cxl") is not None  # the parent keeps its devices
    assert candidate.document.resolved is scenario.document.resolved  # profiles looked up once for all


def test_equal_sections_are_validated_once_and_unequal_ones_apart() -> None:
    """Variants share the objects of the sections they leave alone; ``1``, ``1.0`` and ``True``
    are told apart (``True`` for a count is still an error), and an unhashable value is validated
    each time."""
    doc = load_document(ROOT / "scenarios" / "quickstart.yaml")
    a = doc.with_values({"training.global_batch": 8}, SET).configs()[0]
    b = doc.with_values({"training.global_batch": 16}, SET).configs()[0]
    assert a.model is b.model and a.training is not b.training
    assert doc.with_values({"hardware.nvme.count": 1}, SET).configs()[0].hardware.nvme_count == 1
    with pytest.raises(ConfigError, match="hardware.nvme.count"):
        doc.with_values({"hardware.nvme.count": True}, SET).configs()
    odd = doc.with_values({"model.layers": {1, 2}}, SET)
    with pytest.raises(ConfigError, match="model.layers"):
        odd.configs()
