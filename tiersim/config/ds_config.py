"""A DeepSpeed JSON config as scenario settings, so one file drives DeepSpeed and tiersim.

``apply_ds_config(data, ds, source)`` returns the scenario mapping with the ZeRO, offload, aio,
batch and precision settings of ``ds`` put in, and the keys tiersim does not model. The offload
device picks the strategies: ``cpu`` keeps the scenario's ``dram``/``cxl`` entries (both run
DeepSpeed's CPU offload; they differ in the numactl policy, which the JSON does not hold),
``nvme`` its ``nvme`` entry, no offload ``gpu``. A value DeepSpeed's launcher resolves
(``"auto"``, filled in by the Hugging Face Trainer) or one of the wrong type is an error naming
the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiersim.config.scenario import copy_plain
from tiersim.errors import ConfigError

_DTYPES = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16", "bf16": "bf16", "bfloat16": "bf16"}
_DEVICE_STRATEGIES = {"cpu": ("dram", "cxl"), "nvme": ("nvme",), "none": ("gpu",)}


def read_ds_config(path: str | Path) -> dict[str, Any]:
    """Read a DeepSpeed JSON config (a mapping), or say in one line why not."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "", f"cannot read file ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(source, "", "a DeepSpeed config must be a JSON object")
    return data


def apply_ds_config(data: dict[str, Any], ds: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """The scenario ``data`` with ``ds``'s settings applied, and the DeepSpeed keys not modeled."""
    flat = dict(_leaves(ds))
    for key, value in flat.items():
        if value == "auto":
            raise ConfigError(source, key, "is \"auto\": tiersim needs the value DeepSpeed would resolve; write it out")
    out = copy_plain(data)
    training = out.setdefault("training", {})
    if not isinstance(training, dict):
        raise ConfigError(source, "training", "the scenario's training section is not a mapping")
    used: set[str] = set()

    def take(key: str, kind: Callable[[str, str, object], Any]) -> Any:
        if key not in flat:
            return None
        used.add(key)
        return kind(source, key, flat[key])

    simple = {
        "train_micro_batch_size_per_gpu": ("micro_batch", _whole),
        "train_batch_size": ("global_batch", _whole),
        "zero_optimization.stage": ("zero_stage", _stage),
        "zero_optimization.sub_group_size": ("sub_group_size", _whole),
        "zero_optimization.reduce_bucket_size": ("reduce_bucket_size", _whole),
    }
    for key, (field, kind) in simple.items():
        value = take(key, kind)
        if value is not None:
            training[field] = value
    steps = take("gradient_accumulation_steps", _whole)
    if steps is not None and "train_batch_size" not in flat:
        ranks = training.get("data_parallel") or out.get("hardware", {}).get("gpus", 1)
        training["global_batch"] = training.get("micro_batch", 1) * steps * ranks
    if take("bf16.enabled", _boolean):
        training["precision"] = "bf16"
    if take("fp16.enabled", _boolean):
        training["precision"] = "fp16"
    dtype = take("data_types.grad_accum_dtype", _dtype)
    if dtype is not None:
        training["grad_accum_dtype"] = dtype
    betas = flat.get("optimizer.params.betas")
    if betas is not None:
        used.add("optimizer.params.betas")
        if not (isinstance(betas, list) and len(betas) == 2 and all(_is_number(b) for b in betas)):
            raise ConfigError(source, "optimizer.params.betas", f"expected two numbers, got {betas!r}")
        training["adam_beta1"], training["adam_beta2"] = betas
    pinned = take("zero_optimization.offload_optimizer.pin_memory", _boolean)
    if pinned is not None:
        out.setdefault("hardware", {})["pinned"] = pinned
    device = take("zero_optimization.offload_optimizer.device", _device) or "none"
    options = {
        "buffer_count": take("zero_optimization.offload_optimizer.buffer_count", _whole),
        "pipeline_read": take("zero_optimization.offload_optimizer.pipeline_read", _boolean),
        "pipeline_write": take("zero_optimization.offload_optimizer.pipeline_write", _boolean),
        "block_size": take("aio.block_size", _whole),
        "queue_depth": take("aio.queue_depth", _whole),
        "thread_count": take("aio.thread_count", _whole),
    }
    out["strategies"] = _strategies(out.get("strategies"), device, {k: v for k, v in options.items() if v is not None})
    return out, sorted(set(flat) - used)


def _strategies(entries: object, device: str, options: dict[str, Any]) -> list[Any]:
    """The scenario's strategy entries that run ``device``'s offload (a default one if none)."""
    wanted = _DEVICE_STRATEGIES[device]
    kept = [e for e in entries if _name(e) in wanted] if isinstance(entries, list) else []
    if not kept:
        kept = [wanted[0]]
    if device == "nvme" and options:
        kept = [{**({"name": e} if isinstance(e, str) else e), **options} for e in kept]
    return kept


def _name(entry: object) -> object:
    return entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None


def _leaves(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Dotted leaf keys of a nested mapping (lists are leaves)."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.extend(_leaves(value, f"{path}."))
        else:
            out.append((path, value))
    return out


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(source: str, key: str, value: object) -> int:
    if not isinstance(value, (int, float)) or not _is_number(value) or value != int(value) or value <= 0:
        raise ConfigError(source, key, f"expected a positive whole number, got {value!r}")
    return int(value)


def _stage(source: str, key: str, value: object) -> int:
    if value not in (0, 1, 2, 3) or isinstance(value, bool):
        raise ConfigError(source, key, f"expected a ZeRO stage 0, 1, 2 or 3, got {value!r}")
    return int(value)


def _boolean(source: str, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(source, key, f"expected true or false, got {value!r}")
    return value


def _dtype(source: str, key: str, value: object) -> str:
    if not isinstance(value, str) or value not in _DTYPES:
        raise ConfigError(source, key, f"expected one of {', '.join(_DTYPES)}, got {value!r}")
    return _DTYPES[value]


def _device(source: str, key: str, value: object) -> str:
    if value is None:
        return "none"
    if not isinstance(value, str) or value not in _DEVICE_STRATEGIES:
        raise ConfigError(source, key, f"expected one of {', '.join(_DEVICE_STRATEGIES)}, got {value!r}")
    return value
