"""Files shipped with tiersim as package data: device profiles, scenarios and sweeps.

In a checkout (and an editable install) they are the repository's top-level
``device_profiles/``, ``scenarios/`` and ``sweeps/`` folders, which ``pyproject.toml`` maps onto
the packages ``tiersim.device_profiles``, ``tiersim.scenarios`` and ``tiersim.sweeps``; a wheel
carries copies inside the installed ``tiersim``. ``importlib.resources`` finds them either way.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

KINDS = ("device_profiles", "scenarios", "sweeps")


def bundled_dir(kind: str) -> Path:
    """The folder of bundled ``kind`` files (one of ``KINDS``)."""
    return Path(str(resources.files(f"tiersim.{kind}")))


def resolve(argument: str, kind: str) -> str:
    """A file named on the command line: the path itself when it exists, else the bundled file
    of that name (``scenarios/quickstart.yaml`` or ``quickstart`` run from any folder), else the
    path as given (whose error then names it)."""
    path = Path(argument)
    if path.exists() or path.parent not in (Path("."), Path(kind)):
        return argument
    candidate = bundled_dir(kind) / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    return str(candidate) if candidate.is_file() else argument
