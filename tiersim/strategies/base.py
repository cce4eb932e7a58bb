"""The common strategy interface: what every offload strategy decides.

A strategy decides two things: where each tensor lives (``place``) and what the gradient
offload in backward and the optimizer step look like as engine tasks (``offload_gradients``,
``optimizer_step``); ``tiersim.strategies.iteration`` lays out forward and backward for all
micro-steps around those hooks. Adding a strategy = subclass ``Strategy`` and register it.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from tiersim.config.hardware import Hardware
from tiersim.engine.schedule import Session
from tiersim.strategies.builder import StepBuilder, collectives_bound_by_host_link, figures_of, rank_link_capacity
from tiersim.strategies.iteration import schedule_iteration
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.param_offload import (
    ParamFetch,
    ParamLayout,
    check_offload,
    fetch_tasks,
    param_layout,
    place_params,
    prefetch_depth,
    swap_options,
)
from tiersim.strategies.param_options import ParamOffload
from tiersim.strategies.pipeline import schedule_pipeline, stage_link_capacity
from tiersim.strategies.placement import Misfit, MissingDevice, Placement, Unfit, place_gpu_common
from tiersim.workload import LayerWork, StepShape, TrainingSpec, TrainingStep, stage_steps


@dataclass(frozen=True)
class ScheduleHints:
    """What a strategy's schedule says beyond its tasks, all of it DeepSpeed's behaviour: the
    streams whose copies run in the background of the compute at fixed rates, nothing of the
    backward waiting for them (``Session.background_copies``), in the boundary micro-step
    (``boundary_copies``) and in one before it (``accumulation_copies``, which only the next
    forward waits for). A session may time such copies apart from the rest; results do not
    depend on it."""

    boundary_copies: frozenset[str] = frozenset()
    accumulation_copies: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NoOptions:
    """A strategy without options."""


@dataclass
class Plan:
    """A strategy's output: placement, fit verdict and (when it fits) the schedule, which
    adds the iteration's tasks to a ``Session``."""

    placement: Placement
    fits: bool
    misfit: Unfit | None
    schedule: Callable[[Session], None] | None
    capacity_of: Callable[[str], float] | None = None
    """Capacity of each of the rank's links the schedule uses (units/s), by name."""
    whole: bool = False
    """Whether the schedule must run on the plain session, built whole (a pipeline's stages:
    the fast-forward does not skip in them)."""


def fullness(plan: Plan, hw: Hardware) -> float:
    """The largest share of a tier's usable bytes ``plan`` holds (above 1: it does not fit)."""
    shares = [0.0]
    usable = hw.usable_bytes()
    for tier, need in plan.placement.reserved().items():
        have = usable[tier]
        shares.append(need / have if have > 0 else math.inf if need else 0.0)
    return max(shares)


class Strategy(ABC):
    """Base class: subclasses set ``name``, ``Options`` and implement the three hooks."""

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    summary: ClassVar[str] = ""
    grads_on_gpu: ClassVar[bool] = False
    """Whether the 16-bit gradient partition stays in HBM (no optimizer offload)."""
    hints: ClassVar[ScheduleHints] = ScheduleHints()
    """What the schedule tells its session beyond its tasks (``ScheduleHints``)."""

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        """Add this strategy's optimizer state, gradients and buffers to ``placement``."""

    @abstractmethod
    def offload_gradients(self, builder: StepBuilder, micro: int, index: int, layer: LayerWork,
                          ready: str) -> str | None:
        """Tasks moving one layer's reduced gradient partition off the GPU (after ``ready``).
        Returns the task the training loop's host thread waits for before it goes on with the
        backward (a blocking copy), or None when the offload runs in the background. They may
        wait for an earlier micro-step's tasks only through their streams (the micro-step loop
        is ``self_contained``: ``Session.loop``)."""

    def background_streams(self, builder: StepBuilder, micro: int) -> frozenset[str]:
        """Streams whose copies run in the background of the backward of ``micro``
        (``hints``: ``boundary_copies`` at the accumulation boundary, ``accumulation_copies``
        before it)."""
        hints = self.hints
        return hints.boundary_copies if micro == builder.boundary else hints.accumulation_copies

    def backward_keys(self, builder: StepBuilder, micro: int) -> tuple[Hashable, ...]:
        """For each layer in backward order, what makes its backward's tasks differ from another
        layer's (``Session.loop``): by default its shape."""
        return builder.step.layer_shapes[::-1]

    def accumulation_links(self, builder: StepBuilder) -> frozenset[str] | None:
        """The links ``offload_gradients`` uses in a micro-step before the boundary, if there
        it adds nothing but ``gradients_to_host``'s copies (or nothing at all), so that the first
        micro-step's offload differs from an accumulating one's at most in the order of each
        layer's two copies; None otherwise (the default: a strategy that does not say is not
        assumed alike)."""
        return None

    @abstractmethod
    def optimizer_step(self, builder: StepBuilder, begin: str) -> None:
        """Tasks of the optimizer step over all sub-groups, starting after ``begin``."""

    def check(self, hw: Hardware) -> MissingDevice | None:
        """The device this strategy needs that ``hw`` lacks, or None."""
        return None

    def refusal(self, training: TrainingSpec) -> tuple[str, str] | None:
        """A setting of ``training`` or of this strategy's options that DeepSpeed refuses, or
        that tiersim does not model with this strategy: (its dotted field, why); None if none."""
        return None

    def param_memory(self, step: TrainingStep, hw: Hardware) -> HostMemory:
        """Where the host copy of the 16-bit parameters lives (``offload_param``): DRAM unless
        a strategy lays its host memory out otherwise."""
        return HostMemory.dram_only()

    @property
    def param_offload(self) -> ParamOffload | None:
        """The options' ``offload_param`` block: the 16-bit parameters offloaded (None: in HBM)."""
        offload = getattr(self.options, "offload_param", None)
        return offload if isinstance(offload, ParamOffload) else None

    places_param_host: ClassVar[bool] = True
    """Whether ``plan`` places the offloaded parameters' host buffers in DRAM (False: the
    strategy lays them out with its own host memory)."""

    def params_layout(self, step: TrainingStep, offload: ParamOffload) -> ParamLayout:
        """Where ``offload`` puts ``step``'s 16-bit partitions (``param_layout``)."""
        return param_layout(step, offload, swap_options(self.options).block_size)

    def param_fetch(self, step: TrainingStep, hw: Hardware) -> ParamFetch | None:
        """The parameter fetch and update tasks of a schedule, or None without ``offload_param``."""
        offload = self.param_offload
        return None if offload is None else ParamFetch(step, offload, self.param_memory(step, hw),
                                                      swap_options(self.options))

    @abstractmethod
    def offload_task_count(self, shape: StepShape) -> int:
        """Tasks ``offload_gradients`` makes over a step of ``shape``."""

    @abstractmethod
    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        """Tasks ``optimizer_step`` makes for a step of ``shape`` on ``hw``."""

    def task_count(self, shape: StepShape, hw: Hardware) -> int:
        """Tasks ``plan`` builds for a step of ``shape`` on ``hw`` (when it fits), counted
        without building anything: what the work limits (``tiersim.config.limits``) are checked on.
        Per micro-step: two markers, a forward per layer and a backward per layer (twice for a
        checkpointed one, which also recomputes), a gather before each of those under ZeRO-3,
        the tensor-parallel collectives after each pass that has them (``StepShape``), the
        all-to-alls after each pass of an expert-parallel layer, and a reduce-scatter per layer;
        then the step's marker and the strategy's own tasks."""
        passes = shape.layers + (shape.layers + shape.checkpointed)
        gathers = passes if shape.zero_stage >= 3 and shape.data_parallel > 1 else 0
        reduces = shape.layers if shape.data_parallel > 1 else 0
        reducing = shape.micro_steps if shape.zero_stage >= 2 else 1  # below ZeRO-2 at the boundary only
        per_micro = (2 + passes + gathers + shape.tensor_parallel_passes + passes * fetch_tasks(self.param_offload)
                     + 2 * shape.host_checkpoints + shape.exchanges)
        return (shape.micro_steps * per_micro + reducing * reduces + 1 + self.offload_task_count(shape)
                + self.step_task_count(shape, hw))

    def gradient_conversion_bytes(self, step: TrainingStep) -> int:
        """Peak bytes of fp32 gradient partitions this strategy converts on the GPU in backward."""
        return 0

    def step_transient_bytes(self, step: TrainingStep) -> int:
        """Bytes the optimizer step allocates in HBM for a while (after the backward's are freed)."""
        return 0

    def gpu_peak(self, step: TrainingStep) -> dict[str, int] | None:
        """The tensors live at the backward's peak in HBM, where the strategy follows them
        (None: each kind's largest, summed, by ``place_gpu_common``)."""
        return None

    def plan(self, step: TrainingStep, hw: Hardware) -> Plan:
        """Place tensors, check capacity and, when everything fits, the schedule; with pipeline
        parallelism for each stage's rank (``stage_steps``), the verdict and placement those of
        the fullest stage (``fullness``), the schedule the stages' 1F1B (``schedule_pipeline``)."""
        stages = stage_steps(step)
        if len(stages) == 1:
            return self.plan_rank(step, hw)
        plans = [self.plan_rank(stage, hw) for stage in stages]
        unfit = [plan for plan in plans if not plan.fits]
        worst = max(unfit or plans, key=functools.partial(fullness, hw=hw))
        if unfit:
            return worst
        return Plan(worst.placement, True, None, functools.partial(schedule_pipeline, self, stages, hw),
                    functools.partial(stage_link_capacity, hw), whole=True)

    def plan_rank(self, step: TrainingStep, hw: Hardware) -> Plan:
        """``plan`` for one rank holding ``step``'s layers."""
        placement = Placement()
        offload = self.param_offload
        missing = self.check(hw) or (check_offload(offload, hw) if offload else None)
        if hw.gpu is not None:
            fetched = prefetch_depth(step) if offload else None
            place_gpu_common(step, placement, hw.gpu, self.grads_on_gpu, self.gradient_conversion_bytes(step), fetched,
                             self.step_transient_bytes(step), self.gpu_peak(step))
        if missing:
            return Plan(placement, False, missing, None)
        self.place(step, hw, placement)
        checkpoints = step.host_checkpoint_sizes
        if checkpoints:  # none without cpu_checkpointing: a TrainingStep's method runs in Python
            placement.put("dram", "activation checkpoints (cpu_checkpointing, pageable)",
                          step.in_flight_bytes(sum(checkpoints)) * hw.gpus)
        if offload:
            place_params(step, offload, self.params_layout(step, offload), placement, hw.gpus,
                         self.places_param_host)
        usable = figures_of(hw).usable_bytes()
        for tier, need in placement.reserved().items():
            have = usable[tier]
            if need > have:
                return Plan(placement, False, Misfit(tier, need, have), None)
        return Plan(placement, True, None, functools.partial(schedule_iteration, self, step, hw),
                    functools.partial(rank_link_capacity, hw), collectives_bound_by_host_link(step.training, hw))
