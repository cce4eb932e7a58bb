"""The simulation engine: task graphs of delays and flows on SimPy's event queue.

Tasks are not SimPy processes: a stream starts its next task from the callback of the event
that ends the one before (a timeout for a delay, the flow network's completion event for a
flow), so a run costs a few events per task and no generator frames.

The engine knows nothing about transformers or tiers: it runs ``Task`` objects on ordered
``streams`` over shared-bandwidth ``links`` and returns trace records.
"""

from tiersim.engine.graph import Link, Task, TaskGraph
from tiersim.engine.runner import EngineRun, run_graph

__all__ = ["EngineRun", "Link", "Task", "TaskGraph", "run_graph"]
