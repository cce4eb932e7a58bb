"""Fits of the device-profile model parameters, pure functions on arrays (scipy.optimize).

* ``fit_latency_bandwidth``: time = latency + size / bandwidth (memory copies, PCIe copies);
* ``fit_overhead_rate``: time = overhead + numel / rate (an optimizer step);
* ``fit_queue_model``: throughput of N outstanding requests of b bytes =
  min(B, N*b / (L + b/B * (1 + q*(N-1)))) (the NVMe model of ``tiersim.config.profiles.NVMeProfile``;
  q, the transfer queueing, is 0 in the plain Little's-law model and fitted in [0, 1]).

Residuals are relative, (model - measured) / measured, so they read as fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares


@dataclass(frozen=True)
class LinearFit:
    """``y = intercept + x / rate``: intercept in seconds, rate in x-units per second."""

    intercept: float
    rate: float
    residuals: list[float] = field(default_factory=list)

    @property
    def max_abs_residual(self) -> float:
        return max((abs(r) for r in self.residuals), default=0.0)

    def predict(self, x: float | np.ndarray) -> float | np.ndarray:
        return self.intercept + np.asarray(x, dtype=float) / self.rate


@dataclass(frozen=True)
class QueueFit:
    """NVMe-style queue model: per-request ``latency`` (s), device ``bandwidth`` (bytes/s) and
    ``queueing`` (0..1: how much of the other outstanding requests' transfers each one waits behind)."""

    latency: float
    bandwidth: float
    residuals: list[float] = field(default_factory=list)
    queueing: float = 0.0

    @property
    def max_abs_residual(self) -> float:
        return max((abs(r) for r in self.residuals), default=0.0)

    def predict(self, block_size: float | np.ndarray, outstanding: float | np.ndarray) -> np.ndarray:
        return queue_throughput(block_size, outstanding, self.latency, self.bandwidth, self.queueing)


def _arrays(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1 or len(xa) < 2:
        raise ValueError("need two equal-length 1-D arrays of at least 2 points")
    if np.any(ya <= 0) or np.any(xa <= 0):
        raise ValueError("sizes and times must be positive")
    return xa, ya


def fit_latency_bandwidth(sizes: Sequence[float], seconds: Sequence[float]) -> LinearFit:
    """Fit ``seconds = latency + size / bandwidth`` minimising relative error, latency >= 0."""
    x, y = _arrays(sizes, seconds)
    # Parametrise with (intercept / t_scale, inverse rate / g_scale) so both are O(1).
    t_scale = float(np.min(y))
    g0 = float(np.max(y / x))
    g_scale = g0

    def resid(p: np.ndarray) -> np.ndarray:
        return (p[0] * t_scale + x * p[1] * g_scale - y) / y

    # Start from an ordinary least-squares line through the points.
    slope, icpt = np.polyfit(x, y, 1)
    p0 = np.array([max(icpt, 0.0) / t_scale, max(slope, 1e-12) / g_scale])
    sol = least_squares(resid, p0, bounds=([0.0, 1e-12], [np.inf, np.inf]), x_scale="jac", xtol=1e-14, ftol=1e-14)
    intercept = float(sol.x[0] * t_scale)
    rate = 1.0 / float(sol.x[1] * g_scale)
    return LinearFit(intercept, rate, [float(r) for r in resid(sol.x)])


def fit_overhead_rate(numels: Sequence[float], seconds: Sequence[float]) -> LinearFit:
    """Fit ``seconds = overhead + numel / rate`` (per-call overhead and params/s)."""
    return fit_latency_bandwidth(numels, seconds)


def fit_rate_given_intercept(x: Sequence[float], seconds: Sequence[float], intercept: float) -> LinearFit:
    """Fit ``seconds = intercept + x / rate`` with the intercept measured separately (e.g. the
    per-call overhead of a step on a tiny tensor); relative least squares, closed form."""
    xa, y = _arrays(x, seconds)
    w = 1.0 / y**2
    g = float(np.sum(w * xa * (y - intercept)) / np.sum(w * xa * xa))
    if g <= 0:
        raise ValueError("measured times are not above the intercept")
    fitted = LinearFit(float(intercept), 1.0 / g)
    return LinearFit(fitted.intercept, fitted.rate, [float(r) for r in (fitted.predict(xa) - y) / y])


def queue_throughput(
    block_size: float | np.ndarray,
    outstanding: float | np.ndarray,
    latency: float,
    bandwidth: float,
    queueing: float = 0.0,
) -> np.ndarray:
    """Little's law with a device cap, min(B, N*b / (L + b/B * (1 + q*(N-1)))); q = 0 is the
    plain model, q = 1 transfers of the outstanding requests fully serialised (see
    ``tiersim.strategies.swap.stream_rate``)."""
    b = np.asarray(block_size, dtype=float)
    n = np.asarray(outstanding, dtype=float)
    return np.minimum(bandwidth, n * b / (latency + b / bandwidth * (1.0 + queueing * (n - 1.0))))


def fit_queue_model(
    block_sizes: Sequence[float],
    outstanding: Sequence[float],
    throughputs: Sequence[float],
    fit_queueing: bool = True,
) -> QueueFit:
    """Fit ``latency``, ``bandwidth`` (and, with ``fit_queueing``, ``queueing`` in [0, 1]) of
    ``queue_throughput`` to measured points, minimising the log ratio (relative error) from a
    few starts, since the min() makes it piecewise."""
    b, n, thr = _measured_points(block_sizes, outstanding, throughputs)

    def resid(p: np.ndarray) -> np.ndarray:
        lat, bw = np.exp(p[:2])
        q = p[2] if fit_queueing else 0.0
        return np.log(queue_throughput(b, n, lat, bw, q) / thr)

    bw0 = float(np.max(thr))
    lo = [np.log(1e-9), np.log(bw0 * 0.1)] + ([0.0] if fit_queueing else [])
    hi = [np.log(1.0), np.log(bw0 * 100.0)] + ([1.0] if fit_queueing else [])
    best = min(
        (least_squares(resid, p0, bounds=(lo, hi), method="trf", xtol=1e-14, ftol=1e-14)
         for p0 in _queue_starts(b, n, thr, fit_queueing)),
        key=lambda sol: sol.cost,
    )
    lat, bw = (float(v) for v in np.exp(best.x[:2]))
    q = float(best.x[2]) if fit_queueing else 0.0
    model = queue_throughput(b, n, lat, bw, q)
    return QueueFit(lat, bw, [float(r) for r in (model - thr) / thr], q)


def _measured_points(
    block_sizes: Sequence[float], outstanding: Sequence[float], throughputs: Sequence[float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The measured points as arrays, checked: equal lengths, at least 2, all positive."""
    b = np.asarray(block_sizes, dtype=float)
    n = np.asarray(outstanding, dtype=float)
    thr = np.asarray(throughputs, dtype=float)
    if not (b.shape == n.shape == thr.shape) or len(b) < 2:
        raise ValueError("need equal-length arrays of at least 2 points")
    if np.any(b <= 0) or np.any(n <= 0) or np.any(thr <= 0):
        raise ValueError("block sizes, request counts and throughputs must be positive")
    return b, n, thr


def _queue_starts(b: np.ndarray, n: np.ndarray, thr: np.ndarray, fit_queueing: bool) -> list[np.ndarray]:
    """Starting points of the fit (log latency, log bandwidth[, queueing]): latencies around
    the median one the points imply at the peak throughput (s), bandwidths at and above that
    peak (bytes/s), queueing 0, 1/2 and 1."""
    bw0 = float(np.max(thr))
    lat_guesses = np.maximum(n * b / thr - b / bw0, 0.0)
    lat0 = float(np.median(lat_guesses[lat_guesses > 0])) if np.any(lat_guesses > 0) else 1e-4
    queueings = [[0.0], [0.5], [1.0]] if fit_queueing else [[]]
    return [
        np.array([np.log(min(max(lat_s, 1e-9), 0.5)), np.log(bw_s), *q_s])
        for lat_s in (lat0, lat0 * 0.3, lat0 * 3.0, 1e-5, 1e-3)
        for bw_s in (bw0, bw0 * 1.2, bw0 * 2.0)
        for q_s in queueings
    ]
