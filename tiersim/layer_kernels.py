"""The kernels of one layer's passes: GEMM shapes and the bytes of the memory-bound kernels.

Knows nothing of devices (``tiersim.strategies.gpu_kernels`` times them on a GPU). Shapes follow
Megatron-DeepSpeed's ``ParallelTransformerLayer`` (``megatron/model/transformer.py``, as of
March 2024, commit ebe8025), on one rank (tensor parallelism below): ``t = seq * micro_batch`` tokens, ``h``
hidden, ``kv`` the width of k (and of v), ``f`` the FFN size, ``a`` heads, ``d`` head size; the
projections are listed by ``tiersim.projections`` (experts as one batched GEMM). 16-bit
elements are 2 bytes. A GEMM ``(m, n, k, batch)`` computes ``batch`` products of an ``m x k`` and a
``k x n`` matrix; a linear layer over ``t`` tokens is ``(t, outputs, inputs)``. Its backward is the
input gradient ``(t, inputs, outputs)`` and the weight gradient ``(inputs, outputs, t)``.

Memory-bound kernels, bytes read + written per forward (counted from the source named):

* RMSNorm (``megatron/model/rmsnorm.py``, unfused torch): ``x.float()`` 2+4, ``pow(2)`` 4+4,
  ``mean(-1)`` 4, ``x * rsqrt(...)`` 4+4, ``type_as(x)`` 4+2, ``* weight`` 2+2: 36 bytes per
  element of the ``t x h`` input. LayerNorm (apex's fused kernel): 2+2.
* Attention glue: the query's reshape of a strided slice copies it (2+2 per element of ``t x h``);
  with GQA ``repeat_kv`` writes k and v at full width (``2*(2*t*kv + 2*t*h)``); rotary
  (``megatron/model/rotary_pos_embedding.py``) on q and on the repeated k: ``t*cos`` 2n, the
  negated half n, ``cat`` 2n, ``*sin`` 2n, the add 3n element accesses, 20 bytes per element each;
  the context's ``permute(...).contiguous()`` 2+2 (with flash attention, q, k, v and the context are
  rearranged instead: 4 copies).
* Scale-mask-softmax (Megatron's fused ``scaled_upper_triang_masked_softmax``, ``sk <= 4096``):
  reads and writes the ``b*a x s x s`` 16-bit score matrix; the QK^T GEMM writes it and the PV
  GEMM reads it (their own bytes). Flash attention keeps it on chip: no ``s^2`` traffic.
  With ``attention_dropout`` above 0, PyTorch's fused dropout (``native_dropout``) reads the
  probabilities and writes its output and a 1-byte mask (2+2+1 bytes per score element); its
  backward reads the gradient and the mask and writes the input gradient (2+1+2). At 0 it is
  not launched (``F.dropout`` returns its input). Without ``masked_softmax_fusion`` (2019-2020
  Megatron-LM: ``scores / sqrt(d)``, ``* mask``, ``- 10000 * (1 - mask)``, then the softmax),
  the scale, the multiply and the subtract each read and write the score matrix (2+2 bytes per
  element each, 12 in all; the ``s x s`` mask is shared by the heads and stays in cache), and
  their backward runs the multiply's and the scale's (8).
* Two residual adds (the bias-dropout-add with no bias and dropout 0: ``F.dropout`` returns its
  input when ``p == 0``): 2+2+2 per element each. SwiGLU (GeGLU): ``silu`` 2+2, the product 4+2
  per element of ``t x f``; GELU 2+2. On a mixture-of-experts layer ``f`` is the width a token
  runs (its ``experts_per_token`` experts and the shared ones), and routing copies each token's
  input to its experts and their outputs back (2+2 bytes per element of ``t x k x h`` each way).
* Expert parallelism (DeepSpeed-MoE, ``deepspeed/moe/sharded_moe.py``, ``MOELayer.forward``):
  the dispatched ``experts x capacity x h`` tensor goes to the experts' ranks in an all-to-all
  (``_AllToAll``) before the experts, and their output comes back in a second one after; a
  backward runs the two again on the gradients. Of each, ``(ep - 1) / ep`` leaves the rank.
* Cross entropy (``megatron/core/tensor_parallel/cross_entropy.py`` on ``output.float()``): the
  cast 2+4, max 4, subtract 4+4, exp 4+4, sum 4, divide 4+4: 38 bytes per logit; backward
  multiplies (4+4) and casts back (4+2): 14.

Tensor parallelism (Megatron-LM ``megatron/core/tensor_parallel/layers.py`` and ``mappings.py``;
activations as in Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models"): over ``tp`` ranks each runs its share of every projection (``tiersim.projections``),
``heads / tp`` heads, and the FFN's activation over ``f / tp``; the norms, residual adds and the
routing copies run over all ``t`` tokens on every rank, or over ``t / tp`` of them with sequence
parallelism. The LM head and its cross entropy hold ``vocab / tp`` of the logits (rounded up: Megatron
pads the vocabulary), the embedding ``vocab / tp`` rows. Each pass lists the collectives it runs among
the tensor-parallel ranks (``PassKernels.tp_calls`` and the bytes one rank sends in them, ring
algorithm: an all-reduce of ``N`` bytes sends ``2 (tp-1)/tp N``, an all-gather or a reduce-scatter
``(tp-1)/tp N``) on the compute stream. A decoder layer's forward all-reduces the ``t x h`` 16-bit
output of the attention's and of the FFN's row-parallel projection (``reduce_from_..._region``), its
backward the input gradient of the two column-parallel ones (``copy_to_..._region``); with sequence
parallelism each is a reduce-scatter and an all-gather (``gather_from_sequence_parallel_region``,
``reduce_scatter_to_sequence_parallel_region``), the same bytes in twice the calls. The embedding's
forward all-reduces its output (reduce-scatters it with sequence parallelism, and all-gathers its
gradient back); the head's input is all-gathered with sequence parallelism, its gradient
all-reduced (reduce-scattered); the vocabulary-parallel cross entropy all-reduces three fp32
values per token (maximum, target logit, sum of exponentials). Left out: with sequence parallelism
Megatron's column-parallel backward gathers its input once more for the weight gradient, overlapped
with the input gradient's GEMM.

Backward: an elementwise kernel's gradient reads the output gradient and its saved input and
writes the input gradient, twice the forward's bytes (``BACKWARD_TRAFFIC``); the softmax backward
reads the probabilities and their gradient and writes the scores' gradient (3 passes of the score
matrix). Biases are added in the GEMMs' epilogue or the residual add; the hidden-state dropouts
are not modelled (Llama-style runs set them to 0). Kernel launches are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiersim.projections import Linear, attention_linears, ffn_linears, ffn_width

if TYPE_CHECKING:
    from tiersim.workload import ModelSpec, TrainingSpec

LP = 2
"""Bytes per 16-bit element."""
RMSNORM_BYTES = 36
"""Bytes read + written per element by Megatron-DeepSpeed's unfused RMSNorm forward."""
LAYERNORM_BYTES = 4
"""Bytes read + written per element by apex's fused LayerNorm forward."""
ROTARY_BYTES = 20
"""Bytes read + written per element of q (or k) by the unfused rotary embedding."""
CROSS_ENTROPY_BYTES = 38
"""Bytes per logit of the fp32 cross entropy's forward."""
CROSS_ENTROPY_BACKWARD_BYTES = 14
"""Bytes per logit of the cross entropy's backward and the cast of its gradient."""
BACKWARD_TRAFFIC = 2
"""Backward bytes of an elementwise kernel per forward byte."""
CROSS_ENTROPY_REDUCTIONS = 3
"""fp32 values per token the vocabulary-parallel cross entropy all-reduces (Megatron-LM
``tensor_parallel/cross_entropy.py``: the logits' maximum, the target's logit, the sum of exponentials)."""
FP32 = 4
"""Bytes per fp32 element."""
DROPOUT_BYTES = 5
"""Bytes per score element of the attention dropout's forward (reads 2, writes 2 and a 1-byte
mask) and, alike, of its backward (reads the gradient and the mask, writes 2)."""
UNFUSED_MASK_BYTES = 12
"""Forward bytes per score element of the unfused scale, mask multiply and subtract."""
UNFUSED_MASK_BACKWARD_BYTES = 8
"""Backward bytes per score element of the unfused mask multiply and scale."""
DROPOUT_KEPT_BYTES = 3
"""Bytes per score element the attention dropout keeps for the backward: its mask and output."""


@dataclass(frozen=True)
class Gemm:
    """``batch`` products of an ``m x k`` and a ``k x n`` matrix moving ``hbm_bytes`` bytes."""

    m: int
    n: int
    k: int
    batch: int
    hbm_bytes: float

    @property
    def flops(self) -> float:
        """2 FLOPs per multiply-accumulate."""
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True)
class PassKernels:
    """One pass (forward or backward) of one layer over one micro-batch on one rank: its GEMMs,
    the bytes its memory-bound kernels read and write, how many module calls run ZeRO-3's hooks,
    and its tensor-parallel collectives."""

    gemms: tuple[Gemm, ...] = ()
    memory_bytes: float = 0.0
    module_calls: int = 0
    tp_calls: int = 0
    """Collective calls among the tensor-parallel ranks (all-reduces, all-gathers, reduce-scatters)."""
    tp_bytes: float = 0.0
    """Bytes one rank sends in them (ring algorithm)."""
    all_to_all: tuple[float, ...] = ()
    """Bytes each of the pass's all-to-alls sends off the rank, in order (expert parallelism)."""

    @property
    def flops(self) -> float:
        """FLOPs of the pass's GEMMs."""
        return sum(g.flops for g in self.gemms)


NO_KERNELS = PassKernels()


def gemm(m: int, n: int, k: int, batch: int = 1, on_chip: int = 0) -> Gemm:
    """A GEMM reading both operands and writing its result once in 16 bits, but for ``on_chip``
    elements per product that a fused kernel keeps on chip (flash attention's score matrix)."""
    return Gemm(m, n, k, batch, float(LP * batch * (m * k + k * n + m * n - on_chip)))


def linear(tokens: int, inputs: int, outputs: int) -> Gemm:
    """The forward GEMM of a linear layer over ``tokens``."""
    return gemm(tokens, outputs, inputs)


def linear_backward(forward: Gemm) -> tuple[Gemm, Gemm]:
    """Input gradient and weight gradient of a linear layer's forward GEMM (of each of its
    ``batch`` copies: the experts)."""
    tokens, outputs, inputs, copies = forward.m, forward.n, forward.k, forward.batch
    return gemm(tokens, inputs, outputs, copies), gemm(inputs, outputs, tokens, copies)


def _layer_linears(model: ModelSpec, training: TrainingSpec, moe: bool) -> tuple[Linear, ...]:
    """The projections one rank runs: its tensor-parallel share and, with expert parallelism,
    its ``experts / ep`` experts."""
    tp = training.tensor_parallel
    return (*attention_linears(model, tp),
            *ffn_linears(model, moe, tp, training.expert_parallel, training.moe_capacity_factor))


def _linears(model: ModelSpec, training: TrainingSpec, moe: bool) -> tuple[Gemm, ...]:
    """The forward GEMMs of one rank's share of the layer's projections (``tiersim.projections``):
    a projection with copies (the routed experts) is one batched GEMM over ``Linear.gemm_tokens``
    per copy (on average each expert gets ``experts_per_token / experts`` of each rank's tokens)."""
    tokens = training.seq_len * training.micro_batch
    return tuple(gemm(lin.gemm_tokens(tokens), lin.outputs, lin.inputs, lin.copies)
                 for lin in _layer_linears(model, training, moe))


def all_to_all_bytes(model: ModelSpec, training: TrainingSpec, moe: bool) -> tuple[float, ...]:
    """Bytes each of a pass's two all-to-alls (dispatch, combine) sends off the rank: of the
    16-bit ``experts x capacity x hidden`` tensor, ``(ep - 1) / ep``; none without expert
    parallelism or on a dense layer."""
    ep = training.expert_parallel
    if ep == 1 or not moe:
        return ()
    tokens = training.seq_len * training.micro_batch
    routed = ffn_linears(model, moe, 1, ep, training.moe_capacity_factor)[1]
    dispatched = float(LP * routed.copies * routed.gemm_tokens(tokens) * model.hidden)
    return (dispatched * (ep - 1) / ep,) * 2


def _attention(model: ModelSpec, training: TrainingSpec, backward: bool) -> tuple[Gemm, ...]:
    """Scores and values per head: QK^T ``(s, s, d)`` and PV ``(s, dv, s)`` over the ``b*a/tp``
    heads of one rank; the backward's dQ, dK ``(s, d, s)``, dV ``(s, dv, s)`` and dP ``(s, s, dv)``,
    and with flash attention QK^T once more (its backward recomputes the scores); flash keeps every
    ``s x s`` operand on chip."""
    s, heads = training.seq_len, training.micro_batch * model.heads // training.tensor_parallel
    d, dv = model.head_size, model.v_head_size
    scores = s * s if training.flash_attention else 0
    if not backward:
        return gemm(s, s, d, heads, scores), gemm(s, dv, s, heads, scores)
    grads = (gemm(s, d, s, heads, scores), gemm(s, d, s, heads, scores), gemm(s, dv, s, heads, scores),
             gemm(s, s, dv, heads, scores))
    return (gemm(s, s, d, heads, scores), *grads) if training.flash_attention else grads


def norm_bytes(model: ModelSpec, tokens: int) -> float:
    """Forward bytes of one norm over ``tokens``."""
    per_element = RMSNORM_BYTES if model.norm == "rmsnorm" else LAYERNORM_BYTES
    return float(per_element * tokens * model.hidden)


def sequence_tokens(training: TrainingSpec) -> int:
    """Tokens of a micro-batch a rank's norms, residual adds and dropouts run over: all of them,
    or with sequence parallelism ``1 / tensor_parallel`` of them."""
    tokens = training.seq_len * training.micro_batch
    return tokens // training.tensor_parallel if training.sequence_parallel else tokens


def _elementwise_bytes(model: ModelSpec, training: TrainingSpec, moe: bool) -> float:
    """Forward bytes of one rank's memory-bound kernels of a decoder layer but the softmax."""
    tokens, tp = training.seq_len * training.micro_batch, training.tensor_parallel
    th = sequence_tokens(training) * model.hidden
    tq = tokens * (model.heads // tp) * model.head_size
    kv = model.kv_head_count // tp * model.head_size
    gqa = 2 * LP * (tokens * kv + tq) if model.kv_head_count != model.heads else 0
    layout = 4 * 2 * LP * tq if training.flash_attention else 2 * 2 * LP * tq
    activation = (5 if model.gated else 2) * LP * tokens * ffn_width(model, moe) / tp
    residual = 2 * 3 * LP * th
    routing = 2 * 2 * LP * th * model.experts_per_token if moe else 0
    norms = 2 * norm_bytes(model, sequence_tokens(training))
    return norms + gqa + 2 * ROTARY_BYTES * tq + layout + activation + residual + routing


def score_matrix_bytes(model: ModelSpec, training: TrainingSpec) -> float:
    """Bytes of one rank's 16-bit score matrices of a layer (``b * a/tp * s^2 * 2``); 0 with flash
    attention."""
    if training.flash_attention:
        return 0.0
    return float(LP * training.micro_batch * (model.heads // training.tensor_parallel) * training.seq_len**2)


def all_reduces(tp: int, num_bytes: int, count: int) -> tuple[int, float]:
    """Calls and the bytes one of ``tp`` ranks sends in ``count`` ring all-reduces of
    ``num_bytes`` each (``2 (tp-1)/tp`` of them): none at ``tp`` 1."""
    return (0, 0.0) if tp == 1 else (count, 2 * count * (tp - 1) / tp * num_bytes)


def tp_exchanges(training: TrainingSpec, num_bytes: int, reductions: int, gathers: int = 0) -> tuple[int, float]:
    """Collective calls and the bytes one rank sends (ring) where a pass reduces ``reductions``
    partial ``num_bytes`` tensors over the tensor-parallel ranks (an all-reduce each, a
    reduce-scatter with sequence parallelism) and, with sequence parallelism, gathers ``gathers``
    (an all-gather each): none at ``tensor_parallel`` 1."""
    tp = training.tensor_parallel
    if not training.sequence_parallel or tp == 1:
        return all_reduces(tp, num_bytes, reductions)
    calls = reductions + gathers
    return calls, calls * (tp - 1) / tp * num_bytes


def score_bytes_kept(model: ModelSpec, training: TrainingSpec) -> int:
    """Bytes of ``s x s`` tensors one layer keeps for its backward without flash attention: the
    16-bit softmax output (the fused softmax saves it, the PV GEMM reads it) and, with an
    attention dropout, the dropout's mask and output (Korthikanti et al. 2022's ``5*a*s^2*b``
    then); none with flash attention."""
    elements = int(score_matrix_bytes(model, training)) // LP
    return elements * (LP + (DROPOUT_KEPT_BYTES if training.attention_dropout > 0 else 0))


def _score_extras(model: ModelSpec, training: TrainingSpec) -> tuple[float, float]:
    """Forward and backward bytes of the score-matrix kernels beside the fused softmax: the
    attention dropout (above 0) and the unfused scale and mask (without
    ``masked_softmax_fusion``); none with flash attention (the matrix stays on chip)."""
    elements = score_matrix_bytes(model, training) / LP
    dropout = DROPOUT_BYTES * elements if training.attention_dropout > 0 else 0.0
    unfused = not training.masked_softmax_fusion
    forward = dropout + (UNFUSED_MASK_BYTES * elements if unfused else 0.0)
    return forward, dropout + (UNFUSED_MASK_BACKWARD_BYTES * elements if unfused else 0.0)


MOE_MODULES = 5
"""Modules of DeepSpeed's mixture-of-experts layer that run once a pass besides the experts:
``MoE`` and ``MOELayer`` (``deepspeed/moe/layer.py``, ``sharded_moe.py``), ``TopKGate`` and its
``wg`` linear (the router), ``Experts`` (``experts.py``, which calls each expert on its chunk)."""


def decoder_module_calls(training: TrainingSpec, model: ModelSpec | None = None, moe: bool = False) -> int:
    """Modules of a ``ParallelTransformerLayer`` whose ZeRO-3 hooks run in one pass: the layer,
    input norm, self-attention, QKV, core attention, dense, post-attention norm, MLP, its two
    linears; without flash attention also the softmax and the attention dropout modules. A
    mixture-of-experts layer (``moe``) has DeepSpeed's ``MOE_MODULES`` and each of the rank's
    experts' MLP and two linears in place of the MLP's three modules, and its shared experts' three."""
    calls = 10 if training.flash_attention else 12
    if not moe or model is None:
        return calls
    local = model.experts // training.expert_parallel
    return calls - 3 + MOE_MODULES + 3 * local + (3 if model.shared_experts else 0)


def decoder_passes(model: ModelSpec, training: TrainingSpec, moe: bool = False) -> tuple[PassKernels, PassKernels]:
    """Forward and backward of one rank's share of a decoder layer (with experts when ``moe``)
    over one micro-batch; each reduces the attention's and the FFN's ``t x h`` outputs (their
    gradients) over the tensor-parallel ranks and, with expert parallelism, exchanges the
    experts' tokens (``all_to_all_bytes``)."""
    linears = _linears(model, training, moe)
    elementwise = _elementwise_bytes(model, training, moe)
    scores = score_matrix_bytes(model, training)
    calls = decoder_module_calls(training, model, moe)
    comms = tp_exchanges(training, LP * training.seq_len * training.micro_batch * model.hidden, 2, 2)
    exchanges = all_to_all_bytes(model, training, moe)
    extra_forward, extra_backward = _score_extras(model, training)
    forward = PassKernels((*linears, *_attention(model, training, False)), elementwise + 2 * scores + extra_forward,
                          calls, *comms, all_to_all=exchanges)
    grads = tuple(g for fwd in linears for g in linear_backward(fwd))
    backward = PassKernels((*grads, *_attention(model, training, True)),
                           BACKWARD_TRAFFIC * elementwise + 3 * scores + extra_backward, calls, *comms,
                           all_to_all=exchanges)
    return forward, backward


def vocab_share(model: ModelSpec, tp: int) -> int:
    """Rows of the embedding (columns of the LM head) one of ``tp`` tensor-parallel ranks holds:
    ``vocab / tp``, rounded up (Megatron pads the vocabulary to a multiple of the ranks)."""
    return -(-model.vocab // tp)


def head_passes(model: ModelSpec, training: TrainingSpec) -> tuple[PassKernels, PassKernels]:
    """Final norm, one rank's share of the LM head and the fp32 cross entropy (modules: the norm
    and the output layer); the head's input is gathered with sequence parallelism, its gradient
    reduced, and the cross entropy all-reduces ``CROSS_ENTROPY_REDUCTIONS`` values per token."""
    tokens = training.seq_len * training.micro_batch
    vocab = vocab_share(model, training.tensor_parallel)
    head = linear(tokens, model.hidden, vocab)
    norm = norm_bytes(model, sequence_tokens(training))
    logits = tokens * vocab
    hidden = LP * tokens * model.hidden
    gather_calls, gather_bytes = tp_exchanges(training, hidden, 0, 1)
    entropy_calls, entropy_bytes = all_reduces(training.tensor_parallel, FP32 * tokens, CROSS_ENTROPY_REDUCTIONS)
    forward = PassKernels((head,), norm + CROSS_ENTROPY_BYTES * logits, 2, gather_calls + entropy_calls,
                          gather_bytes + entropy_bytes)
    backward = PassKernels(linear_backward(head), BACKWARD_TRAFFIC * norm + CROSS_ENTROPY_BACKWARD_BYTES * logits, 2,
                           *tp_exchanges(training, hidden, 1))
    return forward, backward


def embedding_passes(model: ModelSpec, training: TrainingSpec) -> tuple[PassKernels, PassKernels]:
    """The lookup reads and writes one 16-bit row per token (a rank's own rows, zeros for the
    others); its backward zeroes the rank's dense ``vocab/tp x hidden`` gradient and adds a row
    per token into it (modules: the embedding, the word embeddings, the embedding dropout). The
    forward reduces the looked-up rows over the tensor-parallel ranks; with sequence
    parallelism the backward gathers their gradient back."""
    tokens = training.seq_len * training.micro_batch
    rows = LP * tokens * model.hidden
    table = LP * vocab_share(model, training.tensor_parallel) * model.hidden
    forward = PassKernels((), 2.0 * rows, 3, *tp_exchanges(training, rows, 1))
    backward = PassKernels((), float(table + 2 * rows), 3, *tp_exchanges(training, rows, 0, 1))
    return forward, backward
