"""The simulation engine: task graphs of delays and flows run as SimPy processes.

The engine knows nothing about transformers or tiers: it runs ``Task`` objects on ordered
``streams`` over shared-bandwidth ``links`` and returns trace records.
"""

from tiersim.engine.graph import Link, Task, TaskGraph
from tiersim.engine.runner import EngineRun, run_graph

__all__ = ["EngineRun", "Link", "Task", "TaskGraph", "run_graph"]
