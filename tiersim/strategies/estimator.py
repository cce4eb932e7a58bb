"""DeepSpeed's own memory estimate for ZeRO-3, by its formula, for comparison with tiersim's.

``deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs_all_cold(total_params,
largest_layer_params, num_gpus_per_node, num_nodes, additional_buffer_factor=1.5)`` prints, per
option, ``estimate_zero3_model_states_mem_needs``: with the optimizer offloaded to the CPU and
the parameters on the GPU (``zero_init``, as Megatron-DeepSpeed builds the model), host memory
``total_params * 16 * additional_buffer_factor / num_nodes`` and GPU memory
``4 * largest_layer_params + 2 * total_params / total_gpus``; with the parameters offloaded to the
CPU too, host ``total_params * 18 * additional_buffer_factor / num_nodes`` and GPU
``4 * largest_layer_params``; with nothing offloaded, host
``largest_layer_params * 4 * num_gpus_per_node * factor`` and GPU
``4 * largest_layer_params + 18 * total_params / total_gpus`` (DeepSpeed v0.16.2,
deepspeed/runtime/zero/stage3.py, lines 3019-3055). "Largest layer" is the largest module's own
parameters (a linear layer's weight and bias; one expert's, for a mixture of experts). The
estimator has no NVMe option.
"""

from __future__ import annotations

from typing import Any

from tiersim.projections import attention_linears, ffn_linears
from tiersim.workload import ModelSpec, parameter_count

ADDITIONAL_BUFFER_FACTOR = 1.5
"""DeepSpeed's default ``additional_buffer_factor``."""


def largest_module_params(model: ModelSpec) -> int:
    """Parameters of the model's largest module (a linear layer's weight and bias, or the
    embedding / LM head)."""
    linears = (*attention_linears(model), *ffn_linears(model, False), *ffn_linears(model, model.experts > 0))
    largest = max(sum(lin.tensors) for lin in linears)
    return max(largest, model.vocab * model.hidden)


def zero3_estimate(model: ModelSpec, gpus: int, strategy: str, params: str | None = None,
                   nodes: int = 1) -> dict[str, Any] | None:
    """DeepSpeed's estimate for ``nodes`` nodes of ``gpus`` GPUs: host bytes (each node) and GPU
    bytes (each GPU), or None where the estimator has no matching option (NVMe offload; parameters
    offloaded, ``params`` their device, other than to the CPU beside a CPU-offloaded optimizer)."""
    total = parameter_count(model)
    largest = 4 * largest_module_params(model)
    total_gpus = gpus * nodes
    if params is not None:
        if params != "cpu" or strategy not in ("dram", "cxl"):
            return None
        cpu, gpu, options = total * 18 * ADDITIONAL_BUFFER_FACTOR / nodes, largest, (
            "offload_param=cpu, offload_optimizer=cpu, zero_init=1")
    elif strategy in ("dram", "cxl"):
        cpu, gpu, options = total * 16 * ADDITIONAL_BUFFER_FACTOR / nodes, largest + int(2 * total / total_gpus), (
            "offload_param=none, offload_optimizer=cpu, zero_init=1")
    elif strategy == "gpu":
        cpu, gpu, options = largest / 4 * 4 * gpus * ADDITIONAL_BUFFER_FACTOR, largest + int(18 * total / total_gpus), (
            "offload_param=none, offload_optimizer=none, zero_init=1")
    else:
        return None
    return {"host_bytes": int(cpu), "gpu_bytes": int(gpu), "options": options,
            "source": "deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs_all_cold (v0.16.2)"}
