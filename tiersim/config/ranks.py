"""How a job's ranks are laid out: data parallelism over what tensor and pipeline parallelism
leave (Megatron's ``world = tp x pp x dp``), and which layouts tiersim refuses.

A job runs ``hardware.nodes x hardware.gpus`` ranks, one per GPU. Megatron places a
tensor-parallel group on consecutive ranks, so within a node, and a pipeline's stages across
the rest; ZeRO partitions over the data-parallel group of ``world / (tp x pp)`` ranks.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.config.hardware import HardwareSpec
from tiersim.errors import ConfigError
from tiersim.workload import TrainingSpec


def degree(training: dict[str, Any], name: str) -> int:
    """A parallel degree as written (1 when absent or not an integer: the schema refuses it later)."""
    value = training.get(name, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def default_data_parallel(training: dict[str, Any], nodes: int, gpus: int, source: str) -> int:
    """The data-parallel ranks the layout leaves on ``nodes`` of ``gpus``: ``nodes x gpus /
    (tensor_parallel x pipeline_parallel)``; a layout that does not divide the ranks is a ConfigError."""
    tp, pp = degree(training, "tensor_parallel"), degree(training, "pipeline_parallel")
    world = nodes * gpus
    if gpus % tp:
        raise ConfigError(source, "training.tensor_parallel",
                          f"{tp} does not divide hardware.gpus {gpus}: a tensor-parallel group "
                          "stays within a node, as Megatron places it")
    if world % (tp * pp):
        raise ConfigError(source, "training.pipeline_parallel",
                          f"tensor_parallel x pipeline_parallel = {tp} x {pp} does not divide the job's "
                          f"{world} GPUs (hardware.nodes x hardware.gpus)")
    return world // (tp * pp)


def check_data_parallel(training: TrainingSpec, hardware: HardwareSpec, source: str) -> None:
    """``training.data_parallel``, where given, must be what the layout leaves."""
    expected = hardware.nodes * hardware.gpus // (training.tensor_parallel * training.pipeline_parallel)
    if training.data_parallel != expected:
        raise ConfigError(
            source, "training.data_parallel",
            f"{training.data_parallel} ranks but the layout leaves {expected}: hardware.nodes x hardware.gpus / "
            f"(tensor_parallel x pipeline_parallel) = {hardware.nodes} x {hardware.gpus} / "
            f"({training.tensor_parallel} x {training.pipeline_parallel})")


def check_expert_group(training: TrainingSpec, hardware: HardwareSpec, source: str) -> None:
    """An expert-parallel group (DeepSpeed's consecutive ranks, ``_create_expert_and_data_parallel``)
    must lie within a node: its all-to-alls across nodes are not modelled yet."""
    ep = training.expert_parallel
    if hardware.gpus % ep:
        raise ConfigError(source, "training.expert_parallel",
                          f"{ep} does not divide hardware.gpus {hardware.gpus}: an expert-parallel group across "
                          "nodes is not modelled yet")


def data_parallel_span(data_parallel: int, tensor_parallel: int, gpus: int) -> tuple[int, int]:
    """The ranks of one data-parallel group on each node and the nodes it spans. Megatron orders
    ranks tensor-parallel first, then data-parallel, then pipeline stages, so a group's ranks
    lie ``tensor_parallel`` apart: ``gpus / tensor_parallel`` of them per node, or all of them
    on one node when ``data_parallel x tensor_parallel`` fits in it."""
    per_node = min(data_parallel, max(1, gpus // tensor_parallel))
    return per_node, math.ceil(data_parallel / per_node)
