"""A rank's numactl binding, read from the command DeepSpeed's launcher spawned it with.

numactl (numactl.c, libnuma.c) takes a memory policy (``-m/--membind``, ``-i/--interleave``,
``-w/--weighted-interleave``, ``-p/--preferred``, ``-P/--preferred-many``, ``-l/--localalloc``)
over a node list, and a CPU binding (``-C/--physcpubind`` over logical CPUs, ``-N/--cpunodebind``
over nodes), as ``-m 0``, ``-m0``, ``--membind=0`` or ``--membind 0``. Lists are ``0``,
``0-55``, ``0,2-3`` and the strided ``0-55:2`` (every second CPU, util-linux's cpulist form), or
``all``: every node or CPU of the machine, a number the log does not say, so it is kept as
``all_nodes`` rather than counted. A rank spawned without numactl is unbound. Anything else
(an unknown option, a missing value, ``!0``, ``+1``, ``netdev:eth0``) is a ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiersim.errors import ConfigError

MAX_LIST = 1 << 16
"""The most numbers one node or CPU list may name (Linux's NR_CPUS is at most 8192)."""

_MEMORY = {"membind": "bind", "interleave": "interleave", "weighted-interleave": "weighted-interleave",
           "preferred": "preferred", "preferred-many": "preferred-many"}
_CPU = ("physcpubind", "cpunodebind", "cpubind")
SPREAD = ("bind", "interleave", "weighted-interleave", "preferred-many")
"""Memory policies over a node list: over the socket's DRAM node and CXL nodes after it."""
_SHORT = {"m": "membind", "i": "interleave", "w": "weighted-interleave", "p": "preferred",
          "P": "preferred-many", "C": "physcpubind", "N": "cpunodebind", "c": "cpubind",
          "l": "localalloc", "a": "all", "b": "balancing"}
_FLAGS = ("localalloc", "all", "balancing")
"""Options without a value: ``-l`` sets the local policy, ``-a`` and ``-b`` leave placement as is."""
_LONG = (*_MEMORY, *_CPU, *_FLAGS)


@dataclass(frozen=True)
class RankBinding:
    """One rank's numactl binding.

    ``policy``: the memory policy, "bind" (-m), "interleave" (-i), "weighted-interleave" (-w),
    "preferred" (-p), "preferred-many" (-P), "local" (-l), or "none" (the kernel's default:
    memory on the node of the CPU that first touches it); ``nodes`` its node list, empty when
    ``all_nodes``; ``cpus`` the logical CPUs of ``-C``; ``cpu_nodes`` the nodes of ``-N``;
    ``numactl`` whether the rank ran under numactl at all."""

    policy: str
    nodes: tuple[int, ...]
    cpus: tuple[int, ...]
    all_nodes: bool = False
    cpu_nodes: tuple[int, ...] = ()
    numactl: bool = False

    @property
    def socket_bound(self) -> bool:
        """Bound to its own CPUs (``-C`` or ``-N``) with its memory on its own socket: what
        tiersim's ``hardware.numa_bound`` means. An interleave over ``all`` nodes spreads pages
        over every socket; a bind or preference over ``all`` allocates from the nearest node
        first (the kernel orders a multi-node policy by distance), so it stays local."""
        spread = self.all_nodes and self.policy in ("interleave", "weighted-interleave")
        return bool(self.cpus or self.cpu_nodes) and not spread

    @property
    def expanders(self) -> tuple[int, ...]:
        """The CXL nodes of a policy over several nodes: every node after the first (the
        socket's DRAM node). A log cannot say which nodes are CXL memory; tiersim reads a list
        as Linux numbers them, the CPU-less CXL nodes after the sockets' (``-w 0,2,3``,
        ``-m 1,4,5``), and so also reads ``-m 0,1`` as DRAM node 0 with CXL node 1."""
        return self.nodes[1:] if self.policy in SPREAD else ()

    @property
    def home(self) -> int | None:
        """The DRAM node the rank's memory lives on: the one node of its policy, the first node of
        a policy over several nodes (the others are expanders), the one node of ``-N`` under the
        default policy; None where the log does not tell (``all``, CPUs only)."""
        if self.policy in SPREAD and self.nodes:
            return self.nodes[0]
        if len(self.nodes) == 1:
            return self.nodes[0]
        if self.policy in ("none", "local") and len(self.cpu_nodes) == 1:
            return self.cpu_nodes[0]
        return None


def parse_binding(words: list[object], source: str, rank: int) -> RankBinding:
    """The binding of the rank spawned with ``words`` (the launcher's command list)."""
    if not words or words[0] != "numactl":
        return RankBinding("none", (), ())
    field = f"numactl of rank {rank}"
    policy, every = "none", False
    nodes: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    cpu_nodes: tuple[int, ...] = ()
    i = 1
    while i < len(words) and str(words[i]).startswith("-") and words[i] not in ("-", "--"):
        name, value, i = _option([str(w) for w in words], i, source, field)
        if name in _MEMORY:
            policy = _MEMORY[name]
            nodes, every = node_list(value, source, f"{field}: --{name}")
        elif name == "physcpubind":
            listed, every_cpu = node_list(value, source, f"{field}: --{name}")
            cpus = () if every_cpu else listed
        elif name in ("cpunodebind", "cpubind"):
            listed, every_cpu = node_list(value, source, f"{field}: --{name}")
            cpu_nodes = () if every_cpu else listed
        elif name == "localalloc":
            policy, nodes, every = "local", (), False
    if i >= len(words) or words[i] == "-":
        raise ConfigError(source, field, "no command after the numactl options")
    return RankBinding(policy, nodes, cpus, every, cpu_nodes, numactl=True)


def _option(words: list[str], i: int, source: str, field: str) -> tuple[str, str, int]:
    """The option at ``words[i]`` as (long name, value or "", index of the next word)."""
    word = words[i]
    if word.startswith("--"):
        given, eq, value = word[2:].partition("=")
        matches = [name for name in _LONG if name == given] or [name for name in _LONG if name.startswith(given)]
        if len(matches) != 1:
            raise ConfigError(source, field, f"unknown or ambiguous numactl option {word!r}")
        name, attached = matches[0], value if eq else None
    else:
        name = _SHORT.get(word[1:2], "")
        if not name:
            raise ConfigError(source, field, f"unknown numactl option {word!r}")
        attached = word[2:] or None
    if name in _FLAGS:
        if attached is not None:
            raise ConfigError(source, field, f"numactl option {word!r} takes no value")
        return name, "", i + 1
    if attached is not None:
        return name, attached, i + 1
    if i + 1 >= len(words):
        raise ConfigError(source, field, f"numactl option {word!r} is missing its value")
    return name, words[i + 1], i + 2


def node_list(text: str, source: str, field: str) -> tuple[tuple[int, ...], bool]:
    """``"0-55,112-167"`` -> every number, ``"0-55:2"`` -> every second, ``"all"`` -> ((), True)."""
    if text == "all":
        return (), True
    out: list[int] = []
    for part in text.split(","):
        span, colon, stride_text = part.partition(":")
        low_text, dash, high_text = span.partition("-")
        if not (low_text.isdigit() and (not dash or high_text.isdigit()) and (not colon or stride_text.isdigit())):
            raise ConfigError(source, field, f"unreadable node or CPU list {text!r} (at {part!r})")
        low, high, stride = int(low_text), int(high_text or low_text), int(stride_text or 1)
        if high < low or stride < 1:
            raise ConfigError(source, field, f"empty range {part!r} in {text!r}")
        if len(out) + (high - low) // stride + 1 > MAX_LIST:
            raise ConfigError(source, field, f"{text!r} names more than {MAX_LIST} nodes or CPUs")
        out.extend(range(low, high + 1, stride))
    return tuple(out), False
