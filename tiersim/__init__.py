"""tiersim: a discrete-event simulator of memory tiers for transformer training.

The Python API, for notebooks (imported lazily, so ``import tiersim`` stays light)::

    import tiersim
    configs = tiersim.load_scenario("scenarios/quickstart.yaml", ["training.global_batch=8"])
    result = tiersim.simulate(configs[0])          # a Result; result.summary(), result.trace
    df = tiersim.sweep("sweeps/quickstart-nvme.yaml", jobs=4)   # one row per run (DataFrame)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiersim import _native
from tiersim._version import __version__

_native.install()  # before any engine module is imported: compiled, or from the sources

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.analysis.plots import timeline_figure, utilisation_figure
    from tiersim.config.document import load_scenario
    from tiersim.results import Result
    from tiersim.simulate import simulate
    from tiersim.sweeping.runner import sweep

_LAZY = {
    "load_scenario": ("tiersim.config.document", "load_scenario"),
    "simulate": ("tiersim.simulate", "simulate"),
    "Result": ("tiersim.results", "Result"),
    "sweep": ("tiersim.sweeping.runner", "sweep"),
    "timeline_figure": ("tiersim.analysis.plots", "timeline_figure"),
    "utilisation_figure": ("tiersim.analysis.plots", "utilisation_figure"),
}

__all__ = ["__version__", "load_scenario", "simulate", "sweep", "Result", "timeline_figure",
           "utilisation_figure"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tiersim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
