"""Text tables fit 100 columns: wide text columns go under their row, long headers and cells
wrap; every table the CLI prints, for the bundled scenarios, sweeps and profiles, fits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tiersim import cli
from tiersim.analysis.report import TABLE_WIDTH, format_table

ROOT = Path(__file__).resolve().parents[2]


def test_a_narrow_table_is_unchanged() -> None:
    assert format_table(["a", "bb"], [[1, "x"], [22, None]]) == "a   bb\n--  --\n1   x\n22"


def test_a_wide_text_column_goes_under_its_row() -> None:
    reason = "hbm needs 352.9 GB per GPU but has 76.8 GB of its 80 GB after the CUDA context"
    text = format_table(["strategy", *[f"number_{i}" for i in range(8)], "reason"],
                        [["gpu", *range(8), reason], ["dram", *range(8), "-"]])
    lines = text.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH
    assert lines[0].split() == ["strategy", *[f"number_{i}" for i in range(8)]]
    assert lines[3] == "          reason: " + reason
    assert lines[4].startswith("dram") and len(lines) == 5  # "-" is not repeated under its row


def test_headers_wrap_at_dots_and_cells_wrap_when_nothing_else_fits() -> None:
    headers = [f"strategies.option_{i}.value" for i in range(6)]
    text = format_table(headers, [[f"value_number_{i}_of_many_words" for i in range(6)]])
    lines = text.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH
    assert lines[0].split()[0] == "strategies.option_" and lines[1].split()[0] == "0.value"
    joined = " ".join(lines)
    assert all(word in joined for word in ("value", "number", "many", "words"))


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sweeps, run once (module-wide) into a temp folder."""
    out = tmp_path_factory.mktemp("sweeps")
    for name in ("quickstart-nvme", "model-sizes"):
        assert cli.main(["sweep", str(ROOT / "sweeps" / f"{name}.yaml"), "--jobs", "1", "--out", str(out / name),
                         "--format", "none"]) == 0
    return out


COMMANDS = [
    ["run", "scenarios/quickstart.yaml"],
    ["run", "scenarios/llama2-70b-offload.yaml"],
    ["run", "scenarios/quickstart.yaml", "--strategy", "dram"],
    ["profiles"],
    ["profiles", "h200"],
    ["profiles", "samsung-pm9a3"],
    ["plan", "scenarios/llama2-70b-offload.yaml", "--objective", "largest-model"],
    ["plan", "scenarios/quickstart.yaml", "--objective", "fastest"],
    ["reproduce", "seed", "--no-figure", "--out", "{tmp}"],
    ["sweep", "sweeps/quickstart-nvme.yaml", "--out", "{sweeps}/quickstart-nvme", "--resume"],
    ["sweep", "sweeps/model-sizes.yaml", "--out", "{sweeps}/model-sizes", "--resume"],
    ["compare", "{sweeps}/quickstart-nvme/results.parquet", "{sweeps}/quickstart-nvme/results.parquet"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_table_the_cli_prints_fits_100_columns(args: list[str], sweeps: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = [a.format(tmp=tmp_path, sweeps=sweeps) for a in args]
    assert cli.main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if str(tmp_path) not in line and str(sweeps) not in line]  # a line naming a file is as long as its path
    widest = max(lines, key=len)
    assert len(widest) <= TABLE_WIDTH, widest
    shutil.rmtree(tmp_path, ignore_errors=True)
