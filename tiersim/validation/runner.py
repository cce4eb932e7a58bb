"""Run validation cases: build the real executor, time it, predict it, compare."""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tiersim.calibration.directio import AlignedBuffer, probe_bypass_mode
from tiersim.config.profiles import HostProfile
from tiersim.validation.cases import Case
from tiersim.validation.drift import IO_PROBE_BYTES, Drift, DriftProbes, corrected_profile
from tiersim.validation.predictor import predict_case
from tiersim.validation.real_step import (
    CudaOffloadAdam,
    DRAMAdam,
    GPUAdam,
    NVMeAdam,
    SwapConfig,
    make_initial_state,
    swap_buffer_bytes,
    time_step,
)
from tiersim.validation.report import CaseResult


def adam_variant(host: HostProfile) -> str:
    """The CPU Adam implementation calibration found faster (and measured the rate of)."""
    cal = host.calibration or {}
    adam = cal.get("adam") if isinstance(cal, dict) else None
    variant = adam.get("variant") if isinstance(adam, dict) else None
    return variant if variant in ("foreach", "fused") else "fused"


def build_executor(case: Case, host: HostProfile, nvme_dir: Path, arena: AlignedBuffer | None = None) -> object:
    """The real step of ``case``; NVMe cases swap through ``arena`` when given."""
    initial = make_initial_state(case.subgroup_numels)
    variant = adam_variant(host)
    if case.strategy == "dram":
        return DRAMAdam(initial, threads=case.threads, variant=variant)
    if case.strategy == "nvme":
        return NVMeAdam(initial, nvme_dir, case.swap or SwapConfig(), threads=case.threads, variant=variant,
                        arena=arena)
    if case.strategy == "dram+pcie":
        return CudaOffloadAdam(initial, threads=case.threads, variant=variant)
    if case.strategy == "gpu":
        return GPUAdam(initial)
    raise ValueError(f"unknown strategy {case.strategy!r}")


def measure_interleaved(
    cases: Sequence[Case],
    host: HostProfile,
    nvme_dir: Path,
    warmup: int,
    repeats: int,
    on_case: Callable[[Case], None] | None = None,
    probes: DriftProbes | None = None,
    arena: AlignedBuffer | None = None,
) -> list[list[float]]:
    """Seconds per step of every case, timed in ``repeats`` interleaved rounds (each case once
    per round, after the drift ``probes`` when given) after ``warmup`` untimed interleaved
    rounds: on a shared host whose speed drifts over tens of seconds, every case's median then
    spans the same window instead of one case catching a slow spell, and the warm-up rounds run
    after every executor is built, so the first timed sample of a case does not pay for the
    memory its successors' setup touched. NVMe cases swap through ``arena`` when given.
    Returns the samples per case."""
    executors: list[object] = []
    try:
        for case in cases:
            if on_case is not None:
                on_case(case)
            executors.append(build_executor(case, host, nvme_dir, arena))
            executors[-1].step()  # type: ignore[attr-defined]  # creates the Adam state
            gc.collect()
        samples: list[list[float]] = [[] for _ in cases]
        for round_ in range(warmup + max(repeats, 1)):
            timed = round_ >= warmup
            if probes is not None:
                probes.sample(record=timed)
            for i, executor in enumerate(executors):
                seconds = time_step(executor.step, warmup=0, repeats=1).median_s  # type: ignore[attr-defined]
                if timed:
                    samples[i].append(seconds)
        return samples
    finally:
        for executor in executors:
            executor.close()  # type: ignore[attr-defined]
        gc.collect()


@dataclass(frozen=True)
class Validation:
    """Every case's result, the drift the probes measured, and whether ``predicted_s`` is the
    drift-corrected prediction (else the one from the profile as calibrated)."""

    results: list[CaseResult]
    drift: Drift
    corrected: bool


def run_cases(
    cases: Sequence[Case],
    host: HostProfile,
    nvme_dir: Path,
    *,
    warmup: int = 1,
    repeats: int = 3,
    correct_drift: bool = True,
    on_case: Callable[[Case], None] | None = None,
) -> Validation:
    """Time every case (interleaved rounds, medians, drift probes in every round) and compare
    with two predictions: from the profile with its rates scaled by the drift the probes
    measured in the same rounds, and from the profile as calibrated. ``predicted_s`` is the
    first (the second without ``correct_drift``); ``other_s`` the other one.

    Every NVMe case swaps through one arena of memory, which the disk probes also read into
    and write from: on a virtual machine the rate at which the disk fills a buffer depends on
    where the buffer's memory landed (one allocation reads at 1.3 GB/s, the next at 3.3 GB/s,
    each steadily), so the probes then measure the disk into the very pages the cases use."""
    arena = AlignedBuffer(max([IO_PROBE_BYTES] + [swap_buffer_bytes(c.subgroup_numels, c.swap or SwapConfig())
                                                  for c in cases if c.strategy == "nvme"]))
    try:
        probes = DriftProbes(host, nvme_dir, probe_bypass_mode(nvme_dir), adam_variant(host), arena)
        try:
            samples = measure_interleaved(cases, host, nvme_dir, warmup, repeats, on_case, probes, arena)
            drift = probes.drift()
        finally:
            probes.close()
    finally:
        arena.close()
    fixed = corrected_profile(host, drift)
    results = []
    for case, got in zip(cases, samples):
        as_calibrated, corrected = predict_case(host, case), predict_case(fixed, case)
        headline, other = (corrected, as_calibrated) if correct_drift else (as_calibrated, corrected)
        results.append(CaseResult(case.name, case.strategy, headline, statistics.median(got), tuple(got), other))
    return Validation(results, drift, correct_drift)
