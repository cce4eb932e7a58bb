"""``tiersim profiles [NAME]``: list the device profiles on the search path, or show one."""

from __future__ import annotations

import argparse
import json
import textwrap
from dataclasses import fields

from tiersim.analysis.report import TABLE_WIDTH, format_table
from tiersim.commands.options import add_format
from tiersim.config.profiles import PROFILE_KINDS, Profile, find_profile, list_profiles
from tiersim.config.schema import to_plain

_META = ("kind", "name", "description", "sources")


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``profiles``'s arguments to its parser."""
    parser.add_argument("name", nargs="?", help="show this profile (name or path)")
    parser.add_argument("--kind", choices=sorted(PROFILE_KINDS), help="only profiles of this kind")
    add_format(parser, "table", "json")
    parser.set_defaults(func=profiles_command)


def profiles_command(args: argparse.Namespace) -> int:
    """List (optionally by kind) or show one profile with every figure and its source."""
    if args.name:
        profile = find_profile(args.name, PROFILE_KINDS[args.kind] if args.kind else None, "tiersim profiles", "NAME")
        if args.format == "json":
            print(json.dumps(to_plain(profile), indent=2))
        else:
            print(show_profile(profile))
        return 0
    profiles = [p for p in list_profiles() if args.kind in (None, p.kind)]
    if args.format == "json":
        print(json.dumps([to_plain(p) for p in profiles], indent=2))
    else:
        print(
            format_table(["kind", "name", "description"], [[p.kind, p.name, _short(p.description)] for p in profiles])
        )
    return 0


def _short(text: str, width: int = 70) -> str:
    """The first ``width`` characters of a description, with an ellipsis when cut."""
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def show_profile(profile: Profile) -> str:
    """Every figure in base units with its cited source."""
    rows = []
    for f in fields(profile):
        if f.name in _META:
            continue
        value = getattr(profile, f.name)
        if isinstance(value, float):
            value = f"{value:.6g}"
        source = profile.sources.get(f.name, "")
        rows.append([f.name, value, source])
    head = textwrap.fill(f"{profile.kind} profile {profile.name}: {profile.description}", TABLE_WIDTH)
    return head + "\n" + format_table(["figure", "value (base units)", "source"], rows)
