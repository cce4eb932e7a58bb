"""Packaging: a wheel carries the bundled device profiles, scenarios and sweeps as package
data (never a calibrated host profile), every package of the source tree is listed in
pyproject.toml, and a user's own profile folder is found by flag or environment variable.
(.ci/run installs the wheel in a fresh venv and runs the quickstart from it.)"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from setuptools import find_packages

from tiersim import cli
from tiersim.config.bundled import KINDS, bundled_dir, resolve

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = set(find_packages(str(ROOT), include=["tiersim*"]))
    data = {f"tiersim.{kind}" for kind in KINDS}
    assert set(config["packages"]) == code | data
    assert config["package-dir"] == {f"tiersim.{kind}": kind for kind in KINDS}


def test_the_checkout_is_the_source_of_the_bundled_files() -> None:
    for kind in KINDS:
        assert bundled_dir(kind).resolve() == (ROOT / kind).resolve()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    (built,) = out.glob("tiersim-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_ships_profiles_scenarios_and_sweeps(wheel: Path, tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind in KINDS:
        data = (".yaml", ".json", ".csv")
        shipped = {n.removeprefix(f"tiersim/{kind}/") for n in names if n.startswith(f"tiersim/{kind}/")
                   and n.endswith(data)}
        expected = {str(p.relative_to(ROOT / kind)) for p in (ROOT / kind).rglob("*")
                    if p.suffix in data and not p.name.startswith("host-")}
        assert shipped == expected and expected, kind
        assert f"tiersim/{kind}/__init__.py" in names
    assert not any(Path(n).name.startswith("host-") for n in names)


@pytest.mark.slow
def test_the_wheel_ships_the_model_catalogue(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tiersim/catalogue/__init__.py", "tiersim/catalogue/models.json"} <= names


def test_a_calibrated_host_profile_stays_out_of_the_wheel(tmp_path: Path) -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["exclude-package-data"]["tiersim.device_profiles"] == ["host-*.yaml"]


def test_bundled_files_are_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("scenarios/quickstart.yaml", "scenarios") == str(bundled_dir("scenarios") / "quickstart.yaml")
    assert resolve("quickstart", "scenarios") == str(bundled_dir("scenarios") / "quickstart.yaml")
    assert resolve("sweeps/quickstart-nvme.yaml", "sweeps") == str(bundled_dir("sweeps") / "quickstart-nvme.yaml")
    assert resolve("elsewhere/quickstart.yaml", "scenarios") == "elsewhere/quickstart.yaml"
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "quickstart.yaml").write_text("mine")
    assert resolve("scenarios/quickstart.yaml", "scenarios") == "scenarios/quickstart.yaml"  # a user's file wins


@pytest.fixture()
def own_profiles(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    data = yaml.safe_load((ROOT / "device_profiles" / "h200.yaml").read_text())
    data["name"] = "my-gpu"
    (folder / "my-gpu.yaml").write_text(yaml.safe_dump(data))
    return folder


def test_a_users_profile_folder_by_flag(own_profiles: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERSIM_PROFILE_PATH", raising=False)
    args = ["run", "quickstart", "--strategy", "dram", "--set", "hardware.gpu=my-gpu"]
    assert cli.main(args) == 2
    assert "unknown gpu profile 'my-gpu'" in capsys.readouterr().err
    assert cli.main([*args, "--profile-path", str(own_profiles)]) == 0
    assert "TIERSIM_PROFILE_PATH" not in os.environ  # the flag lasts as long as the command
    assert cli.main(["profiles", "--kind", "gpu", "--profile-path", str(own_profiles)]) == 0
    assert "my-gpu" in capsys.readouterr().out


def test_a_users_profile_folder_by_environment_variable(own_profiles: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TIERSIM_PROFILE_PATH": str(own_profiles)}
    proc = subprocess.run([sys.executable, "-m", "tiersim", "run", "quickstart", "--strategy", "dram",
                           "--set", "hardware.gpu=my-gpu", "--format", "json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
