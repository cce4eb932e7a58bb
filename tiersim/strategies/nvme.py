"""``nvme``: ZeRO-Infinity optimizer offload. fp32 params, gradients and Adam state live on
NVMe; each sub-group is swapped in through pinned buffers, updated by CPU Adam and swapped
out, as DeepSpeed's partitioned (and, with pipeline_read/write, pipelined) optimizer swapper
does. Gradients collect in the pinned host gradient buffer as for ``dram``; at the
accumulation boundary each layer's partition is also written to NVMe (swap_out_gradients).
"""

from __future__ import annotations

from tiersim.hardware import Hardware
from tiersim.strategies.base import (
    LP_TO_FP32,
    Placement,
    StepBuilder,
    Strategy,
    TaskKind,
    adam_kind,
    gradient_offload_tasks,
    gradients_to_host,
    params_kind,
    partition,
)
from tiersim.strategies.memory import HostMemory
from tiersim.strategies.swap import TENSORS_SWAPPED_IN, TENSORS_SWAPPED_OUT, SwapOptions, device_cost, stream_rate
from tiersim.workload import LayerWork, StepShape, TrainingStep


class NVMeSwap(Strategy):
    """Optimizer state on NVMe, swapped through ``buffer_count`` pinned buffers."""

    name = "nvme"
    summary = "ZeRO-Infinity: state on NVMe, swapped through pinned buffers"
    Options = SwapOptions

    def check(self, hw: Hardware) -> str | None:
        return None if hw.nvme is not None else "no NVMe drives in hardware.nvme"

    def place(self, step: TrainingStep, hw: Hardware, placement: Placement) -> None:
        ranks = step.training.data_parallel
        largest = max(group.numel for group in step.subgroups)
        placement.put("nvme", "fp32 params + Adam m, v", step.optimizer_state_bytes() * ranks)
        placement.put("nvme", "fp32 gradients", step.fp32_grad_bytes() * ranks)
        buffers = self.options.buffer_count * largest * LP_TO_FP32 * ranks
        placement.put("dram", "pinned swap buffers", buffers)
        placement.put("dram", "bf16 staging for H2D", largest * step.lp_bytes * ranks)
        placement.put("dram", "pinned fp32 gradient buffer", step.fp32_grad_bytes() * ranks)

    def _io_kind(self, b: StepBuilder, stream: str, phase: str, write: bool) -> TaskKind:
        """aio reads or writes (units: bytes) between pinned DRAM buffers and NVMe (made once
        per schedule)."""
        key = ("aio", stream, phase, write)
        kind = b.kinds.get(key)
        if kind is None:
            nvme = b.hw.nvme
            assert nvme is not None
            usage = (("nvme", device_cost(nvme, write)), ("dram", 1.0))
            latency = nvme.write_latency if write else nvme.read_latency
            category = "nvme_write" if write else "nvme_read"
            rate = stream_rate(nvme, self.options, write)
            kind = b.kinds[key] = TaskKind(stream, phase, category, latency, usage, rate)
        return kind

    def offload_gradients(self, b: StepBuilder, micro: int, index: int, layer: LayerWork, ready: str) -> None:
        d2h = gradients_to_host(b, HostMemory.dram_only(), micro, index, layer, ready)
        if micro == b.step.micro_steps - 1:
            grad_bytes = partition(layer, b.dp) * LP_TO_FP32
            write = self._io_kind(b, "aio_write", "backward", True)
            b.add(write.task(f"m{micro}.bwd.{index}.grad_write", grad_bytes, (d2h,)))

    def offload_task_count(self, shape: StepShape) -> int:
        return gradient_offload_tasks(shape) + shape.layers  # and a write per layer in the last micro-step

    def step_task_count(self, shape: StepShape, hw: Hardware) -> int:
        return shape.subgroups * (4 if hw.has_gpu else 3)  # swap in, Adam, swap out, H2D

    def optimizer_step(self, b: StepBuilder, begin: str) -> None:
        opts = self.options
        dram = HostMemory.dram_only()
        swap_in = self._io_kind(b, "aio_read", "optimizer_step", False)
        swap_out = self._io_kind(b, "aio_write", "optimizer_step", True)
        adam, h2d = adam_kind(b, dram), params_kind(b, dram)
        # With pipeline_read, sub-group i is read when sub-group i-1's update begins.
        lag = 2 if opts.pipeline_read else 1
        in_flight = opts.groups_in_flight
        reads: list[str] = []
        adams: list[str] = []
        writes: list[str] = []
        for i, group in enumerate(b.step.subgroups):
            deps = [begin] + ([reads[i - 1]] if i > 0 and opts.pipeline_read else [])
            if i >= lag:
                deps.append(adams[i - lag])
                if not opts.pipeline_write:
                    deps.append(writes[i - lag])
            if i >= in_flight:
                deps.append(writes[i - in_flight])
            fp32 = group.numel * LP_TO_FP32
            reads.append(b.add(swap_in.task(f"step.{i}.swap_in", TENSORS_SWAPPED_IN * fp32, tuple(deps))))
            adam_deps = [reads[i]] + ([writes[i - 1]] if i > 0 and not opts.pipeline_write else [])
            adams.append(b.add(adam.task(f"step.{i}.adam", group.numel, tuple(adam_deps))))
            writes.append(b.add(swap_out.task(f"step.{i}.swap_out", TENSORS_SWAPPED_OUT * fp32, (adams[i],))))
            if h2d:
                b.add(h2d.task(f"step.{i}.h2d", group.numel, (adams[i],)))
