"""The linear layers (projections) of a decoder layer, listed once for the parameter counts, the
FLOPs and the GEMMs (``tiersim.workload``, ``tiersim.layer_kernels``). Elements and FLOPs.

* Attention: q, k and v fused into one projection (``heads*head_size`` wide for q,
  ``kv_heads*head_size`` for k and for v) and the output projection ``heads*head_size -> hidden``.
  Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank`` set) instead projects q down to
  ``q_lora_rank`` and up to ``heads*head_size`` (or straight up when ``q_lora_rank`` is None), k
  and v down to ``kv_lora_rank`` plus a shared rotary key of ``rope_head_dim``, then up to
  ``heads*(head_size - rope_head_dim + v_head_size)``; the output is ``heads*v_head_size -> hidden``
  (Hugging Face ``modeling_deepseek.py``: ``q_a_proj``, ``q_b_proj``, ``kv_a_proj_with_mqa``,
  ``kv_b_proj``, ``o_proj``, with an RMSNorm after each down projection).
* FFN: gated (SwiGLU, GeGLU: gate and up fused, ``2*ffn`` wide, then down) or plain (GELU: up,
  down). A mixture-of-experts layer has a router (``hidden -> experts``, no bias), ``experts``
  copies of the FFN at ``expert_ffn`` of which each token runs ``experts_per_token`` (so each
  expert sees ``experts_per_token/experts`` of the tokens on average), and its shared experts as
  one FFN ``shared_experts*expert_ffn`` wide that every token runs (DeepSeek's
  ``DeepseekMoE.shared_experts``).
* Tensor parallelism (Megatron-LM ``megatron/core/tensor_parallel/layers.py``): each rank holds
  ``1/tp`` of a ``ColumnParallelLinear`` (QKV, the FFN's input projection, MLA's up projections:
  outputs split, with their biases) and of a ``RowParallelLinear`` (the attention's output, the
  FFN's output projection: inputs split, the bias whole on every rank); every expert is split so
  too (Megatron without expert parallelism); the router and MLA's down projections are
  replicated (``Linear.on_rank``).
* Expert parallelism (DeepSpeed-MoE's ``ep_size``, ``deepspeed/moe/layer.py``): a rank holds
  ``experts / ep`` of the routed experts, and each of them runs on the tokens every rank of its
  expert-parallel group routes to it: ``ep`` slots of DeepSpeed's capacity
  ``ceil(tokens * experts_per_token * capacity_factor / experts)`` (``sharded_moe._capacity``,
  with ``drop_tokens`` every slot is computed, filled or not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tiersim.workload import ModelSpec


@dataclass(frozen=True)
class Linear:
    """``copies`` linear layers of ``inputs x outputs`` weights (and ``outputs`` biases), each
    run on ``share`` of the tokens (a routed expert: ``experts_per_token / experts``); a routed
    expert's GEMM runs over ``capacity`` times that share of each of ``ranks`` ranks' tokens
    (``gemm_tokens``)."""

    inputs: int
    outputs: int
    bias: bool = False
    copies: int = 1
    share: float = 1.0
    split: Literal["column", "row", "none"] = "none"
    """How tensor parallelism splits it: its outputs (column), its inputs (row) or not at all."""
    ranks: int = 1
    """Ranks whose tokens each copy runs on: the expert-parallel group (1: the rank's own)."""
    capacity: float = 1.0
    """Slots per routed token a copy computes (DeepSpeed-MoE's ``capacity_factor``; 1: none idle)."""

    def on_rank(self, tp: int) -> Linear:
        """The part one of ``tp`` tensor-parallel ranks holds (the model validates that the split
        widths divide)."""
        if tp == 1 or self.split == "none":
            return self
        if self.split == "column":
            return replace(self, outputs=self.outputs // tp)
        return replace(self, inputs=self.inputs // tp)

    @property
    def tensors(self) -> tuple[int, ...]:
        """Elements of one copy's parameter tensors: its weight, then its bias if it has one."""
        weights = self.inputs * self.outputs
        return (weights, self.outputs) if self.bias else (weights,)

    @property
    def params(self) -> int:
        """Parameters of all the copies (elements)."""
        return self.copies * sum(self.tensors)

    @property
    def token_weights(self) -> float:
        """Weights one token multiplies by, on average over the tokens: ``copies * share`` of
        one copy's (2 FLOPs each)."""
        return self.copies * self.share * self.inputs * self.outputs

    def gemm_tokens(self, tokens: int) -> int:
        """Tokens one copy's GEMM runs over when each rank has ``tokens``: ``ranks`` times
        ``ceil(tokens * share * capacity)`` (DeepSpeed's capacity per expert and rank)."""
        return self.ranks * math.ceil(tokens * self.share * self.capacity)


def attention_linears(model: ModelSpec, tp: int = 1) -> tuple[Linear, ...]:
    """The attention's projections, in the order the model registers them, as one of ``tp``
    tensor-parallel ranks holds them."""
    h, heads, d = model.hidden, model.heads, model.head_size
    out = Linear(heads * model.v_head_size, h, model.bias, split="row")
    if model.kv_lora_rank is None:
        qkv = heads * d + 2 * model.kv_head_count * d
        return Linear(h, qkv, model.bias or model.qkv_bias, split="column").on_rank(tp), out.on_rank(tp)
    q_full = heads * d
    q = ((Linear(h, model.q_lora_rank, model.bias), Linear(model.q_lora_rank, q_full, model.bias, split="column"))
         if model.q_lora_rank is not None else (Linear(h, q_full, model.bias, split="column"),))
    kv_up = heads * (d - model.rope_head_dim + model.v_head_size)
    linears = (*q, Linear(h, model.kv_lora_rank + model.rope_head_dim, model.bias),
               Linear(model.kv_lora_rank, kv_up, model.bias, split="column"), out)
    return tuple(lin.on_rank(tp) for lin in linears)


def attention_norms(model: ModelSpec) -> tuple[int, ...]:
    """Elements of the RMSNorm weights inside the attention: after MLA's down projections."""
    if model.kv_lora_rank is None:
        return ()
    return (*(() if model.q_lora_rank is None else (model.q_lora_rank,)), model.kv_lora_rank)


def ffn(model: ModelSpec, width: int, copies: int = 1, share: float = 1.0,
        routing: tuple[int, float] = (1, 1.0)) -> tuple[Linear, Linear]:
    """One FFN ``width`` wide (``copies`` of it, each run on ``share`` of the tokens of each of
    ``routing``'s ranks, padded by its capacity factor): its input projection (gate and up fused
    when gated; column-parallel) and its output projection (row-parallel)."""
    inputs = (2 if model.gated else 1) * width
    return (Linear(model.hidden, inputs, model.bias, copies, share, "column", *routing),
            Linear(width, model.hidden, model.bias, copies, share, "row", *routing))


def ffn_linears(model: ModelSpec, moe: bool, tp: int = 1, expert_parallel: int = 1,
                capacity_factor: float = 1.0) -> tuple[Linear, ...]:
    """The FFN's projections, a dense FFN or the router, the routed experts (the ``experts /
    expert_parallel`` a rank holds) and the shared experts of a mixture-of-experts layer, as
    one of ``tp`` tensor-parallel ranks holds them."""
    if not moe:
        return tuple(lin.on_rank(tp) for lin in ffn(model, model.ffn))
    share = model.experts_per_token / model.experts
    router = Linear(model.hidden, model.experts)
    shared = ffn(model, model.shared_experts * model.expert_width) if model.shared_experts else ()
    routed = ffn(model, model.expert_width, model.experts // expert_parallel, share,
                 (expert_parallel, capacity_factor))
    return tuple(lin.on_rank(tp) for lin in (router, *routed, *shared))


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Whether decoder layer ``index`` (from 0) is a mixture-of-experts layer: past the first
    ``dense_layers``, every ``moe_interval``-th (Hugging Face Qwen-MoE's ``decoder_sparse_step``)."""
    return model.experts > 0 and index >= model.dense_layers and (index + 1) % model.moe_interval == 0


def ffn_width(model: ModelSpec, moe: bool) -> float:
    """FFN elements per token that the activation function runs over: ``ffn``, or on a
    mixture-of-experts layer its ``experts_per_token`` experts and its shared experts."""
    if not moe:
        return float(model.ffn)
    return float((model.experts_per_token + model.shared_experts) * model.expert_width)
