"""Reading training logs (tiersim import-log); DeepSpeed configs (--ds-config): test_ds_config.py.

The log fixtures are excerpts, every line the reader uses and nothing else, of the seed study's
three 70B logs (shared/reference/seed-logs/, DeepSpeed 0.16.2, numactl-bound ranks), a Polaris
run (polaris-logs/13B-dp4-mb4.log: DeepSpeed 0.13.3 printing thousands separators, a fork's
iteration line, unbound ranks, no --ffn-hidden-size) and the NVMe node's run
(nvme-node-logs/70B-nvme.log: DeepSpeed 0.13.3, NVMe offload, AVX-512)."""

from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from clirun import ROOT, tiersim

from tiersim.cli import main
from tiersim.errors import ConfigError
from tiersim.ingest.log_scenario import log_document, measured_table, megatron_ffn, steady_state
from tiersim.ingest.numactl import RankBinding, parse_binding
from tiersim.ingest.printed_values import boolean, model_fields, whole
from tiersim.ingest.training_log import GIB, read_log

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
DRAM, CXL, NVME = (LOGS / f"70B-{name}.log" for name in ("dram", "cxl-interleave-12-5", "nvme"))
POLARIS = LOGS / "polaris-13B-dp4-mb4.log"
NVME_NODE = LOGS / "nvme-node-70B.log"


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
    assert training["deepspeed_version"] == "0.16.2" and training["flash_attention"] is False
    hardware = scenario["hardware"]
    assert hardware["host"] == "unknown" and hardware["sockets"] == 2 and hardware["cores_per_rank"] == 56
    assert hardware["numa_bound"] is True and hardware["adam_simd"] == "avx512"
    entry = scenario["strategies"][0]
    assert (entry if isinstance(entry, str) else entry["name"]) == strategy
    if strategy == "cxl":
        assert hardware["cxl"] == {"count": 4} and entry["dram_weight"] == "unknown"
    if strategy == "nvme":
        assert entry == {"name": "nvme", "buffer_count": 20, "pipeline_read": False, "pipeline_write": False,
                         "block_size": 1 << 20, "queue_depth": 8, "thread_count": 1}


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- other log formats: Polaris, the NVMe node, older DeepSpeed prints -------------------------


def test_polaris_log_reads_separators_fork_iteration_lines_and_megatron_ffn() -> None:
    """DeepSpeed 0.13.3 prints unvalidated defaults as 500,000,000; the fork's iteration line
    starts ``elapsed_time``; no --ffn-hidden-size: Megatron's SwiGLU default, as it printed it."""
    log = read_log(POLARIS)
    assert log.zero_config["reduce_bucket_size"] == "500,000,000" and log.printed_args["ffn_hidden_size"] == "13632"
    assert [b.numactl for b in log.bindings] == [False] * 4
    assert [it["iteration"] for it in log.iterations[:2]] == pytest.approx([16.691, 13.8166])
    assert log.progress[1] == {"consumed samples": 32, "global batch size": 16, "actual seqlen": 2048}
    scenario = log_document(log).data
    assert scenario["model"]["ffn"] == 13632 and scenario["model"]["vocab"] == 50304
    training, hardware = scenario["training"], scenario["hardware"]
    assert (training["zero_stage"], training["reduce_bucket_size"], training["global_batch"]) == (3, 500_000_000, 16)
    assert training["data_parallel"] == 4 and training["deepspeed_version"] == "0.13.3+8074cd62"
    assert training["flash_attention"] is False and scenario["strategies"] == ["dram"]
    assert hardware == {"host": "unknown", "nodes": 1, "gpus": 4, "numa_bound": False, "sockets": "unknown",
                        "adam_simd": "avx2"}


def test_nvme_node_log() -> None:
    scenario = log_document(read_log(NVME_NODE)).data
    assert scenario["model"]["ffn"] == 28672 and scenario["training"]["deepspeed_version"] == "0.13.3+5486420c"
    assert scenario["strategies"] == [{"name": "nvme", "buffer_count": 50, "pipeline_read": True,
                                       "pipeline_write": True, "block_size": 2 << 20, "queue_depth": 8,
                                       "thread_count": 4}]
    hardware = scenario["hardware"]
    assert (hardware["numa_bound"], hardware["sockets"], hardware["cores_per_rank"]) == (True, 2, 46)
    assert hardware["adam_simd"] == "avx512" and hardware["nvme"] == {"count": 1}


def test_a_log_that_offloads_parameters_maps_them(tmp_path: Path) -> None:
    """DeepSpeed prints ``offload_param`` as its config object; tiersim reads it into the strategy's
    ``offload_param`` block, DeepSpeed's defaults where the print is silent."""
    log = read_log(_write(tmp_path, _edit(DRAM, "offload_param=None", "offload_param=DeepSpeedZeroOffloadParamConfig("
                                          "device='nvme', nvme_path=None, buffer_count=6, buffer_size=200,000,000, "
                                          "pin_memory=True)")))
    scenario = log_document(log).data
    assert scenario["strategies"] == [{"name": "dram", "offload_param": {
        "device": "nvme", "buffer_count": 6, "buffer_size": 200_000_000, "max_in_cpu": 1_000_000_000,
        "pin_memory": True}}]
    assert scenario["hardware"]["nvme"] == {"count": 1}


@pytest.mark.parametrize(("log", "shape"), [
    (POLARIS, "40 layers, hidden 5120, 40 heads (4 KV), FFN 13632, vocab 50304"),
    (NVME_NODE, "80 layers, hidden 8192, 64 heads (4 KV), FFN 28672, vocab 50304"),
])
def test_import_log_reads_each_format(capsys: pytest.CaptureFixture[str], log: Path, shape: str) -> None:
    assert main(["import-log", str(log)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert shape in out and "ZeRO-3" in out and "steady" in out


@pytest.mark.parametrize(("hidden", "swiglu", "ffn"), [
    (5120, True, 13632), (4096, True, 10880), (8192, True, 21824), (8192, False, 32768), (64, True, 128)])
def test_megatron_default_ffn(hidden: int, swiglu: bool, ffn: int) -> None:
    """int((4 h 2/3) / 64) * 64 with SwiGLU (5120: 13653.3 -> 213 x 64), else 4 h."""
    assert megatron_ffn(hidden, swiglu) == ffn


def test_older_deepspeed_print_with_separators_enums_and_json_booleans(tmp_path: Path) -> None:
    """A 0.10-style print: every default grouped by thousands, the device as an enum repr,
    booleans as JSON spells them; the version 0.10.3 is modelled."""
    text = NVME_NODE.read_text().replace("0.13.3+5486420c", "0.10.3").replace(
        "sub_group_size=100000000", "sub_group_size=1,000,000,000").replace(
        "device='nvme'", "device=<OffloadDeviceEnum.nvme: 'nvme'>").replace(
        "pipeline_read=True", "pipeline_read=true").replace("pipeline_write=True", "pipeline_write=0").replace(
        "'block_size': 2097152", "'block_size': 2.097152e+06")
    scenario = log_document(read_log(_write(tmp_path, text))).data
    training, entry = scenario["training"], scenario["strategies"][0]
    assert training["sub_group_size"] == 1_000_000_000 and training["deepspeed_version"] == "0.10.3"
    assert (entry["name"], entry["pipeline_read"], entry["pipeline_write"]) == ("nvme", True, False)
    assert entry["block_size"] == 2097152


def test_iteration_time_with_thousands_separators(tmp_path: Path) -> None:
    text = _edit(DRAM, "elapsed time per iteration (ms): 74206.0", "elapsed time per iteration (ms): 74,206.0")
    assert read_log(_write(tmp_path, text)).iterations[0]["iteration"] == pytest.approx(74.206)


def test_without_spawned_commands_the_binding_is_unknown(tmp_path: Path) -> None:
    """No launcher spawn lines: DeepSpeed's world size gives the ranks; the binding is not guessed."""
    text = "\n".join(line for line in POLARIS.read_text().splitlines() if "spawned with command" not in line)
    hardware = log_document(read_log(_write(tmp_path, text))).data["hardware"]
    assert (hardware["gpus"], hardware["numa_bound"], hardware["sockets"]) == (4, "unknown", "unknown")


def test_flash_attention_flags(tmp_path: Path) -> None:
    for flag in ("--use-flash-attn", "--use-flash-attn-v2", "--use-flash-attn-triton"):
        text = DRAM.read_text().replace("--swiglu", f"--swiglu {flag}", 1)
        assert log_document(read_log(_write(tmp_path, text))).data["training"]["flash_attention"] is True


# --- printed values -------------------------------------------------------------------------


def test_printed_numbers_and_booleans() -> None:
    assert whole("500,000,000", "f", "x") == 500_000_000 and whole("1.000000e+08", "f", "x") == 100_000_000
    assert whole("1e8", "f", "x") == 100_000_000 and whole("100000000", "f", "x") == 100_000_000
    for bad in ("500,00", "5,0000", "1M", "1.5", "nan", "", "1,000.5e"):
        with pytest.raises(ConfigError):
            whole(bad, "f", "x")
    assert [boolean(t, "f", "x") for t in ("True", "true", "1", "False", "false", "0")] == [True] * 3 + [False] * 3
    with pytest.raises(ConfigError, match="x: expected True or False, got 'yes'"):
        boolean("yes", "f", "x")


def test_pydantic_repr_fields() -> None:
    text = ("stage=3 reduce_bucket_size=500,000,000 offload_param=None offload_optimizer=Cfg(device='nvme', "
            "nvme_path=PosixPath('/tmp/a b'), buffer_count=4, ratio=1.0) model_persistence_threshold=sys.maxsize "
            "kind=<Enum.cpu: 'cpu'> groups=[1, 2] memory_efficient_linear=True")
    assert model_fields(text, "f", "zero_config") == {
        "stage": "3", "reduce_bucket_size": "500,000,000", "offload_param": "None", "offload_optimizer.device": "nvme",
        "offload_optimizer.nvme_path": "PosixPath('/tmp/a b')", "offload_optimizer.buffer_count": "4",
        "offload_optimizer.ratio": "1.0", "model_persistence_threshold": "sys.maxsize", "kind": "cpu",
        "groups": "[1, 2]", "memory_efficient_linear": "True"}
    for bad in ("stage=3 offload_optimizer=Cfg(device='nvme'", "stage=3 junk", "a='open"):
        with pytest.raises(ConfigError, match="zero_config: unreadable printed value"):
            model_fields(bad, "f", "zero_config")


# --- numactl --------------------------------------------------------------------------------

RUN = ["python", "-u", "pretrain_gpt.py"]


@pytest.mark.parametrize(("options", "binding"), [
    ([], RankBinding("none", (), (), numactl=True)),
    (["-m", "0", "-C", "0-55"], RankBinding("bind", (0,), tuple(range(56)), numactl=True)),
    (["--membind=0,1", "--physcpubind=0-3,8"], RankBinding("bind", (0, 1), (0, 1, 2, 3, 8), numactl=True)),
    (["-m1", "-C0-6:2"], RankBinding("bind", (1,), (0, 2, 4, 6), numactl=True)),
    (["-C", "0-55:2,112"], RankBinding("none", (), (*range(0, 56, 2), 112), numactl=True)),
    (["-m", "all", "-C", "0-3"], RankBinding("bind", (), (0, 1, 2, 3), all_nodes=True, numactl=True)),
    (["-i", "all"], RankBinding("interleave", (), (), all_nodes=True, numactl=True)),
    (["--interleave", "0,1", "-N", "0"], RankBinding("interleave", (0, 1), (), cpu_nodes=(0,), numactl=True)),
    (["--cpunodebind=1", "--localalloc"], RankBinding("local", (), (), cpu_nodes=(1,), numactl=True)),
    (["-w", "0,2,3", "-C", "0-1"], RankBinding("weighted-interleave", (0, 2, 3), (0, 1), numactl=True)),
    (["--weighted-interleave=1,4"], RankBinding("weighted-interleave", (1, 4), (), numactl=True)),
    (["--preferred=1", "-C", "all"], RankBinding("preferred", (1,), (), numactl=True)),
    (["-p", "0", "-N", "all"], RankBinding("preferred", (0,), (), numactl=True)),
    (["-P", "0,1", "--", "x"], RankBinding("preferred-many", (0, 1), (), numactl=True)),
    (["--inter=all"], RankBinding("interleave", (), (), all_nodes=True, numactl=True)),
])
def test_every_numactl_form(options: list[str], binding: RankBinding) -> None:
    assert parse_binding(["numactl", *options, *RUN], "f", 0) == binding


def test_rank_without_numactl_is_unbound() -> None:
    binding = parse_binding(RUN, "f", 0)
    assert not binding.numactl and not binding.socket_bound and binding.home is None


@pytest.mark.parametrize(("options", "message"), [
    (["-C", "0-"], "unreadable node or CPU list '0-'"),
    (["-m", "!0"], "unreadable node or CPU list '!0'"),
    (["-m", "netdev:eth0"], "unreadable node or CPU list"),
    (["-C", "5-3"], "empty range '5-3'"),
    (["-C", "0-9:0"], "empty range"),
    (["--bogus", "1"], "unknown or ambiguous numactl option '--bogus'"),
    (["--p", "1"], "unknown or ambiguous numactl option '--p'"),
    (["-x"], "unknown numactl option '-x'"),
    (["-l=1"], "numactl option '-l=1' takes no value"),
    (["--localalloc=1"], "takes no value"),
    (["-C", "0-99999999"], "names more than"),
])
def test_malformed_numactl_is_refused(options: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match="numactl of rank 2"):
        parse_binding(["numactl", *options, *RUN], "f", 2)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("!", "!")):
        parse_binding(["numactl", *options, *RUN], "f", 2)


def test_numactl_missing_value_or_command() -> None:
    with pytest.raises(ConfigError, match="'-m' is missing its value"):
        parse_binding(["numactl", "-m"], "f", 0)
    with pytest.raises(ConfigError, match="no command after the numactl options"):
        parse_binding(["numactl", "-m", "0"], "f", 0)


def _rebind(text: str, policies: list[str]) -> str:
    """``text`` with rank r's numactl options replaced by ``policies[r]`` ("" for no numactl)."""
    lines = text.splitlines()
    spawned = [i for i, line in enumerate(lines) if "spawned with command:" in line]
    for i, policy in zip(spawned, policies):
        head, listing = lines[i].split("spawned with command: ")
        words = ast.literal_eval(listing)
        words = words[words.index("-C") + 2:]
        lines[i] = f"{head}spawned with command: {(['numactl', *policy.split()] if policy else []) + words}"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("policies", "numa_bound", "sockets"), [
    (["-m 0 -C 0-55", "-m 0 -C 56-111", "-m 1 -C 112-167", "-m 1 -C 168-223"], True, 2),
    (["-N 0", "-N 0", "-N 1", "-N 1"], True, 2),
    (["-C 0-55:2", "-C 1-55:2", "-C 56-111:2", "-C 57-111:2"], True, "unknown"),
    (["-m all -C 0-55"] * 4, True, "unknown"),
    (["-i all -C 0-55"] * 4, False, "unknown"),
    (["-w all -N 0"] * 4, False, "unknown"),
    (["-i all"] * 4, False, "unknown"),
    (["--membind=0,1 --physcpubind=0-3"] * 4, True, 1),  # node 1 read as CXL: RankBinding.expanders
    ([""] * 4, False, "unknown"),
])
def test_bindings_in_the_scenario(tmp_path: Path, policies: list[str], numa_bound: bool, sockets: object) -> None:
    """'all' spans nodes the log does not count: the sockets are left unknown, never guessed; an
    interleave over all of them is not socket-bound, a bind over all allocates locally first."""
    log = read_log(_write(tmp_path, _rebind(DRAM.read_text(), policies)))
    hardware = log_document(log).data["hardware"]
    assert (hardware["numa_bound"], hardware["sockets"]) == (numa_bound, sockets)
    if policies[0].startswith("-w all"):
        assert hardware["cxl"] == {"count": "unknown"}


def _socket_bound(option: str, second: str | None = None) -> list[str]:
    """The study's four ranks under ``option`` with socket 0's node list, and socket 1's
    (``second``, default the same)."""
    other = option if second is None else second
    return [f"{option} -C 0-55", f"{option} -C 112-167", f"{other} -C 56-111", f"{other} -C 168-223"]


@pytest.mark.parametrize(("policies", "strategy", "cxl"), [
    (_socket_bound("-m 0,2,3", "-m 1,4,5"), {"name": "cxl", "policy": "bind"}, {"count": 4}),
    (_socket_bound("--interleave=0,2,3", "--interleave=1,4,5"), {"name": "cxl", "policy": "interleave"},
     {"count": 4}),
    (_socket_bound("-P 0,2", "-P 1,4"), {"name": "cxl", "policy": "preferred"}, {"count": 2}),
    (_socket_bound("-w 0,2,3", "-w 1,4,5"), {"name": "cxl", "dram_weight": "unknown", "cxl_weight": "unknown"},
     {"count": 4}),
    (_socket_bound("-p 0", "-p 1"), {"name": "dram", "policy": "preferred"}, None),
    (_socket_bound("-m 0", "-m 1"), "dram", None),
])
def test_the_memory_policy_in_the_scenario(tmp_path: Path, policies: list[str], strategy: object,
                                           cxl: object) -> None:
    """numactl's policy over the socket's DRAM node and its CXL nodes (listed after it) becomes
    ``strategies.cxl.policy``; over the DRAM node alone, ``dram``'s."""
    data = log_document(read_log(_write(tmp_path, _rebind(DRAM.read_text(), policies)))).data
    assert data["strategies"] == [strategy]
    assert data["hardware"].get("cxl") == cxl and data["hardware"]["sockets"] == 2


# --- refusals: one line, exit 2 -------------------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "edited.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _refused(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    """``tiersim import-log PATH``'s one line of error (exit 2)."""
    assert main(["import-log", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def _spliced() -> str:
    """The seed DRAM log's header (global batch 4) on the Polaris run's iterations (16)."""
    head = DRAM.read_text().split("[after model, optimizer, and learning rate scheduler are built]")[0]
    polaris = POLARIS.read_text()
    return head + polaris[polaris.index("[after model, optimizer, and learning rate scheduler are built]"):]


def _edit(log: Path, old: str, new: str, count: int = 1) -> str:
    text = log.read_text()
    assert old in text
    return text.replace(old, new, count)


REFUSALS = [
    (_spliced, "iteration 1: 'global batch size': is 16 but the launcher's --global-batch-size is 4"),
    (lambda: _edit(DRAM, "actual seqlen:  2048", "actual seqlen:  4096"), "'actual seqlen': is 4096"),
    (lambda: DRAM.read_text().split("[after model")[0] + "[after model" + NVME.read_text().split("[after model")[1],
     "iteration 1: DeepSpeed timer 'async_swap_gradient_wait' swaps to NVMe but the configuration offloads"),
    (lambda: _edit(DRAM, "consumed samples:           12", "consumed samples:           14"),
     "iteration 3: 'consumed samples': grew by 6"),
    (lambda: _edit(DRAM, "iteration        4/       5", "iteration        4/      50"), "--train-iters is 5"),
    (lambda: _edit(POLARIS, "train_batch_size ............. 16", "train_batch_size ............. 8"),
     "DeepSpeed's train_batch_size: is 8 but the launcher's --global-batch-size is 16"),
    (lambda: _edit(POLARIS, "ffn_hidden_size ................................. 13632",
                   "ffn_hidden_size ................................. 20480"),
     "ffn_hidden_size: Megatron printed 20480"),
    (lambda: _edit(DRAM, "| fwd: ", "| fwd: -"), "iteration 1: DeepSpeed timer 'fwd': negative time"),
    (lambda: _edit(DRAM, "| bwd: ", "| bwd: nan #"), "DeepSpeed timer 'bwd': expected a number, got"),
    (lambda: _edit(DRAM, "| bwd: ", "| bwd: NaN | x: "), "DeepSpeed timer 'bwd': expected a number, got NaN"),
    (lambda: _edit(DRAM, "elapsed time per iteration (ms): ", "elapsed time per iteration (ms): -"),
     "'elapsed time per iteration (ms)': negative time"),
    (lambda: _edit(DRAM, "global batch size:     4", "global batch size:  four"),
     "iteration 1: 'global batch size': expected a number, got 'four'"),
    (lambda: _edit(NVME_NODE, "reduce_bucket_size=500,000,000", "reduce_bucket_size=500,000,00"),
     "reduce_bucket_size: expected a whole number, got '500,000,00'"),
    (lambda: _edit(NVME_NODE, "pipeline_read=True", "pipeline_read=yes"),
     "offload_optimizer.pipeline_read: expected True or False, got 'yes'"),
    (lambda: _edit(NVME_NODE, "offload_param=None", "offload_param=DeepSpeedZeroOffloadParamConfig(device='disk')"),
     "zero_config.offload_param.device: expected cpu, nvme or none, got 'disk'"),
    (lambda: _edit(NVME_NODE, "'block_size': 2097152", "'block_size': '1M'"),
     "aio_config.block_size: expected a whole number, got '1M'"),
    (lambda: _edit(DRAM, "--micro-batch-size 1", "--micro-batch-size -2"),
     "micro_batch_size: expected a whole number of at least 1, got -2"),
    (lambda: _edit(DRAM, "--num-layers 80", "--num-layers 0"), "num_layers: expected a whole number of at least 1"),
    (lambda: _edit(NVME_NODE, "'queue_depth': 8", "'queue_depth': 0"),
     "aio_config.queue_depth: expected a whole number of at least 1, got 0"),
    (lambda: _edit(DRAM, "--adam-beta1 0.9", "--adam-beta1 zero.nine"),
     "adam_beta1: expected a number, got 'zero.nine'"),
    (lambda: _edit(DRAM, "pretrain_gpt.py ", "pretrain_gpt.py --data-path \"/a b ", 1), "launcher command: unreadable"),
    (lambda: _edit(DRAM, "'-C', '0-55'", "'-C', '0-55;2'"), "numactl of rank 0: --physcpubind: unreadable"),
    (lambda: _edit(DRAM, "0.16.2, unknown", "0.9.5, unknown"), "DeepSpeed version: DeepSpeed 0.9.5 is not modelled"),
    (lambda: _edit(DRAM, "0.16.2, unknown", "0.17.1, unknown"), "DeepSpeed 0.17.1 is not modelled"),
    (lambda: DRAM.read_text() + "[INFO] DeepSpeed info: version=0.14.0, git-hash=x\n",
     "DeepSpeed version: the log prints 0.16.2 and 0.14.0"),
    (lambda: _edit(DRAM, "AVX512 arithmetic", "NEON arithmetic"),
     "CPU Adam SIMD: unknown arithmetic capability 'NEON'"),
    (lambda: _rebind(DRAM.read_text(), ["-m 0 -C 0-55", "", "", ""]), "numactl: ranks [0] are bound"),
    (lambda: _rebind(DRAM.read_text(), _socket_bound("-m 0,2,3", "-w 1,4,5")),
     "numactl: ranks run under different memory policies (bind, weighted-interleave)"),
]


@pytest.mark.parametrize(("make", "message"), REFUSALS)
def test_refused_as_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, make: Any, message: str) -> None:
    err = _refused(capsys, _write(tmp_path, make()))
    assert message in err, err


def test_a_refusal_exits_2_from_the_command_line(tmp_path: Path) -> None:
    proc = tiersim("import-log", str(_write(tmp_path, _spliced())))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "spliced" in proc.stderr


# --- reading time ---------------------------------------------------------------------------


def _big_log(iterations: int) -> str:
    """The DRAM excerpt with its iteration block (timers, memory, iteration line) repeated."""
    text = DRAM.read_text()
    start = text.index("[after model, optimizer, and learning rate scheduler are built]")
    head, body = text[:start], text[start:]
    first = body.index(" iteration        1/")
    block = body[body.index("\n") + 1:body.index("\n", first) + 1]
    lines = [head, body[:body.index("\n") + 1]]
    for i in range(1, iterations + 1):
        lines.append(block.replace("iteration        1/       5", f"iteration {i:8d}/{iterations:8d}").replace(
            "consumed samples:            4", f"consumed samples: {4 * i:12d}"))
    return "".join(lines).replace("--train-iters 5", f"--train-iters {iterations}")


def _opcodes(path: Path) -> int:
    """Python bytecodes executed while reading ``path`` (the work, independent of the clock)."""
    count = 0

    def trace(frame: Any, event: str, arg: object) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        read_log(path)
    finally:
        sys.settrace(None)
    return count


def test_reading_work_grows_linearly_with_the_log(tmp_path: Path) -> None:
    """Each further 30 iterations cost the same work: no pass over the whole log per line."""
    work = [_opcodes(_write(tmp_path, _big_log(n), f"{n}.log")) for n in (20, 50, 80)]
    first, second = work[1] - work[0], work[2] - work[1]
    assert first > 0 and abs(second - first) < 0.02 * first, work


@pytest.mark.slow
def test_a_30_mb_log_reads_in_seconds(tmp_path: Path) -> None:
    path = _write(tmp_path, _big_log(10_000), "big.log")
    assert path.stat().st_size > 30e6
    start = time.perf_counter()
    log = read_log(path)
    elapsed = time.perf_counter() - start
    assert len(log.iterations) == 10_000 and elapsed < 20, elapsed


def test_measured_tables_bundled_for_reproduce_are_import_log_output() -> None:
    """scenarios/measured/ is what `tiersim import-log` writes for the three 70B logs."""
    for log in (DRAM, CXL, NVME):
        bundled = pd.read_csv(ROOT / "scenarios" / "measured" / f"{log.stem}.measured.csv")
        fresh = measured_table(read_log(log))
        assert list(bundled["quantity"]) == list(fresh["quantity"])
        assert list(bundled["value"]) == pytest.approx(list(fresh["value"]), rel=1e-12)
