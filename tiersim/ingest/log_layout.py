"""The parallel layout and the experts a training log describes, as scenario fields.

- ``hardware.nodes`` and ``hardware.gpus``: the hosts of the launcher's world info and the GPUs
  of each (``world_info.py``). A job started without DeepSpeed's launcher (mpirun, srun) has no
  world info, and its log does not say how the ranks spread over nodes: both are ``unknown``.
- ``training.tensor_parallel`` and ``pipeline_parallel``: Megatron's
  ``--tensor-model-parallel-size`` and ``--pipeline-model-parallel-size`` (its own print of its
  arguments where the command does not give them, else its default 1); ``sequence_parallel``:
  ``--sequence-parallel``; ``data_parallel``: what they leave, ``nodes x gpus / (tp x pp)``.
- ``training.expert_parallel`` (written where above 1): ``--moe-expert-parallel-size``
  (Megatron-DeepSpeed) or ``--expert-model-parallel-size`` (Megatron-LM).
- The model's experts (``moe_fields``): Megatron-DeepSpeed's ``--num-experts`` (one count for
  every MoE layer), ``--topk`` (default 1; Megatron-LM's ``--moe-router-topk``) and
  ``--expert-interval`` (default 2: layer i, from 0, has experts when i + 1 is a multiple of it,
  ``get_num_experts_per_layer`` in megatron/model/transformer.py, as ``model.moe_interval``
  reads); each expert is a ``ParallelMLP`` of ``--ffn-hidden-size`` (Megatron-LM:
  ``--moe-ffn-hidden-size``); ``--moe-train-capacity-factor`` is
  ``training.moe_capacity_factor`` (``moe_training``).

Megatron's ``using world size: ...`` line, DeepSpeed's ``world_size`` (its data-parallel ranks)
and the ranks the launcher spawned must agree with the layout. What tiersim does not model is
refused by name: a virtual pipeline (under DeepSpeed's engine), DeepSpeed-Ulysses or context
parallelism, per-layer expert counts, residual MoE, Megatron's SwitchMLP, MoE without token
dropping (DeepSpeed then pads each expert to the busiest one's tokens), and with tensor and
pipeline parallelism, DeepSpeed's pipeline engine splitting its sends over the tensor-parallel
ranks (its default ``pipe_partitioned``, as ``--ds-config`` refuses it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from tiersim.config.schema import UNKNOWN
from tiersim.errors import ConfigError
from tiersim.ingest.printed_values import number, whole
from tiersim.ingest.training_log import TrainingLog
from tiersim.ingest.world_info import nodes_and_gpus

EXPERT_PARALLEL = ("moe_expert_parallel_size", "expert_model_parallel_size")
"""Megatron-DeepSpeed's and Megatron-LM's expert-parallel degree."""
TOP_K = ("topk", "moe_router_topk")
"""Megatron-DeepSpeed's and Megatron-LM's experts per token."""


@dataclass(frozen=True)
class Layout:
    """How a logged job laid out its ranks (``nodes`` and ``gpus``: ``unknown`` without world info)."""

    nodes: int | str
    gpus: int | str
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    sequence_parallel: bool
    expert_parallel: int

    def training(self) -> dict[str, Any]:
        """The ``training`` fields of the layout (``expert_parallel`` only where above 1)."""
        fields: dict[str, Any] = {"data_parallel": self.data_parallel, "tensor_parallel": self.tensor_parallel,
                                  "pipeline_parallel": self.pipeline_parallel,
                                  "sequence_parallel": self.sequence_parallel}
        if self.expert_parallel > 1:
            fields["expert_parallel"] = self.expert_parallel
        return fields


def log_layout(log: TrainingLog) -> Layout:
    """The log's layout, checked against what else it prints; an unmodelled one is refused by name."""
    source = log.path
    _refuse_unmodelled(log)
    tp, pp = _size(log, "tensor_model_parallel_size"), _size(log, "pipeline_model_parallel_size")
    nodes: int | str
    gpus: int | str
    if log.hosts is not None:
        nodes, gpus = nodes_and_gpus(log.hosts, source)
        world = nodes * gpus
    else:
        nodes = gpus = UNKNOWN
        world = _world_without_hosts(log, tp * pp)
    if world % (tp * pp):
        raise ConfigError(source, "--pipeline-model-parallel-size", f"tensor x pipeline parallel = {tp} x {pp} "
                          f"does not divide the job's {world} GPUs")
    layout = Layout(nodes, gpus, tp, pp, world // (tp * pp), log.args.get("sequence_parallel") is True,
                    _expert_parallel(log))
    _check_prints(log, layout, world)
    _check_pipeline_sends(log, layout)
    return layout


def _size(log: TrainingLog, key: str, default: int = 1) -> int:
    """A whole-number argument of at least 1: the launcher's, else Megatron's print, else ``default``."""
    raw = _raw(log, (key,))
    value = default if raw is None else whole(raw, log.path, "--" + key.replace("_", "-"))
    if value < 1:
        raise ConfigError(log.path, "--" + key.replace("_", "-"), f"expected a whole number of at least 1, "
                                                                 f"got {value}")
    return value


def _raw(log: TrainingLog, keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` the launcher's command gives, else the first Megatron printed (None:
    neither); a flag given without its value is refused."""
    for key in keys:
        raw = log.args.get(key)
        if raw is True:
            raise ConfigError(log.path, "--" + key.replace("_", "-"), "given without a value in the launcher's "
                                                                      "arguments")
        if isinstance(raw, str):
            return raw
    printed = [log.printed_args[key] for key in keys if log.printed_args.get(key) not in (None, "None")]
    return printed[0] if printed else None


def _given(log: TrainingLog, keys: tuple[str, ...]) -> list[str]:
    """Those of ``keys`` (one argument's names in different forks) the launcher's command gives,
    else those Megatron printed."""
    return [key for key in keys if key in log.args] or [key for key in keys if _raw(log, (key,)) is not None]


def _expert_parallel(log: TrainingLog) -> int:
    """The expert-parallel degree, by either fork's name (both given: they must agree)."""
    given = {key: _size(log, key) for key in _given(log, EXPERT_PARALLEL)}
    if len(set(given.values())) > 1:
        raise ConfigError(log.path, "--expert-model-parallel-size", f"{given['expert_model_parallel_size']} but "
                          f"--moe-expert-parallel-size is {given['moe_expert_parallel_size']}")
    return next(iter(given.values()), 1)


def _world_without_hosts(log: TrainingLog, model_parallel: int) -> int:
    """The job's ranks where the launcher's world info is missing: Megatron's world size, else
    DeepSpeed's data-parallel ``world_size`` x tensor x pipeline parallel."""
    if "world size" in log.parallel_sizes:
        return log.parallel_sizes["world size"]
    if "world_size" in log.engine:
        return whole(log.engine["world_size"], log.path, "DeepSpeed world_size") * model_parallel
    raise ConfigError(log.path, "world size", "missing: the log has neither the launcher's world info nor "
                      "Megatron's 'using world size' line nor DeepSpeed's world_size")


def _check_prints(log: TrainingLog, layout: Layout, world: int) -> None:
    """Megatron's ``using world size`` line, DeepSpeed's data-parallel ``world_size`` and the
    spawned ranks against the layout."""
    source = log.path
    expected = {"world size": world, "data parallel size": layout.data_parallel,
                "tensor model parallel size": layout.tensor_parallel,
                "pipeline model parallel size": layout.pipeline_parallel,
                "sequence parallel size": 1, "context parallel size": 1}
    for name, value in log.parallel_sizes.items():
        if name in expected and value != expected[name]:
            raise ConfigError(source, f"Megatron's {name}", f"is {value} but the launcher's layout gives "
                              f"{expected[name]}" + _UNMODELLED.get(name, ""))
    printed = log.engine.get("world_size")
    if printed is not None and whole(printed, source, "DeepSpeed world_size") != layout.data_parallel:
        raise ConfigError(source, "DeepSpeed world_size", f"is {printed} but the layout leaves "
                          f"{layout.data_parallel} data-parallel ranks")
    ranks = len(log.bindings)
    if ranks and isinstance(layout.gpus, int) and ranks not in (layout.gpus, world):
        raise ConfigError(source, "spawned commands", f"{ranks} ranks spawned, but the launcher's world info "
                          f"has {layout.nodes} hosts of {layout.gpus} GPUs")


def _check_pipeline_sends(log: TrainingLog, layout: Layout) -> None:
    """With tensor and pipeline parallelism DeepSpeed's pipeline engine splits each send between
    stages over the tensor-parallel ranks unless its printed ``pipeline`` config says
    ``pipe_partitioned``/``grad_partitioned`` False (both True by default): refused, as
    ``--ds-config`` refuses it (tiersim sends them whole)."""
    if layout.tensor_parallel == 1 or layout.pipeline_parallel == 1:
        return
    printed = log.engine.get("pipeline", "{}")
    try:
        pipeline = ast.literal_eval(printed)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError(log.path, "DeepSpeed pipeline", f"unreadable printed value {printed[:60]!r}") from None
    for key in ("pipe_partitioned", "grad_partitioned"):
        if not isinstance(pipeline, dict) or pipeline.get(key, True) is not False:
            raise ConfigError(log.path, f"DeepSpeed pipeline.{key}", "true (DeepSpeed's default) with tensor and "
                              "pipeline parallelism: sends split over the tensor-parallel ranks are not modelled")


_UNMODELLED = {"sequence parallel size": " (DeepSpeed-Ulysses sequence parallelism is not modelled)",
               "context parallel size": " (context parallelism is not modelled)"}
"""Why a size of Megatron's line other than 1 is refused, where tiersim has no field for it."""

_VIRTUAL = ("a virtual pipeline under DeepSpeed: Megatron-DeepSpeed runs its stages on DeepSpeed's pipeline "
            "engine, which has no interleaved schedule, so which schedule ran is not in the log (tiersim's "
            "training.virtual_pipeline is Megatron's own interleaved 1F1B)")
_REFUSED = {
    "num_layers_per_virtual_pipeline_stage": _VIRTUAL,
    "virtual_pipeline_model_parallel_size": _VIRTUAL,
    "num_experts_switch": "Megatron's SwitchMLP experts are not modelled (DeepSpeed-MoE's --num-experts are)",
}
"""Arguments refused whenever given (``None`` aside)."""
_AT_DEFAULT = {
    "ds_sequence_parallel_size": ("1", "DeepSpeed-Ulysses sequence parallelism is not modelled"),
    "context_parallel_size": ("1", "context parallelism is not modelled"),
    "mlp_type": ("standard", "residual MoE (a dense MLP beside the experts) is not modelled"),
}
"""Arguments refused at any value but their default (compared as numbers where they are)."""


def _refuse_unmodelled(log: TrainingLog) -> None:
    """A ConfigError naming the first argument or print of a layout tiersim does not model."""
    for key, why in _REFUSED.items():
        raw = _raw(log, (key,))
        if raw is not None:
            raise ConfigError(log.path, "--" + key.replace("_", "-"), f"{raw}: {why}")
    for key, (default, why) in _AT_DEFAULT.items():
        raw = _raw(log, (key,))
        if raw is not None and not _same(raw, default, log.path, key):
            raise ConfigError(log.path, "--" + key.replace("_", "-"), f"{raw}: {why}")
    if log.args.get("disable_moe_token_dropping") is True or log.printed_args.get("moe_token_dropping") == "False":
        raise ConfigError(log.path, "--disable-moe-token-dropping", "without token dropping DeepSpeed pads every "
                          "expert to the busiest one's tokens, which tiersim does not model")
    if log.engine.get("use_data_before_expert_parallel_") == "True":
        raise ConfigError(log.path, "DeepSpeed use_data_before_expert_parallelism", "True: expert-data-parallel "
                          "groups laid out data-first are not modelled")


def _same(raw: str, default: str, source: str, key: str) -> bool:
    """Whether a printed argument is its default (as numbers where the default is one)."""
    if default.replace(".", "").isdigit():
        return number(raw, source, "--" + key.replace("_", "-")) == float(default)
    return raw == default


def moe_fields(log: TrainingLog) -> dict[str, Any]:
    """The ``model`` fields of the log's mixture of experts ({} for a dense model)."""
    raw = _raw(log, ("num_experts",))
    counts = _expert_counts(raw, log.path) if raw is not None else [1]
    if set(counts) == {1}:
        return {}
    if len(set(counts)) > 1:
        raise ConfigError(log.path, "--num-experts", f"{raw}: a different number of experts per MoE layer is "
                          "not modelled (model.experts is every MoE layer's)")
    fields: dict[str, Any] = {"experts": counts[0], "experts_per_token": _top_k(log),
                              "moe_interval": _size(log, "expert_interval", 2)}
    width = _raw(log, ("moe_ffn_hidden_size",))
    if width is not None:
        fields["expert_ffn"] = whole(width, log.path, "--moe-ffn-hidden-size")
    return fields


def moe_training(log: TrainingLog) -> dict[str, Any]:
    """The ``training`` fields of the log's mixture of experts: ``moe_capacity_factor`` from
    ``--moe-train-capacity-factor`` (Megatron-DeepSpeed's default 1.0; {} for a dense model)."""
    if not moe_fields(log):
        return {}
    raw = _raw(log, ("moe_train_capacity_factor",))
    return {"moe_capacity_factor": 1.0 if raw is None else number(raw, log.path, "--moe-train-capacity-factor")}


def _expert_counts(raw: str, source: str) -> list[int]:
    """``--num-experts 8`` or ``8 8 8``, or Megatron's print ``[8, 8, 8]``, as counts of at least 1."""
    counts = [whole(item, source, "--num-experts") for item in raw.strip("[]").replace(",", " ").split()]
    if not counts or min(counts) < 1:
        raise ConfigError(source, "--num-experts", f"expected expert counts of at least 1, got {raw!r}")
    return counts


def _top_k(log: TrainingLog) -> int:
    """Experts per token: ``--topk`` (Megatron-DeepSpeed, default 1) or ``--moe-router-topk``."""
    given = _given(log, TOP_K)
    return _size(log, given[0]) if given else 1
