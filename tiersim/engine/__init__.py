"""The simulation engine: task graphs of delays and flows on SimPy's event queue.

Tasks are not SimPy processes: a task's delay is a timeout whose callback starts its flow, the
flow network's timer calls back when the flow ends, and that callback starts whatever the end
made ready, so a run costs a few events per task and no generator frames.

The engine knows nothing about transformers or tiers: it runs ``Task`` objects on ordered
``streams`` over shared-bandwidth ``links`` and returns trace records.
"""

from tiersim.engine.graph import Link, Task, TaskGraph
from tiersim.engine.links import SharedLinks
from tiersim.engine.runner import EngineRun, run_graph

__all__ = ["EngineRun", "Link", "SharedLinks", "Task", "TaskGraph", "run_graph"]
