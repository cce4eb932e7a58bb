"""Workload model: a transformer + training settings -> counts of parameters, FLOPs and bytes.

This module knows nothing about SimPy, devices or strategies. Units: bytes, FLOPs, elements.

Conventions (Llama-style decoder, one rank, one micro-batch unless stated):

* Parameters per layer: q and o are ``hidden*hidden``; k and v are ``hidden*kv_heads*head_dim``;
  the FFN is ``3*hidden*ffn`` (SwiGLU: gate, up, down) or ``2*hidden*ffn`` (GELU: up, down);
  two norms of ``hidden`` (RMSNorm) or ``2*hidden`` (LayerNorm weight + bias); with ``bias``
  every linear layer of the decoder has a bias (the LM head never does). The model adds an
  embedding ``vocab*hidden``, a final norm and, unless tied, an LM head ``vocab*hidden``.
* FLOPs: 2 per multiply-accumulate. A matmul over ``T`` tokens with ``P`` weights costs
  ``2*T*P``. Attention scores and values cost ``2 * 2 * mb * seq^2 * hidden`` per layer,
  counted in full (not halved for causality), as Megatron-LM does. Norms, biases, softmax and
  activations are not counted. The embedding lookup costs 0. Backward = 2x forward.
  Recompute under activation checkpointing = the forward of the decoder layers (not the head).
  These FLOPs are the model's (MFU); what the GPU runs, pass by pass, is listed as GEMM shapes
  and memory-bound bytes by ``tiersim.layer_kernels`` (``LayerWork.forward_kernels``, ...).
* Activations (16-bit): Korthikanti et al. 2022, ``seq*mb*hidden*(34 + 5*heads*seq/hidden)``
  bytes per layer. With flash attention the ``5*heads*seq/hidden`` term (the materialised
  ``s x s`` matrices) is dropped: ``34*seq*mb*hidden``. Without it a layer also keeps, per
  element of the ``mb*heads x s x s`` scores (``layer_kernels.score_bytes_kept``; a rank's
  ``heads/tp``), the 16-bit softmax output and, with an attention dropout, its 1-byte mask and
  16-bit output: 2 bytes, or Korthikanti's 5. With checkpointing a layer keeps only its 16-bit
  input, ``2*seq*mb*hidden``, and that full set is its working set while it is recomputed.
* Tensor parallelism over ``tp`` ranks (Megatron's column and row split, ``tiersim.projections``):
  a rank holds ``1/tp`` of each split projection and of the embedding's and LM head's rows, the
  norms whole; its FLOPs are its share; its activations are Korthikanti et al.'s Table 2,
  ``seq*mb*hidden*(10 + 24/tp)`` (the norms' and dropouts' inputs whole on every rank) or, with
  sequence parallelism, ``34/tp``; the checkpointed input is split only with sequence
  parallelism. Everything per rank (``LayerWork``, ``TrainingStep``) is then one rank's share.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Literal

from tiersim.config.deepspeed_version import DEFAULT_VERSION, check_version
from tiersim.config.schema import integer, number
from tiersim.errors import ConfigError
from tiersim.layer_kernels import (
    NO_KERNELS,
    PassKernels,
    decoder_passes,
    embedding_passes,
    head_passes,
    score_bytes_kept,
    sequence_tokens,
    vocab_share,
)
from tiersim.projections import Linear, attention_linears, attention_norms, ffn_linears, is_moe_layer

MAX_CAPACITY_FACTOR = 64.0
"""Largest ``moe_capacity_factor`` read: past ``experts / experts_per_token`` every token fits anyway."""
_KORTHIKANTI_BYTES_PER_ELEMENT = 34
"""Korthikanti et al. 2022 activation bytes per (token x hidden) per layer, flash attention."""
_KORTHIKANTI_REPLICATED_BYTES = 10
"""Of those, the bytes tensor parallelism leaves whole on every rank without sequence parallelism
(Korthikanti et al. 2022, Table 2: the norms' and dropouts' inputs, ``10 + 24/t``)."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer's shape (scenario section ``model:``; a catalogue name or a
    Hugging Face ``config.json`` is turned into these fields by ``tiersim.config.hf_config``)."""

    name: str = "custom"
    """The model's name, shown in results."""
    layers: int = integer(gt=0, doc="decoder layers")
    hidden: int = integer(gt=0, doc="hidden size (elements per token)")
    heads: int = integer(gt=0, doc="attention heads; hidden must be a multiple of them unless head_dim is given")
    kv_heads: int | None = integer(None, gt=0, doc="key/value heads (grouped-query attention), heads must be a "
                                                   "multiple of them; None -> = heads (multi-head attention)")
    head_dim: int | None = integer(None, gt=0, doc="elements per attention head of q and k; None -> hidden / heads")
    ffn: int = integer(gt=0, doc="FFN intermediate size (elements) of the dense layers")
    vocab: int = integer(32000, gt=0, doc="vocabulary (tokens); the embedding and the LM head have vocab x hidden "
                                          "parameters each")
    activation: Literal["swiglu", "geglu", "gelu"] = "swiglu"
    """The FFN: gated, SwiGLU or GeGLU (gate, up, down: ``3*hidden*ffn`` parameters), or GELU (up,
    down: ``2*hidden*ffn``)."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """RMSNorm (``hidden`` parameters per norm) or LayerNorm (weight and bias, ``2*hidden``)."""
    bias: bool = False
    """Every linear layer of the decoder has a bias (the LM head never does)."""
    qkv_bias: bool = False
    """Only the q, k and v projections have biases (Qwen2)."""
    tied_embeddings: bool = False
    """The LM head shares the embedding's weights (no separate ``vocab*hidden`` head)."""
    experts: int = integer(0, ge=0, doc="routed experts of a mixture-of-experts FFN; 0: every layer dense")
    experts_per_token: int = integer(0, ge=0, doc="routed experts each token runs (top-k), 1 to experts")
    expert_ffn: int | None = integer(None, gt=0, doc="intermediate size of one expert (elements); None -> ffn")
    shared_experts: int = integer(0, ge=0, doc="experts of expert_ffn that every token runs besides its top-k")
    dense_layers: int = integer(0, ge=0, doc="first decoder layers with a dense FFN of ffn before the "
                                             "mixture-of-experts ones")
    moe_interval: int = integer(1, gt=0, doc="past dense_layers, layer i (from 0) has experts when i + 1 is a "
                                             "multiple of it; the others are dense")
    q_lora_rank: int | None = integer(None, gt=0, doc="multi-head latent attention: width q is projected down to; "
                                                      "None -> q projected straight up")
    kv_lora_rank: int | None = integer(None, gt=0, doc="multi-head latent attention: width k and v are projected "
                                                       "down to; None -> no latent attention")
    rope_head_dim: int = integer(0, ge=0, doc="multi-head latent attention: elements of head_dim that carry the "
                                              "rotary embedding in a key shared by all heads")
    v_head_dim: int | None = integer(None, gt=0, doc="elements per head of v; None -> head_dim")

    @property
    def kv_head_count(self) -> int:
        """Key/value heads (``heads`` when ``kv_heads`` is None)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_size(self) -> int:
        """Elements per attention head of q and k (``head_dim``, else ``hidden / heads``)."""
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def v_head_size(self) -> int:
        """Elements per attention head of v."""
        return self.head_size if self.v_head_dim is None else self.v_head_dim

    @property
    def expert_width(self) -> int:
        """Intermediate size of one expert (``expert_ffn``, else ``ffn``)."""
        return self.ffn if self.expert_ffn is None else self.expert_ffn

    @property
    def gated(self) -> bool:
        """Whether the FFN is gated (SwiGLU, GeGLU: three matrices)."""
        return self.activation != "gelu"

    def validate(self, source: str, path: str) -> None:
        """hidden must split into heads (unless head_dim is given), heads into kv groups; the
        mixture-of-experts and latent-attention fields must fit together."""
        if self.head_dim is None and self.hidden % self.heads:
            raise ConfigError(
                source, _join(path, "hidden"), f"hidden {self.hidden} is not divisible by heads {self.heads}"
            )
        if self.heads % self.kv_head_count:
            raise ConfigError(
                source,
                _join(path, "kv_heads"),
                f"heads {self.heads} is not divisible by kv_heads {self.kv_head_count}",
            )
        problem = self._moe_problem() or self._latent_problem()
        if problem is not None:
            raise ConfigError(source, _join(path, problem[0]), problem[1])

    def _moe_problem(self) -> tuple[str, str] | None:
        """(field, message) of the first mixture-of-experts field that does not fit, or None."""
        if self.experts == 0:
            used = [name for name in ("experts_per_token", "shared_experts", "dense_layers")
                    if getattr(self, name)] + (["expert_ffn"] if self.expert_ffn is not None else [])
            return (used[0], "is a mixture-of-experts field; set experts too") if used else None
        if not 1 <= self.experts_per_token <= self.experts:
            return "experts_per_token", f"must be 1 to experts ({self.experts}), got {self.experts_per_token}"
        if self.dense_layers >= self.layers:
            return "dense_layers", f"{self.dense_layers} leaves none of the {self.layers} layers to the experts"
        return None

    def _latent_problem(self) -> tuple[str, str] | None:
        """(field, message) of the first latent-attention field that does not fit, or None."""
        if self.kv_lora_rank is None:
            used = "q_lora_rank" if self.q_lora_rank is not None else "rope_head_dim" if self.rope_head_dim else None
            return (used, "is a latent-attention field; set kv_lora_rank too") if used else None
        if self.kv_head_count != self.heads:
            return "kv_heads", "latent attention has a key and a value per head: kv_heads must equal heads"
        if self.rope_head_dim >= self.head_size:
            return "rope_head_dim", f"must be less than the head size {self.head_size}, got {self.rope_head_dim}"
        return None


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """Batch, parallelism and ZeRO settings (scenario section ``training:``)."""

    seq_len: int = integer(2048, gt=0, doc="tokens per sequence")
    micro_batch: int = integer(1, gt=0, doc="sequences per rank and micro-step (DeepSpeed "
                                           "train_micro_batch_size_per_gpu)")
    global_batch: int = integer(gt=0, doc="sequences per optimizer step, all ranks (DeepSpeed train_batch_size); "
                                          "a multiple of micro_batch x data_parallel")
    data_parallel: int = integer(1, gt=0, doc="data-parallel ranks: hardware.nodes x hardware.gpus / "
                                              "(tensor_parallel x pipeline_parallel)")
    tensor_parallel: int = integer(1, gt=0, doc="GPUs each layer's matrices are split over, within a node "
                                                "(Megatron --tensor-model-parallel-size)")
    pipeline_parallel: int = integer(1, gt=0, doc="pipeline stages the layers are split over (Megatron "
                                                  "--pipeline-model-parallel-size)")
    virtual_pipeline: int = integer(1, gt=0, doc="model chunks each pipeline stage holds and interleaves (Megatron "
                                                 "--num-virtual-stages-per-pipeline-rank, or model.layers / "
                                                 "(pipeline_parallel x --num-layers-per-virtual-pipeline-stage)); "
                                                 "1: no interleaving")
    expert_parallel: int = integer(1, gt=0, doc="ranks each mixture-of-experts layer's experts are split over, "
                                                "experts / expert_parallel each (DeepSpeed-MoE ep_size, "
                                                "Megatron-DeepSpeed --moe-expert-parallel-size); divides "
                                                "data_parallel and model.experts")
    moe_capacity_factor: float = number(1.0, gt=0, le=MAX_CAPACITY_FACTOR,
                                        doc="slots an expert computes per token routed to it on average "
                                            "(DeepSpeed-MoE capacity_factor, Megatron-DeepSpeed "
                                            "--moe-train-capacity-factor); its GEMMs and all-to-alls run "
                                            "over the padded capacity")
    sequence_parallel: bool = False
    """Megatron's sequence parallelism (``--sequence-parallel``): with ``tensor_parallel`` > 1 the
    norms' and dropouts' activations are split over the tensor-parallel ranks too."""
    precision: Literal["bf16", "fp16"] = "bf16"
    """16-bit type of the GPU's parameters, gradients and activations (2 bytes either way)."""
    grad_accum_dtype: Literal["bf16", "fp16", "fp32"] | None = None
    """The dtype of the reduced gradient partitions kept between micro-steps (DeepSpeed
    ``data_types.grad_accum_dtype``); None: the 16-bit precision, DeepSpeed's default under ZeRO."""
    activation_checkpointing: bool = True
    """Each decoder layer keeps only its 16-bit input, and backward recomputes its forward."""
    cpu_checkpointing: bool = False
    """Those inputs are kept in host memory (DeepSpeed ``activation_checkpointing.cpu_checkpointing``):
    copied D2H after each layer's forward and back H2D before its recomputation."""
    zero_stage: int = integer(3, ge=0, le=3, doc="DeepSpeed ZeRO stage: 1 partitions the optimizer state over the "
                                                 "ranks, 2 also the gradients, 3 also the parameters; 0 none")
    sub_group_size: int = integer(1_000_000_000, gt=0, doc="elements per optimizer sub-group (DeepSpeed "
                                                           "sub_group_size, default 1e9); ZeRO-3 adds whole tensor "
                                                           "partitions to a sub-group until it holds this many")
    reduce_bucket_size: int = integer(500_000_000, gt=0, doc="elements per gradient reduce bucket (DeepSpeed "
                                                             "reduce_bucket_size); sizes the bucket's buffers")
    overlap_comm: bool = True
    """Gradient reduction and offload copies on a stream of their own beside the compute
    (DeepSpeed ``zero_optimization.overlap_comm``; ZeRO-1/2 then keep two reduce buckets). False,
    DeepSpeed's default below ZeRO-3, is modelled at ZeRO-1/2: one bucket, and the copies on the
    compute stream, which the backward waits for."""
    prefetch_bucket_size: int = integer(50_000_000, ge=0, doc="elements of parameters ZeRO-3 fetches ahead of their "
                                                              "use (DeepSpeed stage3_prefetch_bucket_size); read for "
                                                              "offloaded parameters (offload_param) only: the layers "
                                                              "fetched ahead")
    adam_beta1: float = number(0.9, gt=0, le=1, doc="Adam's first-moment decay, as DeepSpeed configs and "
                                                    "logs give it; time and memory do not depend on it")
    adam_beta2: float = number(0.999, gt=0, le=1, doc="Adam's second-moment decay, as DeepSpeed configs and "
                                                      "logs give it; time and memory do not depend on it")
    flash_attention: bool = True
    """Fused attention (Megatron ``--use-flash-attn``); without it the score matrix is written
    to and read from HBM by the softmax and its dropout, and a layer keeps the softmax output
    (and the dropout's mask and output) for its backward."""
    masked_softmax_fusion: bool = True
    """Megatron's fused scale-mask-softmax kernel (``--masked-softmax-fusion``, Megatron's
    default since 2020); false: the unfused scale, mask multiply and subtract of 2019-2020
    Megatron-LM (DeepSpeedExamples' ``GPT2ParallelSelfAttention``), each a pass over the score
    matrix (without flash attention)."""
    attention_dropout: float = number(0.0, ge=0, le=0.99, doc="dropout probability of the attention "
                                                              "probabilities (Megatron --attention-dropout; "
                                                              "Llama-style runs set 0); above 0 and without "
                                                              "flash attention the dropout's kernels run over "
                                                              "the score matrix and keep its mask and output")
    deepspeed_version: str = DEFAULT_VERSION
    """The DeepSpeed release whose code paths the strategies follow (``tiersim.config.deepspeed_version``)."""

    def validate(self, source: str, path: str) -> None:
        """global_batch must be a whole number of micro-batches on every rank; a DeepSpeed
        version tiersim models."""
        check_version(self.deepspeed_version, source, _join(path, "deepspeed_version"))
        if not self.overlap_comm and self.zero_stage >= 3:
            raise ConfigError(source, _join(path, "overlap_comm"),
                              "false is modelled at ZeRO stage 1 and 2 only (DeepSpeed's ZeRO-3 default is true)")
        if self.cpu_checkpointing and not self.activation_checkpointing:
            raise ConfigError(source, _join(path, "cpu_checkpointing"),
                              "true needs activation_checkpointing: true (it keeps the checkpoints on the host)")
        problem = self._expert_parallel_problem()
        if problem is not None:
            raise ConfigError(source, _join(path, problem[0]), problem[1])
        if self.pipeline_parallel > 1 and self.zero_stage >= 2:
            raise ConfigError(source, _join(path, "zero_stage"),
                              f"{self.zero_stage} with pipeline_parallel {self.pipeline_parallel}: DeepSpeed's "
                              "pipeline engine refuses ZeRO-2 and ZeRO-3 (use zero_stage 0 or 1)")
        if self.sequence_parallel and self.seq_len % self.tensor_parallel:
            raise ConfigError(source, _join(path, "seq_len"),
                              f"{self.seq_len} is not a multiple of tensor_parallel {self.tensor_parallel}: sequence "
                              "parallelism splits each sequence over the tensor-parallel ranks")
        per_step = self.micro_batch * self.data_parallel
        if self.global_batch % per_step:
            raise ConfigError(
                source,
                _join(path, "global_batch"),
                f"global_batch {self.global_batch} is not divisible by micro_batch * data_parallel"
                f" = {self.micro_batch} * {self.data_parallel} = {per_step}",
            )

    @property
    def expert_data_parallel(self) -> int:
        """Ranks each expert's parameters are partitioned and reduced over (DeepSpeed's expert
        data-parallel group, ``data_parallel / expert_parallel``)."""
        return self.data_parallel // self.expert_parallel

    def _expert_parallel_problem(self) -> tuple[str, str] | None:
        """(field, message) where expert parallelism does not fit the other settings, or None."""
        ep = self.expert_parallel
        if ep == 1:
            return None
        if self.data_parallel % ep:
            return "expert_parallel", (f"{ep} does not divide data_parallel {self.data_parallel}: "
                                       "DeepSpeed's expert-parallel groups split the data-parallel ranks")
        if self.zero_stage >= 3:
            return "zero_stage", (f"3 with expert_parallel {ep}: DeepSpeed asserts 'MoE not supported with "
                                  "Stage 3' (use zero_stage 0 to 2)")
        if self.tensor_parallel > 1:
            return "expert_parallel", (f"{ep} with tensor_parallel {self.tensor_parallel}: expert parallelism "
                                       "beside tensor parallelism is not modelled yet")
        return None


def check_expert_parallel(model: ModelSpec, training: TrainingSpec, source: str, path: str = "training") -> None:
    """``expert_parallel`` above 1 needs routed experts, a whole number per rank; a capacity
    factor, routed experts."""
    ep = training.expert_parallel
    if model.experts == 0 and training.moe_capacity_factor != 1.0:
        raise ConfigError(source, _join(path, "moe_capacity_factor"),
                          f"{training.moe_capacity_factor} but model {model.name} has no experts (model.experts is 0)")
    if ep == 1:
        return
    if model.experts == 0:
        raise ConfigError(source, _join(path, "expert_parallel"),
                          f"{ep} but model {model.name} has no experts (model.experts is 0)")
    if model.experts % ep:
        raise ConfigError(source, _join(path, "expert_parallel"),
                          f"{ep} does not divide model.experts {model.experts}: each rank holds "
                          "experts / expert_parallel of them (DeepSpeed-MoE asserts it)")


def check_tensor_split(model: ModelSpec, training: TrainingSpec, source: str, path: str = "training") -> None:
    """Tensor parallelism must split the heads, the key/value heads and the FFN widths evenly, as
    Megatron-LM's ``divide`` asserts (a ConfigError at ``tensor_parallel`` naming the width)."""
    tp = training.tensor_parallel
    widths = {"model.heads": model.heads, "model.kv_heads": model.kv_head_count, "model.ffn": model.ffn}
    if model.experts:
        widths["model.expert_ffn"] = model.expert_width
    for name, width in widths.items():
        if width % tp:
            raise ConfigError(source, _join(path, "tensor_parallel"),
                              f"{tp} does not divide {name} {width}: Megatron splits it evenly over the "
                              "tensor-parallel ranks")


@dataclass(frozen=True)
class LayerWork:
    """One unit of GPU work, per micro-batch, per rank (FLOPs, bytes; params in elements).

    ``tensors`` are the element counts of the layer's parameter tensors in the order the model
    registers them (Megatron-DeepSpeed: input norm, fused QKV, attention output, post-attention
    norm, fused FFN input, FFN output, each followed by its bias), which is the order ZeRO
    partitions them and forms optimizer sub-groups."""

    name: str
    params: int
    forward_flops: float
    backward_flops: float
    activation_bytes: int
    working_bytes: int
    tensors: tuple[int, ...] = ()
    checkpointed: bool = False
    """Whether backward recomputes this layer's forward (activation checkpointing)."""
    expert_tensors: int = 0
    """How many of ``tensors``, the last ones, are its experts', partitioned and reduced over the
    expert data-parallel group (expert parallelism: the rank's experts only)."""
    forward_kernels: PassKernels = NO_KERNELS
    """The forward's GEMMs and memory-bound bytes (``tiersim.layer_kernels``); a recompute runs it again."""
    backward_kernels: PassKernels = NO_KERNELS
    """The backward's GEMMs and memory-bound bytes."""

    @property
    def expert_params(self) -> int:
        """Elements of the layer's expert tensors (``expert_tensors``) the rank holds."""
        return sum(self.tensors[len(self.tensors) - self.expert_tensors:]) if self.expert_tensors else 0

    def partitions(self, dp: int, expert_dp: int) -> tuple[int, ...]:
        """Elements of each of the layer's tensors one rank owns when each is partitioned on its
        own (``ceil``, the last parts padded): over ``dp`` ranks, the expert tensors over ``expert_dp``."""
        dense = len(self.tensors) - self.expert_tensors
        return tuple(-(-numel // (dp if i < dense else expert_dp)) for i, numel in enumerate(self.tensors))

    @property
    def recompute_flops(self) -> float:
        """FLOPs the backward spends recomputing the forward: all of it when checkpointed."""
        return self.forward_flops if self.checkpointed else 0.0


@dataclass(frozen=True)
class SubGroup:
    """One optimizer sub-group of one rank's partition (``numel`` elements)."""

    index: int
    numel: int


@dataclass(frozen=True)
class TrainingStep:
    """Everything one optimizer step costs on one rank, in elements, FLOPs and bytes."""

    model: ModelSpec
    training: TrainingSpec
    total_params: int
    rank_params: int
    micro_steps: int
    tokens_per_micro_batch: int
    layers: tuple[LayerWork, ...]
    subgroups: tuple[SubGroup, ...]
    lp_bytes: int = 2
    fp32_bytes: int = 4
    stage: int = 0
    """The pipeline stage (from 0) whose layers ``layers`` are (``stage_steps``); 0 without
    pipeline parallelism, when they are all the model's."""

    @property
    def last_stage(self) -> bool:
        """Whether this step's stage holds the LM head and the loss (the last, or the only one)."""
        return self.stage == self.training.pipeline_parallel - 1

    @property
    def in_flight(self) -> int:
        """Micro-batches whose checkpoints the stage holds at once: 1F1B's stage ``s`` of ``p``
        keeps ``min(p - s, micro_steps)`` (DeepSpeed ``TrainSchedule.num_pipe_buffers``);
        interleaved over ``v`` model chunks, each a chunk's, Megatron's warm-up forwards and
        one, ``min(2 (p - s - 1) + (v - 1) p + 1, v x micro_steps)``; without pipeline
        parallelism, one."""
        stages, chunks = self.training.pipeline_parallel, self.training.virtual_pipeline
        if chunks == 1:
            return min(stages - self.stage, self.micro_steps)
        return min(2 * (stages - self.stage - 1) + (chunks - 1) * stages + 1, chunks * self.micro_steps)

    def in_flight_bytes(self, per_micro_batch: int) -> int:
        """Bytes held of the stage's ``per_micro_batch`` bytes (its checkpoints of one micro-batch)
        for the micro-batches (or interleaved chunks, each ``1 / virtual_pipeline`` of them) in
        flight (``in_flight``)."""
        return self.in_flight * per_micro_batch // self.training.virtual_pipeline

    @functools.cached_property
    def layer_shapes(self) -> tuple[int, ...]:
        """For each layer, a number naming its shape (equal for layers that cost the same)."""
        shapes: dict[LayerWork, int] = {}
        return tuple(shapes.setdefault(replace(layer, name=""), len(shapes)) for layer in self.layers)

    @functools.cached_property
    def largest_tensor(self) -> int:
        """Elements of the model's largest tensor."""
        return max(max(layer.tensors) for layer in self.layers)

    @functools.cached_property
    def subgroup_sizes(self) -> tuple[int, ...]:
        """Each optimizer sub-group's elements (sub-groups of equal size update alike)."""
        return tuple(group.numel for group in self.subgroups)

    @functools.cached_property
    def rank_partitions(self) -> tuple[int, ...]:
        """For each layer, the elements of its tensors one rank owns under ZeRO-3 (each tensor
        partitioned over the data-parallel ranks, an expert's over the expert data-parallel ones,
        the last parts padded)."""
        dp, edp = self.training.data_parallel, self.training.expert_data_parallel
        return tuple(sum(layer.partitions(dp, edp)) for layer in self.layers)

    @functools.cached_property
    def largest_subgroup(self) -> int:
        """Elements of the largest optimizer sub-group."""
        return max(self.subgroup_sizes)

    @functools.cached_property
    def largest_layer(self) -> int:
        """Parameters of the largest layer."""
        return max(layer.params for layer in self.layers)

    @property
    def grad_accum_bytes(self) -> int:
        """Bytes per element of the gradient partition accumulated across micro-steps."""
        return self.fp32_bytes if self.training.grad_accum_dtype == "fp32" else self.lp_bytes

    def optimizer_state_bytes(self) -> int:
        """Bytes of fp32 master params + Adam m + v owned by one rank."""
        return self.rank_params * 3 * self.fp32_bytes

    def fp32_grad_bytes(self) -> int:
        """Bytes of fp32 gradients owned by one rank (fed to the optimizer)."""
        return self.rank_params * self.fp32_bytes

    @functools.cached_property
    def shard_params(self) -> int:
        """Parameters of this rank's layers (its pipeline stage's) that it holds: its
        tensor-parallel share (all of them at ``tensor_parallel`` 1) and, with expert parallelism,
        only its own experts, which ZeRO partitions over the data-parallel ranks (the experts over
        the expert data-parallel ones)."""
        return sum(layer.params for layer in self.layers)

    def lp_param_bytes_on_gpu(self) -> int:
        """Bytes of 16-bit params resident on one GPU (partitioned only for ZeRO-3)."""
        count = self.rank_params if self.training.zero_stage >= 3 else self.shard_params
        return count * self.lp_bytes

    def lp_grad_bytes_on_gpu(self) -> int:
        """Bytes of 16-bit grads resident on one GPU (partitioned for ZeRO-2 and -3)."""
        count = self.rank_params if self.training.zero_stage >= 2 else self.shard_params
        return count * self.lp_bytes

    def logits_bytes(self) -> int:
        """Bytes of one rank's fp32 logits of one micro-batch (``seq*mb*vocab/tp*4``) on the stage
        with the LM head (0 on the other pipeline stages)."""
        vocab = vocab_share(self.model, self.training.tensor_parallel)
        return self.tokens_per_micro_batch * vocab * self.fp32_bytes if self.last_stage else 0

    @functools.cached_property
    def kept_activation_bytes(self) -> int:
        """Activation bytes the layers keep on one GPU at the start of the backward: every
        checkpoint, for each micro-batch in flight (``in_flight_bytes``), or with
        ``cpu_checkpointing`` only the one being recomputed."""
        kept = self.in_flight_bytes(sum(layer.activation_bytes for layer in self.layers))
        if self.training.cpu_checkpointing:  # on the host but the one being recomputed
            kept += max(self.host_checkpoint_sizes, default=0) - self.in_flight_bytes(sum(self.host_checkpoint_sizes))
        return kept

    @functools.cached_property
    def activation_peak_bytes(self) -> int:
        """Peak activation bytes on one GPU in backward: kept (``kept_activation_bytes``) + largest
        working set + fp32 logits."""
        working = max(layer.working_bytes for layer in self.layers)
        return self.kept_activation_bytes + working + self.logits_bytes()

    @functools.cached_property
    def host_checkpoint_sizes(self) -> tuple[int, ...]:
        """Bytes of each checkpoint ``cpu_checkpointing`` keeps on the host (none without it)."""
        if not self.training.cpu_checkpointing:
            return ()
        return tuple(layer.activation_bytes for layer in self.layers if layer.checkpointed)

    def model_flops_per_iteration(self) -> float:
        """Forward + backward FLOPs of one optimizer step on one rank, recompute excluded."""
        per_micro = sum(layer.forward_flops + layer.backward_flops for layer in self.layers)
        return per_micro * self.micro_steps


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _norm_tensors(model: ModelSpec) -> tuple[int, ...]:
    """Parameter tensors of one norm: a weight (RMSNorm) or a weight and a bias (LayerNorm)."""
    return (model.hidden,) if model.norm == "rmsnorm" else (model.hidden, model.hidden)


def _linears(model: ModelSpec, moe: bool, tp: int = 1) -> tuple[Linear, ...]:
    """The projections of a decoder layer (with experts when ``moe``), attention first, as one of
    ``tp`` tensor-parallel ranks holds them."""
    return (*attention_linears(model, tp), *ffn_linears(model, moe, tp))


def _layer_tensors(model: ModelSpec, moe: bool = False, tp: int = 1) -> tuple[int, ...]:
    """Element counts of one decoder layer's tensors in Megatron-DeepSpeed's order, as one of
    ``tp`` tensor-parallel ranks holds them: input norm, the attention's projections (QKV fused)
    and norms, post-attention norm, the FFN's projections (gate and up fused when gated; every
    routed expert's input projection, then every expert's output projection)."""
    attention = tuple(t for lin in attention_linears(model, tp) for t in lin.tensors) + attention_norms(model)
    ffn = tuple(t for lin in ffn_linears(model, moe, tp) for _ in range(lin.copies) for t in lin.tensors)
    return (*_norm_tensors(model), *attention, *_norm_tensors(model), *ffn)


def _rank_layer_tensors(model: ModelSpec, moe: bool, tp: int, expert_parallel: int) -> tuple[tuple[int, ...], int]:
    """The tensors one rank holds of a decoder layer, and how many of them (the last) are its
    experts'. Without expert parallelism, ``_layer_tensors`` (no expert group); with it (and
    no tensor parallelism, ``TrainingSpec``), the rank's ``experts / expert_parallel`` routed
    experts after the layer's other tensors (DeepSpeed-MoE keeps them in parameter groups of
    their own, ``moe/utils.py`` ``split_params_into_different_moe_groups_for_optimizer``)."""
    if expert_parallel == 1 or not moe:
        return _layer_tensors(model, moe, tp), 0
    router, gate_up, down, *shared = ffn_linears(model, moe, 1, expert_parallel)
    attention = tuple(t for lin in attention_linears(model) for t in lin.tensors) + attention_norms(model)
    dense = (*_norm_tensors(model), *attention, *_norm_tensors(model), *router.tensors,
             *(t for lin in shared for t in lin.tensors))
    experts = tuple(t for lin in (gate_up, down) for _ in range(lin.copies) for t in lin.tensors)
    return (*dense, *experts), len(experts)


def layer_params(model: ModelSpec, moe: bool = False, tp: int = 1) -> int:
    """Parameters of one decoder layer, dense or (``moe``) with experts, or those one of ``tp``
    tensor-parallel ranks holds (elements)."""
    return sum(_layer_tensors(model, moe, tp))


def _embedding_params(model: ModelSpec, vocab: int | None = None) -> int:
    """Parameters of the token embedding, or of ``vocab`` of its rows (a tensor-parallel rank's)
    (elements)."""
    return (model.vocab if vocab is None else vocab) * model.hidden


def _head_tensors(model: ModelSpec, vocab: int | None = None) -> tuple[int, ...]:
    """The final norm's tensors, then the LM head's weight (none when tied to the embedding), or
    ``vocab`` of its columns (a tensor-parallel rank's)."""
    head = () if model.tied_embeddings else (_embedding_params(model, vocab),)
    return (*_norm_tensors(model), *head)


def moe_layer_count(model: ModelSpec) -> int:
    """Decoder layers with experts (``projections.is_moe_layer``): those past ``dense_layers``
    whose number (from 1) is a multiple of ``moe_interval``, counted without listing them (a
    refused run may have 1e15 layers)."""
    if model.experts == 0:
        return 0
    return max(0, model.layers // model.moe_interval - model.dense_layers // model.moe_interval)


def parameter_count(model: ModelSpec, tp: int = 1) -> int:
    """Total parameters of the model, every expert counted, or those one of ``tp``
    tensor-parallel ranks holds (elements)."""
    moe, vocab = moe_layer_count(model), vocab_share(model, tp)
    dense = (model.layers - moe) * layer_params(model, False, tp)
    decoder = dense + (moe * layer_params(model, True, tp) if moe else 0)
    return _embedding_params(model, vocab) + decoder + sum(_head_tensors(model, vocab))


def active_parameter_count(model: ModelSpec) -> float:
    """Parameters one token runs through (elements): every expert counted at its share of the
    tokens, so a mixture-of-experts layer counts its top-k experts (Mixtral 8x7B's 12.9B)."""
    moe = moe_layer_count(model)

    def active(is_moe: bool) -> float:
        norms = sum(_norm_tensors(model)) * 2 + sum(attention_norms(model))
        return norms + sum(lin.params * lin.share for lin in _linears(model, is_moe))

    decoder = (model.layers - moe) * active(False) + (moe * active(True) if moe else 0.0)
    return _embedding_params(model) + decoder + sum(_head_tensors(model))


def _layer_forward_flops(model: ModelSpec, training: TrainingSpec, moe: bool) -> float:
    """Forward FLOPs of one rank's share of a decoder layer for one micro-batch (full, non-causal
    attention): each token through every projection it runs (a mixture-of-experts layer: the
    router, its ``experts_per_token`` experts and the shared ones), and the scores and values of
    the rank's heads."""
    tokens, tp = training.seq_len * training.micro_batch, training.tensor_parallel
    matmuls = 2.0 * tokens * sum(lin.token_weights for lin in _linears(model, moe, tp))
    width = model.heads // tp * (model.head_size + model.v_head_size)
    attention = 2.0 * training.micro_batch * training.seq_len**2 * width
    return matmuls + attention


def _checkpoint_bytes(model: ModelSpec, training: TrainingSpec, lp_bytes: int) -> int:
    """Bytes of a checkpointed layer's 16-bit input on one rank: whole, or with sequence
    parallelism its ``1/tp`` of the tokens."""
    return sequence_tokens(training) * model.hidden * lp_bytes


def _full_layer_activation_bytes(model: ModelSpec, training: TrainingSpec) -> int:
    """Korthikanti et al. 2022 16-bit activations of one rank's share of a layer: ``34*s*b*h`` at
    ``tensor_parallel`` 1, ``(10 + 24/tp)*s*b*h`` above, ``34/tp*s*b*h`` with sequence
    parallelism; and, without flash attention, the ``s x s`` tensors it keeps
    (``score_bytes_kept``)."""
    tp, elements = training.tensor_parallel, training.seq_len * training.micro_batch * model.hidden
    kept = score_bytes_kept(model, training)
    if training.sequence_parallel or tp == 1:
        return _KORTHIKANTI_BYTES_PER_ELEMENT * elements // tp + kept
    split = _KORTHIKANTI_BYTES_PER_ELEMENT - _KORTHIKANTI_REPLICATED_BYTES
    return _KORTHIKANTI_REPLICATED_BYTES * elements + split * elements // tp + kept


def _decoder_layer(index: int, model: ModelSpec, training: TrainingSpec, lp_bytes: int,
                   passes: tuple[PassKernels, PassKernels]) -> LayerWork:
    """The work of decoder layer ``index``: recompute and keep only its input when checkpointing;
    ``passes`` its forward and backward kernels (one pair shared by the layers of its kind)."""
    moe = is_moe_layer(model, index)
    forward = _layer_forward_flops(model, training, moe)
    full = _full_layer_activation_bytes(model, training)
    checkpointing = training.activation_checkpointing
    tensors, experts = _rank_layer_tensors(model, moe, training.tensor_parallel, training.expert_parallel)
    forward_kernels, backward_kernels = passes
    return LayerWork(
        name=f"layer.{index}",
        params=sum(tensors),
        forward_flops=forward,
        backward_flops=2.0 * forward,
        activation_bytes=_checkpoint_bytes(model, training, lp_bytes) if checkpointing else full,
        working_bytes=full,
        tensors=tensors,
        checkpointed=checkpointing,
        expert_tensors=experts,
        forward_kernels=forward_kernels,
        backward_kernels=backward_kernels,
    )


def _embedding_layer(model: ModelSpec, training: TrainingSpec) -> LayerWork:
    """The embedding lookup: one rank's rows, no FLOPs, no kept activations, a gather of rows."""
    params = _embedding_params(model, vocab_share(model, training.tensor_parallel))
    forward, backward = embedding_passes(model, training)
    return LayerWork("embedding", params, 0.0, 0.0, 0, 0, tensors=(params,), forward_kernels=forward,
                     backward_kernels=backward)


def _head_layer(model: ModelSpec, training: TrainingSpec, lp_bytes: int) -> LayerWork:
    """Final norm + one rank's share of the LM head: keeps its 16-bit input (a checkpoint's
    share); its working set is the rank's 16-bit logits."""
    tokens, vocab = training.seq_len * training.micro_batch, vocab_share(model, training.tensor_parallel)
    forward = 2.0 * tokens * model.hidden * vocab
    tensors = _head_tensors(model, vocab)
    forward_kernels, backward_kernels = head_passes(model, training)
    return LayerWork(
        name="final_norm+lm_head",
        params=sum(tensors),
        forward_flops=forward,
        backward_flops=2.0 * forward,
        activation_bytes=_checkpoint_bytes(model, training, lp_bytes),
        working_bytes=tokens * vocab * lp_bytes,
        tensors=tensors,
        forward_kernels=forward_kernels,
        backward_kernels=backward_kernels,
    )


def _partitions(layers: tuple[LayerWork, ...], training: TrainingSpec) -> list[int]:
    """Elements of each parameter tensor that one rank owns, in model order.

    ZeRO-3 partitions every tensor on its own (``ceil(numel / dp)`` elements per rank, the last
    rank padded), ZeRO-1/2 partition one flat buffer of all of them; without ZeRO a rank owns
    everything it holds. With expert parallelism the experts' tensors are a flat buffer of their
    own, partitioned over the expert data-parallel group (``stage_1_and_2.py``,
    ``_configure_moe_settings``: ``real_dp_process_group``)."""
    dp, edp = training.data_parallel, training.expert_data_parallel
    if training.zero_stage >= 3:
        return [part for layer in layers for part in layer.partitions(dp, edp)]
    experts = sum(layer.expert_params for layer in layers)
    dense = sum(sum(layer.tensors) for layer in layers) - experts
    if training.zero_stage >= 1:
        return [math.ceil(dense / dp), *([math.ceil(experts / edp)] if experts else [])]
    return [dense + experts]


def _subgroups(partitions: list[int], sub_group_size: int, zero_stage: int) -> tuple[SubGroup, ...]:
    """Optimizer sub-groups of one rank's partition (elements).

    ZeRO-3 (DeepSpeed ``stage3._create_fp16_sub_groups``) adds whole tensor partitions to a
    sub-group until it holds at least ``sub_group_size`` elements, so sub-groups are unequal
    and can exceed the setting. Earlier stages are cut into chunks of ``sub_group_size``."""
    sizes: list[int] = []
    if zero_stage >= 3:
        current = 0
        for numel in partitions:
            current += numel
            if current >= sub_group_size:
                sizes.append(current)
                current = 0
        if current:
            sizes.append(current)
    else:
        full, rest = divmod(sum(partitions), sub_group_size)
        sizes = [sub_group_size] * full + ([rest] if rest else [])
    return tuple(SubGroup(index, numel) for index, numel in enumerate(sizes))


@dataclass(frozen=True)
class StepShape:
    """How many of each unit of work one rank's step has: GPU layers (embedding and head
    included), checkpointed ones among them, micro-steps, optimizer sub-groups; what the task
    graph's size follows from."""

    layers: int
    checkpointed: int
    micro_steps: int
    subgroups: int
    data_parallel: int
    zero_stage: int
    deepspeed_version: str
    """The DeepSpeed release, where the tasks of a step differ by release."""
    host_checkpoints: int = 0
    """Checkpointed layers whose input ``cpu_checkpointing`` keeps on the host."""
    tensor_parallel_passes: int = 0
    """Passes per micro-step followed by tensor-parallel collectives (``tensor_parallel_passes``)."""
    exchanges: int = 0
    """Passes with expert all-to-alls per micro-step (forward, recompute and backward of each
    mixture-of-experts layer under expert parallelism)."""


def tensor_parallel_passes(training: TrainingSpec, layers: int, checkpointed: int, embedding: bool) -> int:
    """Passes of ``layers`` (``checkpointed`` of them recomputed; the embedding among them where
    ``embedding``) that run tensor-parallel collectives (``tiersim.layer_kernels``): none at
    ``tensor_parallel`` 1, else every pass but the embedding's backward (with sequence
    parallelism, every pass)."""
    if training.tensor_parallel == 1:
        return 0
    return 2 * layers + checkpointed - (1 if embedding and not training.sequence_parallel else 0)


def step_shape(model: ModelSpec, training: TrainingSpec) -> StepShape:
    """The shape ``build_step`` would give, from arithmetic alone (cheap for any size)."""
    return StepShape(
        layers=model.layers + 2,
        checkpointed=model.layers if training.activation_checkpointing else 0,
        micro_steps=training.global_batch // (training.micro_batch * training.data_parallel),
        subgroups=subgroup_count(model, training),
        data_parallel=training.data_parallel,
        zero_stage=training.zero_stage,
        deepspeed_version=training.deepspeed_version,
        host_checkpoints=model.layers if training.activation_checkpointing and training.cpu_checkpointing else 0,
        tensor_parallel_passes=tensor_parallel_passes(
            training, model.layers + 2, model.layers if training.activation_checkpointing else 0, True),
        exchanges=_exchanges(model, training, moe_layer_count(model)),
    )


def _exchanges(model: ModelSpec, training: TrainingSpec, moe_layers: int) -> int:
    """Passes with expert all-to-alls per micro-step over ``moe_layers`` mixture-of-experts
    layers: forward, backward and recompute of each under expert parallelism."""
    if training.expert_parallel == 1:
        return 0
    return (3 if training.activation_checkpointing else 2) * moe_layers


def _flat_subgroups(model: ModelSpec, training: TrainingSpec, params: int, moe_layers: int) -> int:
    """Sub-groups of a rank's ZeRO-0/1/2 flat partition of ``params`` (every expert counted) with
    ``moe_layers`` mixture-of-experts layers among them: under expert parallelism the rank's own
    experts, a flat buffer of their own over the expert data-parallel group (``_partitions``)."""
    ep, experts = training.expert_parallel, 0
    if ep > 1 and model.experts:
        tensors, count = _rank_layer_tensors(model, True, 1, ep)
        experts = moe_layers * sum(tensors[len(tensors) - count:])
    dense = params - experts * ep
    owned = dense + experts
    if training.zero_stage >= 1:
        owned = math.ceil(dense / training.data_parallel) + (
            math.ceil(experts / training.expert_data_parallel) if experts else 0)
    return -(-owned // training.sub_group_size)


class _Packer:
    """The ZeRO-3 rule of ``_subgroups`` run over partition sizes: sub-groups closed so far and
    the elements carried into the next."""

    def __init__(self, size: int) -> None:
        self.size, self.count, self.carry = size, 0, 0

    def feed(self, tensors: list[int]) -> None:
        """Add tensor partitions, closing a sub-group whenever it reaches ``size``."""
        for numel in tensors:
            self.carry += numel
            if self.carry >= self.size:
                self.count, self.carry = self.count + 1, 0

    def feed_repeated(self, unit: list[int], times: int) -> None:
        """Feed ``unit`` ``times`` times: one at a time until the carry-over at a unit's
        boundary repeats, then over the repeats in one step."""
        seen: dict[int, tuple[int, int]] = {}
        done = 0
        while done < times:
            if self.carry in seen:
                at, counted = seen.pop(self.carry)
                repeats = (times - done) // (done - at)
                self.count += repeats * (self.count - counted)
                done += repeats * (done - at)
                seen = {}
                if done >= times:
                    break
            seen[self.carry] = (done, self.count)
            self.feed(unit)
            done += 1


@functools.lru_cache(maxsize=256)
def subgroup_count(model: ModelSpec, training: TrainingSpec) -> int:
    """How many optimizer sub-groups ``build_step`` makes, without listing them: the ZeRO-3 rule
    of ``_subgroups`` (``_Packer``) over the embedding, the first ``dense_layers``, the decoder
    layers a period of ``moe_interval`` at a time, the layers left over and the head."""
    dp, tp, vocab = training.data_parallel, training.tensor_parallel, vocab_share(model, training.tensor_parallel)
    kinds = {moe: [math.ceil(n / dp) for n in _layer_tensors(model, moe, tp)] for moe in {False, model.experts > 0}}
    if training.zero_stage < 3:
        return _flat_subgroups(model, training, parameter_count(model, tp), moe_layer_count(model))
    packer = _Packer(training.sub_group_size)
    packer.feed([math.ceil(_embedding_params(model, vocab) / dp)])
    start = model.dense_layers if model.experts else 0
    packer.feed_repeated(kinds[False], start)
    period = model.moe_interval if model.experts else 1
    unit = [n for i in range(start, start + period) for n in kinds[is_moe_layer(model, i)]]
    periods, rest = divmod(model.layers - start, period)
    packer.feed_repeated(unit, periods)
    for index in range(model.layers - rest, model.layers):
        packer.feed(kinds[is_moe_layer(model, index)])
    packer.feed([math.ceil(n / dp) for n in _head_tensors(model, vocab)])
    return packer.count + (1 if packer.carry else 0)


@functools.lru_cache(maxsize=64)
def build_step(model: ModelSpec, training: TrainingSpec) -> TrainingStep:
    """Count parameters, FLOPs and bytes of one optimizer step of ``model`` under ``training``.

    Specs built directly (not through ``schema.build``) are validated here, source ``<api>``.
    A pure function of two frozen specs, so its (immutable) result is kept for the last few
    (a sweep over hardware and strategy options builds the same step at every point).
    """
    model.validate("<api>", "model")
    training.validate("<api>", "training")
    check_tensor_split(model, training, "<api>")
    check_expert_parallel(model, training, "<api>")
    lp_bytes = 2  # bf16 and fp16 are both 16-bit
    passes = {moe: decoder_passes(model, training, moe) for moe in {False, model.experts > 0}}
    decoder = tuple(_decoder_layer(i, model, training, lp_bytes, passes[is_moe_layer(model, i)])
                    for i in range(model.layers))
    layers = (_embedding_layer(model, training), *decoder, _head_layer(model, training, lp_bytes))
    partitions = _partitions(layers, training)
    return TrainingStep(
        model=model,
        training=training,
        total_params=parameter_count(model),
        rank_params=sum(partitions),
        micro_steps=training.global_batch // (training.micro_batch * training.data_parallel),
        tokens_per_micro_batch=training.seq_len * training.micro_batch,
        layers=layers,
        subgroups=_subgroups(partitions, training.sub_group_size, training.zero_stage),
        lp_bytes=lp_bytes,
    )


def check_stages(model: ModelSpec, training: TrainingSpec, source: str) -> None:
    """The decoder layers must split evenly over the pipeline stages and their model chunks
    (Megatron's ``--pipeline-model-parallel-size`` asserts ``num_layers`` a multiple of it), and
    interleaved chunks need more than one stage and micro-batches in whole groups of
    ``pipeline_parallel`` (Megatron core's ``forward_backward_pipelining_with_interleaving``
    refuses a last group smaller than that)."""
    stages, chunks = training.pipeline_parallel, training.virtual_pipeline
    field = "training.virtual_pipeline" if chunks > 1 else "training.pipeline_parallel"
    if chunks > 1 and stages == 1:
        raise ConfigError(source, field, f"{chunks} needs pipeline_parallel above 1: it interleaves model chunks "
                                         "over the pipeline stages")
    if model.layers % (stages * chunks):
        what = f"{stages} x virtual_pipeline {chunks} = {stages * chunks}" if chunks > 1 else str(stages)
        raise ConfigError(source, field,
                          f"{what} does not divide model.layers {model.layers}: the decoder layers are split "
                          "evenly over the pipeline stages, as Megatron splits them")
    micro = training.global_batch // (training.micro_batch * training.data_parallel)
    if chunks > 1 and micro % stages:
        raise ConfigError(source, field, f"{chunks} needs the micro-batches (global_batch / (micro_batch x "
                                         f"data_parallel) = {micro}) a multiple of pipeline_parallel {stages}: "
                                         "Megatron's interleaved schedule runs them in groups of that many")


def part_bounds(layers: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Each of ``parts`` pipeline parts' slice (first, end) of a step's layers (the embedding,
    ``layers`` decoder layers, the head), in model order: Megatron's uniform split, ``layers /
    parts`` decoder layers a part, the embedding on the first and the final norm and LM head on
    the last (Megatron-DeepSpeed's ``GPTModelPipe`` partitions likewise:
    ``partition_method='type:transformer'``). A part is a stage, or with interleaving one of its
    model chunks: part ``c x stages + s`` is stage ``s``'s chunk ``c``."""
    per = layers // parts
    return tuple((0 if s == 0 else 1 + s * per, 1 + (s + 1) * per + (1 if s == parts - 1 else 0))
                 for s in range(parts))


def stage_parts(training: TrainingSpec, layers: int, stage: int) -> tuple[tuple[int, int], ...]:
    """Stage ``stage``'s model chunks as slices of a step's layers (``part_bounds``), in chunk order."""
    stages, chunks = training.pipeline_parallel, training.virtual_pipeline
    bounds = part_bounds(layers, stages * chunks)
    return tuple(bounds[chunk * stages + stage] for chunk in range(chunks))


def tied_copy(model: ModelSpec, training: TrainingSpec) -> int:
    """Elements of the embedding's copy the last pipeline stage holds for a head tied to it
    (Megatron's ``shared_embedding_or_output_weight``, DeepSpeed's ``TiedLayerSpec``): the
    embedding's (a tensor-parallel rank's rows of it), with tied embeddings and more than one
    stage; else 0."""
    if not model.tied_embeddings or training.pipeline_parallel == 1:
        return 0
    return _embedding_params(model, vocab_share(model, training.tensor_parallel))


def stage_steps(step: TrainingStep) -> tuple[TrainingStep, ...]:
    """One step per pipeline stage (``stage_parts``): its layers (the last's head with its own
    copy of a tied embedding, ``tied_copy``), its parameters, its rank's ZeRO partition of them
    over the data-parallel group and that partition's sub-groups; the step itself without
    pipeline parallelism."""
    training = step.training
    if training.pipeline_parallel == 1:
        return (step,)
    check_stages(step.model, training, "<api>")
    stages = []
    copy = tied_copy(step.model, training)
    for stage in range(training.pipeline_parallel):
        layers = tuple(layer for first, end in stage_parts(training, step.model.layers, stage)
                       for layer in step.layers[first:end])
        if copy and stage == training.pipeline_parallel - 1:
            head = layers[-1]
            layers = (*layers[:-1], replace(head, params=head.params + copy, tensors=(*head.tensors, copy)))
        partitions = _partitions(layers, training)
        stages.append(replace(step, total_params=sum(layer.params for layer in layers), rank_params=sum(partitions),
                              layers=layers, stage=stage,
                              subgroups=_subgroups(partitions, training.sub_group_size, training.zero_stage)))
    return tuple(stages)


def stage_shapes(model: ModelSpec, training: TrainingSpec) -> tuple[StepShape, ...]:
    """The shape of each pipeline stage's step (``stage_steps``), from arithmetic alone; the
    step's shape alone without pipeline parallelism. A stage's rank owns a flat ZeRO-1
    partition (pipeline parallelism refuses ZeRO-2 and -3), cut into sub-groups."""
    whole = step_shape(model, training)
    stages = training.pipeline_parallel
    if stages == 1:
        return (whole,)
    chunks, tp = training.virtual_pipeline, training.tensor_parallel
    per = model.layers // (stages * chunks)
    sizes = {moe: layer_params(model, moe, tp) for moe in {False, model.experts > 0}}
    vocab = vocab_share(model, tp)
    shapes = []
    for stage in range(stages):
        ranges = [range((chunk * stages + stage) * per, (chunk * stages + stage + 1) * per) for chunk in range(chunks)]
        params = sum(sizes[is_moe_layer(model, i)] for layers_of in ranges for i in layers_of)
        moe = sum(is_moe_layer(model, i) for layers_of in ranges for i in layers_of)
        per_stage = per * chunks
        if stage == 0:
            params += _embedding_params(model, vocab)
        if stage == stages - 1:
            params += sum(_head_tensors(model, vocab)) + tied_copy(model, training)
        layers, checkpointed = per_stage + (stage == 0) + (stage == stages - 1), per_stage if whole.checkpointed else 0
        collectives = tensor_parallel_passes(training, layers, checkpointed, stage == 0)
        shapes.append(replace(whole, layers=layers, checkpointed=checkpointed,
                              subgroups=_flat_subgroups(model, training, params, moe),
                              host_checkpoints=per_stage if whole.host_checkpoints else 0,
                              tensor_parallel_passes=collectives, exchanges=_exchanges(model, training, moe)))
    return tuple(shapes)


_LLAMA2: dict[str, tuple[int, int, int, int, int]] = {
    "7b": (32, 4096, 32, 32, 11008),
    "13b": (40, 5120, 40, 40, 13824),
    "70b": (80, 8192, 64, 8, 28672),
}


def llama2(size: Literal["7b", "13b", "70b"]) -> ModelSpec:
    """The Llama-2 shape of ``size`` (SwiGLU, RMSNorm, no bias, untied, vocab 32000)."""
    if size not in _LLAMA2:
        raise ConfigError("<api>", "model.name", f"unknown Llama-2 size {size!r}; choose one of 7b, 13b, 70b")
    layers, hidden, heads, kv_heads, ffn = _LLAMA2[size]
    return ModelSpec(
        name=f"llama2-{size}",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn=ffn,
        vocab=32000,
    )
