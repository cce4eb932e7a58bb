"""Run validation cases: build the real executor, time it, predict it, compare."""

from __future__ import annotations

import gc
import statistics
from pathlib import Path
from typing import Callable, Sequence

from tiersim.profiles import HostProfile
from tiersim.validation.cases import Case
from tiersim.validation.predictor import predict_case
from tiersim.validation.real_step import (
    CudaOffloadAdam,
    DRAMAdam,
    GPUAdam,
    NVMeAdam,
    SwapConfig,
    make_initial_state,
    time_step,
)
from tiersim.validation.report import CaseResult


def adam_variant(host: HostProfile) -> str:
    """The CPU Adam implementation calibration found faster (and measured the rate of)."""
    cal = host.calibration or {}
    adam = cal.get("adam") if isinstance(cal, dict) else None
    variant = adam.get("variant") if isinstance(adam, dict) else None
    return variant if variant in ("foreach", "fused") else "fused"


def build_executor(case: Case, host: HostProfile, nvme_dir: Path) -> object:
    initial = make_initial_state(case.subgroup_numels)
    variant = adam_variant(host)
    if case.strategy == "dram":
        return DRAMAdam(initial, threads=case.threads, variant=variant)
    if case.strategy == "nvme":
        return NVMeAdam(initial, nvme_dir, case.swap or SwapConfig(), threads=case.threads, variant=variant)
    if case.strategy == "dram+pcie":
        return CudaOffloadAdam(initial, threads=case.threads, variant=variant)
    if case.strategy == "gpu":
        return GPUAdam(initial)
    raise ValueError(f"unknown strategy {case.strategy!r}")


def measure_case(case: Case, host: HostProfile, nvme_dir: Path, warmup: int, repeats: int) -> float:
    executor = build_executor(case, host, nvme_dir)
    try:
        return time_step(executor.step, warmup=warmup, repeats=repeats).median_s  # type: ignore[attr-defined]
    finally:
        executor.close()  # type: ignore[attr-defined]
        gc.collect()


def measure_interleaved(
    cases: Sequence[Case],
    host: HostProfile,
    nvme_dir: Path,
    warmup: int,
    repeats: int,
    on_case: Callable[[Case], None] | None = None,
) -> list[list[float]]:
    """Seconds per step of every case, timed in ``repeats`` interleaved rounds (each case once
    per round, after ``warmup`` untimed steps each): on a shared host whose speed drifts over
    tens of seconds, every case's median then spans the same window instead of one case
    catching a slow spell. Returns the samples per case."""
    executors: list[object] = []
    try:
        for case in cases:
            if on_case is not None:
                on_case(case)
            executors.append(build_executor(case, host, nvme_dir))
            gc.collect()
            for _ in range(warmup):
                executors[-1].step()  # type: ignore[attr-defined]
        samples: list[list[float]] = [[] for _ in cases]
        for _ in range(max(repeats, 1)):
            for i, executor in enumerate(executors):
                samples[i].append(time_step(executor.step, warmup=0, repeats=1).median_s)  # type: ignore[attr-defined]
        return samples
    finally:
        for executor in executors:
            executor.close()  # type: ignore[attr-defined]
        gc.collect()


def run_cases(
    cases: Sequence[Case],
    host: HostProfile,
    nvme_dir: Path,
    *,
    warmup: int = 1,
    repeats: int = 3,
    on_case: Callable[[Case], None] | None = None,
) -> list[CaseResult]:
    """Time every case (interleaved rounds, medians) and compare with its prediction."""
    samples = measure_interleaved(cases, host, nvme_dir, warmup, repeats, on_case)
    results = []
    for case, got in zip(cases, samples):
        predicted = predict_case(host, case)
        results.append(CaseResult(case.name, case.strategy, predicted, statistics.median(got)))
    return results
