"""Read a Megatron-DeepSpeed training log: what ran, on what binding, and how long each part took.

A log holds (DeepSpeed 0.16, Megatron-DeepSpeed):
- the launcher's ``cmd = ... pretrain_gpt.py ARGS`` line: model shape and training arguments;
- one ``spawned with command: ['numactl', POLICY, NODES, '-C', CORES, ...]`` line per rank;
- DeepSpeed's printed configuration: ``zero_config``, ``aio_config`` and the user's JSON;
- per iteration: DeepSpeed's rank-0 timers (``time (ms) | fwd: ... | bwd: ...``, swap timers),
  ``see_memory_usage`` lines (rank 0 ``MA``/``Max_MA``/``CA``/``Max_CA``, node ``CPU Virtual
  Memory: used``) and Megatron's ``elapsed time per iteration (ms)``.

Times are stored in seconds and memory in bytes (DeepSpeed prints GiB as "GB"). What a log
lacks is a ``ConfigError`` naming the file and the missing piece.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tiersim.errors import ConfigError

GIB = 1 << 30

_CMD = re.compile(r"\] cmd = (.*)$")
_SPAWN = re.compile(r"spawned with command: (\[.*\])\s*$")
_TIMERS = re.compile(r"time \(ms\) \| (.*)$")
_ITERATION = re.compile(r"elapsed time per iteration \(ms\): ([\d.]+)")
"""Megatron's iteration line: ``iteration N/ M | ...`` or, in forks, other fields first
(``elapsed_time 9.19 | consumed samples: ... | elapsed time per iteration (ms): 9195.7 | ...``)."""
_MEMORY_LABEL = re.compile(r"see_memory_usage\] (.*?)\s*$")
_GPU_MEMORY = re.compile(r"MA ([\d.]+) GB\s+Max_MA ([\d.]+) GB\s+CA ([\d.]+) GB\s+Max_CA ([\d.]+) GB")
_CPU_MEMORY = re.compile(r"CPU Virtual Memory:\s+used = ([\d.]+) GB")
_DS_FIELD = re.compile(r"\[config\.py:\d+:print\]\s+(\w+) \.+ (.*)$")
_BUILT = "[after model, optimizer, and learning rate scheduler are built]"
_PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")

TIMER_PHASES = {"fwd": "forward", "bwd": "backward", "step": "optimizer_step"}
"""DeepSpeed's rank-0 timers of the three phases, by the name tiersim gives the phase."""


@dataclass(frozen=True)
class RankBinding:
    """One rank's numactl binding: ``policy`` "bind" (-m) or "weighted-interleave" (-w) over
    ``nodes``; ``cpus`` the logical CPUs of ``-C``."""

    policy: str
    nodes: tuple[int, ...]
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class MemorySample:
    """One ``see_memory_usage`` report (bytes): rank 0's allocated (MA), peak allocated
    (Max_MA), reserved (CA), peak reserved (Max_CA), and the node's used host memory; the
    iteration it was printed in (0 before the first)."""

    label: str
    iteration: int
    allocated: float
    max_allocated: float
    reserved: float
    max_reserved: float
    host_used: float


@dataclass
class TrainingLog:
    """What one training log says (times in seconds, memory in bytes)."""

    path: str
    args: dict[str, str | bool]
    """Megatron arguments from the launcher command (flags without a value are True)."""
    bindings: list[RankBinding]
    zero_config: dict[str, str]
    aio_config: dict[str, object]
    user_config: dict[str, object]
    vocab: int | None = None
    """Megatron's padded vocabulary size (``padded vocab ... (new size: N)``), None if not printed."""
    iterations: list[dict[str, float]] = field(default_factory=list)
    """Per iteration: ``iteration`` (Megatron's elapsed time) and every rank-0 timer."""
    memory: list[MemorySample] = field(default_factory=list)


def read_log(path: str | Path) -> TrainingLog:
    """Parse a Megatron-DeepSpeed training log; a truncated or foreign one is a ConfigError."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read file ({exc.strerror})") from None
    lines = text.splitlines()
    args = _launcher_args(lines, source)
    bindings = [_binding(m.group(1), source) for line in lines if (m := _SPAWN.search(line))]
    fields = _ds_fields(lines)
    if "zero_config" not in fields:
        raise ConfigError(source, "DeepSpeed configuration", "missing: the log has no printed zero_config "
                          "(is it a DeepSpeed training log, with the engine configuration printed?)")
    vocab = next((int(m.group(1)) for line in lines if (m := _PADDED_VOCAB.search(line))), None)
    aio = _literal(fields.get("aio_config", "{}"), source, "aio_config")
    zero = _key_values(fields["zero_config"])
    log = TrainingLog(source, args, bindings, zero, aio, _user_config(lines, source), vocab)
    _read_iterations(lines, log)
    if not log.iterations:
        raise ConfigError(source, "iterations", "missing: no 'elapsed time per iteration' line "
                          "(the log ends before the first iteration finished)")
    for number, row in enumerate(log.iterations, 1):
        absent = [timer for timer in TIMER_PHASES if timer not in row]
        if absent:
            raise ConfigError(source, f"iteration {number}", f"missing DeepSpeed timer {absent[0]!r} "
                              "(run with wall_clock_breakdown: true)")
    return log


def _launcher_args(lines: list[str], source: str) -> dict[str, str | bool]:
    """Megatron's arguments on the launcher's ``cmd =`` line (after the training script)."""
    for line in lines:
        match = _CMD.search(line)
        if match:
            words = shlex.split(match.group(1))
            start = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
            if start is None:
                raise ConfigError(source, "launcher command", "missing the training script in 'cmd ='")
            return _flags(words[start + 1:])
    raise ConfigError(source, "launcher command", "missing: no DeepSpeed launcher 'cmd = ...' line")


def _flags(words: list[str]) -> dict[str, str | bool]:
    """``--name value`` and bare ``--flag`` words as a mapping (dashes turned to underscores)."""
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                flags[key] = value
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                flags[key] = words[i + 1]
                i += 1
            else:
                flags[key] = True
        i += 1
    return flags


def _binding(listing: str, source: str) -> RankBinding:
    """A rank's ``numactl`` policy, nodes and CPUs from its spawned command."""
    try:
        words = ast.literal_eval(listing)
    except (ValueError, SyntaxError):
        raise ConfigError(source, "spawned command", f"unreadable command list {listing[:60]!r}") from None
    if not words or words[0] != "numactl":
        return RankBinding("none", (), ())
    policy = "none"
    nodes: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    for flag, value in zip(words[1:], words[2:]):
        if flag in ("-m", "--membind"):
            policy, nodes = "bind", _ranges(value)
        elif flag in ("-w", "--weighted-interleave"):
            policy, nodes = "weighted-interleave", _ranges(value)
        elif flag in ("-i", "--interleave"):
            policy, nodes = "interleave", _ranges(value)
        elif flag in ("-C", "--physcpubind"):
            cpus = _ranges(value)
    return RankBinding(policy, nodes, cpus)


def _ranges(text: str) -> tuple[int, ...]:
    """``"0-55,112-167"`` -> every number in the ranges."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return tuple(out)


def _ds_fields(lines: list[str]) -> dict[str, str]:
    """DeepSpeed's ``DeepSpeedEngine configuration`` print: field name -> printed value."""
    found: dict[str, str] = {}
    for line in lines:
        match = _DS_FIELD.search(line)
        if match:
            found.setdefault(match.group(1), match.group(2).strip())
    return found


def _key_values(text: str) -> dict[str, str]:
    """``stage=3 offload_optimizer=DeepSpeedZero...(device='nvme', ...) sub_group_size=...`` as
    a flat mapping; nested ``Name(a=1, b=2)`` values become ``name.a`` keys."""
    out: dict[str, str] = {}
    for match in re.finditer(r"(\w+)=(\w+\((?:[^()]|\([^()]*\))*\)|'[^']*'|[^\s,()]+)", text):
        key, value = match.groups()
        inner = re.fullmatch(r"\w+\((.*)\)", value)
        if inner:
            for sub_key, sub_value in _key_values(inner.group(1)).items():
                out[f"{key}.{sub_key}"] = sub_value
        else:
            out[key] = value.strip("'")
    return out


def _literal(text: str, source: str, name: str) -> dict[str, object]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ConfigError(source, name, f"unreadable printed value {text[:60]!r}") from None
    return value if isinstance(value, dict) else {}


def _user_config(lines: list[str], source: str) -> dict[str, object]:
    """The user's DeepSpeed JSON as ``print_user_config`` printed it ({} when absent)."""
    for i, line in enumerate(lines):
        if "print_user_config" in line and "json = {" in line:
            body = ["{"]
            for follow in lines[i + 1:]:
                body.append(follow)
                if follow.startswith("}"):
                    break
            try:
                value = json.loads("\n".join(body))
            except json.JSONDecodeError:
                raise ConfigError(source, "DeepSpeed user config", "truncated or unreadable 'json = {' block") from None
            return value if isinstance(value, dict) else {}
    return {}


def _read_iterations(lines: list[str], log: TrainingLog) -> None:
    """Per-iteration timers and memory reports (everything before the model was built is
    initialisation: its timers are skipped and its memory reports belong to iteration 0)."""
    built = any(line.startswith(_BUILT) for line in lines)
    started = not built
    timers: dict[str, float] = {}
    label: str | None = None
    gpu: tuple[float, float, float, float] | None = None
    for line in lines:
        if not started:
            started = line.startswith(_BUILT)
        match = _MEMORY_LABEL.search(line)
        if match and "MA " not in line and "CPU Virtual Memory" not in line:
            label, gpu = match.group(1), None
            continue
        if (memory := _GPU_MEMORY.search(line)) is not None:
            allocated, max_allocated, reserved, max_reserved = (float(x) * GIB for x in memory.groups())
            gpu = (allocated, max_allocated, reserved, max_reserved)
            continue
        if (host := _CPU_MEMORY.search(line)) is not None and label is not None and gpu is not None:
            log.memory.append(MemorySample(label, len(log.iterations), *gpu, float(host.group(1)) * GIB))
            label = gpu = None
            continue
        if started and (timer := _TIMERS.search(line)) is not None:
            for item in timer.group(1).split("|"):
                name, _, value = item.partition(":")
                try:
                    timers[name.strip()] = float(value) / 1000.0
                except ValueError:
                    continue
            continue
        if (done := _ITERATION.search(line)) is not None:
            log.iterations.append({**timers, "iteration": float(done.group(1)) / 1000.0})
            timers = {}
