"""import-log's parallel layout: the launcher's world info (hosts and their GPUs), Megatron's
tensor, pipeline and expert parallelism and its experts (tiersim.ingest.log_layout).

The logs here are the Polaris excerpt (tests/fixtures/logs/polaris-13B-dp4-mb4.log: one host of
4 GPUs, TP 1) relaid by ``relaid``: every line that states the layout or the batch per rank
edited together, and for more than one host, the runner's pdsh command and pdsh's ``host: ``
before each node's lines, as DeepSpeed's PDSHRunner starts them."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from clirun import ROOT

from tiersim.cli import main
from tiersim.errors import ConfigError
from tiersim.fitting.replay import load_node, log_config
from tiersim.ingest.log_scenario import log_document
from tiersim.ingest.training_log import read_log
from tiersim.ingest.world_info import decode_world_info, encode_world_info, printed_world_info

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
POLARIS = LOGS / "polaris-13B-dp4-mb4.log"
POLARIS_HOST = "x3006c0s1b0n0.hsn.cm.polaris.alcf.anl.gov"
POLARIS_NODE = load_node(ROOT / "systems" / "polaris.yaml")
ENCODED = "eyJ4MzAwNmMwczFiMG4wLmhzbi5jbS5wb2xhcmlzLmFsY2YuYW5sLmdvdiI6IFswLCAxLCAyLCAzXX0="


def encode(hosts: dict[str, list[int]]) -> str:
    """DeepSpeed's ``encode_world_info``: URL-safe base64 of the JSON."""
    return base64.urlsafe_b64encode(json.dumps(hosts).encode()).decode()


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def relaid(tp: int = 1, pp: int = 1, hosts: int = 1, micro: int = 4, extra: str = "") -> str:
    """The Polaris excerpt as the same job (global batch 16) on ``hosts`` hosts of 4 GPUs with
    tensor and pipeline parallelism ``tp`` and ``pp``, ``micro`` sequences per micro-batch and
    ``extra`` launcher arguments (Megatron's print of those left out)."""
    names = [POLARIS_HOST] if hosts == 1 else [f"h{i}" for i in range(hosts)]
    world = {name: [0, 1, 2, 3] for name in names}
    dp = 4 * hosts // (tp * pp)
    text = POLARIS.read_text()
    text = _sub(text, f"--world_info={ENCODED}", f"--world_info={encode(world)}")
    text = _sub(text, "--tensor-model-parallel-size 1 ", f"--tensor-model-parallel-size {tp} "
                f"--pipeline-model-parallel-size {pp} {extra} ")
    for old, new in (("--micro-batch-size 4", f"--micro-batch-size {micro}"),
                     ("micro_batch_size ................................ 4",
                      f"micro_batch_size ................................ {micro}"),
                     ("train_micro_batch_size_per_gpu  4", f"train_micro_batch_size_per_gpu  {micro}"),
                     ('"train_micro_batch_size_per_gpu": 4', f'"train_micro_batch_size_per_gpu": {micro}'),
                     ("world_size ................... 4", f"world_size ................... {dp}"),
                     ("tensor_model_parallel_size ...................... 1",
                      f"tensor_model_parallel_size ...................... {tp}"),
                     ("pipeline_model_parallel_size .................... 1",
                      f"pipeline_model_parallel_size .................... {pp}"),
                     ("using world size: 4, data-parallel-size: 4,", f"using world size: {4 * hosts}, "
                                                                     f"data-parallel-size: {dp},"),
                     ("tensor-model-parallel size: 1, pipeline-model-parallel size: 1",
                      f"tensor-model-parallel size: {tp}, pipeline-model-parallel size: {pp}"),
                     (f"WORLD INFO DICT: {{'{POLARIS_HOST}': [0, 1, 2, 3]}}", f"WORLD INFO DICT: {world}")):
        text = _sub(text, old, new)
    given = tuple(f"  {word[2:].replace('-', '_')} ." for word in extra.split() if word.startswith("--"))
    text = "".join(line for line in text.splitlines(keepends=True) if not given or not line.startswith(given))
    return text if hosts == 1 else _pdsh(text, names)


def _pdsh(text: str, names: list[str]) -> str:
    """The runner's pdsh command, and pdsh's ``host: `` before each node's lines: every node
    prints its world info and spawns its ranks; rank 0 (the first host) prints the rest, but
    Megatron's iteration line comes from the last rank, on the last host."""
    lines = text.splitlines()
    head, script = lines[0].split(" -u -m deepspeed.launcher.launch ", 1)
    launcher = f"export NCCL_DEBUG=WARN; cd /home/user; {head.split('cmd = ')[1]} -u -m deepspeed.launcher.launch"
    out = [f"{head.split('cmd = ')[0]}cmd = pdsh -S -f 1024 -w {','.join(names)} {launcher} "
           + script.replace("--master_addr", "--node_rank=%n --master_addr", 1)]
    for line in lines[1:]:
        if "WORLD INFO DICT" in line or "spawned with command" in line:
            out += [f"{name}: {line}" for name in names]
        else:
            out.append(f"{names[-1] if 'elapsed time per iteration' in line else names[0]}: {line}")
    return "\n".join(out) + "\n"


def _imported(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "relaid.log"
    path.write_text(text)
    return log_document(read_log(path)).data


def _layout(data: dict[str, Any]) -> tuple[object, ...]:
    training, hardware = data["training"], data["hardware"]
    return (hardware["nodes"], hardware["gpus"], training["tensor_parallel"], training["pipeline_parallel"],
            training["data_parallel"])


# --- world info -----------------------------------------------------------------------------


def test_the_world_info_both_ways() -> None:
    """The runner's base64 and launch.py's print say the same: one Polaris host, GPUs 0-3."""
    assert decode_world_info(ENCODED, "f") == {POLARIS_HOST: (0, 1, 2, 3)}
    assert encode_world_info({POLARIS_HOST: (0, 1, 2, 3)}) == ENCODED
    assert printed_world_info(f" {{'{POLARIS_HOST}': [0, 1, 2, 3]}}", "f") == {POLARIS_HOST: (0, 1, 2, 3)}
    assert read_log(POLARIS).hosts == {POLARIS_HOST: (0, 1, 2, 3)}
    assert read_log(POLARIS).parallel_sizes == {"world size": 4, "data parallel size": 4,
                                                "sequence parallel size": 1, "tensor model parallel size": 1,
                                                "pipeline model parallel size": 1}


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_every_fixture_is_one_node(log: Path) -> None:
    data = log_document(read_log(log)).data
    assert _layout(data) == (1, 4, 1, 1, 4) and data["training"]["sequence_parallel"] is False
    assert "expert_parallel" not in data["training"] and "experts" not in data["model"]


@pytest.mark.parametrize(("hosts", "micro"), [(2, 2), (4, 1)])
def test_hosts_of_a_pdsh_launch_are_nodes(tmp_path: Path, hosts: int, micro: int) -> None:
    """2 and 4 hosts of 4 GPUs: nodes x GPUs of each, DP 8 and 16; pdsh's prefixes are read past,
    so every line still counts (the spawned ranks of every node, the iterations of the last)."""
    text = relaid(hosts=hosts, micro=micro)
    data = _imported(tmp_path, text)
    assert _layout(data) == (hosts, 4, 1, 1, 4 * hosts)
    assert data["training"]["micro_batch"] == micro and data["training"]["global_batch"] == 16
    log = read_log(tmp_path / "relaid.log")
    assert len(log.bindings) == 4 * hosts and len(log.iterations) == 5 and log.printed_args["topk"] == "1"
    hardware = log_config(log, POLARIS_NODE).hardware  # over Polaris's two Slingshot 11 NICs per node
    assert hardware.network is not None and (hardware.network.name, hardware.network_count) == ("slingshot-11", 2)


def test_tensor_parallelism(tmp_path: Path) -> None:
    """TP 2 on one node of 4 GPUs leaves DP 2 (2 micro-steps of 4 for a global batch of 16)."""
    text = relaid(tp=2, extra="--sequence-parallel")
    data = _imported(tmp_path, text)
    assert _layout(data) == (1, 4, 2, 1, 2) and data["training"]["sequence_parallel"] is True
    log = read_log(tmp_path / "relaid.log")
    config = log_config(log, POLARIS_NODE)
    assert (config.training.tensor_parallel, config.training.data_parallel) == (2, 2)


def test_pipeline_parallelism_keeps_its_refusal_by_field(tmp_path: Path) -> None:
    """PP 2 x TP 2 on 2 nodes: DP 2; ZeRO-3 under a pipeline is refused as DeepSpeed refuses it."""
    data = _imported(tmp_path, _whole_sends(relaid(tp=2, pp=2, hosts=2)))
    assert _layout(data) == (2, 4, 2, 2, 2)
    with pytest.raises(ConfigError, match="zero_stage: 3 with pipeline_parallel 2"):
        log_config(read_log(tmp_path / "relaid.log"), POLARIS_NODE)


def _whole_sends(text: str) -> str:
    """DeepSpeed's pipeline engine sending whole tensors between stages (not split over TP)."""
    return _sub(text, "'pipe_partitioned': True, 'grad_partitioned': True",
                "'pipe_partitioned': False, 'grad_partitioned': False")


def test_experts_and_expert_parallelism(tmp_path: Path) -> None:
    """Megatron-DeepSpeed's --num-experts 8 --topk 2 --moe-expert-parallel-size 4, every 2nd layer
    (its default --expert-interval): the model's experts; EP 4 is training.expert_parallel."""
    data = _imported(tmp_path, relaid(extra="--num-experts 8 --topk 2 --moe-expert-parallel-size 4"))
    model = data["model"]
    assert (model["experts"], model["experts_per_token"], model["moe_interval"]) == (8, 2, 2)
    assert data["training"]["expert_parallel"] == 4 and "expert_ffn" not in model
    assert data["training"]["moe_capacity_factor"] == 1.0
    padded = _imported(tmp_path, relaid(extra="--num-experts 8 --moe-train-capacity-factor 1.25"))
    assert padded["training"]["moe_capacity_factor"] == 1.25
    dense = _imported(tmp_path, relaid(extra="--num-experts 1 --expert-interval 1"))
    assert "experts" not in dense["model"] and "moe_capacity_factor" not in dense["training"]
    megatron_lm = _imported(tmp_path, relaid(extra="--num-experts 4 --moe-router-topk 2 --expert-interval 1 "
                                                   "--moe-ffn-hidden-size 1024 --expert-model-parallel-size 2"))
    assert {key: megatron_lm["model"][key] for key in ("experts", "experts_per_token", "moe_interval", "expert_ffn")} \
        == {"experts": 4, "experts_per_token": 2, "moe_interval": 1, "expert_ffn": 1024}
    assert megatron_lm["training"]["expert_parallel"] == 2


def test_an_expert_parallel_log_validates_as_imported(tmp_path: Path) -> None:
    """4 experts on every layer, EP 2 over DP 4, at ZeRO-2 (DeepSpeed-MoE refuses ZeRO-3)."""
    text = relaid(extra="--num-experts 4 --moe-expert-parallel-size 2 --expert-interval 1")
    for old, new in (("zero_config .................. stage=3", "zero_config .................. stage=2"),
                     ("--zero-stage=3", "--zero-stage=2"), ('"stage": 3', '"stage": 2')):
        text = _sub(text, old, new)
    _imported(tmp_path, text)
    config = log_config(read_log(tmp_path / "relaid.log"), POLARIS_NODE)
    assert (config.model.experts, config.model.experts_per_token, config.model.moe_interval) == (4, 1, 1)
    assert (config.training.expert_parallel, config.training.expert_data_parallel) == (2, 2)


def test_without_world_info_the_nodes_are_unknown(tmp_path: Path) -> None:
    """A job mpirun started (no launcher world info): Megatron's world size gives DP; how the 4
    ranks spread over nodes is not in the log."""
    lines = [line for line in POLARIS.read_text().splitlines() if "WORLD INFO" not in line]
    lines[0] = lines[0].replace(f"--world_info={ENCODED}", "")
    data = _imported(tmp_path, "\n".join(lines) + "\n")
    assert _layout(data) == ("unknown", "unknown", 1, 1, 4)


def test_the_summary_names_the_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tp2.log"
    path.write_text(relaid(tp=2, hosts=2, micro=2))
    assert main(["import-log", str(path)]) == 0
    assert "ranks: 2 node(s) x 4 GPUs, TP 2, PP 1, DP 4" in " ".join(capsys.readouterr().out.split())


# --- refusals -------------------------------------------------------------------------------


def _without_spawned(text: str, host: str, count: int) -> str:
    """``text`` less the lines of the first ``count`` ranks ``host`` spawned."""
    lines = text.splitlines(keepends=True)
    spawned = [i for i, line in enumerate(lines) if line.startswith(f"{host}: ") and "spawned with command" in line]
    return "".join(line for i, line in enumerate(lines) if i not in spawned[:count])


REFUSALS = [
    (lambda: _sub(relaid(hosts=2, micro=2), "'h1': [0, 1, 2, 3]}", "'h1': [0, 1]}"),
     "WORLD INFO DICT: h0: 4 GPUs, h1: 2 GPUs, but the log said h0: 4 GPUs, h1: 4 GPUs before"),
    (lambda: relaid(hosts=2, micro=2).replace("'h1': [0, 1, 2, 3]", "'h1': [0, 1]").replace(
        encode({"h0": [0, 1, 2, 3], "h1": [0, 1, 2, 3]}), encode({"h0": [0, 1, 2, 3], "h1": [0, 1]})),
     "the hosts run 2 and 4 GPUs: tiersim models nodes alike"),
    (lambda: _sub(POLARIS.read_text(), f"--world_info={ENCODED}", "--world_info=bm90IGpzb24="),
     "launcher --world_info: unreadable base64 JSON"),
    (lambda: _sub(POLARIS.read_text(), "[0, 1, 2, 3]}", "[0, 0, 2, 3]}"), "expected a list of distinct GPU ids"),
    (lambda: _sub(POLARIS.read_text(), "tensor-model-parallel size: 1", "tensor-model-parallel size: 2"),
     "Megatron's tensor model parallel size: is 2 but the launcher's layout gives 1"),
    (lambda: _sub(POLARIS.read_text(), "sequence-parallel size: 1", "sequence-parallel size: 2"),
     "is 2 but the launcher's layout gives 1 (DeepSpeed-Ulysses sequence parallelism is not modelled)"),
    (lambda: _sub(POLARIS.read_text(), "world_size ................... 4", "world_size ................... 2"),
     "DeepSpeed world_size: is 2 but the layout leaves 4 data-parallel ranks"),
    (lambda: _sub(POLARIS.read_text(), "tensor_model_parallel_size ...................... 1",
                  "tensor_model_parallel_size ...................... 2"),
     "Megatron's printed tensor_model_parallel_size: is 2 but the launcher's --tensor-model-parallel-size is 1"),
    (lambda: relaid(tp=4, pp=2),
     "--pipeline-model-parallel-size: tensor x pipeline parallel = 4 x 2 does not divide the job's 4 GPUs"),
    (lambda: _without_spawned(relaid(hosts=2, micro=2), "h1", 2),
     "spawned commands: 6 ranks spawned, but the launcher's world info has 2 hosts of 4 GPUs"),
    (lambda: relaid(tp=2, pp=2, hosts=2),
     "DeepSpeed pipeline.pipe_partitioned: true (DeepSpeed's default) with tensor and pipeline parallelism"),
    (lambda: relaid(extra="--num-layers-per-virtual-pipeline-stage 2"),
     "--num-layers-per-virtual-pipeline-stage: 2: a virtual pipeline under DeepSpeed"),
    (lambda: relaid(extra="--ds-sequence-parallel-size 2"), "--ds-sequence-parallel-size: 2: DeepSpeed-Ulysses"),
    (lambda: relaid(extra="--num-experts 8 --mlp-type residual"), "--mlp-type: residual: residual MoE"),
    (lambda: relaid(extra="--num-experts 8 --disable-moe-token-dropping"), "--disable-moe-token-dropping: without"),
    (lambda: relaid(extra="--num-experts 8 16"), "--num-experts: 8 16: a different number of experts per MoE layer"),
    (lambda: relaid(extra="--num-experts 0"), "--num-experts: expected expert counts of at least 1"),
    (lambda: relaid(extra="--moe-expert-parallel-size 2 --expert-model-parallel-size 4"),
     "--expert-model-parallel-size: 4 but --moe-expert-parallel-size is 2"),
    (lambda: relaid(extra="--num-experts 8 --topk"), "--topk: given without a value"),
    (lambda: _sub(POLARIS.read_text(), "use_data_before_expert_parallel_  False",
                  "use_data_before_expert_parallel_  True"),
     "use_data_before_expert_parallelism: True"),
]


@pytest.mark.parametrize(("make", "message"), REFUSALS)
def test_refused_as_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, make: Any, message: str) -> None:
    path = tmp_path / "edited.log"
    path.write_text(make())
    assert main(["import-log", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert message in err, err
