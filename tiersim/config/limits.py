"""Limits that keep every accepted input bounded in time and memory.

Input limits (always applied): a YAML file is at most ``MAX_FILE_BYTES`` long, expands (aliases
followed) to at most ``MAX_YAML_NODES`` values nested at most ``MAX_YAML_DEPTH`` deep, and a
whole number or size in it is at most ``MAX_WHOLE`` (beyond 2^53 a whole number is no longer
exact in the float arithmetic of the models).

Work limits (``--force`` lifts them): one run builds at most ``MAX_TASKS`` tasks (the engine
handles at most two events per task: a delay and a flow's finish), and one sweep has at most
``MAX_SWEEP_RUNS`` runs and ``MAX_SWEEP_TASKS`` tasks in all. A run's tasks are counted from
the model and training settings before anything is built (``Strategy.task_count``). On the
2-core development VM a run of 500,000 tasks took 4.6 s and 460 MB, so a run at the limit
takes about 10 s and 1 GB; a sweep at the limit about 10 minutes per core. A run whose
engine may take more than ``MAX_RUN_SECONDS`` is refused too (``--force`` lifts it): its time is
bounded by the tasks fast-forward may simulate one by one (``worksize.simulated_tasks``) at
``SECONDS_PER_TASK`` each.
"""

from __future__ import annotations

MAX_FILE_BYTES = 4 * 2**20
MAX_LOG_BYTES = 256 * 2**20
"""The longest training log read (bytes): a log of 10,000 iterations is about 30 MB."""
"""Bytes of one input file (YAML parses at about 1 MB/s)."""
MAX_YAML_NODES = 1_000_000
"""Values (mappings, lists and scalars) of one YAML document, aliases expanded."""
MAX_YAML_DEPTH = 64
"""Nesting depth of one YAML document."""
MAX_WHOLE = 2**53
"""Largest whole number (count, element count, bytes) a file may give."""
MAX_TASKS = 1_000_000
"""Tasks of one run (simulated iteration)."""
MAX_RUN_SECONDS = 1.0
"""Seconds of engine work one run may take (``worksize.simulated_tasks`` at ``SECONDS_PER_TASK``)."""
SECONDS_PER_TASK = 13e-6
"""Seconds of CPU the engine spends on a task it simulates one by one, at most: simulated in
full (``fast_forward=False``) on the loaded 2-core development VM, the quickstart at global batch
64 took 144 ms for 11,099 tasks under DRAM and 149 ms for 11,199 under NVMe (13 us a task)."""
MAX_SWEEP_RUNS = 100_000
"""Runs of one sweep."""
MAX_SWEEP_TASKS = 100_000_000
"""Tasks of all the runs of one sweep."""
NOTICE_TASKS = 100_000
"""Work (tasks in all) from which ``run`` says how much it is about to do."""

FORCE_HINT = "pass force=True (on the command line: --force) to run it anyway"
"""The way past a limit, from Python or the CLI (a library error names the parameter first)."""
