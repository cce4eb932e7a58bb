"""Parameter offload's schedules give the same results with and without fast-forward."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clirun import QUICKSTART

from tiersim.config.document import load_scenario
from tiersim.simulate import simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_session import assert_agrees  # noqa: E402  (the fast-forward check)

TINY = ["model.hidden=1024", "model.heads=8", "model.kv_heads=8", "model.ffn=2048", "model.vocab=1024",
        "training.seq_len=16", "training.sub_group_size=1e5"]


@pytest.mark.parametrize(("strategy", "offload", "overrides"), [
    ("dram", "{device: cpu}", ["model.layers=6", "training.global_batch=4"]),
    ("nvme", "{device: nvme, max_in_cpu: 3e6}", ["model.layers=6", "training.global_batch=6", "hardware.gpus=2"]),
    ("gpu", "{device: nvme, buffer_count: 2}", ["model.layers=5", "training.global_batch=3",
                                                "training.prefetch_bucket_size=1e7"]),
])
def test_the_same_with_and_without_fast_forward(strategy: str, offload: str, overrides: list[str]) -> None:
    entry = f"{{name: {strategy}, offload_param: {offload}}}"
    (config,) = load_scenario(QUICKSTART, [*TINY, *overrides, f"strategies=[{entry}]"])
    assert_agrees(config, simulate(config), simulate(config, fast_forward=False))
