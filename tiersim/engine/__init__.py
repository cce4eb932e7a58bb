"""The simulation engine: task graphs of delays and flows on one clock and event queue.

The physics: tasks on ordered ``streams`` (``graph``), flows over shared links with max-min
sharing (``flows``), time integrals of what ran (``accounts``) and how busy they kept each
stream and link (``usage``), the event loop that runs a graph (``runner``) on a heap of timed
callbacks ordered as SimPy's queue (``clock``, the only module that touches SimPy), and the
interface a schedule is built through (``schedule``); ``links``
gives process-style SimPy models the same links. Tasks are not processes: a task's delay is a
timeout whose callback starts its flow, the flow network's timer calls back when the flow ends,
and that callback starts whatever the end made ready, so a run costs a few events per task and
no generator frames.

The engine knows nothing about transformers or tiers: it runs ``Task`` objects on ordered
``streams`` over shared-bandwidth ``links`` and returns trace records.
"""

from tiersim.engine.graph import Link, Task, TaskGraph
from tiersim.engine.links import SharedLinks
from tiersim.engine.runner import EngineRun, run_graph

__all__ = ["EngineRun", "Link", "SharedLinks", "Task", "TaskGraph", "run_graph"]
