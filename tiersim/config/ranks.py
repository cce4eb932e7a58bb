"""How a job's ranks are laid out: data parallelism over what tensor and pipeline parallelism
leave (Megatron's ``world = tp x pp x dp``), and which layouts tiersim refuses.

A job runs ``hardware.nodes x hardware.gpus`` ranks, one per GPU. Megatron places a
tensor-parallel group on consecutive ranks, so within a node, and a pipeline's stages across
the rest; ZeRO partitions over the data-parallel group of ``world / (tp x pp)`` ranks.
"""

from __future__ import annotations

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


NOT_YET = {
    "hardware.nodes": "more than one node",
}
"""Layouts the schema reads but the strategies do not model yet, refused by field."""


def refuse_unmodelled_layout(training: TrainingSpec, hardware: HardwareSpec, source: str) -> None:
    """A ConfigError naming the first layout field above 1 that is not modelled yet."""
    values = {"hardware.nodes": hardware.nodes}
    for path, what in NOT_YET.items():
        if values[path] > 1:
            raise ConfigError(source, path, f"{values[path]}: {what} is not modelled yet")
