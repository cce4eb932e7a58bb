"""Expert parallelism (DeepSpeed-MoE's ep_size): each rank holds experts / EP of a layer's experts
and runs them over the tokens its expert-parallel group routes to them, two all-to-alls per MoE
pass on the compute stream, the experts' state partitioned over the expert data-parallel group
(analytic cases); EP 1 is the answer without it; what DeepSpeed refuses exits 2 by field."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from clirun import refused_in_process

from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.config.worksize import run_tasks
from tiersim.layer_kernels import decoder_passes
from tiersim.simulate import simulate
from tiersim.workload import build_step

ROOT = Path(__file__).resolve().parents[2]
SEVENTY_B = ROOT / "scenarios" / "llama2-70b-offload.yaml"
EXPERTS, TOP_K, EXPERT_FFN, HIDDEN, TOKENS = 8, 2, 3072, 8192, 2048
MOE = [f"model.experts={EXPERTS}", f"model.experts_per_token={TOP_K}", f"model.expert_ffn={EXPERT_FFN}",
       "model.layers=4", "hardware.gpus=8", "training.global_batch=16", "training.sub_group_size=3e7"]
"""The 70B scenario's shape with four layers of eight experts (top 2), on eight GPUs."""


def config(ep: int, strategy: str = "dram", *more: str) -> RunConfig:
    overrides = [*MOE, "training.zero_stage=2", f"training.expert_parallel={ep}", *more]
    return load_scenario(SEVENTY_B, overrides, [strategy])[0]


def expert_params(cfg: RunConfig) -> int:
    """Every expert's parameters over the model's layers (gate and up fused, and down)."""
    return cfg.model.layers * EXPERTS * 3 * HIDDEN * EXPERT_FFN


def test_ep_1_is_the_answer_without_expert_parallelism() -> None:
    # main's answers just before expert parallelism was modelled (fe6570c); a deliberate change
    # of the model elsewhere updates them
    ov = ["model.layers=4", "model.experts=8", "model.experts_per_token=2", "model.expert_ffn=4096",
          "hardware.gpus=4", "training.global_batch=8", "training.zero_stage=2", "training.sub_group_size=3e7"]
    before = {"gpu": (0.13436562850398667, 30798518784), "dram": (0.9568436150696641, 15456334848)}
    for strategy, (seconds, hbm) in before.items():
        for extra in ([], ["training.expert_parallel=1"]):
            result = simulate(load_scenario(SEVENTY_B, [*ov, *extra], [strategy])[0])
            assert (result.iteration_time_s, result.peak_bytes["hbm"]) == (seconds, hbm)


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_each_moe_pass_ends_in_two_all_to_alls_of_the_capacity_tensor(ep: int) -> None:
    cfg = config(ep)
    hw = cfg.hardware
    capacity = math.ceil(TOKENS * TOP_K / EXPERTS)  # DeepSpeed's capacity per expert at capacity_factor 1
    each = 2 * EXPERTS * capacity * HIDDEN * (ep - 1) / ep  # 16-bit, of which (ep-1)/ep leaves the rank
    result = simulate(cfg, trace=True)
    trace = result.trace
    exchanges = trace[trace["name"].str.endswith(".all_to_all")]
    # forward, recompute and backward of 4 layers, each of 2 micro-steps
    assert len(exchanges) == 3 * 4 * 2 and set(exchanges["stream"]) == {"gpu"}
    assert exchanges["size"].tolist() == pytest.approx([2 * each] * len(exchanges), rel=1e-12)
    # ZeRO-2 gathers nothing in forward: there the all-to-alls have the fabric alone
    forward = exchanges[exchanges["phase"] == "forward"]
    alone = 2 * (hw.fabric_latency + each / hw.fabric_bandwidth)
    assert (forward["end"] - forward["start"]).tolist() == pytest.approx([alone] * len(forward), rel=1e-9)


def test_a_rank_runs_its_experts_over_its_groups_tokens() -> None:
    for ep in (1, 2, 4, 8):
        cfg = config(ep)
        forward, backward = decoder_passes(cfg.model, cfg.training, moe=True)
        experts = [g for g in forward.gemms if g.n == 2 * EXPERT_FFN or g.k == EXPERT_FFN]
        assert {(g.m, g.batch) for g in experts} == {(ep * TOKENS * TOP_K // EXPERTS, EXPERTS // ep)}
        assert sum(g.flops for g in experts) == TOKENS * TOP_K * 2 * 3 * HIDDEN * EXPERT_FFN  # the same work
        assert len(forward.all_to_all) == len(backward.all_to_all) == (0 if ep == 1 else 2)


def test_capacity_factor_pads_the_experts_gemms_and_all_to_alls() -> None:
    plain, padded = (config(4, "dram", f"training.moe_capacity_factor={cf}") for cf in (1, 1.25))
    (f1, _), (f2, _) = (decoder_passes(c.model, c.training, moe=True) for c in (plain, padded))
    slots = math.ceil(TOKENS * TOP_K / EXPERTS * 1.25)
    assert {g.m for g in f2.gemms if g.batch == EXPERTS // 4} == {4 * slots}
    assert f2.all_to_all[0] == f1.all_to_all[0] * slots / (TOKENS * TOP_K // EXPERTS)


def test_without_zero_a_ranks_expert_state_divides_by_ep() -> None:
    cfgs = [config(ep, "gpu", "training.zero_stage=0") for ep in (1, 2, 4, 8)]
    steps = [build_step(c.model, c.training) for c in cfgs]
    experts = expert_params(cfgs[0])
    for ep, step in zip((1, 2, 4, 8), steps, strict=True):
        assert step.rank_params == step.total_params - experts + experts // ep
        assert step.optimizer_state_bytes() == 12 * step.rank_params
        assert step.total_params == steps[0].total_params


def test_zero_partitions_experts_over_the_expert_data_parallel_group() -> None:
    """ZeRO-1/2 partition the dense parameters over all 8 ranks and a rank's experts (E / EP of
    them) over the DP / EP ranks that hold the same ones: a rank's share of the experts' state
    is E / DP whatever EP, while the 16-bit experts it holds whole divide by EP."""
    experts = expert_params(config(1))
    dense = build_step(config(1).model, config(1).training).total_params - experts
    for ep in (2, 4, 8):
        step = build_step(config(ep).model, config(ep).training)
        assert step.rank_params == math.ceil(dense / 8) + experts // ep // (8 // ep)
        assert step.shard_params == dense + experts // ep
        assert step.lp_param_bytes_on_gpu() == 2 * (dense + experts // ep)
        assert sum(layer.expert_params for layer in step.layers) == experts // ep


def test_the_gradients_of_experts_reduce_over_the_expert_data_parallel_group() -> None:
    cfg = config(8)  # every rank holds its own expert: nothing of theirs to reduce
    step = build_step(cfg.model, cfg.training)
    trace = simulate(cfg, trace=True).trace
    layer = step.layers[1]
    reduce = trace[trace["name"] == "m1.bwd.1.reduce"]
    assert reduce["size"].tolist() == pytest.approx([2 * (layer.params - layer.expert_params) * 7 / 8])


def test_the_task_count_is_the_graph_built_with_expert_parallelism() -> None:
    for strategy, stage in (("gpu", 0), ("dram", 1), ("cxl", 2)):
        for ckpt in ("true", "false"):
            cfg = config(4, strategy, f"training.zero_stage={stage}", f"training.activation_checkpointing={ckpt}")
            result = simulate(cfg, fast_forward=False)
            assert result.graph is not None and run_tasks(cfg) == len(result.graph.tasks)


def refusal(capsys: pytest.CaptureFixture[str], *overrides: str) -> str:
    return refused_in_process(capsys, ["run", str(SEVENTY_B), "--strategy", "dram"], *overrides)


@pytest.mark.parametrize("overrides, expected", [
    (("training.zero_stage=2", "training.expert_parallel=3"), "training.expert_parallel: 3 does not divide "
                                                              "data_parallel 8"),
    (("training.expert_parallel=2",), "training.zero_stage: 3 with expert_parallel 2: DeepSpeed asserts 'MoE not "
                                      "supported with Stage 3'"),
    (("training.zero_stage=2", "model.experts=0", "model.experts_per_token=0", "model.expert_ffn=null",
      "training.expert_parallel=2"), "training.expert_parallel: 2 but model llama2-70b has no experts"),
    (("model.experts=0", "model.experts_per_token=0", "model.expert_ffn=null", "training.moe_capacity_factor=1.25"),
     "training.moe_capacity_factor: 1.25 but model llama2-70b has no experts"),
    (("training.zero_stage=2", "hardware.gpus=4", "hardware.nodes=2", "training.expert_parallel=8"),
     "training.expert_parallel: 8 does not divide hardware.gpus 4: an expert-parallel group across nodes"),
    (("training.zero_stage=2", "model.experts=6", "training.expert_parallel=4"),
     "training.expert_parallel: 4 does not divide model.experts 6"),
])
def test_what_deepspeed_refuses_exits_2_by_field(capsys: pytest.CaptureFixture[str], overrides: tuple[str, ...],
                                                 expected: str) -> None:
    replaced = {item.split("=")[0] for item in overrides}
    moe = [item for item in MOE if item.split("=")[0] not in replaced]
    assert expected in refusal(capsys, *moe, *overrides)


def test_expert_parallelism_needs_a_whole_number_of_ranks_per_group_via_the_api() -> None:
    cfg = config(2)
    with pytest.raises(Exception, match="expert_parallel: 16 does not divide data_parallel 8"):
        build_step(cfg.model, replace(cfg.training, expert_parallel=16))


def test_expert_parallelism_runs_in_each_pipeline_stage() -> None:
    """Two stages of two MoE layers each, EP 2 over the 4 data-parallel ranks of each stage:
    every stage's MoE passes end in their all-to-alls, and the tasks counted are those built."""
    cfg = config(2, "dram", "training.zero_stage=1", "training.pipeline_parallel=2")
    result = simulate(cfg, trace=True)
    assert result.fits and result.graph is not None and run_tasks(cfg) == len(result.graph.tasks)
    exchanges = result.trace[result.trace["name"].str.endswith(".all_to_all")]
    assert sorted(set(exchanges["stream"])) == ["s0/gpu", "s1/gpu"]
    assert len(exchanges) == 2 * 3 * 2 * 4  # 2 stages x 3 passes x 2 layers x 4 micro-steps (16 / DP 4)
