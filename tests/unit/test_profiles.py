"""Bundled device profiles load and are sane; the loader rejects bad profile files clearly."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from tiersim.config.document import load_scenario
from tiersim.config.profiles import (
    DEFAULT_PROFILE_DIR,
    PROFILE_KINDS,
    CXLProfile,
    GPUProfile,
    HostProfile,
    LinkProfile,
    NVMeProfile,
    find_profile,
    list_profiles,
    load_profile_file,
)
from tiersim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "gpu": {"a100-80gb", "h100-sxm", "h100-pcie", "h200", "h200-nvl", "b200", "gb200", "gh200", "mi300x",
            "v100-sxm3-32gb"},
    "fabric": {"pcie-p2p-gen5"},
    "network": {"ib-ndr400-cx7", "ib-hdr200-cx6", "slingshot-11", "roce-400g"},
    "host": {"seed-node"},
    "link": {"pcie-gen3-x16", "pcie-gen4-x16", "pcie-gen5-x16", "nvlink-c2c", "nvlink-c2c-gb200"},
    "cpu": {"xeon-8480", "epyc-9654", "xeon-8380", "epyc-7543p", "xeon-6980p", "epyc-9755", "grace",
            "xeon-8168"},
    "dram": {"ddr4-2666-6ch", "ddr4-3200-8ch", "ddr5-4800-8ch", "ddr5-4800-12ch", "ddr5-6000-12ch", "ddr5-6400-12ch",
             "grace-lpddr5x-480gb"},
    "cxl": {"micron-cz120", "samsung-cmm-d", "skhynix-cmm-ddr5", "cxl-gen5-x16-whatif"},
    "nvme": {"samsung-pm9a3", "micron-7450", "micron-9550", "kioxia-cm7", "samsung-pm1743", "solidigm-d7-ps1010",
             "seed-nvme-pool"},
}
X86_CPUS = sorted(EXPECTED["cpu"] - {"grace"})
DRIVES = sorted(EXPECTED["nvme"] - {"seed-nvme-pool"})
"""Single NVMe drives (the seed pool stripes several)."""
BUNDLED_FILES = sorted(DEFAULT_PROFILE_DIR.glob("*.yaml"))


@pytest.fixture(autouse=True)
def _only_bundled_profiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep a user's TIERSIM_PROFILE_PATH or ./device_profiles out of these tests."""
    monkeypatch.delenv("TIERSIM_PROFILE_PATH", raising=False)
    monkeypatch.chdir(tmp_path)


def _find(name: str, kind: str):
    return find_profile(name, PROFILE_KINDS[kind], "test.yaml", f"hardware.{kind}")


# --- the bundled profiles -------------------------------------------------------------------


def test_every_expected_profile_is_bundled() -> None:
    by_kind: dict[str, set[str]] = {}
    for profile in list_profiles():
        by_kind.setdefault(profile.kind, set()).add(profile.name)
    for kind, names in EXPECTED.items():
        assert names <= by_kind.get(kind, set()), f"missing {kind} profiles: {names - by_kind.get(kind, set())}"


@pytest.mark.parametrize("path", BUNDLED_FILES, ids=lambda p: p.stem)
def test_bundled_profile_loads_and_name_is_stem(path: Path) -> None:
    profile = load_profile_file(path)
    assert profile.name == path.stem
    assert profile.description.strip()
    parts = [getattr(profile, part) for part in ("cpu", "dram", "nvme", "link", "gpu", "fabric", "cxl", "network")
             if getattr(profile, part, None) is not None] if isinstance(profile, HostProfile) else [profile]
    for part in parts:
        figures = {f.name for f in fields(part)} - {"kind", "name", "description", "sources"}
        for figure in figures:
            if getattr(part, figure) is not None:
                assert part.sources.get(figure, "").strip(), f"{path.name}: {part.kind}.{figure} has no citation"


@pytest.mark.parametrize("name", sorted(EXPECTED["gpu"]))
def test_gpu_host_link_resolves(name: str) -> None:
    gpu = _find(name, "gpu")
    assert isinstance(gpu, GPUProfile)
    link = find_profile(gpu.host_link, PROFILE_KINDS["link"], f"{name}.yaml", "host_link")
    assert isinstance(link, LinkProfile)
    assert link.pinned_bandwidth <= link.raw_bandwidth
    assert link.pageable_bandwidth is None  # set by the host CPU (Hardware.pageable_bandwidth)
    assert gpu.reserved_memory < gpu.hbm_capacity


def test_gpu_values_in_base_units() -> None:
    h100 = _find("h100-sxm", "gpu")
    assert h100.hbm_capacity == 81_559 * 2**20  # what nvidia-smi reports, not the datasheet's rounded 80 GB
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert h100.bf16_flops == pytest.approx(989e12)
    assert h100.host_link == "pcie-gen5-x16"
    h200 = _find("h200", "gpu")
    assert h200.hbm_capacity == 143_771 * 2**20
    assert 0.75 <= h200.compute_efficiency <= 0.82
    assert h200.memory_efficiency == pytest.approx(4.3 / 4.8, abs=0.01)
    a100 = _find("a100-80gb", "gpu")
    assert a100.hbm_capacity == 81_920 * 2**20
    assert a100.host_link == "pcie-gen4-x16"
    assert a100.nvlink_bandwidth == pytest.approx(300e9)
    assert h200.nvlink_bandwidth == pytest.approx(450e9)
    assert h100.reserved_memory == 1.5 * 2**30


def test_link_values() -> None:
    gen5 = _find("pcie-gen5-x16", "link")
    assert 40e9 <= gen5.pinned_bandwidth <= 64e9
    assert gen5.raw_bandwidth == pytest.approx(64e9)
    gen4 = _find("pcie-gen4-x16", "link")
    assert 20e9 <= gen4.pinned_bandwidth <= 32e9
    for link in (gen4, gen5):
        assert 1e-6 <= link.latency <= 20e-6


def test_superchip_parts() -> None:
    """GH200 and GB200 reach Grace's LPDDR5X over NVLink-C2C (450 GB/s a direction per
    superchip, shared by GB200's two GPUs), not PCIe; MI300X counts compute units as SMs."""
    c2c, gb200_c2c = _find("nvlink-c2c", "link"), _find("nvlink-c2c-gb200", "link")
    assert c2c.raw_bandwidth == pytest.approx(450e9) and gb200_c2c.raw_bandwidth == pytest.approx(225e9)
    assert c2c.pinned_bandwidth / c2c.raw_bandwidth == pytest.approx(
        gb200_c2c.pinned_bandwidth / gb200_c2c.raw_bandwidth, abs=0.01)
    assert _find("gh200", "gpu").host_link == "nvlink-c2c" and _find("gb200", "gpu").host_link == "nvlink-c2c-gb200"
    assert {_find(name, "gpu").host_link for name in ("b200", "h200-nvl", "mi300x")} == {"pcie-gen5-x16"}
    grace = _find("grace", "cpu")
    assert grace.cores_per_socket == 72 and grace.threads_per_core == 1 and grace.simd == "sve"
    assert grace.simd_lanes() == 16 and grace.simd_lanes("scalar") == 4  # 4 pipes of 128 bits
    lpddr = _find("grace-lpddr5x-480gb", "dram")
    assert lpddr.capacity == 480e9 and lpddr.peak_bandwidth == pytest.approx(360e9)
    mi300x = _find("mi300x", "gpu")
    assert mi300x.sm_count == 304 and mi300x.bf16_flops == pytest.approx(1307.4e12)


def test_cpu_and_dram_values() -> None:
    assert _find("xeon-8480", "cpu").cores_per_socket == 56
    assert _find("epyc-9654", "cpu").cores_per_socket == 96
    assert _find("xeon-8380", "cpu").cores_per_socket == 40
    assert _find("epyc-7543p", "cpu").cores_per_socket == 32 and _find("epyc-7543p", "cpu").simd == "avx2"
    for name in EXPECTED["cpu"]:
        cpu = _find(name, "cpu")
        assert cpu.adam_params_per_core is None  # from the SIMD figures
        assert 1e7 <= cpu.adam_core_rate() <= 1e9
        assert 5e9 <= cpu.memcpy_bandwidth_per_core <= 30e9
    for name in X86_CPUS:
        cpu = _find(name, "cpu")
        assert cpu.threads_per_core == 2 and cpu.fma_units == 2
    ddr5 = _find("ddr5-4800-8ch", "dram")
    assert ddr5.peak_bandwidth == pytest.approx(307.2e9)
    assert ddr5.capacity == 512 * 2**30
    assert _find("ddr5-4800-12ch", "dram").peak_bandwidth == pytest.approx(460.8e9)
    for name in EXPECTED["dram"]:
        dram = _find(name, "dram")
        assert 0.6 * dram.peak_bandwidth <= dram.bandwidth <= dram.peak_bandwidth
        assert 50e-9 <= dram.latency <= 200e-9


@pytest.mark.parametrize("name", sorted(EXPECTED["cxl"]))
def test_cxl_values(name: str) -> None:
    cxl = _find(name, "cxl")
    assert isinstance(cxl, CXLProfile)
    assert cxl.write_bandwidth <= cxl.read_bandwidth <= cxl.link_bandwidth
    assert 100e-9 <= cxl.added_latency <= 400e-9
    if name != "cxl-gen5-x16-whatif":
        assert cxl.link_bandwidth == pytest.approx(32e9)  # PCIe 5.0 x8
        assert cxl.capacity == {"skhynix-cmm-ddr5": 96_000_000_000}.get(name, 256_000_000_000)
    else:
        assert "hypothetical" in cxl.description.lower()


@pytest.mark.parametrize("name", DRIVES)
def test_nvme_values(name: str) -> None:
    nvme = _find(name, "nvme")
    assert isinstance(nvme, NVMeProfile)
    assert nvme.write_bandwidth <= nvme.read_bandwidth <= 16e9
    assert nvme.write_latency <= nvme.read_latency <= 200e-6
    if nvme.aio_thread_bandwidth is not None:
        assert nvme.aio_thread_bandwidth <= nvme.read_bandwidth


def test_seed_node_is_fitted_to_the_study_logs() -> None:
    """The seed node's unknown figures come from `tiersim fit` on the 70B logs, and say so."""
    node = _find("seed-node", "host")
    assert isinstance(node, HostProfile)
    assert node.gpu is not None and node.fabric is not None and node.cxl is not None and node.link is not None
    fit = node.calibration["fit"]  # type: ignore[index]
    fitted = {f["figure"] for f in fit["figures"]}
    assert {"fabric.bus_bandwidth", "nvme.read_bandwidth", "nvme.write_bandwidth"} <= fitted
    for key in fitted:
        part, figure = key.split(".")
        assert getattr(node, part).sources[figure].startswith("fitted by tiersim fit to 70B-")
    assert all(abs(r["relative_error"]) < 0.05 for r in fit["residuals"])
    pool = _find("seed-nvme-pool", "nvme")
    assert pool.aio_thread_bandwidth is None  # the withdrawn 2.3 GB/s per-thread figure is gone


# --- error cases ----------------------------------------------------------------------------

GOOD_LINK = """\
kind: link
name: {name}
description: a test link
raw_bandwidth: 32 GB/s
pinned_bandwidth: 25 GB/s
pageable_bandwidth: 12 GB/s
latency: 8 us
sources:
  raw_bandwidth: spec
  pinned_bandwidth: measured
  pageable_bandwidth: estimate
  latency: estimate
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _assert_error(path: Path, field: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_profile_file(path)
    message = str(info.value)
    assert str(path) in message
    assert field in message
    assert info.value.field == field or info.value.field.startswith(field)
    return info.value


def test_good_tmp_profile_loads_and_is_found_by_name_on_the_profile_path_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name is looked up on the profile path alone (not in the scenario's folder, ``extra``);
    a file name ending .yaml may be relative to the scenario's folder."""
    path = _write(tmp_path, "my-link", GOOD_LINK.format(name="my-link"))
    assert load_profile_file(path).pinned_bandwidth == pytest.approx(25e9)
    with pytest.raises(ConfigError, match="unknown link profile 'my-link'"):
        find_profile("my-link", PROFILE_KINDS["link"], "scen.yaml", "hardware.link", extra=(tmp_path,))
    by_path = find_profile("my-link.yaml", PROFILE_KINDS["link"], "scen.yaml", "hardware.link", extra=(tmp_path,))
    assert by_path.latency == pytest.approx(8e-6)
    monkeypatch.setenv("TIERSIM_PROFILE_PATH", str(tmp_path))
    assert find_profile("my-link", PROFILE_KINDS["link"], "scen.yaml", "hardware.link").name == "my-link"


def test_a_scenario_named_like_its_gpu_profile_is_not_loaded_as_that_profile(tmp_path: Path) -> None:
    """scenarios/h200.yaml saying ``gpu: h200`` gets the h200 profile, not itself."""
    scenario = tmp_path / "h200.yaml"
    scenario.write_text((ROOT / "scenarios" / "quickstart.yaml").read_text().replace("gpu: h100-sxm", "gpu: h200"))
    (config,) = load_scenario(scenario, [], ["gpu"])
    assert config.hardware.gpu.name == "h200"


def test_figure_without_source(tmp_path: Path) -> None:
    text = GOOD_LINK.format(name="nosrc").replace("  latency: estimate\n", "")
    _assert_error(_write(tmp_path, "nosrc", text), "sources.latency")


def test_source_for_unknown_figure(tmp_path: Path) -> None:
    text = GOOD_LINK.format(name="extra") + "  warp_speed: fiction\n"
    _assert_error(_write(tmp_path, "extra", text), "sources.warp_speed")


def test_unknown_field(tmp_path: Path) -> None:
    text = GOOD_LINK.format(name="unk") + "flux_capacitance: 1.21 GB/s\n"
    error = _assert_error(_write(tmp_path, "unk", text), "flux_capacitance")
    assert "unknown field" in str(error)


@pytest.mark.parametrize("value", ["-25 GB/s", "0 GB/s", "0"])
def test_non_positive_bandwidth(tmp_path: Path, value: str) -> None:
    text = GOOD_LINK.format(name="neg").replace("pinned_bandwidth: 25 GB/s", f"pinned_bandwidth: {value}")
    _assert_error(_write(tmp_path, "neg", text), "pinned_bandwidth")


def test_wrong_unit(tmp_path: Path) -> None:
    text = GOOD_LINK.format(name="unit").replace("latency: 8 us", "latency: 8 GB")
    _assert_error(_write(tmp_path, "unit", text), "latency")


def test_missing_figure(tmp_path: Path) -> None:
    text = GOOD_LINK.format(name="miss").replace("raw_bandwidth: 32 GB/s\n", "", 1)
    error = _assert_error(_write(tmp_path, "miss", text), "raw_bandwidth")
    assert "missing" in str(error)


def test_malformed_yaml(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken", "kind: link\nname: [broken\nraw_bandwidth: 32 GB/s\n")
    with pytest.raises(ConfigError) as info:
        load_profile_file(path)
    message = str(info.value)
    assert str(path) in message
    assert "line" in info.value.field and "malformed YAML" in message


def test_not_a_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "list", "- kind: link\n")
    with pytest.raises(ConfigError, match="mapping") as info:
        load_profile_file(path)
    assert str(path) in str(info.value)


def test_unknown_kind(tmp_path: Path) -> None:
    text = GOOD_LINK.format(name="tape").replace("kind: link", "kind: tape")
    error = _assert_error(_write(tmp_path, "tape", text), "kind")
    assert "tape" in str(error)


def test_unknown_profile_name() -> None:
    with pytest.raises(ConfigError) as info:
        find_profile("nope", PROFILE_KINDS["gpu"], "scen.yaml", "hardware.gpu")
    message = str(info.value)
    assert "scen.yaml" in message and "hardware.gpu" in message and "nope" in message
    assert "h100-sxm" in message  # lists the known GPUs


def test_wrong_kind_of_profile() -> None:
    with pytest.raises(ConfigError) as info:
        find_profile("pcie-gen5-x16", PROFILE_KINDS["gpu"], "scen.yaml", "hardware.gpu")
    assert "scen.yaml: hardware.gpu" in str(info.value)
    assert "link" in str(info.value)


def test_missing_profile_file_by_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        find_profile("absent.yaml", PROFILE_KINDS["nvme"], "scen.yaml", "hardware.nvme", extra=(tmp_path,))
    assert "scen.yaml: hardware.nvme" in str(info.value)


def test_adam_rate_uses_measured_rates_per_core_count() -> None:
    from dataclasses import replace

    from tiersim.config.profiles import CPUProfile

    cpu = find_profile("xeon-8480", PROFILE_KINDS["cpu"], "t.yaml", "hardware.cpu")
    assert isinstance(cpu, CPUProfile)
    assert cpu.adam_rate(4) == 4 * cpu.adam_core_rate()
    measured = replace(cpu, adam_params_per_s=[1.0e9, 1.5e9])
    assert measured.adam_rate(1) == 1.0e9 and measured.adam_rate(2) == 1.5e9
    assert measured.adam_rate(4) == 1.5e9 / 2 * 4


def test_measured_adam_rates_must_be_positive(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load((DEFAULT_PROFILE_DIR / "xeon-8480.yaml").read_text())
    data["adam_params_per_s"] = [1e9, 0]
    data["sources"]["adam_params_per_s"] = "measured (test)"
    path = tmp_path / "xeon-8480.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"adam_params_per_s\[1\]: must be greater than 0"):
        load_profile_file(path)


@pytest.mark.parametrize("path", BUNDLED_FILES, ids=lambda p: p.stem)
def test_citations_name_public_sources_not_local_files(path: Path) -> None:
    """A source is the public document itself, never a file outside the repository."""
    for figure, source in load_profile_file(path).sources.items():
        assert not re.search(r"/work/|shared/|\.\./|\b[\w-]+\.md\b", source), (figure, source)


def test_gpu_capacity_is_what_the_device_reports() -> None:
    """HBM capacity in MiB as nvidia-smi prints it (a decimal "80 GB" would be 74.5 GiB)."""
    for name in ("a100-80gb", "h100-sxm", "h200"):
        gpu = _find(name, "gpu")
        assert gpu.hbm_capacity % 2**20 == 0 and "nvidia-smi" in gpu.sources["hbm_capacity"]
