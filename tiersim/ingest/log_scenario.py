"""A training log -> a tiersim scenario (what ran) and a measured table (how long it took).

The scenario takes the model shape and training arguments from the launcher command, the ZeRO
and offload settings from DeepSpeed's printed configuration, the nodes, GPUs and parallel layout
from the launcher's world info and Megatron's arguments (``log_layout.py``), the ranks' memory
policy from the numactl bindings (a policy over several nodes: the socket's DRAM node, then its CXL
nodes; ``RankBinding.expanders``). What a log cannot say (the device models, the weights of a weighted
interleave, which live in sysfs) is written as ``unknown``: validating it names the field, and a
profile, ``--set`` or a ``tiersim fit`` system file fills it in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tiersim.config.document import ScenarioDocument
from tiersim.config.ds_config import NVME_OPTIONS, PARAM_OFFLOAD_DEFAULTS
from tiersim.config.schema import UNKNOWN
from tiersim.errors import ConfigError
from tiersim.ingest.log_layout import Layout, log_layout, moe_fields, moe_training
from tiersim.ingest.printed_values import boolean, number, whole
from tiersim.ingest.training_log import TIMER_PHASES, MemorySample, TrainingLog

WARMUP_ITERATIONS = 2
"""Iterations the steady state leaves out (the study's statistic: the mean of iterations 3..N)."""

PHASES = ("forward", "backward", "optimizer_step")
TIMER_PREFIX = "ds:"
"""How the measured table names a DeepSpeed timer that is not one of the three phases."""


def log_document(log: TrainingLog) -> ScenarioDocument:
    """The scenario the log describes (``unknown`` where it cannot say), its values blamed on
    the log."""
    source = log.path
    layout = log_layout(log)
    return ScenarioDocument({
        "name": Path(source).stem,
        "description": f"imported by tiersim import-log from {Path(source).name}",
        "seed": 0,
        "model": _model(log),
        "training": _training(log, layout),
        "hardware": _hardware(log, layout),
        "strategies": [_strategy(log)],
    }, source)


def _model(log: TrainingLog) -> dict[str, Any]:
    source, args = log.path, log.args
    hidden = _integer(args, "hidden_size", source)
    heads = _integer(args, "num_attention_heads", source)
    swiglu = bool(args.get("swiglu"))
    return {
        "name": Path(source).stem,
        "layers": _integer(args, "num_layers", source),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": _integer(args, "num_key_value_heads", source, heads),
        "ffn": _ffn(log, hidden, swiglu),
        "vocab": log.vocab if log.vocab is not None else UNKNOWN,
        "activation": "swiglu" if swiglu else "gelu",
        "norm": "rmsnorm" if args.get("normalization") == "rmsnorm" else "layernorm",
        "bias": not args.get("disable_bias_linear", False),
        "tied_embeddings": not args.get("untie_embeddings_and_output_weights", False),
        **moe_fields(log),
    }


def megatron_ffn(hidden: int, swiglu: bool) -> int:
    """Megatron-DeepSpeed's FFN size when ``--ffn-hidden-size`` is absent (megatron/arguments.py):
    4 x hidden, or for SwiGLU two thirds of that (its two input projections keep the parameter
    count) rounded down to a multiple of 64, computed in floating point as Megatron does."""
    return int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden


def _ffn(log: TrainingLog, hidden: int, swiglu: bool) -> int:
    """``--ffn-hidden-size``, else Megatron's default; Megatron's own print, where the log has
    it, must say the same."""
    ffn = _integer(log.args, "ffn_hidden_size", log.path, megatron_ffn(hidden, swiglu))
    printed = log.printed_args.get("ffn_hidden_size")
    if printed is not None and whole(printed, log.path, "printed argument ffn_hidden_size") != ffn:
        raise ConfigError(log.path, "ffn_hidden_size", f"Megatron printed {printed} but its arguments give {ffn} "
                          "(a header spliced from another run, or a fork with another default?)")
    return ffn


FLASH_ATTENTION_FLAGS = ("use_flash_attn", "use_flash_attn_v1", "use_flash_attn_v2", "use_flash_attn_triton",
                         "use_flash_attn_builder")
"""Megatron-DeepSpeed's flash-attention switches (``--use-flash-attn`` and its variants)."""


def _training(log: TrainingLog, layout: Layout) -> dict[str, Any]:
    source, args, zero = log.path, log.args, log.zero_config
    micro = _integer(args, "micro_batch_size", source)
    training: dict[str, Any] = {
        "seq_len": _integer(args, "seq_length", source),
        "micro_batch": micro,
        "global_batch": _integer(args, "global_batch_size", source, micro * layout.data_parallel),
        **layout.training(),
        **moe_training(log),
        "precision": "fp16" if args.get("fp16") else "bf16",
        "activation_checkpointing": bool(args.get("checkpoint_activations") or args.get("recompute_granularity")),
        "zero_stage": _integer(zero, "stage", source, least=0),
        "sub_group_size": _integer(zero, "sub_group_size", source, 1_000_000_000),
        "reduce_bucket_size": _integer(zero, "reduce_bucket_size", source, 500_000_000),
        "prefetch_bucket_size": _integer(zero, "prefetch_bucket_size", source, 50_000_000, least=0),
        "adam_beta1": _real(args, "adam_beta1", source, 0.9),
        "adam_beta2": _real(args, "adam_beta2", source, 0.999),
        "flash_attention": any(args.get(flag) is True for flag in FLASH_ATTENTION_FLAGS),
    }
    if log.deepspeed_version is not None:
        training["deepspeed_version"] = log.deepspeed_version
    dtype = log.user_config.get("data_types", {})
    if isinstance(dtype, dict) and dtype.get("grad_accum_dtype"):
        training["grad_accum_dtype"] = str(dtype["grad_accum_dtype"])
    return training


def _hardware(log: TrainingLog, layout: Layout) -> dict[str, Any]:
    """Nodes and GPUs of each; whether numactl bound each to its cores and socket memory; sockets (the DRAM nodes
    ranks bind or interleave from, ``unknown`` where the log does not tell: no numactl, ``all``);
    the logical CPUs each rank is bound to (``Hardware.rank_cores`` counts the physical cores under them);
    CXL nodes; the SIMD width of CPU Adam."""
    hardware: dict[str, Any] = {"host": UNKNOWN, "nodes": layout.nodes, "gpus": layout.gpus, **_binding(log)}
    cxl = _cxl_count(log)
    if cxl is not None:
        hardware["cxl"] = {"count": cxl}
    if "nvme" in (log.zero_config.get("offload_optimizer.device"), log.zero_config.get("offload_param.device")):
        hardware["nvme"] = {"count": 1}
    if log.adam_simd is not None:
        hardware["adam_simd"] = log.adam_simd
    return hardware


def _binding(log: TrainingLog) -> dict[str, Any]:
    """``numa_bound``, ``sockets`` and (where numactl lists CPUs) ``cores_per_rank`` from the
    ranks' numactl bindings."""
    bound = [b.socket_bound for b in log.bindings]
    if any(bound) and not all(bound):
        raise ConfigError(log.path, "numactl", f"ranks {[r for r, b in enumerate(bound) if b]} are bound to their "
                          f"cores and socket memory and ranks {[r for r, b in enumerate(bound) if not b]} are not: "
                          "tiersim models all ranks bound or none")
    homes = {b.home for b in log.bindings}
    fields: dict[str, Any] = {
        "numa_bound": all(bound) if bound else UNKNOWN,
        "sockets": len(homes) if homes and None not in homes else UNKNOWN,
    }
    cpus = [len(b.cpus) for b in log.bindings if b.cpus]
    if cpus:
        fields["cores_per_rank"] = cpus[0]
    return fields


def _cxl_count(log: TrainingLog) -> int | str | None:
    """CXL nodes the ranks' policies spread over beyond the first (home) node
    (``RankBinding.expanders``): ``unknown`` where a weighted interleave says ``all``, None where
    no rank's policy reaches one."""
    if any(b.all_nodes for b in log.bindings if b.policy == "weighted-interleave"):
        return UNKNOWN  # "all": the log does not say how many nodes are CXL
    expanders = {node for b in log.bindings for node in b.expanders}
    return len(expanders) if expanders else None


HOST_POLICIES = {"bind": "bind", "preferred": "preferred", "preferred-many": "preferred",
                 "interleave": "interleave", "weighted-interleave": "weighted-interleave"}
"""numactl's memory policies (``RankBinding.policy``) -> ``strategies.dram/cxl.policy``."""


def _host_strategy(log: TrainingLog) -> dict[str, Any] | str:
    """CPU offload under the ranks' memory policy: ``cxl`` where it spans CXL nodes
    (``-w 0,2,3``: weights unknown, they live in sysfs; ``-m 0,2,3``: bind; ``-i``; ``-P``:
    preferred), ``dram`` on the DRAM node alone (``-p 0``: preferred)."""
    policies = {HOST_POLICIES[b.policy] for b in log.bindings if b.policy in HOST_POLICIES}
    if len(policies) > 1:
        named = ", ".join(sorted(policies))
        raise ConfigError(log.path, "numactl", f"ranks run under different memory policies ({named}): tiersim "
                          "models one policy for all ranks")
    policy = next(iter(policies), "bind")
    if policy == "weighted-interleave":
        return {"name": "cxl", "dram_weight": UNKNOWN, "cxl_weight": UNKNOWN}
    if any(b.expanders for b in log.bindings):
        return {"name": "cxl", "policy": policy}
    return {"name": "dram", "policy": "preferred"} if policy == "preferred" else "dram"


def _strategy(log: TrainingLog) -> dict[str, Any] | str:
    """The strategy of ``_optimizer_strategy``, with the ``offload_param`` block where the
    parameters are offloaded."""
    strategy = _optimizer_strategy(log)
    param = _param_offload(log.zero_config, log.path)
    if param is None:
        return strategy
    return {**({"name": strategy} if isinstance(strategy, str) else strategy), "offload_param": param}


def _param_offload(zero: dict[str, Any], source: str) -> dict[str, Any] | None:
    """The log's ``offload_param`` as a strategy's block (DeepSpeed's defaults where it is
    silent), or None where it offloads no parameters."""
    device = zero.get("offload_param.device", "none")
    if device in ("none", "None"):
        return None
    if device not in ("cpu", "nvme"):
        raise ConfigError(source, "zero_config.offload_param.device", f"expected cpu, nvme or none, got {device!r}")
    default = PARAM_OFFLOAD_DEFAULTS
    return {
        "device": device,
        "buffer_count": _integer(zero, "offload_param.buffer_count", source, default["buffer_count"]),
        "buffer_size": _integer(zero, "offload_param.buffer_size", source, default["buffer_size"]),
        "max_in_cpu": _integer(zero, "offload_param.max_in_cpu", source, default["max_in_cpu"], least=0),
        "pin_memory": boolean(zero.get("offload_param.pin_memory", default["pin_memory"]), source,
                              "zero_config.offload_param.pin_memory"),
    }


def _optimizer_strategy(log: TrainingLog) -> dict[str, Any] | str:
    """The strategy: offload device and memory policy, with the swapper's knobs for NVMe."""
    source, zero, aio = log.path, log.zero_config, log.aio_config
    device = zero.get("offload_optimizer.device", "none")
    if device == "nvme":
        return {
            "name": "nvme",
            "buffer_count": _integer(zero, "offload_optimizer.buffer_count", source, _nvme_default("buffer_count")),
            "pipeline_read": _pipelined(zero, "pipeline_read", source),
            "pipeline_write": _pipelined(zero, "pipeline_write", source),
            "block_size": _aio(aio, "block_size", source, _nvme_default("block_size")),
            "queue_depth": _aio(aio, "queue_depth", source, _nvme_default("queue_depth")),
            "thread_count": _aio(aio, "thread_count", source, _nvme_default("thread_count")),
        }
    if device == "cpu":
        return _host_strategy(log)
    if device not in ("none", "None"):
        raise ConfigError(source, "zero_config.offload_optimizer.device", f"expected cpu, nvme or none, got {device!r}")
    return "gpu"


def _nvme_default(option: str) -> Any:
    """DeepSpeed's default for a ``strategies.nvme`` option (``tiersim.config.ds_config``)."""
    return NVME_OPTIONS[option][1]


def _pipelined(zero: dict[str, Any], option: str, source: str) -> bool:
    """The swapper's ``offload_optimizer.pipeline_read``/``_write`` switch, DeepSpeed's default
    where the log does not print it."""
    key = f"offload_optimizer.{option}"
    return boolean(zero.get(key, _nvme_default(option)), source, f"zero_config.{key}")


def _aio(aio: dict[str, object], key: str, source: str, default: int) -> int:
    """An ``aio_config`` count or size: DeepSpeed hands it to its aio handle as an integer, so a
    unit suffix (``"1M"``) is not something it reads, and neither does tiersim."""
    if key not in aio:
        return default
    value = aio[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(source, f"aio_config.{key}", f"expected a whole number, got {value!r}")
    return at_least(whole(value, source, f"aio_config.{key}"), 1, source, f"aio_config.{key}")


def _integer(values: dict[str, Any], key: str, source: str, default: int | None = None, least: int = 1) -> int:
    """A whole number the log printed (``1e8``, ``1.000000e+08`` and ``500,000,000`` allowed), at
    least ``least`` (a count or size: 1; a stage or an optional amount: 0)."""
    raw = values.get(key)
    if raw is None or raw == "None":
        if default is None:
            raise ConfigError(source, key, "missing from the log's launcher arguments or DeepSpeed configuration")
        return default
    if raw is True:
        raise ConfigError(source, key, "given without a value in the log's launcher arguments")
    return at_least(whole(raw, source, key), least, source, key)


def at_least(value: int, least: int, source: str, key: str) -> int:
    """``value``, or a ConfigError at ``key`` where it is below ``least``."""
    if value < least:
        raise ConfigError(source, key, f"expected a whole number of at least {least}, got {value}")
    return value


def _real(values: dict[str, Any], key: str, source: str, default: float) -> float:
    """A real number from the launcher's arguments (its Megatron default when absent)."""
    raw = values.get(key)
    if raw is None:
        return default
    if raw is True:
        raise ConfigError(source, key, "given without a value in the log's launcher arguments")
    return number(raw, source, key)


def measured_table(log: TrainingLog) -> pd.DataFrame:
    """Every iteration's measured quantities, then ``steady``: their mean over iterations 3..N.

    Columns: iteration (1-based, or "steady"), quantity, value, unit. Times (unit ``s``):
    ``iteration``, ``forward``, ``backward``, ``optimizer_step``, and ``ds:NAME`` for DeepSpeed's
    timer NAME. Memory (unit ``B``, from the iteration's ``see_memory_usage`` reports):
    ``memory:host_used`` (node-wide host memory in use at its highest, less what was in use
    before the model was built), ``memory:gpu_max_allocated`` (rank 0's ``Max_MA``),
    ``memory:gpu_reserved`` (its highest ``CA``) and ``memory:gpu_max_reserved`` (``Max_CA``,
    which DeepSpeed rounds to whole GiB)."""
    engine = _engine_reports(log)
    per_iteration = [{**{q: (v, "s") for q, v in _quantities(timers).items()}, **_memory(log, engine.get(number, []))}
                     for number, timers in enumerate(log.iterations, 1)]
    rows: list[dict[str, Any]] = [{"iteration": number, "quantity": q, "value": v, "unit": unit}
                                  for number, values in enumerate(per_iteration, 1) for q, (v, unit) in values.items()]
    steady = per_iteration[WARMUP_ITERATIONS:]
    if not steady:
        raise ConfigError(log.path, "iterations", f"missing: the steady state needs more than {WARMUP_ITERATIONS} "
                          f"iterations, the log has {len(log.iterations)}")
    for quantity, (_value, unit) in steady[0].items():
        if all(quantity in values for values in steady):
            mean = sum(values[quantity][0] for values in steady) / len(steady)
            rows.append({"iteration": "steady", "quantity": quantity, "value": mean, "unit": unit})
    return pd.DataFrame(rows, columns=["iteration", "quantity", "value", "unit"])


def steady_state(log: TrainingLog) -> dict[str, float]:
    """quantity -> its mean over iterations 3..N (seconds, or bytes for ``memory:*``)."""
    table = measured_table(log)
    steady = table[table["iteration"] == "steady"]
    return dict(zip(steady["quantity"], steady["value"].astype(float)))


def _engine_reports(log: TrainingLog) -> dict[int, list[MemorySample]]:
    """The engine's memory reports by the iteration (1-based) they were printed in: one pass."""
    reports: dict[int, list[MemorySample]] = {}
    for sample in log.memory:
        if sample.label.startswith("Engine "):
            reports.setdefault(sample.iteration + 1, []).append(sample)
    return reports


def _memory(log: TrainingLog, reports: list[MemorySample]) -> dict[str, tuple[float, str]]:
    """One iteration's engine memory reports, reduced to their peaks."""
    if not reports or not log.memory:
        return {}
    baseline = log.memory[0].host_used
    return {
        "memory:host_used": (max(m.host_used for m in reports) - baseline, "B"),
        "memory:gpu_max_allocated": (max(m.max_allocated for m in reports), "B"),
        "memory:gpu_reserved": (max(m.reserved for m in reports), "B"),
        "memory:gpu_max_reserved": (max(m.max_reserved for m in reports), "B"),
    }


def _quantities(timers: dict[str, float]) -> dict[str, float]:
    """Megatron's iteration time, the three phases by tiersim's names, then DeepSpeed's other
    timers as ``ds:NAME`` (``*_microstep`` duplicates of the phase timers left out)."""
    out = {"iteration": timers["iteration"]}
    out.update({phase: timers[timer] for timer, phase in TIMER_PHASES.items()})
    for name, seconds in timers.items():
        if name not in TIMER_PHASES and name != "iteration" and not name.endswith("_microstep"):
            out[f"{TIMER_PREFIX}{name}"] = seconds
    return out
