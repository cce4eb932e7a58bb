"""The size of the work a config asks for, counted before anything is built, and its limit.

A run's size is the number of tasks its strategy would put in the task graph
(``Strategy.task_count``, from the layers, micro-steps and optimizer sub-groups of the step);
the engine handles at most two events per task (a delay, a flow's finish). Past
``limits.MAX_TASKS`` a config is refused, naming the setting that makes most of the work,
unless ``force`` is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.errors import ConfigError
from tiersim.limits import FORCE_HINT, MAX_TASKS
from tiersim.strategies import STRATEGIES
from tiersim.workload import step_shape

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.scenario import RunConfig

EVENTS_PER_TASK = 2
"""At most this many engine events per task (a delay's timeout and a flow's finish timer)."""


def run_tasks(config: RunConfig) -> int:
    """Tasks the run of ``config`` builds (when it fits)."""
    strategy = STRATEGIES[config.strategy](config.options)
    return strategy.task_count(step_shape(config.model, config.training), config.hardware)


def check_run(config: RunConfig, source: str, force: bool = False) -> int:
    """The run's tasks; past ``MAX_TASKS`` (unless ``force``) a ConfigError naming the field
    that makes most of them, its value and the limit."""
    tasks = run_tasks(config)
    if tasks <= MAX_TASKS or force:
        return tasks
    shape = step_shape(config.model, config.training)
    strategy = STRATEGIES[config.strategy](config.options)
    if 2 * strategy.step_task_count(shape, config.hardware) >= tasks:
        field, value = "training.sub_group_size", config.training.sub_group_size
        why = f"{count(shape.subgroups)} optimizer sub-groups"
    elif shape.micro_steps >= shape.layers:
        field, value = "training.global_batch", config.training.global_batch
        why = f"{count(shape.micro_steps)} micro-steps of {count(shape.layers)} layers"
    else:
        field, value = "model.layers", config.model.layers
        why = f"{count(shape.layers)} layers in each of {count(shape.micro_steps)} micro-steps"
    raise ConfigError(source, field, f"{count(value)} gives {why}, {count(tasks)} tasks per run ({config.strategy}); "
                                     f"the limit is {MAX_TASKS:,} tasks ({FORCE_HINT})")


def describe(runs: int, tasks: int) -> str:
    """``"4 runs, 2,960 tasks and at most 5,920 events"``."""
    return (f"{count(runs)} run{'s' if runs != 1 else ''}, {count(tasks)} tasks and at most "
            f"{count(EVENTS_PER_TASK * tasks)} events")


def count(value: int) -> str:
    """A count for a message: with thousands separators, or in powers of ten when huge."""
    return f"{value:,}" if abs(value) < 10**15 else f"{value:.3g}"
