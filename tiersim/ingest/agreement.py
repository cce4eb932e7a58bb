"""Whether a training log's header and its iterations describe one run.

A log spliced from two runs (one log's header onto another's iterations) would import as a
scenario whose measurements belong to a different shape or batch. The header says what ran: the
launcher's arguments, Megatron's print of them and DeepSpeed's engine configuration. Every
iteration line counts what actually ran: ``global batch size``, ``consumed samples`` (growing by
the global batch per iteration), ``actual seqlen`` and ``iteration N/ M``; DeepSpeed's timers
swap to NVMe only when the optimizer is offloaded there. Any disagreement is a ConfigError
naming the iteration and the counter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.errors import ConfigError
from tiersim.ingest.printed_values import whole

if TYPE_CHECKING:
    from tiersim.ingest.training_log import TrainingLog

_SPLICED = "(a header spliced onto another run's iterations?)"
_SHARED_ARGUMENTS = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "micro_batch_size",
                     "global_batch_size", "ffn_hidden_size", "num_key_value_heads", "tensor_model_parallel_size",
                     "pipeline_model_parallel_size", "moe_expert_parallel_size", "topk", "expert_interval")
"""Arguments both the launcher's command and Megatron's own print give."""
_ENGINE = {"train_batch_size": "global_batch_size", "train_micro_batch_size_per_gpu": "micro_batch_size"}
"""DeepSpeed's engine print -> the Megatron argument it must equal."""


def check_agreement(log: TrainingLog) -> None:
    """Refuse a log whose launcher arguments, printed configuration and iteration lines disagree."""
    expected = _header(log)
    _check_iterations(log, expected)
    _check_swapping(log)


def _header(log: TrainingLog) -> dict[str, int]:
    """The run's shape as the launcher gives it, checked against Megatron's and DeepSpeed's prints."""
    source, args = log.path, log.args
    header = {key: whole(args[key], source, f"--{key.replace('_', '-')}")
              for key in _SHARED_ARGUMENTS if isinstance(args.get(key), str)}
    for key in _SHARED_ARGUMENTS:
        printed = log.printed_args.get(key)
        if key in header and printed not in (None, "None"):
            _same(log, f"Megatron's printed {key}", whole(printed, source, f"printed argument {key}"), header, key)
    for name, key in _ENGINE.items():
        printed = log.engine.get(name)
        if key in header and printed is not None:
            _same(log, f"DeepSpeed's {name}", whole(printed, source, f"DeepSpeed {name}"), header, key)
    for key in ("log_interval", "train_iters"):
        if isinstance(args.get(key), str):
            header[key] = whole(args[key], source, f"--{key.replace('_', '-')}")
    return header


def _same(log: TrainingLog, what: str, found: float, header: dict[str, int], key: str) -> None:
    if found != header[key]:
        flag = "--" + key.replace("_", "-")
        raise ConfigError(log.path, what, f"is {found:g} but the launcher's {flag} is {header[key]} {_SPLICED}")


def _check_iterations(log: TrainingLog, header: dict[str, int]) -> None:
    """Each iteration line's counters against the header, and consumed samples step by step."""
    rampup = "rampup_batch_size" in log.args
    curriculum = any("curriculum" in key for key in log.args)
    previous: dict[str, float] = {}
    for number, counters in enumerate(log.progress, 1):
        where = f"iteration {number}"
        batch = counters.get("global batch size")
        if batch is not None and not rampup and "global_batch_size" in header:
            _counter(log, where, "global batch size", batch, header["global_batch_size"], "--global-batch-size")
        seqlen = counters.get("actual seqlen")
        if seqlen is not None and not curriculum and "seq_length" in header:
            _counter(log, where, "actual seqlen", seqlen, header["seq_length"], "--seq-length")
        total = counters.get("iterations")
        if total is not None and "train_iters" in header:
            _counter(log, where, "iteration N/M", total, header["train_iters"], "--train-iters")
        _check_consumed(log, where, previous, counters, header)
        previous = counters


def _counter(log: TrainingLog, where: str, name: str, found: float, wanted: int, flag: str) -> None:
    if found != wanted:
        raise ConfigError(log.path, f"{where}: {name!r}", f"is {found:g} but the launcher's {flag} is {wanted} "
                          f"{_SPLICED}")


def _check_consumed(log: TrainingLog, where: str, previous: dict[str, float], counters: dict[str, float],
                    header: dict[str, int]) -> None:
    """``consumed samples`` grows by the global batch times the iterations since the last line."""
    if "consumed samples" not in previous or "consumed samples" not in counters:
        return
    batch = counters.get("global batch size", header.get("global_batch_size"))
    if batch is None:
        return
    if "iteration" in previous and "iteration" in counters:
        steps = counters["iteration"] - previous["iteration"]
    else:
        steps = header.get("log_interval", 1)
    grown = counters["consumed samples"] - previous["consumed samples"]
    if grown != batch * steps:
        raise ConfigError(log.path, f"{where}: 'consumed samples'", f"grew by {grown:g} since the last iteration "
                          f"line, not by the global batch {batch:g} x {steps:g} iteration(s): the iteration lines "
                          f"are not one run's {_SPLICED}")


def _check_swapping(log: TrainingLog) -> None:
    """NVMe swap timers only where the configuration offloads the optimizer to NVMe."""
    device = log.zero_config.get("offload_optimizer.device", "none")
    if device == "nvme":
        return
    for number, timers in enumerate(log.iterations, 1):
        swaps = sorted(name for name in timers if "swap" in name)
        if swaps:
            raise ConfigError(log.path, f"iteration {number}", f"DeepSpeed timer {swaps[0]!r} swaps to NVMe but the "
                              f"configuration offloads the optimizer to {device!r} {_SPLICED}")
