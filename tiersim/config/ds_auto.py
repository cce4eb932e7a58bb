"""``"auto"`` in a DeepSpeed config, filled from the scenario the way the Hugging Face Trainer
fills it from its ``TrainingArguments`` and model (transformers ``integrations/deepspeed.py``,
``HfTrainerDeepSpeedConfig.trainer_config_process`` and ``trainer_config_finalize``).

The scenario stands for the Trainer's arguments: ``training.micro_batch`` for
``per_device_train_batch_size``, ``global_batch / (micro_batch x data_parallel)`` for
``gradient_accumulation_steps``, ``training.precision`` for ``--bf16``/``--fp16``, the Adam betas,
and ``model.hidden`` for the model's ``hidden_size``. What the Trainer fills from arguments that
change nothing tiersim simulates (learning rate, schedule, clipping) is listed, not filled.
What is still ``"auto"`` in ``zero_optimization`` afterwards DeepSpeed's own config model drops
(``DeepSpeedConfigModel``: the key takes its default); the caller does the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tiersim.config.ds_batch import world_size
from tiersim.config.scenario import copy_plain
from tiersim.errors import ConfigError

AUTO = "auto"

NO_EFFECT = ("gradient_clipping", "optimizer.params.lr", "optimizer.params.eps", "optimizer.params.weight_decay",
             "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
             "scheduler.params.total_num_steps", "amp.opt_level")
"""Keys the Trainer fills from arguments that change no time or memory tiersim simulates."""


@dataclass(frozen=True)
class Filled:
    """A DeepSpeed config with the Trainer's ``"auto"`` values filled in."""

    config: dict[str, Any]
    filled: tuple[str, ...]
    """``key=value`` for each value filled, in the Trainer's order."""
    no_effect: tuple[str, ...]
    """The keys of ``NO_EFFECT`` that are ``"auto"`` (left as they are)."""


def fill_auto(ds: dict[str, Any], scenario: dict[str, Any], source: str) -> Filled:
    """``ds`` with ``"auto"`` filled from the scenario mapping ``scenario`` (``ds`` is not changed)."""
    out = copy_plain(ds)
    args = _TrainerArguments(scenario, source)
    filled: list[str] = []

    def fill(path: str, value: Callable[[], object], note: str = "") -> None:
        parent, key = _parent(out, path)
        if parent is not None and parent.get(key) == AUTO:
            parent[key] = value()
            filled.append(f"{path}={_show(parent[key])}{note}")

    fill("train_micro_batch_size_per_gpu", lambda: args.micro)
    fill("gradient_accumulation_steps", args.accumulation)
    fill("train_batch_size", lambda: args.world * args.micro * args.accumulation())
    fill("optimizer.params.betas", lambda: list(args.betas))
    fill("fp16.enabled", lambda: args.precision == "fp16")
    fill("amp.enabled", lambda: False)
    fill("bf16.enabled", lambda: args.precision == "bf16")
    fill("zero_optimization.reduce_bucket_size", lambda: args.hidden("reduce_bucket_size") ** 2, " (hidden^2)")
    if _get(out, "zero_optimization.stage") == 3:
        fill("zero_optimization.stage3_prefetch_bucket_size",
             lambda: int(0.9 * args.hidden("stage3_prefetch_bucket_size") ** 2), " (0.9 hidden^2)")
        fill("zero_optimization.stage3_param_persistence_threshold",
             lambda: 10 * args.hidden("stage3_param_persistence_threshold"), " (10 hidden)")
    no_effect = tuple(path for path in NO_EFFECT if _get(out, path) == AUTO)
    return Filled(out, tuple(filled), no_effect)


class _TrainerArguments:
    """The scenario's values in the roles of the Trainer's arguments (read when needed)."""

    def __init__(self, scenario: dict[str, Any], source: str) -> None:
        training = scenario.get("training")
        self.training: dict[str, Any] = training if isinstance(training, dict) else {}
        model = scenario.get("model")
        self.model: dict[str, Any] = model if isinstance(model, dict) else {}
        self.source = source
        self.micro = self._whole("training.micro_batch", self.training.get("micro_batch", 1))
        self.world = world_size(scenario, source)
        self.precision = self.training.get("precision", "bf16")
        self.betas = (self.training.get("adam_beta1", 0.9), self.training.get("adam_beta2", 0.999))

    def accumulation(self) -> int:
        """``gradient_accumulation_steps``: the scenario's micro-steps per optimizer step."""
        total = self._whole("training.global_batch", self.training.get("global_batch"))
        if total % (self.micro * self.world):
            raise ConfigError(self.source, "gradient_accumulation_steps",
                              f"is \"auto\" and the scenario's training.global_batch {total} is not a multiple of "
                              f"micro_batch * data_parallel = {self.micro} * {self.world}")
        return total // (self.micro * self.world)

    def hidden(self, key: str) -> int:
        """The model's hidden size, which the Trainer reads for the bucket sizes."""
        if "hidden" not in self.model:
            raise ConfigError(self.source, f"zero_optimization.{key}",
                              "is \"auto\": the Hugging Face Trainer fills it from the model's hidden size, and the "
                              "scenario has no model.hidden")
        return self._whole("model.hidden", self.model["hidden"])

    def _whole(self, field: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value <= 0:
            raise ConfigError(self.source, "", f"cannot fill \"auto\": the scenario's {field} is {value!r}, "
                                               "not a positive whole number")
        return int(value)


def _parent(config: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    """The mapping that holds dotted ``path``'s last key (None if a section on the way is not
    a mapping), and that key."""
    *sections, key = path.split(".")
    node: object = config
    for section in sections:
        node = node.get(section) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), key


def _get(config: dict[str, Any], path: str) -> object:
    """The value at dotted ``path`` (None where it is not given)."""
    parent, key = _parent(config, path)
    return parent.get(key) if parent is not None else None


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
