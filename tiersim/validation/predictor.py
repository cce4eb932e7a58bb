"""Predictions for validation cases.

The prediction is the simulator's: ``tiersim.predict.predict_optimizer_step``. Until that
module exists, ``analytic_prediction`` (a closed-form/timeline model of the same mechanism,
written from the simulator's description) stands in, and ``predictor_name()`` says so.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tiersim.profiles import HostProfile
from tiersim.validation.cases import Case
from tiersim.validation.real_step import SwapConfig

ADAM_BYTES_PER_PARAM = 28
READ_BYTES = 16  # param, grad, exp_avg, exp_avg_sq in
WRITE_BYTES = 12  # param, exp_avg, exp_avg_sq out


def _simulator() -> Callable[..., float] | None:
    try:
        from tiersim.predict import predict_optimizer_step
    except ImportError:
        return None
    return predict_optimizer_step  # type: ignore[no-any-return]


def predictor_name() -> str:
    return "tiersim.predict.predict_optimizer_step" if _simulator() else "analytic fallback (tiersim.predict missing)"


def _swap_options(swap: SwapConfig) -> Any:
    from tiersim.strategies.swap import SwapOptions

    return SwapOptions(
        buffer_count=swap.buffer_count,
        block_size=swap.block_size,
        queue_depth=swap.queue_depth,
        thread_count=swap.thread_count,
        pipeline_read=swap.pipeline_read,
        pipeline_write=swap.pipeline_write,
    )


def predict_case(host: HostProfile, case: Case) -> float:
    sim = _simulator()
    strategy = "dram" if case.strategy in ("dram", "dram+pcie") else case.strategy
    if sim is not None:
        swap = _swap_options(case.swap) if case.swap is not None else None
        return float(sim(host, strategy, list(case.subgroup_numels), threads=case.threads, swap=swap))
    return analytic_prediction(host, strategy, case.subgroup_numels, threads=case.threads, swap=case.swap)


# --------------------------------------------------------------------------- fallback model


def _adam_overhead(host: HostProfile) -> float:
    cal = host.calibration or {}
    adam = cal.get("adam", {}) if isinstance(cal, dict) else {}
    return float(adam.get("step_overhead_s", 0.0)) if isinstance(adam, dict) else 0.0


def adam_time(host: HostProfile, numel: int, threads: int) -> float:
    rate = min(threads * host.cpu.adam_params_per_core, host.dram.bandwidth / ADAM_BYTES_PER_PARAM)
    return _adam_overhead(host) + numel / rate


def stream_rate(host: HostProfile, swap: SwapConfig, write: bool) -> float:
    nv = host.nvme
    bw = nv.write_bandwidth if write else nv.read_bandwidth
    lat = nv.write_latency if write else nv.read_latency
    n = swap.queue_depth * swap.thread_count
    rate = min(bw, n * swap.block_size / (lat + swap.block_size / bw))
    if nv.aio_thread_bandwidth is not None:
        rate = min(rate, swap.thread_count * nv.aio_thread_bandwidth)
    return rate


def analytic_prediction(
    host: HostProfile, strategy: str, subgroup_numels: Sequence[int], *, threads: int, swap: SwapConfig | None = None
) -> float:
    """Sum of Adam steps (DRAM), or a timeline of read / Adam / write per sub-group with the
    device serving transfers in issue order (NVMe)."""
    if strategy == "dram":
        return sum(adam_time(host, n, threads) for n in subgroup_numels)
    if strategy != "nvme":
        raise ValueError(f"no analytic model for {strategy!r}")
    swap = swap or SwapConfig()
    r_rate, w_rate = stream_rate(host, swap, False), stream_rate(host, swap, True)
    sets = max(swap.buffer_count // 4, 1)
    device_free = 0.0
    cpu_free = 0.0
    read_done: dict[int, float] = {}
    write_done_by_set: dict[int, float] = {}
    n = len(subgroup_numels)

    def read(i: int, issue: float) -> None:
        nonlocal device_free
        s = i % sets
        start = max(issue, device_free, write_done_by_set.pop(s, 0.0))
        device_free = start + READ_BYTES * subgroup_numels[i] / r_rate
        read_done[i] = device_free

    t = 0.0
    if swap.pipeline_read and n:
        read(0, 0.0)
    for i, numel in enumerate(subgroup_numels):
        if not swap.pipeline_read:
            read(i, t)
        t = max(t, read_done.pop(i))
        if swap.pipeline_read and i + 1 < n:
            read(i + 1, t)
        t = max(t, cpu_free) + adam_time(host, numel, threads)
        cpu_free = t
        start = max(t, device_free)
        device_free = start + WRITE_BYTES * numel / w_rate
        if swap.pipeline_write:
            write_done_by_set[i % sets] = device_free
        else:
            t = device_free
    return max([t, device_free, *write_done_by_set.values()])
