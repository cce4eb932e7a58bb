"""DeepSpeed's batch arithmetic: ``train_batch_size = micro_batch x gradient_accumulation_steps x
world_size``, the missing values derived as DeepSpeed derives them and the result refused as it
refuses it (v0.16.2 ``deepspeed/runtime/config.py``: ``_set_batch_related_parameters``,
``_batch_assertion``). Sizes are sequences; ``world`` is the data-parallel ranks (DeepSpeed's
``world_size`` is ``mpu.get_data_parallel_world_size()`` under Megatron: nodes x GPUs / (TP x PP)).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tiersim.config.ranks import default_data_parallel
from tiersim.errors import ConfigError


class Batch(NamedTuple):
    """One optimizer step's batch: sequences in all, per rank and micro-step, and micro-steps."""

    train: int
    micro: int
    accumulation: int


def world_size(scenario: dict[str, Any], source: str) -> int:
    """DeepSpeed's ``world_size`` for a scenario mapping: its data-parallel ranks,
    ``training.data_parallel``, else what the layout leaves, ``hardware.nodes x hardware.gpus /
    (tensor_parallel x pipeline_parallel)`` (``tiersim.config.ranks``; each 1 where absent)."""
    training = scenario.get("training")
    training = training if isinstance(training, dict) else {}
    hardware = scenario.get("hardware")
    hardware = hardware if isinstance(hardware, dict) else {}
    counts = {key: hardware.get(key, 1) for key in ("nodes", "gpus")}
    for key, count in counts.items():
        _positive(count, f"hardware.{key}", source)
    ranks = training.get("data_parallel")
    if ranks is None:
        return default_data_parallel(training, counts["nodes"], counts["gpus"], source)
    return _positive(ranks, "training.data_parallel", source)


def _positive(value: object, field: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(source, "", f"cannot apply the DeepSpeed config: the scenario's {field} is {value!r}, "
                                      "not a positive integer")
    return value


def deepspeed_batch(train: int | None, micro: int | None, accumulation: int | None, world: int,
                    source: str) -> Batch:
    """The batch DeepSpeed runs for the values a config gives (None: not given). As in DeepSpeed,
    ``train_batch_size`` with ``gradient_accumulation_steps`` sets the micro-batch (8 sequences,
    1 step, 4 ranks: 1 micro-step of 2), floor division derives the missing value and a result
    that does not multiply out is refused."""
    batch = Batch(*_derived(train, micro, accumulation, world, source))
    for key, value in zip(("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"),
                          batch, strict=True):
        if value <= 0:
            raise ConfigError(source, key, f"is {value} as DeepSpeed derives it; it has to be greater than 0")
    if batch.train != batch.micro * batch.accumulation * world:
        raise ConfigError(source, "train_batch_size",
                          f"{batch.train} != train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
                          f"world_size = {batch.micro} * {batch.accumulation} * {world} (DeepSpeed's batch check)")
    return batch


def _derived(train: int | None, micro: int | None, accumulation: int | None, world: int,
             source: str) -> tuple[int, int, int]:
    """``_set_batch_related_parameters``: the values not given, from those given."""
    match (train, micro, accumulation):
        case (int(), int(), int()):
            return train, micro, accumulation
        case (int(), int(), None):
            return train, micro, train // micro // world
        case (int(), None, int()):
            return train, train // world // accumulation, accumulation
        case (None, int(), int()):
            return micro * accumulation * world, micro, accumulation
        case (int(), None, None):
            return train, train // world, 1
        case (None, int(), None):
            return micro * world, micro, 1
    raise ConfigError(source, "train_batch_size",
                      "either train_batch_size or train_micro_batch_size_per_gpu must be given (DeepSpeed)")
