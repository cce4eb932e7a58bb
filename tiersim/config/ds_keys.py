"""Which DeepSpeed config keys tiersim models, which change nothing it simulates, and which it
refuses: one entry per key of DeepSpeed 0.16 (``deepspeed/runtime/config.py``, ``zero/config.py``,
``zero/offload_config.py``, ``swap_tensor/aio_config.py``, ``activation_checkpointing/config.py``,
and the ``pipeline`` keys ``pipe/engine.py`` reads).

A key is addressed by its dotted path; ``SECTION.*`` stands for every key under ``SECTION``
that has no entry of its own. A refused key is accepted at the value tiersim models (the
``accepted`` values, DeepSpeed's default), so ``"overlap_comm": true`` runs and ``false`` is
refused naming the key. docs/guide/deepspeed-config.md lists this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Treatment = Literal["modelled", "ignored", "refused"]


@dataclass(frozen=True)
class Key:
    """How tiersim treats one DeepSpeed key, and why (``note``: the scenario field it sets, or
    what it would take to model it)."""

    treatment: Treatment
    note: str
    accepted: tuple[object, ...] = ()
    """For a refused key: the values that mean what tiersim models (DeepSpeed's default)."""


def _modelled(note: str) -> Key:
    return Key("modelled", note)


def _ignored(note: str) -> Key:
    return Key("ignored", note)


def _refused(note: str, *accepted: object) -> Key:
    return Key("refused", note, accepted)


_OFF = (False, 0, None)
"""A switch that is off (DeepSpeed reads 0 and a missing value as off)."""
_LOGGING = "logging, profiling or monitoring: no effect on one iteration's time or memory"
_TUNING = ("tiersim's ZeRO-3 schedule is fixed (each layer's parameters gathered whole, the next "
           "layer's prefetched, gradients reduce-scattered per layer): the value does not change it")

_PARTITIONED = ("true (DeepSpeed's default) splits each stage boundary's {what} over the tensor-parallel "
                "ranks and all-gathers it after, refused with tensor and pipeline parallelism both above 1; "
                "false sends it whole, as tiersim does")

KEYS: dict[str, Key] = {
    # batch (DeepSpeed's arithmetic: tiersim.config.ds_batch)
    "train_batch_size": _modelled("training.global_batch"),
    "train_micro_batch_size_per_gpu": _modelled("training.micro_batch"),
    "gradient_accumulation_steps": _modelled("training.global_batch / (micro_batch x data_parallel)"),
    # precision
    "fp16.enabled": _modelled("training.precision: fp16"),
    "bf16.enabled": _modelled("training.precision: bf16"),
    "bfloat16.enabled": _modelled("training.precision: bf16 (DeepSpeed's older spelling)"),
    "fp16.fp16_master_weights_and_grads": _refused("16-bit master weights and gradients", *_OFF),
    "fp16.*": _ignored("loss scaling: no effect on time or memory"),
    "bf16.immediate_grad_update": _refused("the bf16 optimizer's immediate gradient update", *_OFF),
    "bf16.*": _ignored("no effect on time or memory"),
    "bfloat16.*": _ignored("no effect on time or memory"),
    "amp.enabled": _refused("Apex AMP", *_OFF),
    "amp.*": _ignored("read only with amp.enabled"),
    "data_types.grad_accum_dtype": _modelled("training.grad_accum_dtype"),
    "communication_data_type": _refused("a collective dtype other than the training precision", None),
    "seq_parallel_comm_data_type": _ignored("read only with sequence parallelism"),
    # optimizer
    "optimizer.type": _modelled("Adam or AdamW (any other optimizer is refused)"),
    "optimizer.params.betas": _modelled("training.adam_beta1, training.adam_beta2"),
    "optimizer.params.lr": _ignored("learning rate: no effect on time or memory"),
    "optimizer.params.eps": _ignored("no effect on time or memory"),
    "optimizer.params.weight_decay": _ignored("no effect on time or memory"),
    "optimizer.params.bias_correction": _ignored("no effect on time or memory"),
    "optimizer.params.adam_w_mode": _ignored("AdamW or Adam: the same time and memory"),
    "optimizer.params.*": _refused("an optimizer parameter tiersim does not model"),
    "scheduler.*": _ignored("learning-rate schedule: no effect on time or memory"),
    "gradient_clipping": _ignored("the gradient norm is computed either way (overflow check)"),
    "zero_allow_untested_optimizer": _ignored("a permission, no effect on time or memory"),
    "zero_force_ds_cpu_optimizer": _ignored("a permission, no effect on time or memory"),
    # ZeRO
    "zero_optimization.stage": _modelled("training.zero_stage"),
    "zero_optimization.sub_group_size": _modelled("training.sub_group_size"),
    "zero_optimization.reduce_bucket_size": _modelled("training.reduce_bucket_size"),
    "zero_optimization.offload_optimizer.device": _modelled("strategies: cpu -> dram and cxl, nvme -> nvme "
                                                            "(stage 3 only), none -> gpu"),
    "zero_optimization.offload_optimizer.pin_memory": _modelled("hardware.pinned (DeepSpeed's default: false)"),
    "zero_optimization.offload_optimizer.buffer_count": _modelled("strategies.nvme.buffer_count"),
    "zero_optimization.offload_optimizer.pipeline_read": _modelled("strategies.nvme.pipeline_read"),
    "zero_optimization.offload_optimizer.pipeline_write": _modelled("strategies.nvme.pipeline_write"),
    "zero_optimization.offload_optimizer.ratio": _modelled("strategies.dram.ratio and strategies.cxl.ratio "
                                                           "(partial offload, ZeRO-3, device cpu)"),
    "zero_optimization.offload_optimizer.nvme_path": _ignored("the path; the drives are hardware.nvme"),
    "zero_optimization.offload_optimizer.fast_init": _ignored("initialization only"),
    "zero_optimization.offload_param.device": _modelled("strategies.NAME.offload_param.device: cpu or nvme "
                                                        "(stage 3 only); none: no offload_param block"),
    "zero_optimization.offload_param.buffer_count": _modelled("strategies.NAME.offload_param.buffer_count"),
    "zero_optimization.offload_param.buffer_size": _modelled("strategies.NAME.offload_param.buffer_size"),
    "zero_optimization.offload_param.max_in_cpu": _modelled("strategies.NAME.offload_param.max_in_cpu"),
    "zero_optimization.offload_param.pin_memory": _modelled("strategies.NAME.offload_param.pin_memory"),
    "zero_optimization.offload_param.nvme_path": _ignored("the path; the drives are hardware.nvme"),
    "zero_optimization.overlap_comm": _modelled("training.overlap_comm (DeepSpeed's default: true at ZeRO-3, "
                                                "false below); false at ZeRO-3 refused"),
    "zero_optimization.contiguous_gradients": _refused("gradients not copied to a contiguous buffer", True),
    "zero_optimization.reduce_scatter": _refused("all-reduce instead of reduce-scatter", True),
    "zero_optimization.allgather_partitions": _refused("broadcasts instead of all-gather", True),
    "zero_optimization.allgather_bucket_size": _ignored(_TUNING),
    "zero_optimization.use_multi_rank_bucket_allreduce": _ignored(_TUNING),
    "zero_optimization.stage3_prefetch_bucket_size": _modelled("training.prefetch_bucket_size (read with "
                                                               "offload_param)"),
    "zero_optimization.stage3_param_persistence_threshold": _ignored(_TUNING),
    "zero_optimization.stage3_model_persistence_threshold": _ignored(_TUNING),
    "zero_optimization.stage3_max_live_parameters": _ignored(_TUNING),
    "zero_optimization.stage3_max_reuse_distance": _ignored(_TUNING),
    "zero_optimization.stage3_module_granularity_threshold": _ignored(_TUNING),
    "zero_optimization.stage3_use_all_reduce_for_fetch_params": _refused("all-reduce to fetch parameters", *_OFF),
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": _ignored("checkpointing only"),
    "zero_optimization.stage3_gather_fp16_weights_on_model_save": _ignored("checkpointing only"),
    "zero_optimization.load_from_fp32_weights": _ignored("checkpointing only"),
    "zero_optimization.elastic_checkpoint": _ignored("checkpointing only"),
    "zero_optimization.pipeline_loading_checkpoint": _ignored("checkpointing only"),
    "zero_optimization.ignore_unused_parameters": _ignored("no effect on a model that uses all its parameters"),
    "zero_optimization.round_robin_gradients": _ignored("the order of ZeRO-1/2's gradient copies: the same bytes"),
    "zero_optimization.memory_efficient_linear": _ignored("the same GEMMs"),
    "zero_optimization.override_module_apply": _ignored("initialization only"),
    "zero_optimization.cpu_offload_use_pin_memory": _ignored("deprecated; DeepSpeed does not read it"),
    "zero_optimization.cpu_offload": _refused("deprecated optimizer offload switch (write offload_optimizer)",
                                              *_OFF),
    "zero_optimization.cpu_offload_param": _refused("parameter offload (deprecated switch)", *_OFF),
    "zero_optimization.legacy_stage1": _refused("the legacy ZeRO-1 implementation", *_OFF),
    "zero_optimization.zero_hpz_partition_size": _refused("ZeRO++ hierarchical partitioning", 1),
    "zero_optimization.zero_quantized_weights": _refused("ZeRO++ quantized weights", *_OFF),
    "zero_optimization.zero_quantized_nontrainable_weights": _refused("ZeRO++ quantized weights", *_OFF),
    "zero_optimization.zero_quantized_gradients": _refused("ZeRO++ quantized gradients", *_OFF),
    "zero_optimization.zeropp_loco_param.*": _refused("LoCo-ZeRO++"),
    "zero_optimization.mics_shard_size": _refused("MiCS sharding", -1),
    "zero_optimization.mics_hierarchical_params_gather": _refused("MiCS sharding", *_OFF),
    "zero_optimization.zenflow.*": _refused("ZenFlow (stall-free offload)"),
    "zenflow.*": _refused("ZenFlow (stall-free offload)"),
    # NVMe I/O
    "aio.block_size": _modelled("strategies.nvme.block_size"),
    "aio.queue_depth": _modelled("strategies.nvme.queue_depth"),
    "aio.thread_count": _modelled("strategies.nvme.thread_count"),
    "aio.single_submit": _refused("one request per submission", *_OFF),
    "aio.overlap_events": _refused("aio without overlapped events", True, None),
    "aio.use_gds": _refused("GPUDirect Storage", *_OFF),
    # activation checkpointing (DeepSpeed's API; training.activation_checkpointing says whether)
    "activation_checkpointing.cpu_checkpointing": _modelled("training.cpu_checkpointing"),
    "activation_checkpointing.partition_activations": _refused("activations partitioned over model-parallel "
                                                               "ranks", *_OFF),
    "activation_checkpointing.contiguous_memory_optimization": _refused("contiguous checkpoint buffers", *_OFF),
    "activation_checkpointing.number_checkpoints": _ignored("read only with contiguous_memory_optimization"),
    "activation_checkpointing.synchronize_checkpoint_boundary": _ignored("a device synchronize per layer: "
                                                                         "tiersim's layers end in order anyway"),
    "activation_checkpointing.profile": _ignored(_LOGGING),
    # DeepSpeed's pipeline engine (``get_pipeline_config``; pipe/engine.py reads the keys it uses):
    # the stages are the model's, training.pipeline_parallel
    "pipeline.stages": _ignored("read by no DeepSpeed engine: the stages are the PipelineModule's "
                                "(training.pipeline_parallel)"),
    "pipeline.partition": _ignored("read by no DeepSpeed engine: the split is the PipelineModule's "
                                   "partition_method (tiersim splits the layers uniformly, as Megatron does)"),
    "pipeline.seed_layers": _ignored("read by no DeepSpeed engine; a random seed per layer: no effect on time "
                                     "or memory"),
    "pipeline.activation_checkpoint_interval": _refused("the pipeline engine's own checkpointing every N layers "
                                                        "(tiersim's is training.activation_checkpointing)", 0),
    "pipeline.use_reentrant": _ignored("read only with activation_checkpoint_interval"),
    "pipeline.pipe_partitioned": _modelled(_PARTITIONED.format(what="activation")),
    "pipeline.grad_partitioned": _modelled(_PARTITIONED.format(what="gradient")),
    # parallelism and training methods tiersim does not simulate
    "tensor_parallel.*": _refused("DeepSpeed's AutoTP tensor parallelism (Megatron's is "
                                  "training.tensor_parallel)"),
    "sequence_parallel_size": _refused("DeepSpeed-Ulysses sequence parallelism (Megatron's is "
                                       "training.sequence_parallel)", 1),
    "use_data_before_expert_parallelism": _refused("expert-data-parallel groups laid out data-first", *_OFF),
    "moe.*": _refused("a DeepSpeed-MoE section (DeepSpeed 0.16 reads none: the experts, top-k and expert "
                      "parallelism are arguments of deepspeed.moe.layer.MoE, Megatron-DeepSpeed's --num-experts, "
                      "--topk, --moe-expert-parallel-size; in tiersim model.experts, model.experts_per_token, "
                      "training.expert_parallel)"),
    "sparse_attention.*": _refused("sparse attention"),
    "sparse_gradients": _refused("sparse gradients", *_OFF),
    "progressive_layer_drop.enabled": _refused("progressive layer drop", *_OFF),
    "progressive_layer_drop.*": _ignored("read only with progressive_layer_drop.enabled"),
    "curriculum_learning.enabled": _refused("curriculum learning", *_OFF),
    "curriculum_learning.*": _ignored("read only with curriculum_learning.enabled"),
    "data_efficiency.enabled": _refused("data efficiency (sampling, routing)", *_OFF),
    "data_efficiency.*": _ignored("read only with data_efficiency.enabled"),
    "compression_training.*": _refused("compression training"),
    "weight_quantization.*": _refused("weight quantization"),
    "eigenvalue.enabled": _refused("eigenvalue computation", *_OFF),
    "eigenvalue.*": _ignored("read only with eigenvalue.enabled"),
    "hybrid_engine.enabled": _refused("the hybrid (RLHF) engine", *_OFF),
    "hybrid_engine.*": _ignored("read only with hybrid_engine.enabled"),
    "elasticity.enabled": _refused("elastic batch sizes", *_OFF),
    "elasticity.*": _ignored("read only with elasticity.enabled"),
    "compile.enabled": _refused("torch.compile", *_OFF),
    "compile.*": _ignored("read only with compile.enabled"),
    "torch_autocast.enabled": _refused("torch autocast", *_OFF),
    "torch_autocast.*": _ignored("read only with torch_autocast.enabled"),
    "disable_allgather": _refused("all-gather disabled", *_OFF),
    "graph_harvesting": _refused("CUDA graph harvesting", *_OFF),
    # no effect on one iteration
    "steps_per_print": _ignored(_LOGGING),
    "wall_clock_breakdown": _ignored(_LOGGING),
    "memory_breakdown": _ignored(_LOGGING),
    "dump_state": _ignored(_LOGGING),
    "flops_profiler.*": _ignored(_LOGGING),
    "comms_logger.*": _ignored(_LOGGING),
    "timers.*": _ignored(_LOGGING),
    "tensorboard.*": _ignored(_LOGGING),
    "wandb.*": _ignored(_LOGGING),
    "csv_monitor.*": _ignored(_LOGGING),
    "comet.*": _ignored(_LOGGING),
    "autotuning.*": _ignored("read by the autotuner, not by a training run"),
    "checkpoint.*": _ignored("checkpointing only"),
    "nebula.*": _ignored("checkpointing only"),
    "dataloader_drop_last": _ignored("the data loader, not the step"),
    "prescale_gradients": _ignored("one scaling of the gradients: negligible"),
    "gradient_predivide_factor": _ignored("one scaling of the gradients: negligible"),
    "vocabulary_size": _ignored("read for a warning only; the vocabulary is model.vocab"),
}


def lookup(path: str) -> Key | None:
    """The entry for dotted ``path``: its own, else its nearest ``SECTION.*``; None: unknown."""
    if path in KEYS:
        return KEYS[path]
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        found = KEYS.get(".".join(parts[:end]) + ".*")
        if found is not None:
            return found
    return None
