"""A measured run replayed on a described node: the log's scenario completed with the node's
parts, simulated, and set beside what the log measured.

The node is either a system file (``systems/*.yaml``: datasheet parts, settings, the figures a
fit may move) or a host profile that ``tiersim fit`` wrote. Each log's scenario is the one
``import-log`` reads; the node's settings fill what a log cannot say, and ``--set`` overrides
win over both. ``tiersim fit`` builds its runs with the same ``log_config``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiersim.config.document import SET, Origin, ScenarioDocument
from tiersim.config.profiles import HostProfile, load_profile_file, read_yaml
from tiersim.config.scenario import RunConfig, parse_assignment
from tiersim.errors import ConfigError
from tiersim.fitting.predicted import predicted_quantities
from tiersim.fitting.system import System, load_system
from tiersim.ingest.log_scenario import log_document, steady_state
from tiersim.ingest.training_log import TrainingLog, read_log
from tiersim.simulate import simulate

PHASES = (("forward", "forward_s"), ("backward", "backward_s"), ("optimizer_step", "step_s"),
          ("iteration", "iteration_s"))
"""The measured quantities a replay compares, and the key each has in the output (seconds)."""


@dataclass(frozen=True)
class Node:
    """What a replay runs the logs on: a host profile, and the scenario settings that come with it."""

    name: str
    source: str
    host: HostProfile
    settings: dict[str, object]


def load_node(path: str | Path) -> Node:
    """A system file or a host profile (``kind: host``) as a node; anything else is a ConfigError.
    A profile ``tiersim fit`` wrote keeps its system file's settings under ``calibration.settings``."""
    source = str(path)
    data = read_yaml(Path(path))
    if isinstance(data, dict) and data.get("kind") == "host":
        profile = load_profile_file(Path(path))
        assert isinstance(profile, HostProfile)
        settings = (profile.calibration or {}).get("settings") or {}
        if not isinstance(settings, dict):
            raise ConfigError(source, "calibration.settings", "expected a mapping of scenario field -> value")
        return Node(profile.name, source, profile, settings)
    return system_node(load_system(path))


def system_node(system: System) -> Node:
    """A system file's node: its parts as one host profile (what ``tiersim fit`` writes), and its settings."""
    parts = system.parts
    host = HostProfile(kind="host", name=system.name, description=system.description, sources={},
                       cpu=parts["cpu"], dram=parts["dram"], nvme=parts["nvme"], link=parts.get("link"),
                       gpu=parts.get("gpu"), fabric=parts.get("fabric"), cxl=parts.get("cxl"),
                       network=parts.get("network"))
    return Node(system.name, system.source, host, dict(system.settings))


def log_config(log: TrainingLog, node: Node, overrides: Sequence[str] = ()) -> RunConfig:
    """The run ``log`` describes, on ``node``: the node's settings, then ``overrides``
    (``KEY=VALUE``); options of a strategy the log did not run are passed over in both."""
    doc: ScenarioDocument = log_document(log)
    ran = set(doc.strategy_names())
    given = [(Origin(node.source, "settings"), key, value) for key, value in node.settings.items()]
    given += [(SET, *parse_assignment(item, SET.source)) for item in overrides]
    for origin, key, value in given:
        if not key.startswith("strategies.") or key.split(".")[1] in ran:
            doc = doc.with_values({key: value}, origin)
    doc = doc.with_values({"hardware.host": node.name}, Origin(node.source, "name"))
    (config,) = doc.configs(host=node.host)
    return config


@dataclass(frozen=True)
class Replay:
    """One log replayed: measured and predicted seconds by output key (``forward_s`` ...)."""

    log: str
    measured: dict[str, float]
    predicted: dict[str, float]

    def error(self, key: str) -> float | None:
        """(predicted - measured) / measured of one quantity (None where either is missing)."""
        measured, predicted = self.measured.get(key), self.predicted.get(key)
        if measured is None or predicted is None or measured == 0:
            return None
        return (predicted - measured) / measured


def replay(path: str | Path, node: Node, overrides: Sequence[str] = ()) -> Replay:
    """Import ``path``, run it on ``node`` and pair the steady-state phases with the prediction."""
    log = read_log(path)
    steady = steady_state(log)
    result = simulate(log_config(log, node, overrides))
    if not result.fits:
        raise ConfigError(str(path), "replay", f"the run does not fit on {node.name}: {result.reason}")
    predicted = predicted_quantities(result)
    return Replay(str(path),
                  {key: steady[quantity] for quantity, key in PHASES if quantity in steady},
                  {key: predicted[quantity] for quantity, key in PHASES if quantity in predicted})
