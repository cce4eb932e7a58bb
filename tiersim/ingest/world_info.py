"""The DeepSpeed launcher's world info: the hosts a job ran on and the GPUs it used on each.

DeepSpeed's runner (``deepspeed/launcher/runner.py``, ``encode_world_info``) writes
``{host: [GPU ids]}`` as URL-safe base64 JSON into every node's launcher command,
``deepspeed.launcher.launch --world_info=...``, which its ``cmd = ...`` line shows; each node's
``launch.py`` prints it decoded: ``WORLD INFO DICT: {'host1': [0, 1, 2, 3], ...}``. With more
than one host the runner starts the nodes through pdsh, which puts ``host: `` before every line
a node prints (``pdsh_prefixes``).
"""

from __future__ import annotations

import ast
import base64
import json

from tiersim.errors import ConfigError

Hosts = dict[str, tuple[int, ...]]
"""Host name -> the GPU ids the launcher used on it, in the launcher's order."""

MAX_PRINTED = 100_000
"""Characters of a printed world info read (a 4,096-node job's prints in under 100,000)."""


def encode_world_info(hosts: Hosts) -> str:
    """``--world_info=``'s value for ``hosts``, as DeepSpeed's ``encode_world_info`` writes it."""
    return base64.urlsafe_b64encode(json.dumps({h: list(g) for h, g in hosts.items()}).encode()).decode()


def decode_world_info(text: str, source: str) -> Hosts:
    """The launcher's ``--world_info=`` value (URL-safe base64 of a JSON object) as hosts."""
    where = "launcher --world_info"
    try:
        value = json.loads(base64.urlsafe_b64decode(text.encode("ascii")).decode("utf-8"))
    except (ValueError, UnicodeError):  # binascii.Error and JSONDecodeError are ValueErrors
        raise ConfigError(source, where, f"unreadable base64 JSON {text[:60]!r}") from None
    return _hosts(value, source, where)


def printed_world_info(text: str, source: str) -> Hosts:
    """``launch.py``'s ``WORLD INFO DICT: {...}`` (the text after the colon) as hosts."""
    where = "WORLD INFO DICT"
    if len(text) > MAX_PRINTED:
        raise ConfigError(source, where, f"longer than {MAX_PRINTED:,} characters")
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError(source, where, f"unreadable printed mapping {text.strip()[:60]!r}") from None
    return _hosts(value, source, where)


def _hosts(value: object, source: str, where: str) -> Hosts:
    """A ``{host: [GPU ids]}`` mapping checked: at least one host, each with distinct GPU ids."""
    if not isinstance(value, dict) or not value:
        raise ConfigError(source, where, f"expected a mapping of hosts to GPU ids, got {str(value)[:60]!r}")
    hosts: Hosts = {}
    for host, gpus in value.items():
        ids = gpus if isinstance(gpus, list) else None
        if not isinstance(host, str) or not ids or not all(type(g) is int and g >= 0 for g in ids) \
                or len(set(ids)) != len(ids):
            raise ConfigError(source, f"{where}: {str(host)[:60]}",
                              f"expected a list of distinct GPU ids, got {str(gpus)[:60]!r}")
        hosts[host] = tuple(ids)
    return hosts


def agree(first: Hosts | None, second: Hosts, source: str) -> Hosts:
    """The world info as seen before (``first``, None if not yet) and seen again: they must be
    equal (the runner's ``--world_info`` and every node's print of it)."""
    if first is not None and first != second:
        raise ConfigError(source, "WORLD INFO DICT", f"{_shown(second)}, but the log said {_shown(first)} before "
                          "(two runs' logs in one file?)")
    return second


def nodes_and_gpus(hosts: Hosts, source: str) -> tuple[int, int]:
    """(nodes, GPUs per node) of the world info; hosts with different GPU counts are refused
    (``hardware.gpus`` is each node's, and the nodes are alike)."""
    counts = sorted({len(gpus) for gpus in hosts.values()})
    if len(counts) > 1:
        raise ConfigError(source, "WORLD INFO DICT", f"the hosts run {' and '.join(map(str, counts))} GPUs: "
                          "tiersim models nodes alike (hardware.gpus GPUs on each of hardware.nodes)")
    return len(hosts), counts[0]


def pdsh_prefixes(hosts: Hosts) -> tuple[str, ...]:
    """The ``host: `` prefixes pdsh puts before each node's lines (none for one host: the
    runner starts a single node without pdsh)."""
    return tuple(f"{host}: " for host in hosts) if len(hosts) > 1 else ()


def _shown(hosts: Hosts) -> str:
    text = ", ".join(f"{host}: {len(gpus)} GPUs" for host, gpus in hosts.items())
    return text if len(text) <= 120 else f"{len(hosts)} hosts"
