"""The bundled catalogue of models: the architecture fields of the Hugging Face ``config.json``
of popular open models (``models.json``, no weights), each with the address of its
``config.json`` and the public copy its values were read from. ``tiersim models`` lists it;
``model: NAME`` in a scenario and ``--model NAME`` look a name up here (case-insensitive, with or
without the organisation: ``meta-llama/Llama-3.1-8B`` or ``llama-3.1-8b``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class CatalogueModel:
    """One catalogue entry: the model's Hugging Face name, its ``config.json`` fields, where that
    file is (``source``) and the public copy the values were read from (``read_from``)."""

    name: str
    config: dict[str, Any]
    source: str
    read_from: str


@functools.cache
def models() -> tuple[CatalogueModel, ...]:
    """Every model of the catalogue, in file order."""
    text = resources.files(__name__).joinpath("models.json").read_text(encoding="utf-8")
    entries = json.loads(text)["models"]
    return tuple(CatalogueModel(name, entry["config"], entry["source"], entry["read_from"])
                 for name, entry in entries.items())


def lookup(name: str) -> CatalogueModel | None:
    """The model called ``name`` (case-insensitive; the organisation may be left out when only
    one model has that name), or None."""
    wanted = name.strip().lower()
    exact = [m for m in models() if m.name.lower() == wanted]
    if exact:
        return exact[0]
    short = [m for m in models() if m.name.lower().partition("/")[2] == wanted]
    return short[0] if len(short) == 1 else None
