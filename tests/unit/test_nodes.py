"""More than one node (issue 39 item 4): ZeRO's collectives over a data-parallel group that spans
nodes run as one NCCL ring, within a node over the GPU fabric and between nodes over the NICs,
and every host resource stays each node's own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tiersim.config.document import load_scenario
from tiersim.config.profiles import NetworkProfile, load_profile_file
from tiersim.config.scenario import RunConfig
from tiersim.engine.schedule import Session
from tiersim.errors import ConfigError
from tiersim.simulate import simulate
from tiersim.strategies.builder import StepBuilder, collectives_bound_by_host_link, figures_of, rank_link_capacity
from tiersim.workload import build_step

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
SMALL = ["model.layers=4", "training.sub_group_size=2e8"]
HDR = "hardware.network={device: ib-hdr200-cx6, count: 1}"


def config(strategy: str, *overrides: str) -> RunConfig:
    """The small quickstart with one micro-step per rank on every layout."""
    values = dict(item.split("=", 1) for item in overrides)
    ranks = int(values.get("hardware.gpus", 1)) * int(values.get("hardware.nodes", 1))
    (found,) = load_scenario(QUICKSTART, [*SMALL, f"training.global_batch={ranks}", *overrides],
                             strategies=[strategy])
    return found


def builder(cfg: RunConfig) -> StepBuilder:
    return StepBuilder(build_step(cfg.model, cfg.training), cfg.hardware)


def gather_seconds(cfg: RunConfig) -> tuple[float, float]:
    """The first forward all-gather's seconds (alone on its links: nothing else moves then) and
    the bytes of the layer it gathers."""
    result = simulate(cfg, trace=True)
    row = result.trace.set_index("name").loc["m0.fwd.0.allgather"]
    step = build_step(cfg.model, cfg.training)
    return float(row.end - row.start), step.layers[0].params * step.lp_bytes


def test_a_collective_across_two_nodes_is_latency_plus_its_bytes_over_the_bottleneck() -> None:
    """2 nodes x 4 H100s with one HDR NIC each: a ring of n = 8 ranks. Per byte a rank moves,
    3/4 cross NVLink, 1/4 its PCIe link each way and 1/4 the NIC, through which NCCL's ring
    reaches 24.0 GB/s (measured), shared by the node's 4 ranks: the NIC is the bottleneck at
    24.0 GB/s for the collective's (n-1)/n bytes. The latency is NCCL's model of a ring: 8.4 us
    per call, one step between nodes (14 us and a 1 us message) and 6 within them (3.4 us each)."""
    cfg = config("dram", "hardware.gpus=4", "hardware.nodes=2", HDR)
    seconds, num_bytes = gather_seconds(cfg)
    expected = 8.4e-6 + (14e-6 + 1e-6) + 6 * 3.4e-6 + num_bytes * 7 / 8 / 24.0e9
    assert seconds == pytest.approx(expected, rel=1e-9)


def test_two_slingshot_nics_carry_nccls_measured_rate_per_node() -> None:
    """2 nodes x 4 GPUs with two Slingshot 11 NICs each (as ALCF Polaris): the node's ring
    traffic leaves through both NICs at NCCL's measured 21.2 GB/s each, 42.4 GB/s for the
    collective's (n-1)/n bytes; latency 8.4 us, one step between nodes (14 us and a 2 us message)
    and 6 within them at the AMD host's 6 us."""
    cfg = config("dram", "hardware.gpus=4", "hardware.nodes=2", "hardware.network={device: slingshot-11, count: 2}")
    seconds, num_bytes = gather_seconds(cfg)
    expected = 8.4e-6 + (14e-6 + 2e-6) + 6 * 6e-6 + num_bytes * 7 / 8 / (2 * 21.2e9)
    assert seconds == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("gpus, nodes, between, within", [(4, 2, 1, 6), (4, 4, 3, 12), (2, 4, 3, 4), (1, 8, 7, 0)])
def test_a_rings_latency_grows_with_its_ranks(gpus: int, nodes: int, between: int, within: int) -> None:
    """NCCL's ring all-gather over n ranks on k nodes takes n - 1 steps, k - 1 of them between
    nodes: 8.4 + (k-1) x (14 + 2) + (n-k) x 6 us on Slingshot 11 from AMD hosts."""
    b = builder(config("dram", f"hardware.gpus={gpus}", f"hardware.nodes={nodes}",
                       "hardware.network={device: slingshot-11, count: 2}"))
    assert b.collective_latency() == pytest.approx(8.4e-6 + between * 16e-6 + within * 6e-6, rel=1e-12)


def test_four_nodes_pay_a_message_per_step_between_nodes_and_the_fabric_can_bind() -> None:
    """4 nodes x 2 GPUs with four NDR NICs each: NCCL's ring reaches 4 x 48.5 GB/s through them,
    NVLink's 450 GB/s over the 1/2 of each byte it carries 900 GB/s: the PCIe link (1/2 of each
    byte, each way) binds; the ring crosses nodes in 3 of its 7 steps and stays in them in 4."""
    cfg = config("dram", "hardware.gpus=2", "hardware.nodes=4", "hardware.network={device: ib-ndr400-cx7, count: 4}")
    seconds, num_bytes = gather_seconds(cfg)
    hw = cfg.hardware
    bottleneck = min(hw.fabric_bandwidth * 2, 4 * 48.5e9, hw.pcie_bandwidth * 2)
    assert bottleneck == hw.pcie_bandwidth * 2
    latency = 8.4e-6 + 3 * (14e-6 + 1e-6) + 4 * 3.4e-6
    assert seconds == pytest.approx(latency + num_bytes * 7 / 8 / bottleneck, rel=1e-9)


def test_the_links_of_a_ring_over_nodes() -> None:
    """The rank's share of each link per byte of its collective, on one node and over two."""
    one = builder(config("dram", "hardware.gpus=4"))
    assert one.collective_usage() == (("fabric", 1.0),)
    two = builder(config("dram", "hardware.gpus=4", "hardware.nodes=2", HDR))
    assert two.collective_usage() == (("fabric", 0.75), ("network", pytest.approx(0.25 * 24.84 / 24.0)),
                                      ("pcie_d2h", 0.25), ("pcie_h2d", 0.25))
    pcie = builder(config("dram", "hardware.gpus=4", "hardware.nodes=2", HDR, "hardware.fabric=pcie-p2p-gen5"))
    assert dict(pcie.collective_usage())["pcie_d2h"] == 1.0  # 3/4 peer to peer and 1/4 to the NIC
    assert rank_link_capacity(two.hw, "network") == 24.84e9 / 4


def test_without_gpudirect_rdma_the_nic_bytes_cross_host_dram_twice_each_way() -> None:
    """NCCL staging through a pinned host buffer: per byte of the collective, 1/4 goes through a
    NIC, written to DRAM and read back on each side: 4/4 of a byte of the rank's DRAM share."""
    staged = builder(config("dram", "hardware.gpus=4", "hardware.nodes=2",
                            "hardware.network={device: ib-hdr200-cx6, count: 1, gpudirect: false}"))
    assert dict(staged.collective_usage()) == {"fabric": 0.75, "network": pytest.approx(0.25 * 24.84 / 24.0),
                                               "pcie_d2h": 0.25, "pcie_h2d": 0.25, "dram": 1.0}
    slow_dram = config("dram", "hardware.gpus=4", "hardware.nodes=2", "hardware.dram=ddr4-2666-6ch",
                       "hardware.network={device: ib-ndr400-cx7, count: 4, gpudirect: false}")
    seconds, num_bytes = gather_seconds(slow_dram)
    hw = slow_dram.hardware
    assert hw.dram_bandwidth_per_rank < min(4 * 48.5e9, hw.pcie_bandwidth * 4)
    latency = 8.4e-6 + (14e-6 + 1e-6) + 6 * 3.4e-6
    assert seconds == pytest.approx(latency + num_bytes * 7 / 8 / hw.dram_bandwidth_per_rank, rel=1e-9)


def test_collectives_at_a_pcie_links_rate_run_on_the_plain_session() -> None:
    """One GPU per node with three Slingshot NICs: NCCL's ring through them (63.6 GB/s) outruns
    the GPU's PCIe link (52 GB/s), which then sets the collectives' rate beside the gradient
    copies; the fast-forward does not time that exactly, so the schedule runs whole, and gives
    the full run's answer. Two GPUs per node share the NICs (63.6 GB/s for half of each byte,
    under PCIe's 104)."""
    slingshot = "hardware.network={device: slingshot-11, count: 3}"
    bound = config("dram", "hardware.gpus=1", "hardware.nodes=4", slingshot)
    assert collectives_bound_by_host_link(bound.training, bound.hardware)
    fast, full = simulate(bound), simulate(bound, fast_forward=False)
    assert fast.iteration_time_s == full.iteration_time_s and fast.events == full.events
    shared = config("dram", "hardware.gpus=2", "hardware.nodes=4", slingshot)
    assert not collectives_bound_by_host_link(shared.training, shared.hardware)


def test_pipeline_stages_on_different_nodes_send_through_the_nics() -> None:
    """2 nodes x 4 GPUs, 2 stages of DP 4: each stage fills a node, so its activations leave
    through a NIC (the node's 4 ranks send at once) after NCCL's per-call cost and one message;
    its data-parallel group stays within the node."""
    pp = ("hardware.gpus=4", "hardware.nodes=2", HDR, "training.pipeline_parallel=2", "training.zero_stage=1")
    b = builder(config("dram", *pp))
    assert b.dp_span == (4, 1) and b.collective_usage() == (("fabric", 1.0),)
    assert b.sends_cross_nodes and b.p2p_usage(True) == (("network", 1.0), ("pcie_d2h", 1.0))
    assert b.p2p_latency(True) == pytest.approx(8.4e-6 + 14e-6 + 1e-6)
    within = builder(config("dram", "hardware.gpus=4", "training.pipeline_parallel=2", "training.zero_stage=1"))
    assert not within.sends_cross_nodes
    assert within.p2p_usage(False) == (("fabric", 1.0),) and within.p2p_latency(False) == 0.0
    assert simulate(config("dram", *pp)).fits


@pytest.mark.parametrize("strategy", ["dram", "nvme"])
def test_one_node_is_unchanged_by_a_network(strategy: str) -> None:
    plain = simulate(config(strategy, "hardware.gpus=4"))
    with_nic = simulate(config(strategy, "hardware.gpus=4", HDR))
    assert with_nic.iteration_time_s == plain.iteration_time_s
    assert with_nic.phases == plain.phases


def test_more_than_one_node_needs_a_network() -> None:
    with pytest.raises(ConfigError, match="hardware.network: required with hardware.nodes 2"):
        config("dram", "hardware.gpus=4", "hardware.nodes=2")


def test_a_network_profile_cites_every_figure(tmp_path: Path) -> None:
    path = tmp_path / "nic.yaml"
    path.write_text("kind: network\nname: nic\ndescription: d\nport_bandwidth: 25 GB/s\nbandwidth: 24 GB/s\n"
                    "latency: 1 us\ncall_latency: 10 us\nstep_latency: 14 us\nproxy_step_latency: 6 us\n"
                    "sources: {port_bandwidth: a, bandwidth: b, latency: c, step_latency: e, proxy_step_latency: f}\n")
    with pytest.raises(ConfigError, match="sources.call_latency"):
        load_profile_file(path)
    path.write_text(path.read_text().replace("latency: c,", "latency: c, call_latency: d,"))
    nic = load_profile_file(path)
    assert isinstance(nic, NetworkProfile) and nic.collective_rate == 24e9  # no measurement: the payload rate
    measured = path.read_text().replace("bandwidth: 24 GB/s\n", "bandwidth: 24 GB/s\ncollective_bandwidth: 25 GB/s\n")
    path.write_text(measured.replace("bandwidth: b,", "bandwidth: b, collective_bandwidth: g,"))
    with pytest.raises(ConfigError, match="collective_bandwidth: must not exceed bandwidth"):
        load_profile_file(path)


# --- host resources are each node's own -------------------------------------------------------


@pytest.mark.parametrize("strategy, tier", [("dram", "dram"), ("cxl", "cxl"), ("nvme", "nvme")])
def test_each_node_holds_the_host_memory_of_its_own_ranks(strategy: str, tier: str) -> None:
    """2 nodes x 4 GPUs (DP 8) hold, per node, what 4 of the 8 ranks of one 8-GPU node hold: the
    same per-rank partitions (each 1/8 of the model), half as many ranks; 1 node x 4 GPUs (DP 4)
    holds twice each partition with as many ranks."""
    two_nodes = simulate(config(strategy, "hardware.gpus=4", "hardware.nodes=2", HDR))
    one_node_of_8 = simulate(config(strategy, "hardware.gpus=8"))
    one_node_of_4 = simulate(config(strategy, "hardware.gpus=4"))
    assert two_nodes.fits and one_node_of_8.fits and one_node_of_4.fits
    assert two_nodes.capacity_bytes[tier] == one_node_of_4.capacity_bytes[tier]
    for held in ("peak_bytes", "reserved_bytes"):
        assert getattr(two_nodes, held)[tier] * 2 == pytest.approx(getattr(one_node_of_8, held)[tier], abs=8), held
    assert two_nodes.peak_bytes[tier] < one_node_of_4.peak_bytes[tier]


def test_each_rank_gets_its_own_nodes_share_of_the_host() -> None:
    """Bandwidth and device shares count the ranks of one node, whatever the nodes."""
    one = config("cxl", "hardware.gpus=4").hardware
    two = config("cxl", "hardware.gpus=4", "hardware.nodes=2", HDR).hardware
    for share in ("dram_bandwidth_per_rank", "cxl_devices_per_rank", "nvme_drives_per_rank", "adam_rate",
                  "rank_cores"):
        assert getattr(two, share) == getattr(one, share), share
    for tier in ("dram", "cxl", "nvme"):
        assert two.usable(tier) == one.usable(tier)


def test_the_simulation_does_not_grow_with_the_nodes() -> None:
    """One representative rank: 64 nodes build and run as many tasks as 2."""
    two = simulate(config("dram", "hardware.gpus=4", "hardware.nodes=2", HDR), fast_forward=False)
    many = simulate(config("dram", "hardware.gpus=4", "hardware.nodes=64", HDR), fast_forward=False)
    assert many.events == two.events


def test_a_session_builds_the_collective_from_the_step() -> None:
    cfg = config("dram", "hardware.gpus=4", "hardware.nodes=2", HDR)
    b = StepBuilder(build_step(cfg.model, cfg.training), cfg.hardware, Session(lambda name: 1.0))
    assert b.collective("x", "allgather", "forward", 8.0, ()) == "x"
    assert b.graph.tasks[-1].size == 7.0


def test_a_hardware_figures_are_read_once_and_agree_with_it() -> None:
    """``figures_of`` keeps one ``RankFigures`` per hardware object; what it gives is what the
    hardware's properties give, and another hardware (``replace``) gets its own."""
    hw = config("nvme").hardware
    figures = figures_of(hw)
    assert figures_of(hw) is figures
    assert figures.figure("pcie_latency") == hw.pcie_latency
    assert rank_link_capacity(hw, "nvme") == hw.nvme_drives_per_rank
    more = replace(hw, nvme_count=2 * hw.nvme_count)
    assert figures_of(more) is not figures
    assert rank_link_capacity(more, "nvme") == 2 * rank_link_capacity(hw, "nvme")

