"""DeepSpeed releases tiersim models, and the parsing of a version string such as ``0.13.3+8074cd62``.

Where DeepSpeed's code paths differ between releases in something tiersim simulates, a strategy
asks ``at_least(training.deepspeed_version, (0, 14))`` rather than comparing strings.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tiersim.errors import ConfigError

OLDEST = (0, 10)
NEWEST = (0, 16)
"""The range of DeepSpeed minor releases tiersim models; the default is the newest."""
DEFAULT_VERSION = "0.16"

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:[+.\-][\w.+\-]*)?")


def release(text: str) -> tuple[int, int]:
    """``"0.13.3+8074cd62"`` -> ``(0, 13)``; a ValueError for anything else."""
    major, minor, _patch = patch_release(text)
    return major, minor


@lru_cache(maxsize=64)
def patch_release(text: str) -> tuple[int, int, int]:
    """``"0.13.3+8074cd62"`` -> ``(0, 13, 3)``, ``"0.16"`` -> ``(0, 16, 0)``; a ValueError for anything else.
    Cached: the strategies ask for each layer they build (``at_least``)."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a DeepSpeed version: {text!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def check_version(text: str, source: str, path: str) -> None:
    """A version tiersim models, or a ConfigError naming ``path``."""
    try:
        found = release(text)
    except ValueError:
        raise ConfigError(source, path, f"expected a DeepSpeed version such as 0.13.3, got {text!r}") from None
    if not OLDEST <= found <= NEWEST:
        raise ConfigError(source, path, f"DeepSpeed {text} is not modelled (tiersim models "
                          f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]})")


def at_least(text: str, wanted: tuple[int, int] | tuple[int, int, int]) -> bool:
    """Whether DeepSpeed ``text`` (already checked) is release ``wanted`` (major, minor and
    optionally patch; a version without a patch number is its ``.0``) or newer."""
    return patch_release(text)[:len(wanted)] >= wanted
