"""Fit a node's unknown figures to measured runs by least squares of tiersim's own predictions.

Every evaluation is ``simulate`` on the logs' scenarios with the candidate figures put into the
node's profiles: the fit is a loop around the simulator, never a second model beside it. The
residual of a measured value is ``ln(predicted / measured)``; the figures are fitted in log
space within their bounds (scipy ``least_squares``, trust region reflective). Confidence
intervals come from the Jacobian at the solution: ``cov = s^2 (J^T J)^-1`` with ``s^2`` the
residual variance (m values, n figures, m - n degrees of freedom).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from tiersim.config.hardware import Hardware
from tiersim.config.scenario import RunConfig
from tiersim.errors import ConfigError
from tiersim.fitting.predicted import predicted_quantities
from tiersim.fitting.replay import log_config, system_node
from tiersim.fitting.system import System, Unknown
from tiersim.ingest.log_scenario import steady_state
from tiersim.ingest.training_log import read_log
from tiersim.simulate import simulate

Z95 = 1.959963984540054
"""Two-sided 95% quantile of the standard normal distribution."""


@dataclass(frozen=True)
class Measured:
    """One measured value a fit matches: which log, which quantity, seconds."""

    log: str
    quantity: str
    seconds: float


@dataclass(frozen=True)
class FittedFigure:
    """A fitted figure with its bounds and 95% confidence interval (base units; the interval
    is None when the data do not determine the figure)."""

    unknown: Unknown
    start: float
    value: float
    interval: tuple[float, float] | None

    @property
    def at_bound(self) -> bool:
        """Whether the fit pressed the figure against one of its bounds."""
        return math.isclose(self.value, self.unknown.low, rel_tol=1e-3) or math.isclose(
            self.value, self.unknown.high, rel_tol=1e-3)


@dataclass(frozen=True)
class Residual:
    """A measured value against the fitted prediction."""

    measured: Measured
    predicted: float

    @property
    def relative(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted / self.measured.seconds - 1.0


@dataclass(frozen=True)
class FitResult:
    """What ``fit_system`` found."""

    system: System
    logs: tuple[str, ...]
    figures: tuple[FittedFigure, ...]
    residuals: tuple[Residual, ...]
    parts: dict[str, Any]
    """The node's profiles with the fitted figures in place."""
    evaluations: int


class Problem:
    """The logs' runs on a node whose unknown figures are a vector ``x`` (log of base units)."""

    def __init__(self, system: System, logs: Sequence[str | Path]) -> None:
        self.system = system
        self.runs: list[tuple[str, RunConfig]] = []
        self.measured: list[Measured] = []
        node = system_node(system)
        for path in logs:
            log = read_log(path)
            config = log_config(log, node)
            steady = steady_state(log)
            wanted = [q for q in system.measures if q in steady]
            if not wanted:
                raise ConfigError(log.path, "measure", f"has none of the measured quantities {list(system.measures)}")
            self.runs.append((log.path, config))
            self.measured.extend(Measured(log.path, q, steady[q]) for q in wanted)
        if len(self.measured) <= len(system.unknowns):
            raise ConfigError(system.source, "fit", f"{len(system.unknowns)} figures need more measured values "
                              f"than the {len(self.measured)} the logs give")
        self.evaluations = 0

    @property
    def start(self) -> np.ndarray:
        """The profiles' own values of the unknowns (log space)."""
        return np.log([getattr(self.system.parts[u.part], u.figure) for u in self.system.unknowns])

    def parts_at(self, x: np.ndarray) -> dict[str, Any]:
        """The node's profiles with the unknowns set to ``exp(x)``."""
        parts = dict(self.system.parts)
        for unknown, value in zip(self.system.unknowns, np.exp(x)):
            current = getattr(parts[unknown.part], unknown.figure)
            typed = int(round(value)) if isinstance(current, int) and not isinstance(current, bool) else float(value)
            parts[unknown.part] = dataclasses.replace(parts[unknown.part], **{unknown.figure: typed})
        return parts

    def predictions(self, x: np.ndarray) -> list[float]:
        """Predicted seconds of every measured value with the unknowns at ``exp(x)``."""
        self.evaluations += 1
        parts = self.parts_at(x)
        predicted: dict[tuple[str, str], float] = {}
        for path, config in self.runs:
            result = simulate(dataclasses.replace(config, hardware=_with_parts(config.hardware, parts)))
            if not result.fits:
                raise ConfigError(path, "fit", f"the node does not fit this run: {result.reason}")
            for quantity, seconds in predicted_quantities(result).items():
                predicted[(path, quantity)] = seconds
        missing = [m for m in self.measured if (m.log, m.quantity) not in predicted]
        if missing:
            raise ConfigError(missing[0].log, "measure", f"tiersim predicts no {missing[0].quantity!r} for this run")
        return [predicted[(m.log, m.quantity)] for m in self.measured]

    def residuals(self, x: np.ndarray) -> np.ndarray:
        """ln(predicted / measured) of every measured value."""
        return np.log(np.asarray(self.predictions(x)) / [m.seconds for m in self.measured])


def fit_system(system: System, logs: Sequence[str | Path]) -> FitResult:
    """Fit ``system``'s unknown figures to the steady state of ``logs``."""
    problem = Problem(system, logs)
    low = np.log([u.low for u in system.unknowns])
    high = np.log([u.high for u in system.unknowns])
    solution = least_squares(problem.residuals, problem.start, bounds=(low, high), method="trf",
                             diff_step=1e-4, x_scale=1.0, xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=400)
    x = solution.x
    intervals = _intervals(solution.jac, solution.fun, x)
    figures = tuple(FittedFigure(u, float(math.exp(s)), float(math.exp(v)), ci)
                    for u, s, v, ci in zip(system.unknowns, problem.start, x, intervals))
    predicted = problem.predictions(x)
    residuals = tuple(Residual(m, p) for m, p in zip(problem.measured, predicted))
    return FitResult(system, tuple(str(p) for p in logs), figures, residuals, problem.parts_at(x),
                     problem.evaluations)


def _intervals(jac: np.ndarray, fun: np.ndarray, x: np.ndarray) -> list[tuple[float, float] | None]:
    """95% intervals of each figure from the Jacobian of the log residuals (None where the data
    leave a figure undetermined: a singular or near-singular J^T J)."""
    m, n = jac.shape
    dof = m - n
    variance = float(fun @ fun) / dof if dof > 0 else float("nan")
    information = jac.T @ jac
    out: list[tuple[float, float] | None] = []
    try:
        cov = np.linalg.inv(information) * variance
    except np.linalg.LinAlgError:
        return [None] * n
    if np.linalg.cond(information) > 1e12:
        return [None] * n
    for k in range(n):
        sigma = math.sqrt(cov[k, k]) if cov[k, k] >= 0 and math.isfinite(cov[k, k]) else float("nan")
        if not math.isfinite(sigma) or Z95 * sigma > 50:
            out.append(None)
        else:
            out.append((math.exp(x[k] - Z95 * sigma), math.exp(x[k] + Z95 * sigma)))
    return out


def _with_parts(hardware: Hardware, parts: dict[str, Any]) -> Hardware:
    """``hardware`` with its profiles replaced by the node's parts."""
    return dataclasses.replace(hardware, **{part: value for part, value in parts.items()})
