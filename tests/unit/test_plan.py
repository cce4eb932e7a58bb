"""The planner against brute force: every candidate simulated directly, costs from the profiles."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest
import yaml
from clirun import QUICKSTART, ROOT, tiersim

from tiersim.analysis.plan import (
    GIB,
    LADDER,
    SECONDS_PER_YEAR,
    plan_cheapest,
    plan_fastest,
    plan_largest_model,
    read_scenario,
)
from tiersim.config.profiles import PROFILE_KINDS, find_profile
from tiersim.config.scenario import scenario_from_dict
from tiersim.errors import ConfigError
from tiersim.simulate import simulate

DRAM_GIB = [48, 96, 192]
CXL = [1, 2]
NVME = [1, 2]


@pytest.fixture(autouse=True)
def _bundled_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERSIM_PROFILE_PATH", raising=False)
    monkeypatch.chdir(ROOT)


def small_data() -> dict:
    """quickstart with a 20-layer 7B-wide model (4.3B): too big for HBM alone, ~75 GB of host
    state, so the DRAM sizes tried decide which offload fits."""
    data = yaml.safe_load(QUICKSTART.read_text())
    data["model"]["layers"] = 20
    return data


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_data()))
    return path


def price(name: str, kind: str) -> float:
    profile = find_profile(name, PROFILE_KINDS[kind], "test", "x")
    assert profile.price_usd is not None, name
    return float(profile.price_usd)


def brute_force(data: dict, lifetime: float = 3.0) -> list[dict]:
    """Every (strategy, dram, cxl in 0..., nvme in 0...) simulated; cost summed by hand."""
    rows = []
    hw0 = data["hardware"]
    dram_default = find_profile(hw0["dram"], PROFILE_KINDS["dram"], "test", "x").capacity
    for strategy, g, c, n in itertools.product(["gpu", "dram", "cxl", "nvme"], DRAM_GIB, [0, *CXL], [0, *NVME]):
        d = copy.deepcopy(data)
        hw = d["hardware"]
        hw["dram_capacity"] = g * GIB
        if c:
            hw["cxl"]["count"] = c
        else:
            del hw["cxl"]
        if n:
            hw["nvme"]["count"] = n
        else:
            del hw["nvme"]
        (config,) = scenario_from_dict(d, "brute", [strategy])
        result = simulate(config)
        cost = (price(hw0["gpu"], "gpu") * hw0["gpus"] + price(hw0["cpu"], "cpu") * hw0["sockets"]
                + price(hw0["dram"], "dram") * hw0["sockets"] * g * GIB / dram_default
                + c * price(hw0["cxl"]["device"], "cxl") + n * price(hw0["nvme"]["device"], "nvme"))
        rows.append({"strategy": strategy, "dram": float(g), "cxl": c, "nvme": n, "fits": result.fits,
                     "time": result.iteration_time_s, "cost": cost, "reason": result.reason,
                     "per_iter": None if not result.fits else cost / (lifetime * SECONDS_PER_YEAR)
                     * result.iteration_time_s})
    return rows


USES = {"gpu": (False, False), "dram": (False, False), "cxl": (True, False), "nvme": (False, True)}


def planner_space(rows: list[dict]) -> list[dict]:
    """The planner's candidates: a device a strategy does not use is absent, one it uses present."""
    return [r for r in rows if (r["cxl"] > 0) == USES[r["strategy"]][0] and (r["nvme"] > 0) == USES[r["strategy"]][1]]


def key(row) -> tuple:
    return (row["strategy"], float(row["dram"]), int(row["cxl"]), int(row["nvme"]))


def plan_key(row) -> tuple:
    return (row["strategy"], float(row["dram_gib_per_socket"]), int(row["cxl_devices"]), int(row["nvme_drives"]))


@pytest.fixture(scope="module")
def brute() -> list[dict]:
    return brute_force(small_data())


def test_fastest_matches_brute_force(small: Path, brute: list[dict]) -> None:
    frame = plan_fastest(read_scenario(small), dram_gib=DRAM_GIB, cxl_counts=CXL, nvme_counts=NVME)
    fitting = [r for r in brute if r["fits"]]
    best = min(fitting, key=lambda r: (r["time"], r["cost"]))
    top = frame.iloc[0]
    assert plan_key(top) == key(best)
    assert top["iteration_time_s"] == pytest.approx(best["time"], rel=1e-12)
    assert top["cost_usd"] == pytest.approx(best["cost"], rel=1e-12)
    # the full ranking: the planner's space, fitting rows, by (time, cost)
    expected = sorted((r for r in planner_space(brute) if r["fits"]), key=lambda r: (r["time"], r["cost"]))
    ranked = frame[frame["rank"].notna()]
    assert list(ranked["rank"]) == list(range(1, len(expected) + 1))
    assert [(round(t, 12), round(c, 6)) for t, c in zip(ranked["iteration_time_s"], ranked["cost_usd"])] == \
        [(round(r["time"], 12), round(r["cost"], 6)) for r in expected]
    assert {plan_key(r) for _, r in ranked.iterrows()} == {key(r) for r in expected}
    for _, row in ranked.iterrows():
        match = next(r for r in brute if key(r) == plan_key(row))
        assert row["cost_per_iteration_usd"] == pytest.approx(match["per_iter"], rel=1e-12)
    # every candidate is listed; the unranked ones are those that do not fit, with the tier
    assert len(frame) == len(planner_space(brute))
    unfit = frame[frame["rank"].isna()]
    assert not unfit["fits"].any()
    assert all(b.startswith(("capacity: ", "missing: ")) for b in unfit["binding"])
    assert all(b.startswith(("busy: ", "bandwidth: ")) for b in ranked["binding"])


def test_cheapest_matches_brute_force(small: Path, brute: list[dict]) -> None:
    fitting = sorted(r["time"] for r in planner_space(brute) if r["fits"])
    target = fitting[len(fitting) // 2]   # a target half the fitting candidates meet
    budget = sorted(r["cost"] for r in planner_space(brute))[-3]
    frame = plan_cheapest(read_scenario(small), dram_gib=DRAM_GIB, cxl_counts=CXL, nvme_counts=NVME,
                          max_iteration_time=target, budget=budget)
    meeting = [r for r in brute if r["fits"] and r["time"] <= target and r["cost"] <= budget]
    best = min(meeting, key=lambda r: (r["cost"], r["time"]))
    assert plan_key(frame.iloc[0]) == key(best)
    expected = sorted((r for r in planner_space(meeting)), key=lambda r: (r["cost"], r["time"]))
    ranked = frame[frame["rank"].notna()]
    assert [(round(c, 6), round(t, 12)) for c, t in zip(ranked["cost_usd"], ranked["iteration_time_s"])] == \
        [(round(r["cost"], 6), round(r["time"], 12)) for r in expected]
    excluded = frame[frame["rank"].isna()]
    assert len(excluded) == len(planner_space(brute)) - len(expected)
    for _, row in excluded.iterrows():
        assert (not row["fits"]) or row["iteration_time_s"] > target or row["cost_usd"] > budget


def test_cheapest_with_an_impossible_target_ranks_nothing(small: Path) -> None:
    frame = plan_cheapest(read_scenario(small), dram_gib=[192], cxl_counts=[1], nvme_counts=[1],
                          max_iteration_time=1e-6)
    assert frame["rank"].isna().all()
    assert all("slower than" in e or "does not fit" in e for e in frame["excluded"])


@pytest.mark.parametrize("strategy", ["gpu", "dram", "nvme"])
def test_largest_model_fits_and_the_next_layer_does_not(small: Path, strategy: str) -> None:
    scenario = read_scenario(small)
    frame = plan_largest_model(scenario, [strategy], max_layers=512)
    row = frame.iloc[0]
    layers = int(row["layers"])
    for n, fits in ((layers, True), (layers + 1, False)):
        data = small_data()
        data["model"]["layers"] = n
        (config,) = scenario_from_dict(data, "x", [strategy])
        result = simulate(config)
        assert result.fits is fits, (strategy, n, result.reason)
    assert row["next_step"] == f"{layers + 1} layers"
    assert row["next_binding"].startswith("capacity: ")
    assert row["next_binding_tier"] in ("hbm", "dram", "nvme")
    assert row["iteration_time_s"] > 0


def test_largest_model_grows_a_pipeline_by_a_layer_per_stage_and_chunk(tmp_path: Path) -> None:
    """Stages split the layers evenly: the planner deepens by pipeline_parallel x virtual_pipeline."""
    data = small_data()
    data["training"].update(zero_stage=1, pipeline_parallel=2, virtual_pipeline=2, global_batch=4)
    data["hardware"]["gpus"] = 2
    data["strategies"] = ["gpu"]
    path = tmp_path / "piped.yaml"
    path.write_text(yaml.safe_dump(data))
    row = plan_largest_model(read_scenario(path), ["gpu"], max_layers=512).iloc[0]
    layers = int(row["layers"])
    assert layers % 4 == 0 and row["next_step"] == f"{layers + 4} layers"
    for n, fits in ((layers, True), (layers + 4, False)):
        data["model"]["layers"] = n
        (config,) = scenario_from_dict(data, "x", ["gpu"])
        assert simulate(config).fits is fits


def test_largest_model_ladder(small: Path) -> None:
    frame = plan_largest_model(read_scenario(small), ["dram", "gpu"], scale="ladder")
    by = {r["strategy"]: r for _, r in frame.iterrows()}
    names = [rung["name"] for rung in LADDER]
    dram = by["dram"]
    i = names.index(dram["model"])
    for rung, fits in ((LADDER[i], True), (LADDER[i + 1], False)):
        data = small_data()
        data["model"] = {**data["model"], **{k: v for k, v in rung.items() if k != "name"}}
        (config,) = scenario_from_dict(data, "x", ["dram"])
        assert simulate(config).fits is fits
    assert by["gpu"]["model"] == "-" and by["gpu"]["next_step"] == "7b"   # nothing fits in one H100's HBM
    assert list(frame["strategy"]) == ["dram", "gpu"]


def test_missing_price_is_a_config_error(tmp_path: Path) -> None:
    gpu = yaml.safe_load((ROOT / "device_profiles" / "h100-sxm.yaml").read_text())
    gpu.pop("price_usd")
    gpu["sources"].pop("price_usd")
    (tmp_path / "h100-sxm.yaml").write_text(yaml.safe_dump(gpu))
    data = small_data()
    data["hardware"]["gpu"] = "h100-sxm.yaml"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    scenario = read_scenario(path)
    with pytest.raises(ConfigError, match="price_usd"):
        plan_cheapest(scenario, dram_gib=[192], cxl_counts=[1], nvme_counts=[1])
    frame = plan_fastest(scenario, strategies=["dram"], dram_gib=[192])   # no cost asked: cost unknown
    assert frame.iloc[0]["cost_usd"] is None


@pytest.mark.slow
def test_plan_cli_table_and_json(small: Path) -> None:
    proc = tiersim("plan", str(small), "--objective", "fastest", "--dram-gib", "96,192", "--cxl-counts", "2",
                   "--nvme-counts", "1", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["objective"] == "fastest" and data["rows"][0]["rank"] == 1
    assert {"strategy", "iteration_time_s", "cost_usd", "cost_per_iteration_usd", "binding"} <= set(data["rows"][0])
    table = tiersim("plan", str(small), "--objective", "largest-model", "--strategy", "dram", "--max-layers", "64")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[:2] == ["rank", "strategy"] and lines[3].split()[:2] == ["1", "dram"]


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["--objective", "fastest", "--dram-gib", "x"],
    ["--objective", "fastest", "--cxl-counts", "0"],
    ["--objective", "cheapest", "--budget", "-5"],
    ["--objective", "cheapest", "--max-iteration-time", "0"],
    ["--objective", "largest-model", "--budget", "100"],
    ["--objective", "fastest", "--strategy", "tape"],
    ["--objective", "largest-model", "--lifetime-years", "0"],
    ["--objective", "fastest", "--set", "hardware.gpu=nope"],
])
def test_plan_bad_input_exits_2_with_one_line(small: Path, args: list[str]) -> None:
    proc = tiersim("plan", str(small), *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("tiersim: error: ")


@pytest.mark.parametrize("top", ["0", "-1"])
def test_plan_top_below_one_is_refused(small: Path, top: str) -> None:
    proc = tiersim("plan", str(small), "--objective", "fastest", "--top", top)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tiersim: error: plan: --top: must be at least 1, got {top}"


def test_plan_top_shows_the_first_rows(small: Path) -> None:
    proc = tiersim("plan", str(small), "--objective", "fastest", "--dram-gib", "96,192", "--cxl-counts", "2",
                   "--nvme-counts", "1", "--top", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    choice = next(k for k, line in enumerate(lines) if line.startswith("chose "))
    ranks = [line.split()[0] for line in lines[3:choice] if not line.startswith(" ")]
    assert ranks == ["1", "2"] and all(line.startswith("  ") for line in lines[choice + 1:])


@pytest.mark.slow
def test_plan_without_an_answer_exits_1_naming_the_nearest_miss(small: Path) -> None:
    args = ["plan", str(small), "--objective", "cheapest", "--dram-gib", "96,192", "--cxl-counts", "2",
            "--nvme-counts", "1", "--format", "json"]
    rows = json.loads(tiersim(*args).stdout)["rows"]
    fastest = min((r for r in rows if r["fits"]), key=lambda r: r["iteration_time_s"])
    limit = fastest["iteration_time_s"] * 0.99
    proc = tiersim(*args[:-2], "--max-iteration-time", f"{limit:.6g}")
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tiersim: no answer: no candidate meets the constraints; nearest: "
                           f"{fastest['strategy']} with ")
    assert f"{fastest['iteration_time_s']:.4g} s" in line and f"(slower than {limit:.6g} s)" in line
    answered = tiersim(*args[:-2], "--max-iteration-time", f"{fastest['iteration_time_s'] * 1.01:.6g}")
    assert answered.returncode == 0 and answered.stderr == ""
