"""A model by name or by Hugging Face ``config.json`` -> the fields of ``ModelSpec``.

``model:`` in a scenario (and ``--model`` on ``run`` and ``plan``) may be, besides the mapping of
tiersim's own fields:

* a name, ``meta-llama/Llama-3.1-70B``: looked up in the bundled catalogue
  (``tiersim.catalogue``, listed by ``tiersim models``); a name it lacks is fetched from the
  Hugging Face Hub when the optional ``huggingface_hub`` is installed (``pip install
  'tiersim[hf]'``) and online, else refused in one line naming the catalogue and the form below;
* ``{hf_config: path/to/config.json}``: a local ``config.json`` (read as any input file: no
  blocking, at most ``limits.MAX_FILE_BYTES``), a relative path taken from the scenario's folder;
  tiersim's own fields given beside it win over the file's (``{hf_config: c.json, layers: 4}``).

``model_fields`` maps the ``config.json`` fields (the table in ``docs/guide/scenarios.md``):
grouped-query attention, ``head_dim``, gated or plain FFN (GPT-NeoX and Falcon: GELU, two
matrices), biases, LayerNorm, tied embeddings, the experts of Mixtral, Qwen-MoE and DeepSeek and
DeepSeek's latent attention. Not modelled, and left out of the counts (each under 0.1% of the
parameters of the catalogue's models): the q/k norms of Qwen3, Gemma 3 and OLMo-2, Gemma's extra
norms around the attention and the FFN, the output projection's bias under ``attention_bias``,
DeepSeek-V3's multi-token-prediction module (``num_nextn_predict_layers``, which Hugging Face
Transformers does not load either) and the vision tower of a multimodal config (its
``text_config`` is read). Expert parallelism (``ep_size`` above 1) is refused there: it is ``training.expert_parallel``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiersim.catalogue import lookup
from tiersim.config.yamlfile import check_tree, read_input
from tiersim.errors import ConfigError

PLAIN_MLP = frozenset({"gpt_neox", "falcon"})
"""Model types whose FFN is up, GELU, down (two matrices)."""
LAYERNORM = frozenset({"gpt_neox", "falcon", "olmo"})
"""Model types with LayerNorm (OLMo's non-parametric one counted as LayerNorm's weight and bias)."""
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "falcon"})
"""Model types whose configuration class ties the LM head to the embedding when ``tie_word_embeddings``
is absent (the others default to an untied head)."""
KNOWN = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                   "gemma3", "gemma3_text", "phi3", "deepseek_v2", "deepseek_v3", "olmo", "olmo2", "gpt_neox",
                   "falcon"})
"""Model types whose ``config.json`` fields this module reads as their architecture defines them;
another is read as a Llama-style decoder, with a warning."""
QKV_BIAS = frozenset({"qwen2", "qwen2_moe"})
"""Model types whose q, k and v projections always have biases (Hugging Face's ``Qwen2Attention``)."""
HINT = ("list the catalogue with `tiersim models`, or give a local config.json as "
        "model: {hf_config: path/to/config.json}")

_REQUIRED = object()


class ModelTypeWarning(UserWarning):
    """A ``config.json`` of a model type ``model_fields`` does not know, read as Llama-style."""


def _whole(config: Mapping[str, Any], source: str, *keys: str, default: Any = _REQUIRED) -> Any:
    """The value of the first of ``keys`` present (and not null) in ``config``, a whole number;
    ``default`` when none is (an error naming the first key when there is no default)."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(source, key, f"expected a whole number, got {value!r}")
        return value
    if default is _REQUIRED:
        raise ConfigError(source, keys[0], "required field is missing from the config.json")
    return default


def _flag(config: Mapping[str, Any], source: str, key: str, default: bool) -> bool:
    """A true/false field of ``config`` (``default`` when absent)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(source, key, f"expected true or false, got {value!r}")
    return value


def _attention(config: Mapping[str, Any], source: str, kind: str) -> dict[str, Any]:
    """Heads, key/value heads and head sizes; DeepSeek's latent attention."""
    heads = _whole(config, source, "num_attention_heads", "n_head")
    fields: dict[str, Any] = {"heads": heads}
    if kind == "falcon" and not config.get("new_decoder_architecture"):
        fields["kv_heads"] = 1 if _flag(config, source, "multi_query", True) else heads
    else:
        fields["kv_heads"] = _whole(config, source, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    if config.get("kv_lora_rank") is None:
        fields["head_dim"] = _whole(config, source, "head_dim", default=None)
        return fields
    rope = _whole(config, source, "qk_rope_head_dim")
    return {**fields, "kv_lora_rank": _whole(config, source, "kv_lora_rank"),
            "q_lora_rank": _whole(config, source, "q_lora_rank", default=None), "rope_head_dim": rope,
            "head_dim": _whole(config, source, "qk_nope_head_dim") + rope,
            "v_head_dim": _whole(config, source, "v_head_dim", default=None)}


def _style(config: Mapping[str, Any], source: str, kind: str) -> dict[str, Any]:
    """Activation, norm, biases and tied embeddings."""
    act = config.get("hidden_activation") or config.get("hidden_act") or "silu"
    if not isinstance(act, str):
        raise ConfigError(source, "hidden_act", f"expected the activation's name, got {act!r}")
    activation = "gelu" if kind in PLAIN_MLP else "geglu" if act.startswith("gelu") else "swiglu"
    if kind == "gpt_neox":
        bias = _flag(config, source, "attention_bias", True)
    elif kind == "falcon":
        bias = _flag(config, source, "bias", False)
    else:
        bias = _flag(config, source, "attention_bias", False) and _flag(config, source, "mlp_bias", False)
    qkv_bias = kind in QKV_BIAS or (not bias and _flag(config, source, "attention_bias", False))
    return {"activation": activation, "norm": "layernorm" if kind in LAYERNORM else "rmsnorm", "bias": bias,
            "qkv_bias": qkv_bias,
            "tied_embeddings": _flag(config, source, "tie_word_embeddings", kind in TIED_BY_DEFAULT)}


def _experts(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Routed and shared experts, top-k, expert width, the dense layers (none for a dense model)."""
    experts = _whole(config, source, "num_local_experts", "num_experts", "n_routed_experts", default=0)
    if not experts:
        return {}
    if _whole(config, source, "ep_size", default=1) > 1:
        raise ConfigError(source, "ep_size", "expert parallelism is a training setting, not the model's: "
                                             "set it to 1 here and training.expert_parallel in the scenario")
    if _whole(config, source, "moe_layer_freq", default=1) != 1:
        raise ConfigError(source, "moe_layer_freq", "only 1 (every layer past first_k_dense_replace) is modelled")
    if config.get("mlp_only_layers"):
        raise ConfigError(source, "mlp_only_layers", "listed dense layers are not modelled; use decoder_sparse_step")
    width = _whole(config, source, "moe_intermediate_size", default=None)
    shared = _whole(config, source, "n_shared_experts", default=0)
    shared_width = _whole(config, source, "shared_expert_intermediate_size", default=0)
    if shared_width and width and shared_width % width == 0:
        shared = shared_width // width
    elif shared_width:
        raise ConfigError(source, "shared_expert_intermediate_size",
                          f"{shared_width} is not a whole number of experts of moe_intermediate_size {width}")
    return {"experts": experts, "experts_per_token": _whole(config, source, "num_experts_per_tok", "experts_per_token"),
            "expert_ffn": width, "shared_experts": shared,
            "dense_layers": _whole(config, source, "first_k_dense_replace", default=0),
            "moe_interval": _whole(config, source, "decoder_sparse_step", default=1)}


def model_fields(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ``ModelSpec`` fields of a Hugging Face ``config.json`` (its ``text_config`` when it has
    one); errors name ``source`` and the ``config.json`` field."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        config = text
    kind = config.get("model_type", "")
    kind = kind if isinstance(kind, str) else ""
    hidden = _whole(config, source, "hidden_size", "n_embed", "d_model")
    fields = {
        "layers": _whole(config, source, "num_hidden_layers", "n_layer"),
        "hidden": hidden,
        "ffn": _whole(config, source, "intermediate_size", "ffn_hidden_size",
                      default=4 * hidden if kind == "falcon" else _REQUIRED),
        "vocab": _whole(config, source, "vocab_size"),
        **_attention(config, source, kind),
        **_style(config, source, kind),
        **_experts(config, source),
    }
    if kind not in KNOWN:
        warnings.warn(ModelTypeWarning(f"{source}: model_type {kind or '(none)'!r} is not one tiersim knows; read as "
                                       f"a Llama-style decoder (gated FFN, RMSNorm; biases, GQA and experts as its "
                                       f"fields say)"), stacklevel=2)
    return fields


def read_config(path: Path) -> dict[str, Any]:
    """A local ``config.json`` as a mapping (read as any input file; one-line errors)."""
    raw = read_input(path)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(str(path), "", "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(str(path), "", "JSON nested too deep") from None
    check_tree(data, str(path))
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a config.json must be a mapping")
    return data


def _hub_config(name: str, source: str, field: str) -> dict[str, Any]:
    """The ``config.json`` of ``name`` from the Hugging Face Hub (``huggingface_hub``)."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ConfigError(source, field, f"unknown model {name!r}: not in the bundled catalogue, and fetching "
                                         f"others needs huggingface_hub (pip install 'tiersim[hf]'); "
                                         f"{HINT}") from None
    try:
        path = hf_hub_download(repo_id=name, filename="config.json")
    except Exception as exc:  # offline, unknown or gated: any failure of the hub is one line
        raise ConfigError(source, field, f"unknown model {name!r}: not in the bundled catalogue, and the Hugging "
                                         f"Face Hub did not give its config.json ({type(exc).__name__}); "
                                         f"{HINT}") from None
    return read_config(Path(path))


def expand_model(value: object, source: str, folder: Path, field: str = "model") -> object:
    """``model:`` as tiersim's own fields: a name or a ``{hf_config: ...}`` mapping turned into
    them (relative paths from ``folder``), anything else returned as it is."""
    if isinstance(value, str):
        found = lookup(value)
        if found is not None:
            return {"name": found.name, **model_fields(found.config, f"catalogue {found.name}")}
        return {"name": value, **model_fields(_hub_config(value, source, field), f"{value} config.json")}
    if not isinstance(value, dict) or "hf_config" not in value:
        return value
    given = value["hf_config"]
    if not isinstance(given, str) or not given:
        raise ConfigError(source, f"{field}.hf_config", f"expected the path of a config.json, got {given!r}")
    path = folder / given
    config = read_config(path)
    rest = {key: item for key, item in value.items() if key != "hf_config"}
    return {"name": str(config.get("_name_or_path") or given), **model_fields(config, str(path)), **rest}
