"""A DeepSpeed config as scenario settings, read as DeepSpeed reads it, so that one file drives
DeepSpeed and tiersim.

``read_ds_config`` parses the file as DeepSpeed's loader does (hjson: comments, trailing commas,
unquoted keys; duplicate keys refused). ``apply_ds_config`` then fills ``"auto"`` as the Hugging
Face Trainer does (``tiersim.config.ds_auto``), checks every key against ``tiersim.config.ds_keys``
(a key that would change what tiersim simulates and is not modelled is refused by name; one that
changes nothing passes), and puts the modelled ones into the scenario, DeepSpeed's defaults where
the file is silent: batch (``tiersim.config.ds_batch``), precision, ZeRO stage, sub-group and
bucket sizes, gradient accumulation dtype, and the offload device, which picks the strategies:
``cpu`` keeps the scenario's ``dram``/``cxl`` entries (both run DeepSpeed's CPU offload; they
differ in the numactl policy, which the file does not hold; ``ratio`` becomes their ``ratio``),
``nvme`` its ``nvme`` entry (with the swap and aio settings), no offload ``gpu``; ``offload_param``
(stage 3) becomes each entry's ``offload_param`` block.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from tiersim.config.ds_auto import AUTO, Filled, fill_auto
from tiersim.config.ds_batch import deepspeed_batch, world_size
from tiersim.config.ds_keys import KEYS, lookup
from tiersim.config.ranks import degree
from tiersim.config.scenario import copy_plain
from tiersim.config.yamlfile import read_text
from tiersim.errors import ConfigError

MAX_DEPTH = 16
"""Nesting of a DeepSpeed config (its deepest key, ``zero_optimization.offload_optimizer.device``, is at 3)."""

_DTYPES = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16", "bf16": "bf16", "bfloat16": "bf16"}
_DEVICE_STRATEGIES = {"cpu": ("dram", "cxl"), "nvme": ("nvme",), "none": ("gpu",)}
_OFFLOAD = "zero_optimization.offload_optimizer."
_PARAM = "zero_optimization.offload_param."
PARAM_OFFLOAD_DEFAULTS: dict[str, int] = {
    "buffer_count": 5,
    "buffer_size": 100_000_000,
    "max_in_cpu": 1_000_000_000,
    "pin_memory": False,
}
"""``strategies.NAME.offload_param`` options at DeepSpeed's defaults (``offload_config.py``), for a
DeepSpeed config here and a training log (``tiersim.ingest.log_scenario``) alike."""
NVME_OPTIONS = {  # strategies.nvme option: (DeepSpeed key, DeepSpeed's default)
    "buffer_count": (_OFFLOAD + "buffer_count", 4),
    "pipeline_read": (_OFFLOAD + "pipeline_read", False),
    "pipeline_write": (_OFFLOAD + "pipeline_write", False),
    "block_size": ("aio.block_size", 1_048_576),
    "queue_depth": ("aio.queue_depth", 8),
    "thread_count": ("aio.thread_count", 1),
}


class DeepSpeedAutoFilled(UserWarning):
    """The ``"auto"`` values of a DeepSpeed config that tiersim filled, in one line."""


class DeepSpeedKeyMoved(UserWarning):
    """A section of a DeepSpeed config that tiersim read at the place DeepSpeed reads it from."""


MISPLACED_AIO = "zero_optimization.aio"
"""Where the Hugging Face docs' ZeRO-3 NVMe example puts ``aio``: DeepSpeed reads ``aio`` at the
top level only (``swap_tensor/aio_config.py``, ``get_aio_config(param_dict)``), and from 0.7 its
ZeRO config is a pydantic model with ``extra = "forbid"`` (``runtime/config_utils.py``,
``DeepSpeedConfigModel``), which rejects the key there."""


def read_ds_config(path: str | Path) -> dict[str, Any]:
    """Read a DeepSpeed config (an hjson or JSON object), or say in one line why not."""
    import hjson  # here, not at import: only --ds-config needs it

    source = str(path)
    text = read_text(Path(path))
    try:
        data = hjson.loads(text, object_pairs_hook=lambda pairs: _mapping(pairs, source))
    except hjson.HjsonDecodeError as exc:
        raise ConfigError(source, f"line {exc.lineno}", f"malformed JSON (hjson, as DeepSpeed reads it): {exc.msg}") \
            from None
    except RecursionError:
        raise ConfigError(source, "", f"nested deeper than {MAX_DEPTH} levels") from None
    except (OverflowError, ValueError) as exc:  # hjson's own conversions: "1e999"
        raise ConfigError(source, "", f"malformed JSON (hjson, as DeepSpeed reads it): {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(source, "", "a DeepSpeed config must be a JSON object")
    _check_depth(data, source)
    return data


def apply_ds_config(data: dict[str, Any], ds: dict[str, Any], source: str) -> tuple[dict[str, Any], str | None]:
    """The scenario ``data`` with ``ds``'s settings applied (``data`` is not changed), and the
    line that says which ``"auto"`` values were filled (None: there were none). A misplaced
    ``zero_optimization.aio`` is read as the top-level one (``hoist_aio``), said in one
    ``DeepSpeedKeyMoved`` warning."""
    hoisted = hoist_aio(ds, source)
    filled = fill_auto(hoisted, data, source)
    settings, defaulted = _settings(filled.config, source)
    out = copy_plain(data)
    training = _section(out, "training", source)
    stage = _apply_training(training, settings, world_size(data, source), source)
    _check_pipeline(training, settings, source)
    _apply_offload(out, settings, stage, source)
    if hoisted is not ds:  # said once the file is known to run, so a refusal stays one line
        warnings.warn(DeepSpeedKeyMoved(f"{source}: {MISPLACED_AIO} read as the top-level aio, where DeepSpeed reads "
                                        "it (DeepSpeed 0.7 and later reject the key inside zero_optimization)"),
                      stacklevel=3)
    return out, _auto_line(filled, defaulted)


def hoist_aio(ds: dict[str, Any], source: str) -> dict[str, Any]:
    """``ds`` with a ``zero_optimization.aio`` section read as the top-level ``aio`` (a new
    mapping; ``ds`` itself when there is none to move); refused where the file has both."""
    zero = ds.get("zero_optimization")
    if not isinstance(zero, dict) or "aio" not in zero:
        return ds
    if "aio" in ds:
        raise ConfigError(source, MISPLACED_AIO, "a second aio section beside the top-level one; DeepSpeed reads only "
                                                 "the top-level aio, and from 0.7 rejects this key")
    return {**ds, "aio": zero["aio"], "zero_optimization": {k: v for k, v in zero.items() if k != "aio"}}


def _settings(config: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """The modelled keys of ``config`` ({dotted key: value}) and the ``zero_optimization`` keys
    still ``"auto"``, which DeepSpeed leaves at their defaults; a refused or unknown key raises."""
    modelled: dict[str, Any] = {}
    defaulted: list[str] = []
    for path, value in _leaves(config):
        if value is None:
            continue
        if value == AUTO and path.startswith("zero_optimization."):
            defaulted.append(path)
        elif _is_modelled(path, value, source):
            modelled[path] = value
    return modelled, defaulted


def _is_modelled(path: str, value: object, source: str) -> bool:
    """Whether key ``path`` is one tiersim models (False: one that changes nothing); raises for
    a key that is unknown, refused at ``value``, or still ``"auto"``."""
    key = lookup(path)
    if key is None:
        raise _unknown(path, value, source)
    if key.treatment == "ignored":
        return False
    if value == AUTO:
        raise ConfigError(source, path, "is \"auto\", which the Hugging Face Trainer does not fill and "
                                        "DeepSpeed does not read")
    if key.treatment == "refused" and value not in key.accepted:
        accepted = " or ".join(_show(v) for v in key.accepted if v is not None)
        raise ConfigError(source, path, f"{_show(value)}: {key.note} is not modelled"
                                        + (f"; tiersim accepts only {accepted}" if accepted else ""))
    return key.treatment == "modelled"


def _unknown(path: str, value: object, source: str) -> ConfigError:
    """The error for a key ``lookup`` does not know, at its first unknown section."""
    parts = path.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if not any(known == prefix or known.startswith(prefix + ".") for known in KEYS):
            break
    else:
        return ConfigError(source, path, f"expected a mapping (a DeepSpeed section), got {_show(value)}")
    if end > 1 and parts[0] == "zero_optimization":
        return ConfigError(source, prefix, "not a key of DeepSpeed 0.16's ZeRO config, which refuses unknown keys")
    return ConfigError(source, prefix, "not a DeepSpeed 0.16 key tiersim knows (docs/guide/deepspeed-config.md "
                                       "lists them); refused rather than read past")


def _apply_training(training: dict[str, Any], settings: dict[str, Any], world: int, source: str) -> int:
    """Batch, precision, ZeRO and optimizer settings into the scenario's ``training``; the stage."""

    def get(key: str, kind: Callable[[str, str, object], Any], default: Any = None) -> Any:
        return kind(source, key, settings[key]) if key in settings else default

    batch = deepspeed_batch(get("train_batch_size", _whole), get("train_micro_batch_size_per_gpu", _whole),
                            get("gradient_accumulation_steps", _whole), world, source)
    training["micro_batch"], training["global_batch"] = batch.micro, batch.train
    training["precision"] = _precision(get("fp16.enabled", _flag, False),
                                       get("bf16.enabled", _flag, get("bfloat16.enabled", _flag, False)), source)
    training["zero_stage"] = stage = get("zero_optimization.stage", _stage, 0)
    training["sub_group_size"] = get("zero_optimization.sub_group_size", _whole, 1_000_000_000)
    training["reduce_bucket_size"] = get("zero_optimization.reduce_bucket_size", _whole, 500_000_000)
    training["prefetch_bucket_size"] = get("zero_optimization.stage3_prefetch_bucket_size", _count, 50_000_000)
    training.pop("grad_accum_dtype", None)
    dtype = get("data_types.grad_accum_dtype", _dtype)
    if dtype is not None:
        training["grad_accum_dtype"] = dtype
    training["cpu_checkpointing"] = get("activation_checkpointing.cpu_checkpointing", _flag, False)
    overlap = "zero_optimization.overlap_comm"
    training["overlap_comm"] = get(overlap, _flag, stage >= 3)  # DeepSpeed's default: true at ZeRO-3 only
    if stage >= 3 and not training["overlap_comm"]:
        raise ConfigError(source, overlap, "false at ZeRO stage 3: collectives not overlapped with compute are not "
                                           "modelled there")
    get("optimizer.type", _adam)
    betas = get("optimizer.params.betas", _betas)
    if betas is not None:
        training["adam_beta1"], training["adam_beta2"] = betas
    return int(stage)


def _check_pipeline(training: dict[str, Any], settings: dict[str, Any], source: str) -> None:
    """DeepSpeed's pipeline engine splits each send over the tensor-parallel ranks and all-gathers
    it after (``pipe_partitioned``, ``grad_partitioned``; true by default): refused where the
    scenario has tensor and pipeline parallelism both above 1, whose sends tiersim models whole."""
    split = degree(training, "tensor_parallel") > 1 and degree(training, "pipeline_parallel") > 1
    for key in ("pipeline.pipe_partitioned", "pipeline.grad_partitioned"):
        if _flag(source, key, settings.get(key, True)) and split:
            raise ConfigError(source, key, "true (DeepSpeed's default) with training.tensor_parallel and "
                                           "pipeline_parallel above 1: sends split over the tensor-parallel ranks "
                                           "and all-gathered are not modelled; false sends them whole, as tiersim does")


def _precision(fp16: bool, bf16: bool, source: str) -> str:
    """DeepSpeed's training precision (``_initialize_params``)."""
    if fp16 and bf16:
        raise ConfigError(source, "bf16.enabled", "bfloat16 and fp16 modes cannot be simultaneously enabled "
                                                  "(DeepSpeed refuses it)")
    if not (fp16 or bf16):
        raise ConfigError(source, "fp16.enabled", "neither fp16.enabled nor bf16.enabled: DeepSpeed trains in fp32, "
                                                  "which tiersim does not model")
    return "fp16" if fp16 else "bf16"


def _apply_offload(out: dict[str, Any], settings: dict[str, Any], stage: int, source: str) -> None:
    """The offload device's strategies, pinning and NVMe swap settings into the scenario."""
    key = _OFFLOAD + "device"
    device = _device(source, key, settings.get(key, "none"))
    if device == "nvme" and stage < 3:
        raise ConfigError(source, key, f"{device!r} at ZeRO stage {stage}: DeepSpeed's ZeRO-1/2 (stage_1_and_2.py) "
                                       "offloads to CPU memory whatever the device; write \"cpu\"")
    if device != "none":
        pinned = _flag(source, _OFFLOAD + "pin_memory", settings.get(_OFFLOAD + "pin_memory", False))
        _section(out, "hardware", source)["pinned"] = pinned
    kinds: dict[str, Callable[[str, str, object], Any]] = {"pipeline_read": _flag, "pipeline_write": _flag}
    swap = {option: kinds.get(option, _whole)(source, name, settings.get(name, default))
            for option, (name, default) in NVME_OPTIONS.items()}
    ratio = _cpu_options(settings, device, source)
    options = {**(swap if device == "nvme" else ratio), "offload_param": _param_offload(settings, stage, source)}
    out["strategies"] = _strategies(out.get("strategies"), device, options)


def _cpu_options(settings: dict[str, Any], device: str, source: str) -> dict[str, Any]:
    """``offload_optimizer.ratio`` as the ``dram``/``cxl`` option ``ratio`` (DeepSpeed's default
    1.0: everything on the CPU); below 1 it needs the CPU as the offload device."""
    key = _OFFLOAD + "ratio"
    if key not in settings or device == "none":
        return {}
    ratio = _fraction(source, key, settings[key])
    if device == "nvme" and ratio < 1:
        raise ConfigError(source, key, f"{ratio} with device \"nvme\": tiersim models partial offload with the "
                                       "CPU (DeepSpeed's hybrid optimizer needs DeepSpeedCPUAdam)")
    return {"ratio": ratio} if device == "cpu" else {}


def _param_offload(settings: dict[str, Any], stage: int, source: str) -> dict[str, Any] | None:
    """The ``offload_param`` block of every strategy entry (None: the parameters stay in HBM)."""
    device = _device(source, _PARAM + "device", settings.get(_PARAM + "device", "none"))
    if device == "none":
        return None
    if stage < 3:
        raise ConfigError(source, _PARAM + "device", f"{device!r} at ZeRO stage {stage}: DeepSpeed offloads "
                                                     "parameters at stage 3 only")
    block: dict[str, Any] = {"device": device}
    for option, default in PARAM_OFFLOAD_DEFAULTS.items():
        kind = _flag if option == "pin_memory" else _count
        block[option] = kind(source, _PARAM + option, settings.get(_PARAM + option, default))
    return block


def _strategies(entries: object, device: str, options: dict[str, Any]) -> list[Any]:
    """The scenario's strategy entries that run ``device``'s offload (a default one if none),
    with ``options`` (one of None removes that option from them)."""
    wanted = _DEVICE_STRATEGIES[device]
    kept = [e for e in entries if _name(e) in wanted] if isinstance(entries, list) else []
    if not kept:
        kept = [wanted[0]]
    fields = {key: value for key, value in options.items() if value is not None}
    out: list[Any] = []
    for entry in kept:
        mapping = {"name": entry} if isinstance(entry, str) else {
            key: value for key, value in entry.items() if key not in options or options[key] is not None}
        mapping.update(fields)
        out.append(mapping if len(mapping) > 1 else mapping["name"])
    return out


def _auto_line(filled: Filled, defaulted: list[str]) -> str | None:
    """One line: the ``"auto"`` values filled, those left to DeepSpeed and those of no effect."""
    parts = []
    if filled.filled:
        parts.append("\"auto\" filled from the scenario as the Hugging Face Trainer fills it: "
                     + ", ".join(filled.filled))
    if defaulted:
        parts.append("\"auto\" left to DeepSpeed's default: " + ", ".join(defaulted))
    if filled.no_effect:
        parts.append("\"auto\" of no effect on the simulation: " + ", ".join(filled.no_effect))
    return "; ".join(parts) or None


def _mapping(pairs: list[tuple[str, Any]], source: str) -> dict[str, Any]:
    """An hjson object as a dict; a key given twice is refused, as DeepSpeed refuses it."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(source, key, "given twice (DeepSpeed refuses duplicate keys)")
        out[key] = value
    return out


def _check_depth(data: object, source: str) -> None:
    stack = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(source, "", f"nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _section(out: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    section = out.setdefault(name, {})
    if not isinstance(section, dict):
        raise ConfigError(source, name, f"the scenario's {name} section is not a mapping")
    return section


def _name(entry: object) -> object:
    return entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None


def _leaves(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Dotted leaf keys of a nested mapping (lists are leaves, empty mappings have none)."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.extend(_leaves(value, f"{path}."))
        else:
            out.append((path, value))
    return out


def _show(value: object) -> str:
    return json.dumps(value) if isinstance(value, (str, bool, list)) or value is None else str(value)


def _is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(source: str, key: str, value: object) -> int:
    if not _is_number(value) or value != int(value) or value <= 0:
        raise ConfigError(source, key, f"expected a positive whole number, got {_show(value)}")
    return int(value)


def _fraction(source: str, key: str, value: object) -> float:
    if not _is_number(value) or not 0 <= value <= 1:
        raise ConfigError(source, key, f"expected a number from 0 to 1, got {_show(value)}")
    return float(value)


def _count(source: str, key: str, value: object) -> int:
    """A whole number of at least 0 (DeepSpeed's ``ge=0`` fields)."""
    if not _is_number(value) or value != int(value) or value < 0:
        raise ConfigError(source, key, f"expected a whole number of at least 0, got {_show(value)}")
    return int(value)


def _stage(source: str, key: str, value: object) -> int:
    if isinstance(value, bool) or value not in (0, 1, 2, 3):
        raise ConfigError(source, key, f"expected a ZeRO stage 0, 1, 2 or 3, got {_show(value)}")
    return int(value)


def _flag(source: str, key: str, value: object) -> bool:
    """A boolean as DeepSpeed reads it: true/false, or the integers 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(source, key, f"expected true or false (or 1 or 0), got {_show(value)}")


def _dtype(source: str, key: str, value: object) -> str:
    if not isinstance(value, str) or value not in _DTYPES:
        raise ConfigError(source, key, f"expected one of {', '.join(_DTYPES)}, got {_show(value)}")
    return _DTYPES[value]


def _device(source: str, key: str, value: object) -> str:
    if not isinstance(value, str) or value not in _DEVICE_STRATEGIES:
        raise ConfigError(source, key, f"expected one of {', '.join(_DEVICE_STRATEGIES)}, got {_show(value)}")
    return value


def _adam(source: str, key: str, value: object) -> str:
    if not isinstance(value, str) or value.lower() not in ("adam", "adamw"):
        raise ConfigError(source, key, f"{_show(value)}: tiersim models Adam and AdamW (CPU Adam when offloaded), "
                                       "not another optimizer")
    return value


def _betas(source: str, key: str, value: object) -> tuple[float, float]:
    if not (isinstance(value, list) and len(value) == 2 and all(_is_number(b) for b in value)):
        raise ConfigError(source, key, f"expected two numbers, got {_show(value)}")
    return float(value[0]), float(value[1])
