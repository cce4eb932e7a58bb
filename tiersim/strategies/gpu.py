"""``gpu``: no offload. fp32 master weights, gradients and Adam state stay in HBM; Adam runs on
the GPU, bound by HBM bandwidth (it streams every state byte once per step)."""

from __future__ import annotations

from tiersim.config.hardware import Hardware
from tiersim.strategies.base import Strategy
from tiersim.strategies.builder import StepBuilder, first_apart
from tiersim.strategies.kinds import gpu_adam_task
from tiersim.strategies.param_offload import update_tasks
from tiersim.strategies.param_options import ParamOffloadOptions
from tiersim.strategies.placement import Placement
from tiersim.workload import LayerWork, StepShape, TrainingStep


class GPUResident(Strategy):
    """Everything in HBM, GPU Adam per sub-group on the compute stream."""

    name = "gpu"
    summary = "all state in HBM, GPU Adam"
    grads_on_gpu = True
    Options = ParamOffloadOptions

    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        placement.put("hbm", "fp32 params + Adam m, v", step.optimizer_state_bytes())
        placement.put("hbm", "fp32 gradients", step.fp32_grad_bytes())

    def offload_gradients(self, builder: StepBuilder, micro: int, index: int, layer: LayerWork, ready: str) -> None:
        """Gradients stay in HBM: nothing to move, nothing blocks."""
        return

    def accumulation_links(self, builder: StepBuilder) -> frozenset[str]:
        return frozenset()  # every micro-step builds the same tasks

    def offload_task_count(self, shape: StepShape) -> int:
        return 0

    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        return shape.subgroups * (1 + update_tasks(self.param_offload, hw.has_gpu, fp32_on_gpu=True))

    def optimizer_step(self, builder: StepBuilder, begin: str) -> None:
        """GPU Adam per sub-group, writing the 16-bit parameters in HBM; with them offloaded, each
        sub-group's update then goes to the host partition (``ParamFetch.update``) instead."""
        fetch = self.param_fetch(builder.step, builder.hw)
        groups = builder.step.subgroups
        keys = first_apart(builder.step.subgroup_sizes)
        done = begin  # offloaded, each sub-group's blocking copy ends before the next one's step
        for i in builder.loop(fetch.update_keys(keys) if fetch else keys):
            adam = builder.add(gpu_adam_task(builder, groups[i], (done,), lp_copy=fetch is None))
            if fetch:
                done = fetch.update(builder, groups[i], adam, fp32_on_gpu=True)
