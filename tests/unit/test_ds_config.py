"""``tiersim run --ds-config``: a DeepSpeed config read as DeepSpeed reads it (hjson), "auto" filled
as the Hugging Face Trainer fills it, DeepSpeed's batch arithmetic, and every key modelled, passed
(no effect) or refused by name with exit status 2 and one line."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from clirun import ROOT, tiersim
from hypothesis import given
from hypothesis import strategies as st

from tiersim.cli import main
from tiersim.config.document import load_scenario
from tiersim.config.ds_auto import fill_auto
from tiersim.config.ds_batch import deepspeed_batch
from tiersim.config.ds_config import (
    DeepSpeedAutoFilled,
    DeepSpeedKeyMoved,
    apply_ds_config,
    hoist_aio,
    read_ds_config,
)
from tiersim.config.ds_keys import KEYS
from tiersim.errors import ConfigError
from tiersim.simulate import simulate
from tiersim.strategies.param_options import ParamOffload

SEED70 = ROOT / "scenarios" / "seed-70b.yaml"
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "deepspeed"
ACCELERATE = FIXTURES / "accelerate_zero_stage3_offload_config.json"
HF_NVME = FIXTURES / "hf_docs_zero3_nvme.json"
BASE: dict[str, Any] = {"train_batch_size": 4, "bf16": {"enabled": True}}
"""The least a config needs for seed-70b (4 ranks): a batch and a 16-bit precision."""


def _ds(tmp_path: Path, config: dict[str, Any], name: str = "ds_config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def _refused(tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``tiersim run seed-70b --ds-config`` prints for ``config`` (exit status 2)."""
    assert main(["run", str(SEED70), "--ds-config", str(_ds(tmp_path, config))]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def _scenario(tmp_path: Path, **training: object) -> Path:
    """seed-70b with 6 layers (seconds to simulate) and ``training`` changed."""
    data = yaml.safe_load(SEED70.read_text())
    data["model"]["layers"] = 6
    data["training"].update(training)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _without_offload_param(path: Path) -> dict[str, Any]:
    config = json.loads(path.read_text())
    del config["zero_optimization"]["offload_param"]
    return config


# --- reading: hjson, as DeepSpeed's loader -----------------------------------------------------

def test_hjson_leniency_reads_as_json(tmp_path: Path) -> None:
    lenient = tmp_path / "lenient.json"
    lenient.write_text("""{
        # a comment
        train_batch_size: 4,   // unquoted key, another comment
        "bf16": {"enabled": true,},
        /* block */ "zero_optimization": {"stage": 3, "sub_group_size": 1e8,},
    }""")
    assert read_ds_config(lenient) == {"train_batch_size": 4, "bf16": {"enabled": True},
                                       "zero_optimization": {"stage": 3, "sub_group_size": 100_000_000}}


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "malformed JSON"),
    ('{"a": 1e999}', "malformed JSON"),
    ('{"a": 1, "a": 2}', "a: given twice"),
    ("[1, 2]", "must be a JSON object"),
    ("[" * 100_000, "nested deeper than 16 levels"),
    ('{"a":' * 100_000, "nested deeper than 16 levels"),
    ('{"a":' * 40 + "1" + "}" * 40, "nested deeper than 16 levels"),
])
def test_unreadable_config_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "ds.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_ds_config(path)


def test_config_larger_than_the_input_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text('{"steps_per_print": 1' + " " * (5 * 2**20) + "}")
    with pytest.raises(ConfigError, match="larger than 4 MiB"):
        read_ds_config(path)


@pytest.mark.slow
def test_deeply_nested_config_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"a":' * 100_000)
    proc = tiersim("run", str(SEED70), "--ds-config", str(path))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"tiersim: error: {path}: nested deeper than 16 levels"]


# --- the published configs ---------------------------------------------------------------------

def test_accelerate_template_offloads_the_parameters_and_changes_the_answer(tmp_path: Path) -> None:
    """The template as it is: its ``offload_param`` becomes each strategy's block, and the run
    differs from the one without it."""
    scenario = _scenario(tmp_path)
    with pytest.warns(DeepSpeedAutoFilled):
        offloaded = load_scenario(scenario, ds_config=ACCELERATE)
    with pytest.warns(DeepSpeedAutoFilled):
        kept = load_scenario(scenario, ds_config=_ds(tmp_path, _without_offload_param(ACCELERATE)))
    assert [c.options.offload_param for c in offloaded] == [ParamOffload("cpu", pin_memory=True)] * 2
    assert [c.options.offload_param for c in kept] == [None, None]
    assert offloaded[0].training.prefetch_bucket_size == int(0.9 * 8192**2)
    with_it, without = simulate(offloaded[0]), simulate(kept[0])
    assert with_it.fits and without.fits
    assert with_it.iteration_time_s != without.iteration_time_s
    assert with_it.peak_bytes["hbm"] < without.peak_bytes["hbm"]


@pytest.mark.slow
def test_accelerate_template_without_offload_param_runs_with_the_auto_line(tmp_path: Path) -> None:
    ds = _ds(tmp_path, _without_offload_param(ACCELERATE))
    proc = tiersim("run", str(_scenario(tmp_path)), "--ds-config", str(ds), "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"tiersim: warning: {ds}: \"auto\" filled from the scenario as the Hugging Face "
                           "Trainer fills it: train_micro_batch_size_per_gpu=1, train_batch_size=4, "
                           "zero_optimization.reduce_bucket_size=67108864 (hidden^2), "
                           "zero_optimization.stage3_prefetch_bucket_size=60397977 (0.9 hidden^2), "
                           "zero_optimization.stage3_param_persistence_threshold=81920 (10 hidden)")
    assert "left to DeepSpeed's default: zero_optimization.stage3_gather_16bit_weights_on_model_save" in line
    assert "of no effect on the simulation: gradient_clipping, optimizer.params.lr" in line
    assert [row.split(",")[1] for row in proc.stdout.splitlines()[1:]] == ["dram", "cxl"]


def test_accelerate_template_settings(tmp_path: Path) -> None:
    with pytest.warns(DeepSpeedAutoFilled):
        dram, _cxl = load_scenario(_scenario(tmp_path), ds_config=_ds(tmp_path, _without_offload_param(ACCELERATE)))
    training = dram.training
    assert (training.precision, training.zero_stage, training.micro_batch, training.global_batch) == ("fp16", 3, 1, 4)
    assert training.reduce_bucket_size == 8192**2 and training.sub_group_size == 10**9
    assert dram.hardware.pinned


def test_hf_docs_nvme_example_runs_as_it_is_with_its_aio_moved(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The file unedited: its ``zero_optimization.aio`` is read as the top-level ``aio`` (the
    quickstart at half the hidden size, whose largest tensor fits the example's 1e8-element
    buffers), and
    one stderr line says so and that DeepSpeed itself would reject the key there."""
    data = yaml.safe_load(QUICKSTART.read_text())
    data["training"]["precision"] = "fp16"
    data["model"].update(layers=2, hidden=2048, heads=16, kv_heads=16, ffn=5504)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(data))
    assert main(["run", str(scenario), "--ds-config", str(HF_NVME), "--format", "json"]) == 0
    moved = [line for line in capsys.readouterr().err.splitlines() if "zero_optimization.aio" in line]
    assert len(moved) == 1
    assert "read as the top-level aio" in moved[0] and "reject the key inside zero_optimization" in moved[0]
    with pytest.warns(DeepSpeedKeyMoved), pytest.warns(DeepSpeedAutoFilled):
        (nvme,) = load_scenario(scenario, ds_config=HF_NVME)
    options = nvme.options
    assert (options.block_size, options.queue_depth, options.thread_count) == (262144, 32, 1)


def test_aio_inside_zero_optimization_and_at_the_top_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {**BASE, "aio": {"block_size": 262144}, "zero_optimization": {"stage": 3, "aio": {"queue_depth": 4}}}
    err = _refused(tmp_path, config, capsys)
    assert "zero_optimization.aio: a second aio section" in err


def test_hoisting_aio_leaves_the_config_it_read_unchanged() -> None:
    config = {"zero_optimization": {"stage": 3, "aio": {"queue_depth": 4}}}
    moved = hoist_aio(config, "ds.json")
    assert moved == {"zero_optimization": {"stage": 3}, "aio": {"queue_depth": 4}}
    assert config == {"zero_optimization": {"stage": 3, "aio": {"queue_depth": 4}}}


def test_hf_docs_nvme_example_offloads_the_parameters_to_nvme(tmp_path: Path) -> None:
    config = json.loads(HF_NVME.read_text())
    config["aio"] = config["zero_optimization"].pop("aio")
    # seed-70b's FFN weight is 117M elements per rank on its 2 GPUs: more than a 1e8 buffer holds
    config["zero_optimization"]["offload_param"]["buffer_size"] = 2e8
    with pytest.warns(DeepSpeedAutoFilled):
        (nvme,) = load_scenario(_scenario(tmp_path, precision="fp16"), ds_config=_ds(tmp_path, config))
    assert nvme.options.offload_param == ParamOffload("nvme", 5, 2 * 10**8, 10**9, True)


def test_hf_docs_nvme_example_with_aio_at_the_top_runs(tmp_path: Path) -> None:
    config = _without_offload_param(HF_NVME)
    config["aio"] = config["zero_optimization"].pop("aio")
    scenario = _scenario(tmp_path, precision="fp16")
    with pytest.warns(DeepSpeedAutoFilled, match=r"optimizer.params.betas=\[0.9, 0.95\], fp16.enabled=true"):
        (config_nvme,) = load_scenario(scenario, ds_config=_ds(tmp_path, config))
    options = config_nvme.options
    assert config_nvme.strategy == "nvme" and config_nvme.training.precision == "fp16"
    assert (options.buffer_count, options.block_size, options.queue_depth, options.thread_count,
            options.pipeline_read) == (4, 262144, 32, 1, False)


# --- "auto" --------------------------------------------------------------------------------------

def test_auto_fills_as_the_trainer() -> None:
    scenario = yaml.safe_load(SEED70.read_text())
    scenario["training"].update(global_batch=32, micro_batch=2, precision="fp16")
    ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, "amp": {"enabled": "auto"},
          "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"}}
    filled = fill_auto(ds, scenario, "ds.json")
    assert filled.config == {
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
        "fp16": {"enabled": True}, "bf16": {"enabled": False}, "amp": {"enabled": False},
        # stage 2: the Trainer fills only reduce_bucket_size; DeepSpeed drops the other "auto"
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 8192**2, "stage3_prefetch_bucket_size": "auto"}}
    assert ds["train_batch_size"] == "auto"  # the input is not changed


@pytest.mark.parametrize(("change", "message"), [
    ({"aio": {"block_size": "auto"}}, "aio.block_size: is \"auto\", which the Hugging Face Trainer does not fill"),
    ({"gradient_accumulation_steps": "auto", "train_batch_size": None},
     "gradient_accumulation_steps: is \"auto\" and the scenario's training.global_batch 6 is not a multiple"),
])
def test_auto_that_cannot_be_filled_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 change: dict[str, Any], message: str) -> None:
    scenario = _scenario(tmp_path, global_batch=6, micro_batch=1, data_parallel=4)
    config = {**BASE, **change}
    assert main(["run", str(scenario), "--ds-config", str(_ds(tmp_path, config))]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_hidden_size_auto_follows_the_model_flag(tmp_path: Path) -> None:
    """``--model`` replaces the model before the config is applied: its hidden size fills "auto"."""
    ds = _ds(tmp_path, {**BASE, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})
    with pytest.warns(DeepSpeedAutoFilled, match="reduce_bucket_size=16777216"):
        (config,) = load_scenario(_scenario(tmp_path), ["model.layers=4"], ds_config=ds,
                                  model="meta-llama/Llama-2-7b-hf")
    assert config.model.hidden == 4096 and config.training.reduce_bucket_size == 4096**2


def test_hidden_size_auto_needs_the_model_hidden() -> None:
    with pytest.raises(ConfigError, match="zero_optimization.reduce_bucket_size: is \"auto\".*no model.hidden"):
        fill_auto({"zero_optimization": {"reduce_bucket_size": "auto"}}, {"model": "a-name"}, "ds.json")


# --- batch arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "world", "expected"), [
    ((8, None, 1), 4, (8, 2, 1)),      # the 8 / 1 / 4 GPUs: 1 micro-step of 2
    ((8, 1, None), 4, (8, 1, 2)),
    ((None, 2, 3), 4, (24, 2, 3)),
    ((8, None, None), 4, (8, 2, 1)),
    ((None, 2, None), 4, (8, 2, 1)),
    ((16, 2, 2), 4, (16, 2, 2)),
])
def test_deepspeed_batch_arithmetic(given: tuple[int | None, int | None, int | None], world: int,
                                    expected: tuple[int, int, int]) -> None:
    assert tuple(deepspeed_batch(*given, world, "ds.json")) == expected


@pytest.mark.parametrize(("given", "message"), [
    ((8, 1, 1), "8 != train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size = 1 * 1 * 4"),
    ((10, None, 1), "10 != train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size = 2 * 1 * 4"),
    ((2, None, None), "train_micro_batch_size_per_gpu: is 0 as DeepSpeed derives it"),
    ((None, None, 2), "either train_batch_size or train_micro_batch_size_per_gpu must be given"),
])
def test_deepspeed_batch_check(given: tuple[int | None, int | None, int | None], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        deepspeed_batch(*given, 4, "ds.json")


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_any_two_batch_values_give_the_third(micro: int, steps: int, world: int) -> None:
    batch = (micro * steps * world, micro, steps)
    for missing in range(3):
        given = [None if i == missing else v for i, v in enumerate(batch)]
        assert tuple(deepspeed_batch(given[0], given[1], given[2], world, "ds.json")) == batch


def test_train_batch_and_accumulation_set_the_micro_batch(tmp_path: Path) -> None:
    ds = _ds(tmp_path, {"train_batch_size": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": True}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (config,) = load_scenario(_scenario(tmp_path), ["hardware.dram_capacity=4TiB"], ds_config=ds)
    assert (config.training.global_batch, config.training.micro_batch) == (8, 2)


# --- every key: modelled, passed, or refused by name ---------------------------------------------

@pytest.mark.parametrize(("change", "key"), [
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "ratio": 0.5}}},
     "zero_optimization.offload_optimizer.ratio: 0.5 with device \"nvme\": tiersim models partial offload"),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}},
     "zero_optimization.offload_optimizer.ratio: expected a number from 0 to 1, got 1.5"),
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
     "zero_optimization.offload_param.device: 'cpu' at ZeRO stage 2: DeepSpeed offloads parameters at stage 3"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_size": -1}}},
     "zero_optimization.offload_param.buffer_size: expected a whole number of at least 0, got -1"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "buffer_size": 1000}}},
     "strategies.gpu.offload_param.buffer_size: 1000 elements, but a parameter partition has"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffers": 1}}},
     "zero_optimization.offload_param.buffers: not a key of DeepSpeed 0.16's ZeRO config"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}},
     "zero_optimization.offload_optimizer.device: 'nvme' at ZeRO stage 2: DeepSpeed's ZeRO-1/2"),
    ({"zero_optimization": {"stage": 2, "overlap_comm": True, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}},
     "strategies.dram.ratio: 0.5: partial offload is ZeRO-3's"),
    ({"zenflow": {"topk_ratio": 0.1}}, "zenflow.topk_ratio"),
    ({"zero_optimization": {"zenflow": {"topk_ratio": 0.1}}}, "zero_optimization.zenflow.topk_ratio"),
    ({"pipeline": {"activation_checkpoint_interval": 1}},
     "pipeline.activation_checkpoint_interval: 1: the pipeline engine's own checkpointing every N layers"),
    ({"pipeline": {"pipe_partitioned": "yes"}}, "pipeline.pipe_partitioned: expected true or false"),
    ({"pipeline": {"micro_batches": 4}}, "pipeline.micro_batches: not a DeepSpeed 0.16 key tiersim knows"),
    ({"use_data_before_expert_parallelism": True},
     "use_data_before_expert_parallelism: true: expert-data-parallel groups laid out data-first"),
    ({"moe": {"num_experts": 8}}, "moe.num_experts: 8: a DeepSpeed-MoE section (DeepSpeed 0.16 reads none"),
    ({"optimizer": {"type": "Lamb"}}, "optimizer.type: \"Lamb\": tiersim models Adam and AdamW"),
    ({"optimizer": {"type": "Adam", "params": {"amsgrad": True}}}, "optimizer.params.amsgrad: true"),
    ({"aio": {"use_gds": True}}, "aio.use_gds: true: GPUDirect Storage"),
    ({"zero_optimization": {"stage": 3, "overlap_comm": False}}, "zero_optimization.overlap_comm: false"),
    ({"communication_data_type": "fp32"}, "communication_data_type: \"fp32\""),
    ({"fp16": {"enabled": True}}, "bf16.enabled: bfloat16 and fp16 modes cannot be simultaneously enabled"),
    ({"bf16": {"enabled": False}}, "fp16.enabled: neither fp16.enabled nor bf16.enabled: DeepSpeed trains in fp32"),
    ({"train_micro_batch_size_per_gpu": 2}, "gradient_accumulation_steps: is 0 as DeepSpeed derives it"),
    ({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1},
     "gradient_accumulation_steps * world_size = 2 * 1 * 4"),
    ({"zero_optimization": {"stage": 3, "aio": {}, "buckets": 1}}, "zero_optimization.buckets: not a key"),
    ({"tain_batch_size": 4}, "tain_batch_size: not a DeepSpeed 0.16 key tiersim knows"),
    ({"zero_optimization": {"stage": "three"}}, "zero_optimization.stage: expected a ZeRO stage"),
    ({"aio": {"queue_depth": 1.5}}, "aio.queue_depth: expected a positive whole number"),
    ({"bf16": {"enabled": "yes"}}, "bf16.enabled: expected true or false (or 1 or 0), got \"yes\""),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "tape"}}},
     "offload_optimizer.device: expected one of cpu, nvme, none"),
    ({"data_types": {"grad_accum_dtype": "int8"}}, "grad_accum_dtype: expected one of"),
])
def test_each_refusal_is_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 change: dict[str, Any], key: str) -> None:
    assert key in _refused(tmp_path, {**BASE, **change}, capsys)


@pytest.mark.slow
def test_a_refusal_from_the_command_line(tmp_path: Path) -> None:
    ds = _ds(tmp_path, {**BASE, "zenflow": {"topk_ratio": 0.1}})
    proc = tiersim("run", str(SEED70), "--ds-config", str(ds))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"tiersim: error: {ds}: zenflow.topk_ratio: 0.1: ZenFlow (stall-free offload) is not modelled"]


def test_values_that_mean_what_tiersim_models_pass_silently(tmp_path: Path) -> None:
    ds = _ds(tmp_path, {
        "train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
        "bf16": {"enabled": 1}, "fp16": {"enabled": 0, "loss_scale": 0}, "steps_per_print": 1,
        "wall_clock_breakdown": True, "memory_breakdown": True, "flops_profiler": {"enabled": False},
        "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95]}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "stage3_max_live_parameters": 1e9,
                              "offload_param": {"device": "none", "pin_memory": True},
                              "offload_optimizer": {"device": "nvme", "nvme_path": "/mnt", "ratio": 1.0,
                                                    "pipeline_read": 1, "pipeline_write": 0, "buffer_count": 8,
                                                    "pin_memory": 1}},
        "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2, "single_submit": False},
        "activation_checkpointing": {"cpu_checkpointing": False, "number_checkpoints": 4},
    })
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (config,) = load_scenario(_scenario(tmp_path), ds_config=ds)
    options = config.options
    assert config.strategy == "nvme" and config.training.precision == "bf16" and config.hardware.pinned
    assert (options.buffer_count, options.pipeline_read, options.pipeline_write, options.block_size,
            options.queue_depth, options.thread_count) == (8, True, False, 262144, 16, 2)
    assert (config.training.adam_beta1, config.training.adam_beta2) == (0.9, 0.95)


def test_deepspeed_defaults_where_the_file_is_silent(tmp_path: Path) -> None:
    """seed-70b sets sub_group_size 1e8, 20 swap buffers and pinned memory; a config that says
    nothing of them runs DeepSpeed's defaults: 1e9, 4 buffers, pageable."""
    ds = _ds(tmp_path, {**BASE, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})
    (config,) = load_scenario(_scenario(tmp_path), ds_config=ds)
    assert config.training.sub_group_size == 10**9 and config.training.reduce_bucket_size == 5 * 10**8
    assert config.options.buffer_count == 4 and not config.hardware.pinned
    no_zero = _ds(tmp_path, BASE, "no_zero.json")
    (config,) = load_scenario(_scenario(tmp_path), ["hardware.dram_capacity=4TiB"], ds_config=no_zero)
    assert config.strategy == "gpu" and config.training.zero_stage == 0


def test_set_still_wins_over_the_file(tmp_path: Path) -> None:
    (config,) = load_scenario(_scenario(tmp_path), ["training.global_batch=16"],
                              ds_config=ROOT / "scenarios" / "seed-ds_config-nvme.json")
    assert config.strategy == "nvme" and config.training.global_batch == 16


def test_the_bundled_seed_config_matches_the_seed_scenario() -> None:
    """scenarios/seed-ds_config-nvme.json is the study's config: the same run as seed-70b's nvme entry."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (from_file,) = load_scenario(SEED70, ds_config=ROOT / "scenarios" / "seed-ds_config-nvme.json")
    (plain,) = load_scenario(SEED70, strategies=["nvme"])
    assert from_file == plain


def test_apply_ds_config_leaves_the_scenario_data_alone() -> None:
    data = yaml.safe_load(SEED70.read_text())
    before = json.dumps(data, sort_keys=True)
    out, filled = apply_ds_config(data, {**BASE, "zero_optimization": {"stage": 2}}, "ds.json")
    assert json.dumps(data, sort_keys=True) == before and filled is None
    assert out["training"]["zero_stage"] == 2 and out["strategies"] == ["gpu"]


@pytest.mark.parametrize(("zero", "overlap"), [
    ({"stage": 2}, False), ({"stage": 1, "overlap_comm": True}, True), ({"stage": 3}, True),
    ({"stage": 2, "overlap_comm": 0}, False)])
def test_overlap_comm_follows_the_file_or_deepspeeds_default_for_the_stage(zero: dict[str, Any],
                                                                             overlap: bool) -> None:
    """DeepSpeed's ``overlap_comm`` defaults to true at ZeRO-3 and false below
    (``zero/config.py``, ``overlap_comm_valid``); ZeRO-1/2 runs it either way."""
    data = yaml.safe_load(SEED70.read_text())
    ds = {**BASE, "zero_optimization": {**zero, "offload_optimizer": {"device": "cpu"}}}
    out, _filled = apply_ds_config(data, ds, "ds.json")
    assert out["training"]["overlap_comm"] is overlap


# --- layouts: the batch's world is the data-parallel ranks; the pipeline engine's keys --------


@pytest.mark.parametrize(("hardware", "training", "world"), [
    ({"gpus": 8}, {}, 8), ({"gpus": 8, "nodes": 4}, {}, 32), ({"gpus": 8, "nodes": 2}, {"tensor_parallel": 2}, 8),
    ({"gpus": 8, "nodes": 2}, {"tensor_parallel": 4, "pipeline_parallel": 2}, 2),
    ({"gpus": 8, "nodes": 2}, {"data_parallel": 16}, 16)])
def test_the_batch_world_is_the_data_parallel_ranks(hardware: dict[str, Any], training: dict[str, Any],
                                                    world: int) -> None:
    """DeepSpeed's world_size under Megatron is the data-parallel group, nodes x GPUs / (TP x PP):
    train_batch_size 64 with 1 micro-step is 64 / world sequences per rank."""
    data = {"training": {"micro_batch": 1, "global_batch": 64, **training}, "hardware": hardware}
    out, _ = apply_ds_config(data, {"train_batch_size": 64, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
                                    "pipeline": {"pipe_partitioned": False, "grad_partitioned": False}}, "ds.json")
    assert out["training"]["micro_batch"] == 64 // world


def test_a_layout_that_leaves_no_whole_data_parallel_group_is_refused() -> None:
    data = {"training": {"tensor_parallel": 3}, "hardware": {"gpus": 8}}
    with pytest.raises(ConfigError, match="training.tensor_parallel: 3 does not divide hardware.gpus 8"):
        apply_ds_config(data, BASE, "ds.json")


@pytest.mark.parametrize("pipeline", [{}, {"pipe_partitioned": True, "grad_partitioned": False},
                                      {"pipe_partitioned": False}])
def test_partitioned_pipeline_sends_are_refused_with_tensor_and_pipeline_parallelism(pipeline: dict[str, Any]) \
        -> None:
    """DeepSpeed's engine splits each send over the TP ranks by default; tiersim sends whole."""
    data = {"training": {"tensor_parallel": 2, "pipeline_parallel": 2}, "hardware": {"gpus": 8}}
    ds = {"train_batch_size": 8, "bf16": {"enabled": True}, "pipeline": pipeline}
    with pytest.raises(ConfigError, match=r"pipeline\.(pipe|grad)_partitioned: true \(DeepSpeed's default\)"):
        apply_ds_config(data, ds, "ds.json")


def test_the_pipeline_keys_deepspeed_does_not_read_or_that_send_whole_pass() -> None:
    data = {"training": {"tensor_parallel": 2, "pipeline_parallel": 2}, "hardware": {"gpus": 8}}
    ds = {"train_batch_size": 8, "bf16": {"enabled": True}, "pipeline": {
        "stages": "auto", "partition": "parameters", "seed_layers": True, "activation_checkpoint_interval": 0,
        "use_reentrant": False, "pipe_partitioned": False, "grad_partitioned": False}}
    out, _ = apply_ds_config(data, ds, "ds.json")
    assert out["training"]["micro_batch"] == 4 and out["training"]["pipeline_parallel"] == 2
    out, _ = apply_ds_config({"training": {"tensor_parallel": 2}, "hardware": {"gpus": 8}},
                             {**ds, "pipeline": {"pipe_partitioned": True}}, "ds.json")
    assert out["training"]["micro_batch"] == 2


def test_the_guide_lists_every_key() -> None:
    guide = (ROOT / "docs" / "guide" / "deepspeed-config.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", guide, flags=re.MULTILINE))
    assert listed == set(KEYS)
    for path, key in KEYS.items():
        assert re.search(rf"^\| `{re.escape(path)}` \| {key.treatment} \|", guide, flags=re.MULTILINE), path
