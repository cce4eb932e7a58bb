"""The size of the work a config asks for, counted before anything is built, and its limits.

A run's size is the number of tasks its strategy would put in the task graph
(``Strategy.task_count``, from the layers, micro-steps and optimizer sub-groups of the step);
the engine handles at most two events per task (a delay, a flow's finish). Past
``limits.MAX_TASKS`` a config is refused, naming the setting that makes most of the work,
unless ``force`` is given; so is one whose engine may take more than ``limits.MAX_RUN_SECONDS``
(``simulated_tasks``: the tasks fast-forward may simulate one by one, at ``limits.SECONDS_PER_TASK``
each). The bytes a run places and a tier's capacity must stay within
``limits.MAX_WHOLE`` (2^53, 8 PiB) so that every byte count of a result is exact and fits a
64-bit column (``check_bytes``; no ``force``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tiersim.config.limits import FORCE_HINT, MAX_RUN_SECONDS, MAX_TASKS, MAX_WHOLE, SECONDS_PER_TASK
from tiersim.errors import ConfigError
from tiersim.strategies import STRATEGIES
from tiersim.strategies.builder import collectives_bound_by_host_link
from tiersim.strategies.pipeline import pipeline_tasks
from tiersim.workload import StepShape, parameter_count, stage_shapes, step_shape

if TYPE_CHECKING:  # pragma: no cover
    from tiersim.config.scenario import RunConfig

EVENTS_PER_TASK = 2
"""At most this many engine events per task (a delay's timeout and a flow's finish timer)."""
SIMULATED_MICRO_STEPS = 3
"""Micro-steps a fast-forwarded run simulates at most: the first, an accumulating one whose
state repeats the first's, and the next, begun when the repeat is seen (docs/design/fast-forward.md;
2, 3, 4 and 1,024 micro-steps cost the same events in benchmarks/engine_scaling.py)."""
FAST_FORWARD_TRIES = 3
"""Times ``run_schedule`` may run a schedule: once, again without geometric skips, again
without deferred copies (tiersim/fastforward/session.py)."""


def run_tasks(config: RunConfig) -> int:
    """Tasks the run of ``config`` builds (when it fits) without fast-forward: an upper
    bound of what it builds (a run that builds past ``MAX_TASKS`` stops there, with the error
    ``check_run`` gives up front)."""
    return stage_tasks(config, stage_shapes(config.model, config.training))


def stage_tasks(config: RunConfig, shapes: tuple[StepShape, ...]) -> int:
    """Tasks of a step whose pipeline stages have ``shapes`` (one without pipeline parallelism):
    each stage's and the pipeline's own (``pipeline_tasks``)."""
    strategy = STRATEGIES[config.strategy](config.options)
    return (sum(strategy.task_count(shape, config.hardware) for shape in shapes)
            + pipeline_tasks(config.training, shapes[0].micro_steps, config.model.tied_embeddings))


def simulated_tasks(config: RunConfig) -> int:
    """At most how many tasks the fast-forwarded run of ``config`` simulates one by one: each
    of ``FAST_FORWARD_TRIES`` tries simulates at most the tasks of ``SIMULATED_MICRO_STEPS``
    micro-steps, the boundary and the optimizer step (its layers and sub-groups in full). A
    pipeline's schedule runs on the plain session, once and whole: all its tasks, as does one
    whose collectives move at a PCIe link's rate (``collectives_bound_by_host_link``)."""
    shapes = stage_shapes(config.model, config.training)
    if len(shapes) > 1 or collectives_bound_by_host_link(config.training, config.hardware):
        return stage_tasks(config, shapes)
    return FAST_FORWARD_TRIES * stage_tasks(config, (simulated_shape(shapes[0]),))


def simulated_shape(shape: StepShape) -> StepShape:
    """The step's ``shape`` with its micro-steps cut to ``SIMULATED_MICRO_STEPS``."""
    return replace(shape, micro_steps=min(shape.micro_steps, SIMULATED_MICRO_STEPS))


def check_run(config: RunConfig, source: str, force: bool = False) -> int:
    """The run's tasks; past ``MAX_TASKS``, or with an engine that may take more than
    ``MAX_RUN_SECONDS`` (unless ``force``), a ConfigError naming the field that makes most of
    the work, its value and the limit."""
    tasks = run_tasks(config)
    if force:
        return tasks
    if tasks > MAX_TASKS:
        raise too_many_tasks(config, source, tasks)
    simulated = simulated_tasks(config)
    if simulated * SECONDS_PER_TASK > MAX_RUN_SECONDS:
        whole = config.training.pipeline_parallel > 1 or collectives_bound_by_host_link(config.training,
                                                                                         config.hardware)
        short = None if whole else simulated_shape(step_shape(config.model, config.training))
        field, value, why = largest_factor(config, simulated if whole else simulated // FAST_FORWARD_TRIES, short)
        raise ConfigError(source, field, f"{count(value)} gives {why}, {too_slow(config, simulated)}")
    return tasks


def check_traced(config: RunConfig, flag: str) -> None:
    """A ConfigError (naming ``flag``, ``--out`` or ``--plot``, which write the per-task trace and
    so simulate in full) when the run of ``config`` in full may take more than ``MAX_RUN_SECONDS``."""
    tasks = run_tasks(config)
    if tasks * SECONDS_PER_TASK > MAX_RUN_SECONDS:
        field, value, why = largest_factor(config, tasks)
        raise ConfigError(flag, "", f"writes a per-task trace, so simulates in full: {field} {count(value)} gives "
                                    f"{why}, {too_slow(config, tasks)}")


def too_slow(config: RunConfig, simulated: int) -> str:
    """The end of the error for a run that simulates ``simulated`` tasks one by one, past
    ``MAX_RUN_SECONDS``."""
    return (f"{count(simulated)} tasks simulated at most ({config.strategy}), about "
            f"{simulated * SECONDS_PER_TASK:.2g} s; the limit is {MAX_RUN_SECONDS:g} s per run ({FORCE_HINT})")


def too_many_tasks(config: RunConfig, source: str, tasks: int) -> ConfigError:
    """The error for a run of ``tasks`` tasks, past ``MAX_TASKS``: it names the setting that
    makes most of them, its value and the limit."""
    field, value, why = largest_factor(config, tasks)
    return ConfigError(source, field, f"{count(value)} gives {why}, {count(tasks)} tasks per run ({config.strategy}); "
                                      f"the limit is {MAX_TASKS:,} tasks ({FORCE_HINT})")


def largest_factor(config: RunConfig, tasks: int, shape: StepShape | None = None) -> tuple[str, int, str]:
    """The setting that makes most of a run's ``tasks`` (the field, its value and why), from
    the sub-groups, micro-steps and layers of ``shape`` (by default the config's)."""
    shape = shape or step_shape(config.model, config.training)
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
    return field, value, why


def check_bytes(config: RunConfig, source: str) -> None:
    """A ConfigError when a tier's capacity, the model's state or its activations would be more
    than ``MAX_WHOLE`` bytes (an upper bound of what the strategies place, from arithmetic)."""
    hardware, model, training = config.hardware, config.model, config.training
    for tier, field in (("hbm", "hardware.gpu"), ("dram", "hardware.dram_capacity"), ("cxl", "hardware.cxl.count"),
                        ("nvme", "hardware.nvme.count")):
        capacity = hardware.capacity(tier)
        if capacity > MAX_WHOLE:
            raise ConfigError(source, field, f"gives the {tier} tier {capacity:.3g} bytes, more than 2^53 "
                                             f"({MAX_WHOLE:.3g}), the limit for a run's bytes")
    state = parameter_count(model) * STATE_BYTES_PER_PARAM
    tokens = training.seq_len * training.micro_batch
    activations = ((model.layers + 2) * tokens * model.hidden * ACTIVATION_BYTES_PER_ELEMENT
                   + tokens * model.vocab * LOGIT_BYTES)
    widest = max(("model.hidden", model.hidden), ("model.ffn", model.ffn // 4), ("model.layers", model.layers),
                 ("model.vocab", model.vocab // 1000), key=lambda item: item[1])[0]  # what makes most parameters
    for what, field, num_bytes in (("state", widest, state), ("activations", "training.seq_len", activations)):
        if num_bytes > MAX_WHOLE:
            raise ConfigError(source, field, f"makes {num_bytes:.3g} bytes of {what}, more than 2^53 "
                                             f"({MAX_WHOLE:.3g}), the limit for a run's bytes")


STATE_BYTES_PER_PARAM = 40
"""At most this many bytes a parameter places in all (16-bit weight and gradient, fp32 weight,
gradient and two Adam moments)."""
ACTIVATION_BYTES_PER_ELEMENT = 34
"""Korthikanti et al.'s activation bytes per token x hidden, the most a layer keeps."""
LOGIT_BYTES = 4
"""The fp32 logits, per token x vocabulary entry."""


def describe(runs: int, tasks: int) -> str:
    """``"4 runs, 2,960 tasks and at most 5,920 events"``."""
    return (f"{count(runs)} run{'s' if runs != 1 else ''}, {count(tasks)} tasks and at most "
            f"{count(EVENTS_PER_TASK * tasks)} events")


def count(value: int) -> str:
    """A count for a message: with thousands separators, or in powers of ten when huge."""
    return f"{value:,}" if abs(value) < 10**15 else f"{value:.3g}"
