"""Write a ``kind: host`` profile from calibration results, and check it loads back.

Every figure gets a ``sources`` entry "measured by tiersim calibrate on <date> on <hostname>:
<method>"; raw measurements, fitted parameters and fit residuals go under ``calibration``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tiersim.config.profiles import HostProfile, load_profile_file
from tiersim.jsonout import plain


def build_host_document(
    *,
    name: str,
    hostname: str,
    date: str,
    cpu: Mapping[str, Any],
    dram: Mapping[str, Any],
    nvme: Mapping[str, Any],
    link: Mapping[str, Any] | None,
    methods: Mapping[str, Mapping[str, str]],
    calibration: Mapping[str, Any],
) -> dict[str, Any]:
    """The YAML document of a host profile. ``cpu``/``dram``/``nvme``/``link`` map figure name
    -> value (base units); ``methods[part][figure]`` says how each was obtained."""
    prefix = f"measured by tiersim calibrate on {date} on {hostname}"

    def part(kind: str, figures: Mapping[str, Any], description: str) -> dict[str, Any]:
        figs = {k: plain(v) for k, v in figures.items() if v is not None}
        sources = {k: f"{prefix}: {methods.get(kind, {}).get(k, 'see calibration')}" for k in figs}
        return {"kind": kind, "name": f"{name}-{kind}", "description": description, **figs, "sources": sources}

    doc: dict[str, Any] = {
        "kind": "host",
        "name": name,
        "description": f"{hostname} as measured by tiersim calibrate on {date}",
        "cpu": part("cpu", cpu, f"CPU of {hostname}"),
        "dram": part("dram", dram, f"host memory of {hostname}"),
        "nvme": part("nvme", nvme, f"file I/O in {calibration.get('nvme_dir', '?')} on {hostname}"),
    }
    sources = {
        "cpu": f"{prefix}: see cpu.sources",
        "dram": f"{prefix}: see dram.sources",
        "nvme": f"{prefix}: see nvme.sources",
        "calibration": f"{prefix}: raw micro-benchmark records and fit residuals",
    }
    if link is not None:
        doc["link"] = part("link", link, f"host<->GPU link of {hostname}")
        sources["link"] = f"{prefix}: see link.sources"
    doc["calibration"] = plain(calibration)
    doc["sources"] = sources
    return doc


def write_host_profile(path: Path, document: Mapping[str, Any]) -> HostProfile:
    """Write ``document`` as YAML to ``path`` and load it back through the profile loader (so a
    file that ``tiersim run`` would reject is never left silently)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(plain(document), sort_keys=False, default_flow_style=None, width=120)
    # Check in a scratch directory beside it, under the same file name (the loader ties the
    # profile name to the file name), then move into place.
    with tempfile.TemporaryDirectory(prefix=".tiersim-profile-", dir=path.parent) as scratch:
        tmp = Path(scratch) / path.name
        tmp.write_text(f"# written by `tiersim calibrate`; raw measurements under calibration:\n{text}")
        profile = load_profile_file(tmp)
        tmp.replace(path)
    assert isinstance(profile, HostProfile)
    return profile
