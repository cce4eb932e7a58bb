"""Reading training logs (tiersim import-log) and DeepSpeed configs (tiersim run --ds-config).

The log fixtures are excerpts of the seed study's three 70B logs (shared/reference/seed-logs/):
every line the reader uses, nothing else."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml
from clirun import ROOT, tiersim

from tiersim.config.document import load_scenario
from tiersim.config.ds_config import apply_ds_config
from tiersim.config.scenario import NotModeledWarning
from tiersim.errors import ConfigError
from tiersim.ingest.log_scenario import log_document, measured_table, steady_state
from tiersim.ingest.training_log import GIB, read_log

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
DRAM, CXL, NVME = (LOGS / f"70B-{name}.log" for name in ("dram", "cxl-interleave-12-5", "nvme"))


# --- the log reader -------------------------------------------------------------------------


def test_launcher_arguments_and_bindings() -> None:
    log = read_log(CXL)
    assert log.args["num_layers"] == "80" and log.args["hidden_size"] == "8192"
    assert log.args["swiglu"] is True and log.args["num_key_value_heads"] == "4"
    assert [b.policy for b in log.bindings] == ["weighted-interleave"] * 4
    assert [b.nodes for b in log.bindings] == [(0, 2, 3), (0, 2, 3), (1, 4, 5), (1, 4, 5)]
    assert log.bindings[1].cpus == tuple(range(112, 168))
    assert [b.policy for b in read_log(DRAM).bindings] == ["bind"] * 4


def test_deepspeed_configuration() -> None:
    log = read_log(NVME)
    zero = log.zero_config
    assert zero["stage"] == "3" and zero["sub_group_size"] == "100000000"
    assert zero["offload_optimizer.device"] == "nvme" and zero["offload_optimizer.buffer_count"] == "20"
    assert zero["offload_optimizer.pipeline_read"] == "False" and zero["overlap_comm"] == "True"
    assert zero["reduce_bucket_size"] == "500000000" and zero["prefetch_bucket_size"] == "50000000"
    assert log.aio_config["block_size"] == 1 << 20 and log.aio_config["queue_depth"] == 8
    assert log.user_config["data_types"] == {"grad_accum_dtype": "bf16"}


def test_iteration_timers_and_steady_state() -> None:
    log = read_log(NVME)
    assert len(log.iterations) == 5
    third = log.iterations[2]
    assert third["fwd"] == pytest.approx(6.10529) and third["step"] == pytest.approx(70.71283)
    assert third["iteration"] == pytest.approx(95.9071)
    assert third["optimizer_swap_in_state"] == pytest.approx(26.70023)
    steady = steady_state(log)
    mean = sum(it["bwd"] for it in log.iterations[2:]) / 3
    assert steady["backward"] == pytest.approx(mean)
    assert steady["ds:optimizer_swap_out_state"] == pytest.approx((30.32645 + 31.4252 + 30.34813) / 3)
    table = measured_table(log)
    assert set(table["iteration"]) == {1, 2, 3, 4, 5, "steady"}


def test_memory_in_the_measured_table() -> None:
    """Per iteration the peak of the engine's reports; host memory less the pre-launch use."""
    log = read_log(DRAM)
    peaks = [max(m.host_used for m in log.memory if m.iteration == i and m.label.startswith("Engine "))
             for i in (2, 3, 4)]
    steady = steady_state(log)
    assert steady["memory:host_used"] == pytest.approx(sum(peaks) / 3 - 35.31 * GIB, rel=1e-12)
    assert steady["memory:gpu_max_allocated"] == pytest.approx(40.65 * GIB)
    assert steady["memory:gpu_reserved"] == pytest.approx(45.94 * GIB)
    nvme = steady_state(read_log(NVME))
    assert nvme["memory:gpu_max_allocated"] == pytest.approx(40.86 * GIB)
    assert 210 * GIB < nvme["memory:host_used"] < 225 * GIB
    table = measured_table(log)
    assert set(table["unit"]) == {"s", "B"}


def test_memory_reports() -> None:
    log = read_log(DRAM)
    first = log.memory[0]
    assert first.label == "Before Building Model" and first.iteration == 0
    assert first.host_used == pytest.approx(35.31 * GIB)
    after_step = [m for m in log.memory if m.label == "Engine after step"]
    assert len(after_step) == 5 and after_step[-1].iteration == 4
    assert after_step[0].max_reserved == pytest.approx(45 * GIB)


@pytest.mark.parametrize(("log", "strategy"), [(DRAM, "dram"), (CXL, "cxl"), (NVME, "nvme")])
def test_scenario_of_each_log(log: Path, strategy: str) -> None:
    scenario = log_document(read_log(log)).data
    assert scenario["model"] == {"name": log.stem, "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 4,
                                 "ffn": 28672, "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm",
                                 "bias": False, "tied_embeddings": False}
    training = scenario["training"]
    assert (training["global_batch"], training["data_parallel"], training["zero_stage"]) == (4, 4, 3)
    assert training["sub_group_size"] == 100_000_000 and training["grad_accum_dtype"] == "bf16"
    assert training["activation_checkpointing"] is True and training["adam_beta2"] == 0.95
    hardware = scenario["hardware"]
    assert hardware["host"] == "unknown" and hardware["sockets"] == 2 and hardware["cores_per_rank"] == 28
    entry = scenario["strategies"][0]
    assert (entry if isinstance(entry, str) else entry["name"]) == strategy
    if strategy == "cxl":
        assert hardware["cxl"] == {"count": 4} and entry["dram_weight"] == "unknown"
    if strategy == "nvme":
        assert entry == {"name": "nvme", "buffer_count": 20, "pipeline_read": False, "pipeline_write": False,
                         "block_size": 1 << 20, "queue_depth": 8, "thread_count": 1}


def test_imported_scenario_names_its_unknowns(tmp_path: Path) -> None:
    proc = tiersim("import-log", str(CXL), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    scenario = tmp_path / "70B-cxl-interleave-12-5.yaml"
    assert "wrote" in proc.stderr and scenario.is_file()
    assert (tmp_path / "70B-cxl-interleave-12-5.measured.csv").is_file()
    run = tiersim("run", str(scenario))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "hardware.host: left unknown" in run.stderr
    filled = tiersim("run", str(scenario), "--set", "hardware.host=seed-node", "--set", "strategies.cxl.dram_weight=12",
                     "--set", "strategies.cxl.cxl_weight=5", "--set", "hardware.dram_capacity=1TiB")
    assert filled.returncode == 0, filled.stderr


def test_import_log_json_and_table() -> None:
    proc = tiersim("import-log", str(DRAM), str(NVME), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [Path(d["log"]).name for d in data] == ["70B-dram.log", "70B-nvme.log"]
    steady = {r["quantity"]: r["value"] for r in data[1]["measured"] if r["iteration"] == "steady"}
    assert steady["optimizer_step"] == pytest.approx((70.71283 + 70.79881 + 70.71908) / 3)
    table = tiersim("import-log", str(NVME))
    assert table.returncode == 0 and "steady" in table.stdout and "optimizer_swap_in_state" in table.stdout


@pytest.mark.parametrize(("text", "message"), [
    ("hello world\n", "launcher command: missing"),
    ("", "launcher command: missing"),
])
def test_foreign_log_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "foreign.log"
    bad.write_text(text)
    proc = tiersim("import-log", str(bad))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("keep", "message"), [
    (lambda line: "zero_config" not in line, "DeepSpeed configuration: missing"),
    (lambda line: "elapsed time per iteration" not in line, "iterations: missing"),
])
def test_truncated_log_names_what_is_missing(tmp_path: Path, keep: object, message: str) -> None:
    lines = [line for line in DRAM.read_text().splitlines() if keep(line)]  # type: ignore[operator]
    bad = tmp_path / "cut.log"
    bad.write_text("\n".join(lines) + "\n")
    proc = tiersim("import-log", str(bad))
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_two_iterations_have_no_steady_state(tmp_path: Path) -> None:
    text = DRAM.read_text()
    cut = text[: text.index(" iteration        3/")]
    bad = tmp_path / "short.log"
    bad.write_text(cut)
    with pytest.raises(ConfigError, match="steady state needs more than 2 iterations"):
        measured_table(read_log(bad))


# --- DeepSpeed configs ----------------------------------------------------------------------

SEED70 = ROOT / "scenarios" / "seed-70b.yaml"


def _ds(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    return path


def test_ds_config_drives_the_run(tmp_path: Path) -> None:
    ds = _ds(tmp_path, {
        "train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
        "zero_optimization": {"stage": 3, "sub_group_size": 5e7, "overlap_comm": True,
                              "offload_optimizer": {"device": "nvme", "nvme_path": "/mnt", "buffer_count": 8,
                                                    "pipeline_read": True, "pin_memory": True}},
        "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2},
        "bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"},
    })
    with pytest.warns(NotModeledWarning, match="steps_per_print.*zero_optimization.offload_optimizer.nvme_path"):
        (config,) = load_scenario(SEED70, ds_config=ds)
    assert config.strategy == "nvme" and config.training.global_batch == 8
    assert config.training.sub_group_size == 50_000_000 and config.training.grad_accum_dtype == "fp32"
    options = config.options
    assert (options.buffer_count, options.pipeline_read, options.block_size, options.queue_depth,
            options.thread_count) == (8, True, 262144, 16, 2)
    # --set still wins over the DeepSpeed file
    with pytest.warns(NotModeledWarning):
        (config,) = load_scenario(SEED70, ["training.global_batch=16"], ds_config=ds)
    assert config.training.global_batch == 16


def test_ds_config_cpu_offload_keeps_both_memory_policies(tmp_path: Path) -> None:
    ds = _ds(tmp_path, {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [c.strategy for c in load_scenario(SEED70, ds_config=ds)] == ["dram", "cxl"]
    none = _ds(tmp_path, {"gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 1})
    (config,) = load_scenario(SEED70, ["hardware.dram_capacity=2TiB"], ds_config=none)
    assert config.strategy == "gpu" and config.training.global_batch == 16


def test_ds_config_warning_is_one_line(tmp_path: Path) -> None:
    ds = _ds(tmp_path, {"wall_clock_breakdown": True, "zero_optimization": {"stage": 3, "offload_optimizer":
                                                                           {"device": "cpu"}}})
    proc = tiersim("run", str(SEED70), "--ds-config", str(ds), "--strategy", "dram")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"tiersim: warning: {ds}: not modeled, read past: wall_clock_breakdown"


@pytest.mark.parametrize(("config", "key"), [
    ({"train_batch_size": "auto"}, "train_batch_size: is \"auto\""),
    ({"zero_optimization": {"offload_optimizer": {"device": "auto"}}}, "offload_optimizer.device: is \"auto\""),
    ({"zero_optimization": {"stage": "three"}}, "zero_optimization.stage: expected a ZeRO stage"),
    ({"aio": {"queue_depth": 1.5}}, "aio.queue_depth: expected a positive whole number"),
    ({"bf16": {"enabled": "yes"}}, "bf16.enabled: expected true or false"),
    ({"zero_optimization": {"offload_optimizer": {"device": "tape"}}}, "device: expected one of cpu, nvme, none"),
    ({"data_types": {"grad_accum_dtype": "int8"}}, "grad_accum_dtype: expected one of"),
])
def test_bad_ds_config_is_one_line(tmp_path: Path, config: dict[str, object], key: str) -> None:
    proc = tiersim("run", str(SEED70), "--ds-config", str(_ds(tmp_path, config)))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert key in proc.stderr and "Traceback" not in proc.stderr


def test_malformed_ds_config(tmp_path: Path) -> None:
    bad = tmp_path / "ds.json"
    bad.write_text("{not json")
    proc = tiersim("run", str(SEED70), "--ds-config", str(bad))
    assert proc.returncode == 2 and "malformed JSON" in proc.stderr


def test_apply_ds_config_leaves_the_scenario_data_alone() -> None:
    data = yaml.safe_load(SEED70.read_text())
    before = json.dumps(data, sort_keys=True)
    out, unmodeled = apply_ds_config(data, {"zero_optimization": {"stage": 2}}, "ds.json")
    assert json.dumps(data, sort_keys=True) == before
    assert out["training"]["zero_stage"] == 2 and out["strategies"] == ["gpu"] and unmodeled == []


def test_measured_tables_bundled_for_reproduce_are_import_log_output() -> None:
    """scenarios/measured/ is what `tiersim import-log` writes for the three 70B logs."""
    for log in (DRAM, CXL, NVME):
        bundled = pd.read_csv(ROOT / "scenarios" / "measured" / f"{log.stem}.measured.csv")
        fresh = measured_table(read_log(log))
        assert list(bundled["quantity"]) == list(fresh["quantity"])
        assert list(bundled["value"]) == pytest.approx(list(fresh["value"]), rel=1e-12)
