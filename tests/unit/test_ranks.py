"""The ranks' layout (tiersim.config.ranks): data parallelism is what tensor and pipeline
parallelism leave of nodes x GPUs, and layouts DeepSpeed or tiersim refuse exit 2 by field."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import refused_in_process

from tiersim.config.document import load_scenario
from tiersim.config.ranks import data_parallel_span

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"


def refusal(capsys: pytest.CaptureFixture[str], *overrides: str) -> str:
    return refused_in_process(capsys, ["run", str(QUICKSTART)], *overrides)


def test_data_parallel_defaults_to_every_gpu_of_one_node() -> None:
    (config,) = load_scenario(QUICKSTART, ["hardware.gpus=4"], strategies=["dram"])
    assert config.training.data_parallel == 4
    assert (config.training.tensor_parallel, config.training.pipeline_parallel, config.hardware.nodes) == (1, 1, 1)


def test_a_tensor_parallel_group_stays_within_a_node(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.gpus=4", "training.tensor_parallel=3")
    assert "training.tensor_parallel: 3 does not divide hardware.gpus 4" in err


def test_a_given_data_parallel_must_be_what_the_layout_leaves(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.gpus=4", "training.tensor_parallel=2", "training.data_parallel=4")
    assert "training.data_parallel: 4 ranks but the layout leaves 2" in err


def test_pipeline_parallelism_with_zero_3_is_refused_as_deepspeed_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.gpus=2", "training.pipeline_parallel=2")
    assert "training.zero_stage: 3 with pipeline_parallel 2" in err and "refuses ZeRO-2 and ZeRO-3" in err


def test_pipeline_stages_split_the_decoder_layers_evenly(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.gpus=3", "training.pipeline_parallel=3", "training.zero_stage=1",
                  "training.global_batch=3")
    assert "training.pipeline_parallel: 3 does not divide model.layers 32" in err


def test_more_than_one_node_needs_its_network(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "hardware.nodes=2")
    assert "hardware.network: required with hardware.nodes 2" in err


def test_a_data_parallel_group_spans_the_nodes_its_ranks_are_on() -> None:
    assert data_parallel_span(8, 1, 4) == (4, 2)
    assert data_parallel_span(4, 1, 4) == (4, 1)
    assert data_parallel_span(4, 2, 4) == (2, 2)  # TP 2 within the node: 2 of the group's ranks per node
    assert data_parallel_span(2, 1, 4) == (2, 1)  # pipeline stages across the nodes
