"""Read a Megatron-DeepSpeed training log: what ran, on what binding, and how long each part took.

A log holds (DeepSpeed 0.10 to 0.16, Megatron-DeepSpeed and its forks):
- the launcher's ``cmd = ... pretrain_gpt.py ARGS`` line: model shape and training arguments,
  and before the script the launcher's own options, its ``--world_info`` among them;
- the hosts and GPUs of the job (``WORLD INFO DICT: {...}``, ``world_info.py``; with more than
  one host, each line of a node's may start ``host: ``, as pdsh prints it);
- one ``spawned with command: [...]`` line per rank, under ``numactl`` or not (``numactl.py``);
- Megatron's ``using world size: 8, data-parallel-size: 2, ..., tensor-model-parallel size: 2,
  pipeline-model-parallel size: 2`` line;
- DeepSpeed's version (``deepspeed info ... 0.13.3+8074cd62``, ``DeepSpeed info: version=...``)
  and the SIMD width its CPU Adam was built for (``created with AVX2 arithmetic capability``);
- Megatron's print of its arguments, its defaults filled in (``ffn_hidden_size ... 13632``);
- DeepSpeed's printed configuration: ``zero_config``, ``aio_config`` and the user's JSON
  (numbers and booleans as ``printed_values.py`` reads them);
- per iteration: DeepSpeed's rank-0 timers (``time (ms) | fwd: ... | bwd: ...``, swap timers),
  ``see_memory_usage`` lines (rank 0 ``MA``/``Max_MA``/``CA``/``Max_CA``, node ``CPU Virtual
  Memory: used``) and Megatron's iteration line, wherever it puts ``elapsed time per iteration
  (ms): N`` (``iteration 3/ 5 | ...`` or, in forks, ``elapsed_time 9.19 | consumed samples ...``).

The log is read in one pass, each line tested by substring before any pattern, so reading time
grows linearly with its size. Times are stored in seconds and memory in bytes (DeepSpeed prints
GiB as "GB"). What a log lacks, or prints unreadably, is a ``ConfigError`` naming the file and
the piece.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tiersim.config.deepspeed_version import check_version
from tiersim.config.limits import MAX_LOG_BYTES
from tiersim.config.yamlfile import read_input
from tiersim.errors import ConfigError
from tiersim.ingest.agreement import check_agreement
from tiersim.ingest.numactl import RankBinding, parse_binding
from tiersim.ingest.printed_values import duration, model_fields, number
from tiersim.ingest.world_info import Hosts, agree, decode_world_info, pdsh_prefixes, printed_world_info

__all__ = ["GIB", "TIMER_PHASES", "MemorySample", "RankBinding", "TrainingLog", "read_log"]

GIB = 1 << 30

_GPU_MEMORY = re.compile(r"MA ([\d.]+) GB\s+Max_MA ([\d.]+) GB\s+CA ([\d.]+) GB\s+Max_CA ([\d.]+) GB")
_CPU_MEMORY = re.compile(r"CPU Virtual Memory:\s+used = ([\d.]+) GB")
_PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_VERSION = re.compile(r"(?:deepspeed info \.+ |DeepSpeed info: version=)([^\s,]+)")
_SIMD = re.compile(r"Adam Optimizer #\d+ is created with (\S+) arithmetic capability")
_BUILT = "[after model, optimizer, and learning rate scheduler are built]"
_ITERATION_TIME = "elapsed time per iteration (ms)"
_SIMD_NAMES = {"AVX512": "avx512", "AVX2": "avx2", "scalar": "scalar"}
"""DeepSpeed's cpu_adam build names (csrc/adam/cpu_adam_impl.cpp) -> ``hardware.adam_simd``."""
PROGRESS = ("global batch size", "consumed samples", "actual seqlen")
"""The counters of Megatron's iteration line that say which run it belongs to."""

TIMER_PHASES = {"fwd": "forward", "bwd": "backward", "step": "optimizer_step"}
"""DeepSpeed's rank-0 timers of the three phases, by the name tiersim gives the phase."""


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
    deepspeed_version: str | None = None
    """The DeepSpeed release as printed (``0.13.3+8074cd62``), None if the log does not say."""
    adam_simd: str | None = None
    """``avx512``, ``avx2`` or ``scalar``: what CPU Adam was built for; None if not printed."""
    printed_args: dict[str, str] = field(default_factory=dict)
    """Megatron's own print of its arguments, defaults filled in ({} when not printed)."""
    engine: dict[str, str] = field(default_factory=dict)
    """Every field of DeepSpeed's engine configuration print, as printed."""
    progress: list[dict[str, float]] = field(default_factory=list)
    """Per iteration line: its ``PROGRESS`` counters, and ``iteration``/``iterations`` from
    ``iteration N/ M`` when the line has it."""
    launcher: dict[str, str | bool] = field(default_factory=dict)
    """The launcher's own options on the ``cmd =`` line (before the training script)."""
    hosts: Hosts | None = None
    """The launcher's world info: host -> GPU ids (None: the log has none)."""
    parallel_sizes: dict[str, int] = field(default_factory=dict)
    """Megatron's ``using world size: ...`` line: ``world size``, ``data parallel size``,
    ``tensor model parallel size``, ... ({} when not printed)."""


def read_log(path: str | Path) -> TrainingLog:
    """Parse a Megatron-DeepSpeed training log; a truncated, foreign or inconsistent one is a
    ConfigError."""
    source = str(path)
    text = read_input(Path(path), MAX_LOG_BYTES).decode("utf-8", errors="replace")
    reader = _Reader(source, started=_BUILT not in text)
    for line in text.splitlines():
        reader.feed(line)
    log = reader.finish()
    check_agreement(log)
    return log


class _Reader:
    """One pass over a log's lines, each handed to the first handler whose marker it contains."""

    def __init__(self, source: str, started: bool) -> None:
        self.source = source
        self.started = started
        """Whether the model is built (timers before it are initialisation, and skipped)."""
        self.command: str | None = None
        self.launcher: dict[str, str | bool] = {}
        self.args: dict[str, str | bool] = {}
        self.hosts: Hosts | None = None
        self.prefixes: tuple[str, ...] = ()
        self.world_text = ""
        self.parallel_sizes: dict[str, int] = {}
        self.spawned: list[str] = []
        self.fields: dict[str, str] = {}
        self.printed_args: dict[str, str] = {}
        self.in_arguments = False
        self.json_block: list[str] | None = None
        self.user_config: dict[str, object] = {}
        self.vocab: int | None = None
        self.versions: dict[str, None] = {}
        self.simd: dict[str, None] = {}
        self.timers: dict[str, float] = {}
        self.label: str | None = None
        self.gpu: tuple[float, float, float, float] | None = None
        self.iterations: list[dict[str, float]] = []
        self.progress: list[dict[str, float]] = []
        self.memory: list[MemorySample] = []
        self.handlers: tuple[tuple[str, Callable[[str], None]], ...] = (
            ("see_memory_usage]", self._memory), ("time (ms) |", self._timer_line),
            (_ITERATION_TIME, self._iteration_line), (":print]", self._engine_field),
            ("print_user_config]", self._user_config_start), ("spawned with command:", self._spawned),
            ("] cmd = ", self._command), ("padded vocab", self._vocab), ("eepSpeed info", self._version),
            ("eepspeed info", self._version), ("arithmetic capability", self._simd),
            ("-- arguments --", self._arguments_start), ("WORLD INFO DICT:", self._world_info),
            ("using world size:", self._parallel_sizes))

    def feed(self, line: str) -> None:
        if self.prefixes and line.startswith(self.prefixes):
            line = line.split(": ", 1)[1]
        if self.json_block is not None:
            self._json_line(line)
            return
        if self.in_arguments:
            self._argument_line(line)
            return
        if not self.started and line.startswith(_BUILT):
            self.started = True
        for marker, handler in self.handlers:
            if marker in line:
                handler(line)
                return

    def finish(self) -> TrainingLog:
        """The log, once every line is read; what it must have and lacks is a ConfigError."""
        source = self.source
        if self.json_block is not None:
            raise ConfigError(source, "DeepSpeed user config", "truncated 'json = {' block")
        if self.command is None:
            raise ConfigError(source, "launcher command", "missing: no DeepSpeed launcher 'cmd = ...' line")
        bindings = [_binding(listing, source, rank) for rank, listing in enumerate(self.spawned)]
        if "zero_config" not in self.fields:
            raise ConfigError(source, "DeepSpeed configuration", "missing: the log has no printed zero_config "
                              "(is it a DeepSpeed training log, with the engine configuration printed?)")
        zero = model_fields(self.fields["zero_config"], source, "zero_config")
        aio = _literal(self.fields.get("aio_config", "{}"), source, "aio_config")
        log = TrainingLog(source, self.args, bindings, zero, aio, self.user_config, self.vocab, self.iterations,
                          self.memory, _one(self.versions, source, "DeepSpeed version"),
                          _one(self.simd, source, "CPU Adam SIMD"), self.printed_args, self.fields, self.progress,
                          self.launcher, self.hosts, self.parallel_sizes)
        if log.deepspeed_version is not None:
            check_version(log.deepspeed_version, source, "DeepSpeed version")
        if not log.iterations:
            raise ConfigError(source, "iterations", "missing: no 'elapsed time per iteration' line "
                              "(the log ends before the first iteration finished)")
        for number_, row in enumerate(log.iterations, 1):
            absent = [timer for timer in TIMER_PHASES if timer not in row]
            if absent:
                raise ConfigError(source, f"iteration {number_}", f"missing DeepSpeed timer {absent[0]!r} "
                                  "(run with wall_clock_breakdown: true)")
        return log

    def _command(self, line: str) -> None:
        """The runner's command: the launcher's options (its world info) and the script's arguments."""
        if self.command is None:
            self.command = line.split("] cmd = ", 1)[1]
            self.launcher, self.args = _launcher_args(self.command, self.source)
            encoded = self.launcher.get("world_info")
            if isinstance(encoded, str) and encoded != "None":
                self._hosts(decode_world_info(encoded, self.source))

    def _world_info(self, line: str) -> None:
        """``WORLD INFO DICT: {...}``, read once however many nodes print it."""
        text = line.split("WORLD INFO DICT:", 1)[1]
        if text != self.world_text:
            self.world_text = text
            self._hosts(printed_world_info(text, self.source))

    def _hosts(self, hosts: Hosts) -> None:
        self.hosts = agree(self.hosts, hosts, self.source)
        self.prefixes = pdsh_prefixes(hosts)

    def _parallel_sizes(self, line: str) -> None:
        """``using world size: 4, data-parallel-size: 4, ...``: each size by its name, dashes as spaces
        (a value that is not a whole number, a fork's ``None``, is left out)."""
        for item in ("world size:" + line.split("using world size:", 1)[1]).split(","):
            name, _, value = item.partition(":")
            if value.strip().isdigit():
                self.parallel_sizes[name.strip().replace("-", " ")] = int(value)

    def _spawned(self, line: str) -> None:
        self.spawned.append(line.split("spawned with command:", 1)[1].strip())

    def _vocab(self, line: str) -> None:
        match = _PADDED_VOCAB.search(line)
        if match and self.vocab is None:
            self.vocab = int(match.group(1))

    def _version(self, line: str) -> None:
        match = _VERSION.search(line)
        if match:
            self.versions[match.group(1)] = None

    def _simd(self, line: str) -> None:
        match = _SIMD.search(line)
        if match:
            if match.group(1) not in _SIMD_NAMES:
                raise ConfigError(self.source, "CPU Adam SIMD", f"unknown arithmetic capability {match.group(1)!r} "
                                  f"(DeepSpeed prints one of {', '.join(_SIMD_NAMES)})")
            self.simd[_SIMD_NAMES[match.group(1)]] = None

    def _engine_field(self, line: str) -> None:
        """``[config.py:1002:print]   name ...... value`` (no dots when the name is long)."""
        name, value = _dotted(line.split(":print]", 1)[1])
        if name:
            self.fields.setdefault(name, value)

    def _arguments_start(self, line: str) -> None:
        self.in_arguments = "end of arguments" not in line

    def _argument_line(self, line: str) -> None:
        """A line of Megatron's argument print (``  name ...... value``); the block ends at its
        ``end of arguments`` line, or at the first line that is not an argument."""
        if not line.startswith("  "):
            self.in_arguments = False
            if "end of arguments" not in line:
                self.feed(line)
            return
        name, value = _dotted(line)
        if name:
            self.printed_args.setdefault(name, value)

    def _user_config_start(self, line: str) -> None:
        if "json = {" in line and not self.user_config:
            self.json_block = ["{"]

    def _json_line(self, line: str) -> None:
        """A line of the user's JSON; the block ends at a line starting with ``}``."""
        assert self.json_block is not None
        self.json_block.append(line)
        if not line.startswith("}"):
            return
        try:
            value = json.loads("\n".join(self.json_block))
        except json.JSONDecodeError:
            raise ConfigError(self.source, "DeepSpeed user config",
                              "truncated or unreadable 'json = {' block") from None
        except RecursionError:
            raise ConfigError(self.source, "DeepSpeed user config",
                              "the 'json = {' block is nested too deeply to be a DeepSpeed config") from None
        self.user_config = value if isinstance(value, dict) else {}
        self.json_block = None

    def _memory(self, line: str) -> None:
        """A ``see_memory_usage`` line: its label, rank 0's GPU memory, or the node's host memory."""
        if (memory := _GPU_MEMORY.search(line)) is not None:
            allocated, max_allocated, reserved, max_reserved = (float(x) * GIB for x in memory.groups())
            self.gpu = (allocated, max_allocated, reserved, max_reserved)
        elif (host := _CPU_MEMORY.search(line)) is not None:
            if self.label is not None and self.gpu is not None:
                self.memory.append(MemorySample(self.label, len(self.iterations), *self.gpu,
                                                float(host.group(1)) * GIB))
            self.label = self.gpu = None
        elif "MA " not in line and "CPU Virtual Memory" not in line:
            self.label, self.gpu = line.split("see_memory_usage]", 1)[1].strip(), None

    def _timer_line(self, line: str) -> None:
        """``time (ms) | name: 123.45 | ...``: every timer in seconds (after the model is built)."""
        if not self.started:
            return
        where = f"iteration {len(self.iterations) + 1}"
        for item in line.split("time (ms) |", 1)[1].split("|"):
            name, _, value = item.partition(":")
            name = name.strip()
            if name:
                self.timers[name] = duration(value, self.source, f"{where}: DeepSpeed timer {name!r}") / 1000.0

    def _iteration_line(self, line: str) -> None:
        """Megatron's iteration line: the elapsed time (ms) and the run's progress counters."""
        where = f"iteration {len(self.iterations) + 1}"
        counters: dict[str, float] = {}
        elapsed = ""
        for item in line.split("|"):
            name, colon, value = item.partition(":")
            name = name.strip()
            if name.endswith(_ITERATION_TIME):
                elapsed = value
            elif name in PROGRESS:
                counters[name] = number(value, self.source, f"{where}: {name!r}")
            elif not colon and name.startswith("iteration ") and "/" in name:
                done, _, total = name.removeprefix("iteration ").partition("/")
                counters["iteration"] = number(done, self.source, f"{where}: 'iteration N/M'")
                counters["iterations"] = number(total, self.source, f"{where}: 'iteration N/M'")
        seconds = duration(elapsed, self.source, f"{where}: {_ITERATION_TIME!r}") / 1000.0
        self.iterations.append({**self.timers, "iteration": seconds})
        self.progress.append(counters)
        self.timers = {}


def _dotted(text: str) -> tuple[str, str]:
    """``"  name ...... value"`` or ``"  long_name  value"`` -> (name, value); ("", "") if none."""
    name, _, rest = text.strip().partition(" ")
    if not name.replace("_", "").isalnum():
        return "", ""
    return name, rest.lstrip(".").strip()


def _one(seen: dict[str, None], source: str, what: str) -> str | None:
    """The one value the log printed for ``what`` (None if none); two different ones mean two
    runs' logs in one file."""
    if len(seen) > 1:
        raise ConfigError(source, what, f"the log prints {' and '.join(seen)}: one run's log has one "
                          "(are two logs spliced together?)")
    return next(iter(seen), None)


def _launcher_args(command: str, source: str) -> tuple[dict[str, str | bool], dict[str, str | bool]]:
    """The launcher's options and Megatron's arguments on the ``cmd =`` line (before and after
    the training script)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(source, "launcher command",
                          f"unreadable 'cmd =' line ({exc}: an unbalanced quote?)") from None
    start = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
    if start is None:
        raise ConfigError(source, "launcher command", "missing the training script in 'cmd ='")
    return _flags(words[:start]), _flags(words[start + 1:])


def _flags(words: list[str]) -> dict[str, str | bool]:
    """``--name value`` and bare ``--flag`` words as a mapping (dashes turned to underscores); a
    flag of several values (Megatron's ``--num-experts 8 8``) keeps them, space-separated."""
    flags: dict[str, str | bool] = {}
    key: str | None = None
    for word in words:
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            key = name.replace("-", "_")
            flags[key] = value if eq else True
            key = None if eq else key
        elif key is not None:
            flags[key] = word if flags[key] is True else f"{flags[key]} {word}"
    return flags


def _binding(listing: str, source: str, rank: int) -> RankBinding:
    """A rank's binding from its spawned command list."""
    where = f"spawned command of rank {rank}"
    try:
        words = ast.literal_eval(listing)
    except (ValueError, SyntaxError):
        raise ConfigError(source, where, f"unreadable command list {listing[:60]!r}") from None
    if not isinstance(words, list):
        raise ConfigError(source, where, f"expected a list, got {listing[:60]!r}")
    return parse_binding(words, source, rank)


def _literal(text: str, source: str, name: str) -> dict[str, object]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ConfigError(source, name, f"unreadable printed value {text[:60]!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(source, name, f"expected a mapping, got {text[:60]!r}")
    return value
