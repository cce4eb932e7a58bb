"""Validation cases: model sizes and swap settings *not* used by calibration.

Calibration steps Adam over single tensors of 2^21..2^25 params and moves whole 256 MiB-1 GiB
files; the cases below are whole optimizer steps over several sub-groups of other sizes
(1.5 M, 3 M, 5 M, 6 M ... params), so no end-to-end step is ever an input to the fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tiersim.validation.real_step import SwapConfig

M = 1_000_000
KiB, MiB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Case:
    name: str
    strategy: str  # "dram", "nvme" (and with CUDA "dram+pcie", "gpu")
    subgroup_numels: tuple[int, ...]
    threads: int = 1
    swap: SwapConfig | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def numel(self) -> int:
        return sum(self.subgroup_numels)


def _sg(count: int, numel: float) -> tuple[int, ...]:
    return (int(numel),) * count


def quick_cases(threads: int = 1, cuda: bool = False) -> list[Case]:
    cases = [
        Case("dram 6M (4x1.5M)", "dram", _sg(4, 1.5 * M), threads),
        Case("dram 15M (3x5M)", "dram", _sg(3, 5 * M), threads),
        Case("dram 24M (4x6M)", "dram", _sg(4, 6 * M), threads),
        Case("nvme 6M (4x1.5M) 1MiB qd8", "nvme", _sg(4, 1.5 * M), threads, SwapConfig()),
        Case(
            "nvme 15M (3x5M) 256KiB qd4",
            "nvme",
            _sg(3, 5 * M),
            threads,
            SwapConfig(block_size=256 * KiB, queue_depth=4),
        ),
        Case(
            "nvme 12M (4x3M) pipelined",
            "nvme",
            _sg(4, 3 * M),
            threads,
            SwapConfig(buffer_count=8, pipeline_read=True, pipeline_write=True),
        ),
    ]
    if cuda:
        cases += _cuda_cases(threads)
    return cases


def full_cases(threads: int = 1, cuda: bool = False, max_threads: int = 1) -> list[Case]:
    cases = quick_cases(threads)
    cases += [
        Case("dram 42M (7x6M)", "dram", _sg(7, 6 * M), threads),
        Case("dram 30M (10x3M)", "dram", _sg(10, 3 * M), threads),
        Case("nvme 30M (5x6M) 1MiB qd8", "nvme", _sg(5, 6 * M), threads, SwapConfig()),
        Case("nvme 20M (4x5M) 4MiB qd2 t2", "nvme", _sg(4, 5 * M), threads,
             SwapConfig(block_size=4 * MiB, queue_depth=2, thread_count=2)),
        Case("nvme 30M (6x5M) pipelined read", "nvme", _sg(6, 5 * M), threads,
             SwapConfig(buffer_count=8, pipeline_read=True)),
    ]
    if max_threads > threads:
        cases += [
            Case(f"dram 15M (3x5M) {max_threads} threads", "dram", _sg(3, 5 * M), max_threads),
        ]
    if cuda:
        cases += _cuda_cases(threads)
    return cases


def tiny_cases(threads: int = 1) -> list[Case]:
    """For tests: a few hundred thousand params."""
    return [
        Case("dram tiny", "dram", (150_000, 70_001), threads),
        Case("nvme tiny", "nvme", (150_000, 70_001), threads, SwapConfig(block_size=64 * KiB, queue_depth=2)),
        Case("nvme tiny pipelined", "nvme", (150_000, 70_001, 99_999), threads,
             SwapConfig(buffer_count=8, block_size=64 * KiB, queue_depth=2, pipeline_read=True, pipeline_write=True)),
    ]


def _cuda_cases(threads: int) -> list[Case]:
    return [
        Case("dram+pcie 15M (3x5M)", "dram+pcie", _sg(3, 5 * M), threads),
        Case("gpu 24M (4x6M)", "gpu", _sg(4, 6 * M), threads),
    ]
