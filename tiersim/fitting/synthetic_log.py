"""Write a simulated run as a Megatron-DeepSpeed training log, in the format ``read_log`` reads.

The log carries what a real one does for that reader: the launcher command (its world info:
``hardware.nodes`` hosts of ``hardware.gpus`` GPUs; model shape, training arguments and parallel
layout, ``--use-flash-attn``), Megatron's ``using world size`` line, DeepSpeed's version and CPU Adam's SIMD width, one
numactl binding per rank (``-m`` for DRAM and NVMe runs, ``-w`` over the socket's DRAM node and
its CXL nodes for ``cxl``, no numactl for unbound ranks), DeepSpeed's printed ``aio_config``,
``zero_config`` and user JSON, and per iteration the rank-0 phase timers (plus the swapper's
for NVMe) and Megatron's elapsed time. Every timer is the simulated value: a machine whose
figures are known thus yields logs that ``tiersim fit`` must invert (its round-trip test).
"""

from __future__ import annotations

import json
from pathlib import Path

from tiersim.config.scenario import RunConfig
from tiersim.fitting.predicted import predicted_quantities
from tiersim.ingest.log_scenario import TIMER_PREFIX
from tiersim.ingest.training_log import TIMER_PHASES
from tiersim.ingest.world_info import encode_world_info
from tiersim.results import Result

_STAMP = "[2026-01-01 00:00:00,000] [INFO]"
_PIPELINE = {"stages": "auto", "partition": "best", "seed_layers": False, "activation_checkpoint_interval": 0,
             "pipe_partitioned": False, "grad_partitioned": False}
"""DeepSpeed's pipeline engine config, sending whole tensors between stages (as tiersim models)."""


def write_log(result: Result, path: str | Path, iterations: int = 5) -> Path:
    """Write ``result`` (a run that fits) as a training log of ``iterations`` identical
    iterations; returns the path."""
    config = result.config
    quantities = predicted_quantities(result)
    if not quantities:
        raise ValueError(f"cannot write a log of a run that does not fit: {result.reason}")
    hosts = {f"node{n}": tuple(range(config.hardware.gpus)) for n in range(config.hardware.nodes)}
    lines = [f"{_STAMP} [runner.py:607:main] cmd = python -u -m deepspeed.launcher.launch "
             f"--world_info={encode_world_info(hosts)} --bind_cores_to_rank pretrain_gpt.py {_arguments(config)}",
             f"{_STAMP} [launch.py:146:main] WORLD INFO DICT: { {h: list(g) for h, g in hosts.items()} }"]
    lines += [f"{_STAMP} [launch.py:256:main] process {1000 + r} spawned with command: {binding}"
              for r, binding in enumerate(_bindings(config))]
    lines.append(_parallel_sizes(config))
    lines.append(f"deepspeed info ................... {config.training.deepspeed_version}, unknown, unknown")
    if config.hardware.adam_simd is not None:
        simd = {"avx512": "AVX512", "avx2": "AVX2"}.get(config.hardware.adam_simd, "scalar")
        lines.append(f"Adam Optimizer #0 is created with {simd} arithmetic capability.")
    lines.append(f" > padded vocab (size: {config.model.vocab}) with 0 dummy tokens (new size: {config.model.vocab})")
    lines += _engine_configuration(config)
    lines.append("[after model, optimizer, and learning rate scheduler are built] datetime: 2026-01-01 00:00:00 ")
    phases = " | ".join(f"{timer}: {1000 * quantities[phase]:.4f}" for timer, phase in TIMER_PHASES.items())
    swaps = [f"{name.removeprefix(TIMER_PREFIX)}: {1000 * seconds:.4f}" for name, seconds in quantities.items()
             if name.startswith(TIMER_PREFIX)]
    for i in range(1, iterations + 1):
        if swaps:
            lines.append(f"{_STAMP} [logging.py:128:log_dist] [Rank 0] time (ms) | " + " | ".join(swaps))
        lines.append(f"{_STAMP} [logging.py:128:log_dist] [Rank 0] time (ms) | {phases}")
        lines.append(f" iteration        {i}/       {iterations} | consumed samples: {i * config.training.global_batch}"
                     f" | elapsed time per iteration (ms): {1000 * quantities['iteration']:.1f} | "
                     f"global batch size: {config.training.global_batch:5d} |")
    target = Path(path)
    target.write_text("\n".join(lines) + "\n")
    return target


def _arguments(config: RunConfig) -> str:
    model, training = config.model, config.training
    args = [f"--num-layers {model.layers}", f"--hidden-size {model.hidden}",
            f"--num-attention-heads {model.heads}", f"--num-key-value-heads {model.kv_head_count}",
            f"--ffn-hidden-size {model.ffn}", f"--seq-length {training.seq_len}",
            f"--micro-batch-size {training.micro_batch}", f"--global-batch-size {training.global_batch}",
            f"--adam-beta1 {training.adam_beta1}", f"--adam-beta2 {training.adam_beta2}",
            f"--normalization {model.norm}", f"--{training.precision}", "--deepspeed",
            f"--zero-stage={training.zero_stage}", f"--tensor-model-parallel-size {training.tensor_parallel}",
            f"--pipeline-model-parallel-size {training.pipeline_parallel}"]
    if training.sequence_parallel:
        args.append("--sequence-parallel")
    if model.activation == "swiglu":
        args.append("--swiglu")
    if not model.bias:
        args.append("--disable-bias-linear")
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if training.activation_checkpointing:
        args.append("--checkpoint-activations")
    if training.flash_attention:
        args.append("--use-flash-attn")
    return " ".join(args)


def _parallel_sizes(config: RunConfig) -> str:
    """Megatron's ``using world size: ...`` line."""
    training, hw = config.training, config.hardware
    return (f"using world size: {hw.nodes * hw.gpus}, data-parallel-size: {training.data_parallel}, sequence-parallel "
            f"size: 1, tensor-model-parallel size: {training.tensor_parallel}, pipeline-model-parallel size: "
            f"{training.pipeline_parallel} ")


def _bindings(config: RunConfig) -> list[list[str]]:
    """One numactl command per rank: socket s's DRAM node is s, its CXL nodes follow all DRAM
    nodes; each rank gets its ``cores_per_rank`` logical CPUs. Unbound ranks run without numactl."""
    hw = config.hardware
    if not hw.numa_bound:
        return [["python", "-u", "pretrain_gpt.py", f"--local_rank={rank}"] for rank in range(hw.gpus)]
    cxl_per_socket = hw.cxl_count // hw.sockets if config.strategy == "cxl" else 0
    commands = []
    for rank in range(hw.gpus):
        socket = rank // hw.ranks_per_socket
        cpus = hw.cores_per_rank
        first = rank * cpus
        cores = f"{first}-{first + cpus - 1}"
        if cxl_per_socket:
            expanders = [hw.sockets + socket * cxl_per_socket + k for k in range(cxl_per_socket)]
            policy = ["-w", ",".join(str(n) for n in [socket, *expanders])]
        else:
            policy = ["-m", str(socket)]
        commands.append(["numactl", *policy, "-C", cores, "python", "-u", "pretrain_gpt.py", f"--local_rank={rank}"])
    return commands


def _engine_configuration(config: RunConfig) -> list[str]:
    """DeepSpeed's engine configuration print: aio_config, zero_config and the user JSON."""
    training, options = config.training, config.options
    device = {"nvme": "nvme", "dram": "cpu", "cxl": "cpu"}.get(config.strategy, "none")
    aio = {"block_size": getattr(options, "block_size", 1 << 20), "queue_depth": getattr(options, "queue_depth", 8),
           "thread_count": getattr(options, "thread_count", 1), "single_submit": False, "overlap_events": True,
           "use_gds": False}
    offload = "None" if device == "none" else (
        f"DeepSpeedZeroOffloadOptimizerConfig(device='{device}', buffer_count={getattr(options, 'buffer_count', 4)}, "
        f"pin_memory={config.hardware.pinned}, pipeline_read={getattr(options, 'pipeline_read', False)}, "
        f"pipeline_write={getattr(options, 'pipeline_write', False)}, fast_init=False, ratio=1.0)")
    zero = (f"stage={training.zero_stage} contiguous_gradients=True reduce_bucket_size={training.reduce_bucket_size} "
            f"overlap_comm=True offload_param=None offload_optimizer={offload} "
            f"sub_group_size={training.sub_group_size} prefetch_bucket_size=50000000")
    user = {"train_batch_size": training.global_batch, "train_micro_batch_size_per_gpu": training.micro_batch,
            "zero_optimization": {"stage": training.zero_stage, "sub_group_size": training.sub_group_size},
            "bf16": {"enabled": training.precision == "bf16"}}
    if training.grad_accum_dtype is not None:
        user["data_types"] = {"grad_accum_dtype": training.grad_accum_dtype}
    printed = [f"{_STAMP} [config.py:1003:print]   aio_config ................... {aio}",
               f"{_STAMP} [config.py:1003:print]   pipeline ..................... {_PIPELINE}",
               f"{_STAMP} [config.py:1003:print]   world_size ................... {training.data_parallel}",
               f"{_STAMP} [config.py:1003:print]   zero_config .................. {zero}",
               f"{_STAMP} [config.py:989:print_user_config]   json = {{"]
    body = json.dumps(user, indent=4).splitlines()[1:]
    return printed + body
