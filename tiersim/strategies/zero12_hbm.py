"""What ZeRO-1/2 with CPU offload holds in HBM at its peak, beyond the persistent 16-bit model
and buckets (``zero12.place_gpu``): the largest of three moments of a backward, each the sum of
the tensors live then, as DeepSpeed's ``stage_1_and_2.py`` and Megatron make and free them
(v0.3.0 ``stage2.py`` and v0.10 ``stage_1_and_2.py`` alike):

- **a decoder layer**: the activations still kept on the GPU (the checkpoints), the recomputed
  layer's activations (its working set), the tied embedding's gradient from the LM head (autograd holds it in the
  embedding's input buffer until the lookup's backward adds its part, so the hook fires once,
  at the end), one parameter's 16-bit gradient before it moves into the bucket, and at the
  accumulation boundary that parameter's fp64 copy for the norm
  (``set_norm_for_param_grad_in_gpu``: ``grad.double().norm(2)``, 8 B per element; the
  overflow check's fp32 copy and the fp32 conversion that follow are smaller, and each is freed
  before the next);
- **the LM head**: those kept activations, the fp32 logits (the cross entropy's softmax, made its
  gradient in place), the 16-bit logits' gradient and the head weight's 16-bit gradient;
- **the embedding's gradient**, the last: it and its fp64 copy for the norm.

The sum of the largest of each, which a ZeRO-3 run counts (its layers' gathered parameters and
gradients overlap), would count tensors that are never live together.
"""

from __future__ import annotations

from tiersim.layer_kernels import vocab_share
from tiersim.strategies.kinds import FP32_BYTES
from tiersim.workload import LayerWork, TrainingStep

NORM_COPY_BYTES = 8
"""Bytes per element of the fp64 copy ``set_norm_for_param_grad_in_gpu`` makes of a gradient."""


def _decoder(step: TrainingStep) -> list[LayerWork]:
    """The step's decoder layers (a pipeline stage's own)."""
    return [layer for layer in step.layers if layer.name.startswith("layer.")]


def _embedding(step: TrainingStep) -> LayerWork | None:
    """The step's embedding (None on a pipeline stage without it)."""
    return next((layer for layer in step.layers if layer.name == "embedding"), None)


def _layer_moment(step: TrainingStep) -> dict[str, int]:
    """A decoder layer's backward (the largest layer's)."""
    lp, decoder = step.lp_bytes, _decoder(step)
    if not decoder:
        return {}
    largest = max(max(layer.tensors) for layer in decoder)
    moment = {
        "activations kept on the GPU (the checkpoints)": step.kept_activation_bytes,
        # without checkpointing a layer's activations are among those kept
        "recomputed layer's activations": max((layer.working_bytes for layer in decoder if layer.checkpointed),
                                              default=0),
        "16-bit gradient of the largest layer tensor (before the bucket)": largest * lp,
        "its fp64 copy for the gradient norm (boundary)": largest * NORM_COPY_BYTES,
    }
    if step.model.tied_embeddings and step.last_stage and _embedding(step) is not None:
        held = "tied embedding's gradient from the LM head (held to the end)"
        moment[held] = vocab_share(step.model, step.training.tensor_parallel) * step.model.hidden * lp
    return moment


def _head_moment(step: TrainingStep) -> dict[str, int]:
    """The LM head's backward (none on a pipeline stage without it)."""
    if not step.last_stage:
        return {}
    lp, rows = step.lp_bytes, vocab_share(step.model, step.training.tensor_parallel)
    logits = step.tokens_per_micro_batch * rows
    return {
        "activations kept on the GPU (the checkpoints)": step.kept_activation_bytes,
        "fp32 logits (the cross entropy's softmax and its gradient)": logits * FP32_BYTES,
        "16-bit logits' gradient": logits * lp,
        "LM head weight's 16-bit gradient": rows * step.model.hidden * lp,
    }


def _embedding_moment(step: TrainingStep) -> dict[str, int]:
    """The embedding's gradient, reduced last, and its fp64 copy for the norm (none on a
    pipeline stage without it)."""
    embedding = _embedding(step)
    if embedding is None:
        return {}
    return {"embedding's 16-bit gradient": embedding.params * step.lp_bytes,
            "its fp64 copy for the gradient norm (boundary)": embedding.params * NORM_COPY_BYTES}


def transient_peak(step: TrainingStep) -> dict[str, int]:
    """The tensors live at the backward's peak, by the moment (``what: bytes``, each named
    ``"<moment>: <tensor>"``): the moment whose tensors sum the most."""
    moments = {"layer backward": _layer_moment(step), "LM head backward": _head_moment(step),
               "embedding gradient": _embedding_moment(step)}
    name, peak = max(moments.items(), key=lambda item: sum(item[1].values()))
    return {f"{name}: {what}": num_bytes for what, num_bytes in peak.items()}
