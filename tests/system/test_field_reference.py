"""The field reference pages (docs/reference/fields.md, profiles.md): the committed pages are
what the schema generates, every field of every section has a row with a meaning, and rows
render the type, unit, default and bounds the dataclasses declare."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiersim.config import field_reference
from tiersim.config.field_reference import COMMAND, PAGES, meaning, value_text
from tiersim.config.hardware import DeviceCount, HardwareSpec, NetworkCount
from tiersim.config.profiles import PROFILE_KINDS
from tiersim.config.scenario import SECTIONS
from tiersim.config.schema import integer
from tiersim.config.units import parse_bytes, parse_flops, parse_rate, parse_time
from tiersim.strategies import STRATEGIES
from tiersim.strategies.param_options import ParamOffload
from tiersim.workload import ModelSpec, TrainingSpec

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(?P<path>[^`]+)` \| (?P<cells>.*) \|$")


def _rows(page: str) -> dict[str, list[str]]:
    """{dotted path: [type, unit, default, bounds, meaning]} of every table row of a page
    (a path repeated across sections keeps its first row)."""
    rows: dict[str, list[str]] = {}
    for line in page.splitlines():
        match = ROW.match(line)
        if match:
            rows.setdefault(match["path"], re.split(r"(?<!\\) \| ", match["cells"]))
    return rows


def _sections(page: str) -> dict[str, dict[str, list[str]]]:
    """The rows of each ``## `` section of a page, by heading."""
    parts = re.split(r"^## (.+)$", page, flags=re.M)
    return {heading: _rows(body) for heading, body in zip(parts[1::2], parts[2::2])}


@pytest.fixture(scope="module")
def fields_rows() -> dict[str, list[str]]:
    return _rows(field_reference.fields_page())


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_the_generated_one(name: str) -> None:
    committed = ROOT / "docs" / "reference" / name
    assert committed.is_file(), f"docs/reference/{name} is missing: run `{COMMAND}`"
    assert committed.read_text(encoding="utf-8") == PAGES[name](), (
        f"docs/reference/{name} is out of date with the schema: run `{COMMAND}` and commit it")


def test_every_scenario_field_has_a_row(fields_rows: dict[str, list[str]]) -> None:
    sections = {"model": ModelSpec, "training": TrainingSpec, "hardware": HardwareSpec}
    expected = set(SECTIONS)
    expected |= {f"{section}.{f.name}" for section, cls in sections.items() for f in dataclasses.fields(cls)}
    expected |= {f"hardware.{part}.{f.name}" for part in ("cxl", "nvme") for f in dataclasses.fields(DeviceCount)}
    expected |= {f"hardware.network.{f.name}" for f in dataclasses.fields(NetworkCount)}
    expected |= {f"strategies.{name}.{f.name}" for name, strategy in STRATEGIES.items()
                 for f in dataclasses.fields(strategy.Options)}
    expected |= {f"{path}.{f.name}" for path in set(expected) if path.endswith(".offload_param")
                 for f in dataclasses.fields(ParamOffload)}
    assert set(fields_rows) == expected
    assert {"strategies.nvme.buffer_count", "strategies.cxl.dram_weight", "hardware.numa_bound"} <= expected


def test_every_profile_field_has_a_row_under_its_kind_or_every_kind() -> None:
    sections = _sections(field_reference.profiles_page())
    assert set(sections) == {"Every kind", *PROFILE_KINDS}
    for kind, cls in PROFILE_KINDS.items():
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(sections[kind]) | set(sections["Every kind"]) == names, kind
        assert not set(sections[kind]) & set(sections["Every kind"]), kind
    assert {"kind", "name", "description", "sources", "price_usd"} == set(sections["Every kind"])


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_row_has_all_cells_and_a_meaning(name: str) -> None:
    rows = _rows(PAGES[name]())
    assert rows
    for path, cells in rows.items():
        assert len(cells) == 5, path
        assert len(cells[-1]) > 10 and not cells[-1][0].islower() and cells[-1].endswith("."), path


def test_rendered_scenario_rows(fields_rows: dict[str, list[str]]) -> None:
    assert fields_rows["training.global_batch"][:4] == ["`int`", "—", "required", "> 0"]
    assert fields_rows["training.seq_len"][2] == "`2048`"
    assert fields_rows["training.sub_group_size"][2] == "`1e9`"
    assert fields_rows["training.zero_stage"][3] == "≥ 0, ≤ 3"
    assert fields_rows["training.data_parallel"][2] == (
        "`hardware.nodes x hardware.gpus / (tensor_parallel x pipeline_parallel)`")
    assert fields_rows["training.grad_accum_dtype"][0] == '`"bf16" \\| "fp16" \\| "fp32" \\| None`'
    assert fields_rows["training.flash_attention"][4].startswith("Fused attention (Megatron `--use-flash-attn`)")
    assert fields_rows["strategies.nvme.block_size"][:4] == ["`int`", "bytes", "`1 MiB`", "> 0"]
    assert fields_rows["hardware.dram_capacity"][:3] == ["`int \\| None`", "bytes", "`null`"]
    assert fields_rows["hardware.cxl"][0] == "`DeviceCount \\| None`"
    assert fields_rows["hardware.adam_simd"][4].startswith("The SIMD width DeepSpeed's CPU Adam was built for")


def test_rendered_profile_rows() -> None:
    sections = _sections(field_reference.profiles_page())
    gpu, host, cpu = sections["gpu"], sections["host"], sections["cpu"]
    assert gpu["hbm_capacity"][1] == "bytes" and gpu["hbm_bandwidth"][1] == "bytes/s"
    assert gpu["bf16_flops"][1] == "FLOP/s" and gpu["zero3_hook_latency"][1] == "s"
    assert gpu["compute_efficiency"][3] == "> 0, ≤ 1"
    assert host["cpu"][:3] == ["`CPUProfile`", "—", "required"]  # validate() requires it
    assert host["gpu"][2] == "`null`"
    assert cpu["simd"][0] == '`"avx512" \\| "avx2" \\| "sve" \\| "scalar" \\| None`'


@pytest.mark.parametrize(("parse", "value", "text"), [
    (parse_bytes, 1 << 20, "1 MiB"),
    (parse_bytes, 80 << 30, "80 GiB"),
    (parse_bytes, 1_500_000_000, "1.5 GB"),
    (parse_bytes, 0, "0 B"),
    (parse_rate, 25e9, "25 GB/s"),
    (parse_flops, 989e12, "989 TFLOP/s"),
    (parse_time, 250e-9, "250 ns"),
    (parse_time, 1.5e-3, "1.5 ms"),
    (parse_time, 2.0, "2 s"),
])
def test_a_default_with_a_unit_reads_back_as_itself(parse: object, value: float, text: str) -> None:
    assert value_text(value, parse) == text  # type: ignore[arg-type]
    assert parse(text, ("f", "x")) == pytest.approx(value)  # type: ignore[operator]


def test_plain_numbers_and_other_defaults() -> None:
    assert [value_text(v, None) for v in (500_000_000, 1_234_567, 0.999, 12.0, True, None, "bf16")] == [
        "5e8", "1234567", "0.999", "12", "true", "null", '"bf16"']


@dataclasses.dataclass(frozen=True)
class _Example:
    documented: int = integer(1, doc="by metadata")
    described: int = 2
    """by ``docstring``
    over two lines"""
    silent: int = 3


def test_meaning_is_the_doc_else_the_docstring_else_an_error() -> None:
    fields = {f.name: f for f in dataclasses.fields(_Example)}
    assert meaning(_Example, fields["documented"]) == "By metadata."
    assert meaning(_Example, fields["described"]) == "By `docstring` over two lines."
    with pytest.raises(ValueError, match="_Example.silent has neither"):
        meaning(_Example, fields["silent"])


def test_the_command_writes_both_pages_and_prints_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert field_reference.main(["--write", str(tmp_path / "ref")]) == 0
    for name, page in PAGES.items():
        assert (tmp_path / "ref" / name).read_text(encoding="utf-8") == page()
    assert field_reference.main(["--profiles"]) == 0
    assert capsys.readouterr().out == PAGES["profiles.md"]()


def test_the_pages_do_not_need_pandas() -> None:
    code = ("import sys; from tiersim.config.field_reference import PAGES; [page() for page in PAGES.values()]; "
            "assert 'pandas' not in sys.modules, 'pandas imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
