"""Hostile input files and values: every one is one line naming the file (and field) and exit
status 2, never a traceback or a hang, for ``run``, ``sweep`` and ``plan`` alike."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from clirun import QUICKSTART, tiersim

from tiersim.config.limits import MAX_YAML_DEPTH, MAX_YAML_NODES
from tiersim.config.yamlfile import parse_yaml
from tiersim.errors import ConfigError


def one_line_exit_2(proc: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The single stderr line of a run that exited 2, checked to hold each of ``expected``."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def billion_laughs(levels: int = 9) -> str:
    """A YAML document whose aliases expand to 9**levels strings."""
    text = 'l0: &l0 ["ha", "ha", "ha", "ha", "ha", "ha", "ha", "ha", "ha"]\n'
    for i in range(1, levels + 1):
        text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text + f"model: *l{levels}\n"


HOSTILE = {
    "not UTF-8": (b"name: caf\xe9\nmodel: {}\n", "not UTF-8 text (byte 0xe9"),
    "binary": (bytes(range(256)) * 4, "not UTF-8 text"),
    "NUL in text": (b"name: a\x00b\n", "malformed YAML: unacceptable character #x0000"),
    "self-referencing alias": (b"model: &m {layers: *m}\n", "self-referencing"),
    "alias bomb": (billion_laughs().encode(), f"more than {MAX_YAML_NODES:,} values"),
    "nested too deep": (b"model: " + b"[" * 200 + b"]" * 200 + b"\n", "nested"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("command", ["run", "plan", "sweep"])
def test_hostile_scenario_files_are_one_line_and_exit_2(tmp_path: Path, case: str, command: str) -> None:
    content, message = HOSTILE[case]
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    args = {"run": ["run", str(bad)], "plan": ["plan", str(bad), "--objective", "fastest"],
            "sweep": ["sweep", str(bad), "--out", str(tmp_path / "out")]}[command]
    one_line_exit_2(tiersim(*args), f"{bad}:", message)


def test_a_hostile_base_scenario_of_a_sweep_is_named(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_bytes(b"model: &m [*m]\n")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {base}\ngrid: {{model.layers: [1, 2]}}\n")
    one_line_exit_2(tiersim("sweep", str(sweep), "--out", str(tmp_path / "o")), f"{base}:", "self-referencing")
    assert not (tmp_path / "o").exists()


def test_an_endless_device_is_refused_unread_and_a_large_file_at_the_size_limit(tmp_path: Path) -> None:
    one_line_exit_2(tiersim("run", "/dev/zero"), "/dev/zero:", "a device, not a regular file")
    large = tmp_path / "large.yaml"
    with large.open("wb") as handle:
        handle.truncate(5 << 20)  # sparse: 5 MiB of zeros
    one_line_exit_2(tiersim("run", str(large)), f"{large}:", "larger than 4 MiB")


def test_a_directory_is_not_a_scenario(tmp_path: Path) -> None:
    one_line_exit_2(tiersim("run", str(tmp_path)), f"{tmp_path}:", "cannot read file")


@pytest.mark.slow
def test_unknown_profile_typo_with_a_broken_yaml_on_the_profile_path(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "broken.yaml").write_bytes(b"\xff\xfe kind: gpu\n")
    (profiles / "loop.yaml").write_bytes(b"a: &a [*a]\n")
    env = {**_env(), "TIERSIM_PROFILE_PATH": str(profiles)}
    line = one_line_exit_2(tiersim("run", str(QUICKSTART), "--set", "hardware.gpu=h100-sxmm", env=env),
                           "hardware.gpu", "unknown gpu profile 'h100-sxmm'", "h100-sxm")
    assert "broken" not in line
    one_line_exit_2(tiersim("profiles", "h100-sxmm", env=env), "unknown profile 'h100-sxmm' (known: a100-80gb")


@pytest.mark.slow
def test_profiles_name_unknown_lists_every_known_name() -> None:
    line = one_line_exit_2(tiersim("profiles", "h900"), "unknown profile 'h900'")
    for name in ("a100-80gb", "h100-sxm", "samsung-pm9a3", "xeon-8480"):
        assert name in line
    one_line_exit_2(
        tiersim("profiles", "h900", "--kind", "gpu"),
        "unknown gpu profile 'h900' (known: a100-80gb, a100-sxm4-40gb, b200, gb200, gh200, h100-pcie, h100-sxm",
    )


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("training.global_batch=-4", "must be greater than 0"),
        ("training.zero_stage=5", "must be at most 3"),
        ("strategies.nvme.buffer_count=2", "must be at least 4"),
        ("hardware.gpu=h900", "unknown gpu profile 'h900'"),
        ("model.layers=1e17", "larger than 2^53"),
        ("model=&a [*a]", "self-referencing"),
    ],
)
def test_an_error_in_a_set_value_is_blamed_on_the_set(assignment: str, message: str) -> None:
    key = assignment.partition("=")[0]
    line = one_line_exit_2(tiersim("run", str(QUICKSTART), "--set", assignment), f"--set: {key}:", message)
    assert "quickstart.yaml" not in line


def test_an_error_in_the_file_itself_is_still_blamed_on_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["training"]["global_batch"] = -4
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    one_line_exit_2(tiersim("run", str(bad), "--set", "model.layers=2"), f"{bad}: training.global_batch")


def test_plan_blames_a_set_value_too() -> None:
    one_line_exit_2(
        tiersim("plan", str(QUICKSTART), "--objective", "fastest", "--set", "training.micro_batch=0"),
        "--set: training.micro_batch: must be greater than 0",
    )


def test_parse_yaml_follows_shared_aliases_once() -> None:
    text = "base: &b {x: 1, y: [1, 2, 3]}\n" + "".join(f"k{i}: *b\n" for i in range(1000))
    data = parse_yaml(text, "shared.yaml")
    assert isinstance(data, dict) and data["k999"] == {"x": 1, "y": [1, 2, 3]}
    with pytest.raises(ConfigError, match=f"deeper than {MAX_YAML_DEPTH}"):
        parse_yaml("a: " + "[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1), "deep.yaml")


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "TIERSIM_PROFILE_PATH"}
