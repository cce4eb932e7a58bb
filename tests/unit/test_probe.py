"""The probe of an unsettled fast run: two runs agree when every figure is within ``AGREE``."""

from __future__ import annotations

from tiersim.engine import Task, TaskGraph, run_graph
from tiersim.engine.runner import EngineRun
from tiersim.fastforward.probe import AGREE, NUDGE, agree, nudged


def two_copies(capacity: float) -> EngineRun:
    """A marker, a compute task and two copies sharing a link of ``capacity`` bytes/s."""
    graph = TaskGraph()
    graph.link("pcie", capacity)
    graph.add(Task("begin", "gpu", "forward", "marker"))
    graph.add(Task("compute", "gpu", "forward", "compute", delay=1.0))
    for name in ("a", "b"):
        graph.add(Task(name, name, "forward", "h2d", size=3.0, usage=(("pcie", 1.0),)))
    return run_graph(graph)


def test_a_run_agrees_with_itself_and_with_nudged_rates() -> None:
    run = two_copies(2.0)
    assert agree(run, two_copies(2.0))
    assert agree(run, two_copies(nudged({"pcie": 2.0}.__getitem__)("pcie")))
    capacity = nudged({"pcie": 2.0, "nvme": 1.0}.__getitem__)
    assert (capacity("pcie"), capacity("nvme"), capacity("pcie")) == (2.0 * (1 + NUDGE), 1.0 - NUDGE, 2.0 * (1 + NUDGE))


def test_a_run_moved_beyond_the_bound_disagrees() -> None:
    run = two_copies(2.0)
    assert not agree(run, two_copies(2.0 * (1 + 100 * AGREE)))
    assert not agree(two_copies(2.0 * (1 + 100 * AGREE)), run)


def test_a_figure_one_run_lacks_disagrees() -> None:
    run = two_copies(2.0)
    other = two_copies(2.0)
    other.link_busy["nvme"] = 0.0
    assert not agree(run, other)
