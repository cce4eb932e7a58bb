"""Validation cases: model sizes and swap settings *not* used by calibration.

Calibration steps Adam over single tensors of 3.3 M, 7.7 M, 13.1 M, 26.3 M (and 41.9 M) params
and moves whole 250-500 MB files; the cases below are whole optimizer steps over several
sub-groups of other sizes (5 M, 6 M, 8 M, 10 M, 15 M, 18 M, 25 M params), each tensor in its own
file, so no end-to-end step is ever an input to the fit.
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
    """Each timed step is tens to hundreds of milliseconds (DRAM 60-120 M params; NVMe cases
    move 0.8-1 GB per step, over 20-24 swap files), so a step is well above timer and scheduler noise."""
    cases = [
        Case("dram 60M (6x10M)", "dram", _sg(6, 10 * M), threads),
        Case("dram 90M (5x18M)", "dram", _sg(5, 18 * M), threads),
        Case("dram 120M (20x6M)", "dram", _sg(20, 6 * M), threads),
        Case("nvme 30M (6x5M) 1MiB qd8", "nvme", _sg(6, 5 * M), threads, SwapConfig()),
        Case(
            "nvme 30M (5x6M) 256KiB qd4",
            "nvme",
            _sg(5, 6 * M),
            threads,
            SwapConfig(block_size=256 * KiB, queue_depth=4),
        ),
        Case(
            "nvme 36M (6x6M) pipelined",
            "nvme",
            _sg(6, 6 * M),
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
        Case("dram 150M (10x15M)", "dram", _sg(10, 15 * M), threads),
        Case("dram 100M (4x25M)", "dram", _sg(4, 25 * M), threads),
        Case("nvme 50M (5x10M) 1MiB qd8", "nvme", _sg(5, 10 * M), threads, SwapConfig()),
        Case("nvme 40M (4x10M) 2MiB qd2 t2", "nvme", _sg(4, 10 * M), threads,
             SwapConfig(block_size=2 * MiB, queue_depth=2, thread_count=2)),
        Case("nvme 36M (6x6M) 512KiB qd8", "nvme", _sg(6, 6 * M), threads,
             SwapConfig(block_size=512 * KiB)),
        Case("nvme 45M (9x5M) pipelined read", "nvme", _sg(9, 5 * M), threads,
             SwapConfig(buffer_count=8, pipeline_read=True)),
    ]
    if max_threads > threads:
        cases += [
            Case(f"dram 60M (6x10M) {max_threads} threads", "dram", _sg(6, 10 * M), max_threads),
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
