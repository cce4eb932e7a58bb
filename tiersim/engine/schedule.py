"""How a schedule builds its task graph: the interface strategies write to.

A schedule is a program: it adds tasks in order (``add``), with loops over layers,
micro-steps and sub-groups. A loop says which of its iterations are alike: ``loop(keys)``
takes one key per iteration (consecutive iterations with equal keys add the same tasks, with
the same sizes, streams and dependencies relative to the iteration, or tasks that give the
same results), ``loop_runs(runs)`` the same as runs of (key, count) for a long loop. A schedule
also says which streams carry copies in the background for a stretch
(``background_copies``), whether a loop's iterations wait for earlier ones only through
their streams (``self_contained``) and whether a loop grows a float step in its start
(``amplifies``).

This ``Session`` builds the whole graph and runs it; a session that runs the graph as it is
built and skips what repeats (``tiersim.fastforward``) reads the same statements, so a
schedule must not assume it is given every iteration it counts: it reads its loop's lists of
tasks from their ends (``iterations_back``), as a loop's index may jump past iterations never
built. Times are s.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence

from tiersim.engine.graph import Task, TaskGraph
from tiersim.engine.runner import EngineRun, run_graph

LoopRun = tuple[Hashable, int] | tuple[Hashable, int, int]
"""(key, count) or (key, count, width): ``count`` consecutive blocks of ``width`` iterations
(1 when not given) whose keys are alike, block for block."""
Runs = Sequence[LoopRun]
"""A loop's iterations as runs of alike blocks."""
Block = tuple[Hashable, int, int]
"""(key, count, width): ``count`` consecutive blocks of ``width`` iterations, alike."""


class TaskLimit(Exception):
    """A schedule built more tasks than its session allows (``Session.max_tasks``)."""

    def __init__(self, tasks: int) -> None:
        super().__init__(f"{tasks} tasks built")
        self.tasks = tasks


def iterations_back(tasks: Sequence[str], back: int) -> list[str]:
    """The task ``back`` iterations before the one being built, from a loop's list of one task
    per built iteration (read from its end), as dependencies: none when the list is shorter.
    That iteration is then before the loop's first, or one a session skipped (its tasks all
    done), so a loop's first iterations may share the key of the later ones that do wait."""
    return [tasks[-back]] if len(tasks) >= back else []


def blocks_of(runs: Runs) -> list[Block]:
    """Runs given as (key, count) or (key, count, width) as blocks (width 1 when not given)."""
    return [(run[0], run[1], run[2] if len(run) == 3 else 1) for run in runs]


def run_count(runs: Runs) -> int:
    """The iterations ``runs`` count."""
    return sum(count * width for _key, count, width in blocks_of(runs))


class Session:
    """A task graph under construction: every iteration of every loop is built, and ``finish``
    runs the whole graph."""

    def __init__(self, capacity_of: Callable[[str], float], max_tasks: int | None = None) -> None:
        self.graph = TaskGraph(capacity_of=capacity_of)
        self.max_tasks = max_tasks
        """Tasks the session may build (``TaskLimit`` past it), or None."""

    def add(self, task: Task) -> str:
        """Add a task and return its name."""
        return self.graph.add(task)

    def loop(self, keys: Sequence[Hashable], self_contained: bool = False, amplifies: bool = False) -> Iterator[int]:
        """The indices of a loop's iterations (0, 1, ...), one per key; equal keys mark alike
        iterations. ``self_contained``: an iteration's tasks wait for those of earlier
        iterations only through their streams (each stream's next task follows its last).
        ``amplifies``: a float step in when the loop begins may grow through its iterations
        past float residue unless they settle into a repeat (sub-groups whose reads and writes
        overlap on the drives)."""
        return self._count(len(keys))

    def loop_runs(self, runs: Runs, self_contained: bool = False) -> Iterator[int]:
        """``loop`` with its keys given as runs of alike blocks (``Runs``)."""
        return self._count(run_count(runs))

    def background_copies(self, streams: frozenset[str]) -> None:
        """From now on the tasks of ``streams`` are copies that run in the background of the
        compute at their own rates (an empty set ends it). Every task is run as it is here."""

    def _count(self, iterations: int) -> Iterator[int]:
        for i in range(iterations):
            self.check_size()
            yield i

    def check_size(self) -> None:
        """``TaskLimit`` once more than ``max_tasks`` tasks are built."""
        if self.max_tasks is not None and len(self.graph.tasks) > self.max_tasks:
            raise TaskLimit(len(self.graph.tasks))

    def finish(self) -> EngineRun:
        """Run the graph built."""
        return run_graph(self.graph)


def run_whole(schedule: Callable[[Session], None], capacity_of: Callable[[str], float],
              max_tasks: int | None = None) -> tuple[EngineRun, TaskGraph]:
    """Build a schedule whole and run it: every task, in full (``TaskLimit`` once it builds
    more than ``max_tasks``)."""
    session = Session(capacity_of, max_tasks)
    schedule(session)
    return session.finish(), session.graph
