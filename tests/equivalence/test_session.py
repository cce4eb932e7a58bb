"""Fast-forward over repeating stretches gives the full simulation's results.

Engine cases with known answers, the bundled scenarios, and generated scenarios across every
strategy: iteration time, phases, exposed transfer and every utilisation row (busy seconds,
units moved, utilisation) agree with and without fast-forward to 1e-9 relative, chaotic
schedules among them (pipelined NVMe swaps of many small sub-groups, where a rate nudged by a
float's worth moves the iteration time by 1e-4): where such a step does not settle into a
repeat and nudged rates move the fast run, they are run whole. The generated scenarios
are held, where the full simulation is chaotic, to agree as closely as it agrees with itself
under such nudges (``assert_agrees``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim.config.document import load_scenario
from tiersim.config.scenario import RunConfig
from tiersim.engine import EngineRun, Task
from tiersim.engine.schedule import Session
from tiersim.fastforward.deferred import DeferredFlowContended
from tiersim.fastforward.loops import runs_of
from tiersim.fastforward.session import FastForwardSession, run_schedule
from tiersim.fastforward.transient import GeometricSkipMissed
from tiersim.results import Result
from tiersim.simulate import simulate
from tiersim.strategies import STRATEGIES
from tiersim.workload import build_step


def zero_one(config: RunConfig) -> RunConfig:
    """``config`` at ZeRO stage 1, past the scenario's refusal of NVMe offload below ZeRO-3: these
    tests use the nvme schedule with ZeRO-1's equal sub-groups as a workout for the engine."""
    return replace(config, training=replace(config.training, zero_stage=1))


ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SEVENTY_B = ROOT / "scenarios" / "llama2-70b-offload.yaml"
REL = 1e-9


def quantities(result: Result) -> dict[str, tuple[float, float]]:
    """Every figure ``assert_same`` compares (iteration time, phases, exposed transfer and each
    utilisation row's busy seconds, units moved and utilisation), by name, with the absolute
    difference it allows where ``REL`` allows less."""
    out = {"iteration": (result.iteration_time_s, 1e-12), "exposed": (result.exposed_transfer_s, 1e-12)}
    out.update({f"phase {phase}": (seconds, 1e-12) for phase, seconds in result.phases.items()})
    for row in result._utilisation:
        for column in ("busy_s", "units_moved", "utilisation"):
            out[f"{row['resource']} {row['phase']} {column}"] = (row[column], 1e-9)
    return out


def assert_same(fast: Result, full: Result) -> None:
    """Every summary of two results of one config agrees to ``REL`` (``quantities``)."""
    assert fast.fits == full.fits and fast.peak_bytes == full.peak_bytes
    if not full.fits:
        return
    got, want = quantities(fast), quantities(full)
    assert got.keys() == want.keys()
    for name, (value, tol) in want.items():
        assert got[name][0] == pytest.approx(value, rel=REL, abs=tol), name
    assert fast.bottleneck() == full.bottleneck()


NUDGE = 1e-12
"""Relative change of a rate that moves a stable simulation's results by float residue only."""


def nudged(config: RunConfig) -> list[RunConfig]:
    """The config with its DRAM bandwidth, or one of its NVMe drives' bandwidths, ``NUDGE`` higher
    or lower (six configs)."""
    hw = config.hardware
    out = []
    for sign in (1, -1):
        factor = 1 + sign * NUDGE
        out.append(replace(config, hardware=replace(hw, dram=replace(hw.dram, bandwidth=hw.dram.bandwidth * factor))))
        if hw.nvme is not None:
            for field in ("read_bandwidth", "write_bandwidth"):
                nvme = replace(hw.nvme, **{field: getattr(hw.nvme, field) * factor})
                out.append(replace(config, hardware=replace(hw, nvme=nvme)))
    return out


def spreads(config: RunConfig, full: Result) -> dict[str, float]:
    """How far apart (relative) each of the full simulation's figures falls when a rate is
    nudged by a float's worth (``nudged``; the unnudged run among them): float residue (about
    1e-15) for a stable schedule."""
    runs = [quantities(full)] + [quantities(simulate(c, fast_forward=False)) for c in nudged(config)]
    out = {}
    for name, (value, _tol) in runs[0].items():
        values = [run[name][0] for run in runs if name in run]
        out[name] = (max(values) - min(values)) / abs(value) if value else max(values) - min(values)
    return out


def chaos(config: RunConfig, full: Result) -> float:
    """The spread (``spreads``) of the full simulation's iteration time."""
    return spreads(config, full)["iteration"]


def beyond_spread(fast: Result, full: Result, spread: dict[str, float]) -> list[tuple[str, float, float]]:
    """The figures of ``fast`` that differ from ``full``'s by more than ``assert_same`` allows
    and more than twice the full simulation's own ``spread`` under nudges (``spreads``): name,
    relative difference and spread."""
    got, want = quantities(fast), quantities(full)
    out = []
    for name, (value, tol) in want.items():
        difference = abs(got[name][0] - value)
        relative = difference / abs(value) if value else difference
        if difference > max(REL * abs(value), tol) and not (spread[name] > REL and relative <= 2 * spread[name]):
            out.append((name, relative, spread[name]))
    return out


def assert_agrees(config: RunConfig, fast: Result, full: Result) -> None:
    """``assert_same``, or, where the full simulation is chaotic (some figure spreads over
    ``REL`` under nudges), every figure within twice the full simulation's own spread."""
    try:
        assert_same(fast, full)
    except AssertionError:
        if not full.fits or quantities(fast).keys() != quantities(full).keys():
            raise
        assert not beyond_spread(fast, full, spreads(config, full))


def assert_chaotic_draw_is_the_full_run(overrides: list[str]) -> None:
    """The 70B scenario's NVMe strategy at ZeRO-1 with ``overrides`` is chaotic (a float step
    moves the full run's iteration time by more than 1e-5) and the fast run gives the full run's
    results: nudged rates move its fast run too, so it is run whole (as many events)."""
    config = zero_one(load_scenario(SEVENTY_B, overrides, ["nvme"])[0])
    fast, full = simulate(config), simulate(config, fast_forward=False)
    assert chaos(config, full) > 1e-5
    assert_same(fast, full)
    assert fast.events == full.events


def test_a_chaotic_schedule_gives_the_full_run() -> None:
    """70B layers on one GPU, pipelined NVMe swaps of ~300 small sub-groups: a relative timing
    difference grows about 1.4x per sub-group (reads and writes share the drives), so a drive's
    bandwidth nudged by 1e-12 (even 1e-15) moves the full simulation's iteration time by up to
    7e-4. Copies timed apart from the event run end a float step off its times, which such a step
    would grow (3e-4 off); its sub-groups never settle into a repeat, nudged rates move its fast
    run too (``tiersim.fastforward.probe``), so the schedule is run whole, and the fast-forward
    gives the full run's results."""
    overrides = ["model.layers=3", "hardware.gpus=1", "training.global_batch=2", "training.zero_stage=3",
                 "training.sub_group_size=1e7", "training.activation_checkpointing=true", "hardware.nvme.count=5",
                 "strategies.nvme.buffer_count=16", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=true", "strategies.nvme.queue_depth=8"]
    assert_chaotic_draw_is_the_full_run(overrides)


def test_a_pipelined_nvme_step_after_skipped_layers_gives_the_full_run() -> None:
    """The draw of ``test_generated_scenarios_are_the_same_with_and_without_fast_forward`` that
    once failed: 12 70B layers on one GPU, 2 micro-steps, 3 drives, pipelined swaps of 1e8
    sub-groups. The boundary's gradient write, deferred, ended a float step off the event run's
    (26.3601 s against 26.3610 s, beyond twice the full run's own spread in the drives'
    utilisation); the step's sub-groups never settle and the run fails the probe, so the schedule
    is run whole and the results are the full run's."""
    overrides = ["model.layers=12", "hardware.gpus=1", "hardware.sockets=2", "training.global_batch=2",
                 "training.zero_stage=3", "training.sub_group_size=1e8", "training.activation_checkpointing=false",
                 "hardware.nvme.count=3", "strategies.nvme.buffer_count=16", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=true", "strategies.nvme.queue_depth=8"]
    assert_chaotic_draw_is_the_full_run(overrides)


def test_a_pipelined_nvme_step_after_skipped_micro_steps_gives_the_full_run() -> None:
    """The draw of ``test_generated_scenarios_are_the_same_with_and_without_fast_forward`` that
    once failed: 4 70B layers of 4 experts on one GPU, 4 micro-steps, 4 drives, pipelined swaps
    of 1e7 sub-groups. Run again without deferring, its micro-steps were still skipped, and their
    shifted times, a float step off the full run's sums, grew through the step's unsettled
    sub-groups to 3.9555 s against 3.9577 s; an amplifying loop unsettled after a skip has its
    run probed, this one fails and is run whole, and the results are the full run's."""
    overrides = ["model.layers=4", "hardware.gpus=1", "hardware.sockets=2", "training.global_batch=4",
                 "training.zero_stage=3", "training.sub_group_size=1e7", "training.activation_checkpointing=false",
                 "hardware.nvme.count=4", "strategies.nvme.buffer_count=16", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=true", "strategies.nvme.queue_depth=8", "model.experts=4",
                 "model.experts_per_token=2", "model.expert_ffn=2048"]
    assert_chaotic_draw_is_the_full_run(overrides)


def pipelined_swaps(layers: int, gpus: int, micro_steps: int, extra: tuple[str, ...] = ()) -> RunConfig:
    """The 70B scenario at ZeRO-3 with pipelined NVMe swaps (``pipeline_read`` and
    ``pipeline_write``) of 1e8 sub-groups on 6 drives, one buffer per aio request."""
    overrides = [f"model.layers={layers}", f"hardware.gpus={gpus}", "hardware.sockets=2",
                 f"training.global_batch={gpus * micro_steps}", "training.zero_stage=3",
                 "training.sub_group_size=1e8", "training.activation_checkpointing=true", "hardware.nvme.count=6",
                 "strategies.nvme.buffer_count=16", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=true", "strategies.nvme.queue_depth=1", *extra]
    return load_scenario(SEVENTY_B, overrides, ["nvme"], force=True)[0]


def test_an_unsettled_step_that_nudged_rates_do_not_move_is_not_run_whole() -> None:
    """24 70B layers on 8 GPUs over a PCIe fabric, 60 micro-steps, pipelined swaps of 1e8
    sub-groups on 8 drives: the step's 25 sub-groups follow skipped micro-steps and do not settle
    within ``UNSETTLED_ITERATIONS``, but the run is not chaotic (nudged rates move the full run by
    4e-14), and its fast run stands the probe: 418 events for the full run's 23,344, and the
    full run's results."""
    config = pipelined_swaps(24, 8, 60, ("hardware.fabric=pcie-p2p-gen5", "hardware.nvme.count=8"))
    fast, full = simulate(config), simulate(config, fast_forward=False)
    assert_same(fast, full)
    assert fast.events < full.events / 40


def test_a_pipelined_swap_boundary_defers_its_writes_and_gives_the_full_run() -> None:
    """80 70B layers on 4 GPUs over a PCIe fabric, pipelined swaps: the boundary's NVMe writes
    fall behind the compute, a queue that grows by a layer's write each layer. Deferred, they
    leave the event run and the boundary's layers are skipped (about 1,530 events were 300);
    the step's sub-groups settle into a repeat within a few, so the float step the deferred
    writes' ends are off the event run's does not grow, and the results are the full run's."""
    config = pipelined_swaps(80, 4, 2, ("hardware.fabric=pcie-p2p-gen5",))
    fast, full = simulate(config), simulate(config, fast_forward=False)
    assert_same(fast, full)
    assert fast.events < full.events / 8


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.sampled_from([16, 24, 40, 80]), gpus=st.sampled_from([1, 2, 4, 8]), micro=st.integers(1, 3),
       size=st.sampled_from(["1e7", "3e7", "1e8", "1e9"]), drives=st.integers(1, 8),
       buffers=st.sampled_from([4, 5, 8, 16, 40]), depth=st.sampled_from([1, 8, 64]), pcie=st.booleans())
def test_pipelined_swaps_give_the_full_run(layers: int, gpus: int, micro: int, size: str, drives: int,
                                           buffers: int, depth: int, pcie: bool) -> None:
    """Pipelined NVMe swaps at ZeRO-3 of the agreement scan's shapes, their boundary writes
    deferred: the full run's results to 1e-9 (``assert_same``, not only within the full run's
    own spread)."""
    extra = (f"training.sub_group_size={size}", f"hardware.nvme.count={drives}",
             f"strategies.nvme.buffer_count={buffers}", f"strategies.nvme.queue_depth={depth}",
             *(("hardware.fabric=pcie-p2p-gen5",) if pcie else ()))
    config = pipelined_swaps(layers, gpus, micro, extra)
    assert_same(simulate(config), simulate(config, fast_forward=False))


def chain_schedule(n: int, latency: float, size: float) -> object:
    """n copies of one transfer on one stream (each after the last), then a marker."""
    def schedule(session: Session) -> None:
        session.add(Task("begin", "io", "forward", "marker"))
        for i in session.loop(("copy",) * n):
            session.add(Task(f"copy.{i}", "io", "forward", "copy", latency, size, (("link", 1.0),)))
        session.add(Task("end", "io", "backward", "marker"))
    return schedule


def _fast_and_full(schedule: Callable[[Session], None],
                   capacity: Callable[[str], float]) -> tuple[EngineRun, EngineRun]:
    """``schedule`` run with and without fast-forward, checked to agree in makespan, every
    link's busy seconds and units moved, and every stream's busy seconds."""
    fast, _ = run_schedule(schedule, capacity, fast_forward=True)
    full, _ = run_schedule(schedule, capacity, fast_forward=False)
    assert fast.makespan == pytest.approx(full.makespan, rel=REL)
    for name in ("link_busy", "link_units_moved"):
        for link, value in getattr(full, name).items():
            assert getattr(fast, name)[link] == pytest.approx(value, rel=REL), (name, link)
    assert fast.accounts.stream_busy == pytest.approx(full.accounts.stream_busy, rel=REL)
    return fast, full


def test_a_chain_of_equal_transfers_is_skipped_and_takes_n_times_one() -> None:
    latency, size, bandwidth, n = 1e-5, 3e8, 25e9, 1000
    session = FastForwardSession(lambda name: bandwidth)
    chain_schedule(n, latency, size)(session)  # type: ignore[operator]
    run = session.finish()
    assert session.skipped > n - 10 and len(session.graph.tasks) < 20
    assert run.makespan == pytest.approx(n * (latency + size / bandwidth), rel=1e-12)
    assert run.link_units_moved["link"] == pytest.approx(n * size, rel=1e-12)
    assert run.link_busy["link"] == pytest.approx(n * size / bandwidth, rel=1e-12)
    assert run.accounts.spans["forward"] == pytest.approx(run.makespan, rel=1e-12)
    assert run.accounts.stream_busy["io"] == pytest.approx(run.makespan, rel=1e-12)
    assert not run.complete and run.events < 40


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 60), streams=st.integers(1, 3), shared=st.booleans())
def test_engine_loops_give_the_full_run(n: int, streams: int, shared: bool) -> None:
    """Two overlapping pipelines sharing (or not) a link, iterations depending on the one before
    the last: the fast-forward's makespan and counters are the whole graph's."""
    def schedule(session: Session) -> None:
        previous: list[str] = []
        for i in session.loop(tuple(min(i, 2) for i in range(n))):
            deps = (previous[-2],) if i >= 2 else ()
            names = []
            for s in range(streams):
                link = "shared" if shared else f"link{s}"
                names.append(session.add(Task(f"t{i}.{s}", f"s{s}", "forward", "copy", 1e-4 * (s + 1), 1e6 * (s + 1),
                                              ((link, 1.0),), deps=deps)))
            previous.append(session.add(Task(f"c{i}", "gpu", "forward", "compute", 3e-4, deps=tuple(names))))
    capacity = {"shared": 5e9, "link0": 5e9, "link1": 4e9, "link2": 3e9}.__getitem__
    _fast_and_full(schedule, capacity)


def entered_schedule(n: int, head_delay: float, head_size: float, self_contained: bool) -> Callable[[Session], None]:
    """A head iteration then ``n`` alike ones, each an inner loop of six computes, each compute's
    result copied on another stream (so the outer loop's states are taken near an iteration's
    end); an iteration waits for the one before only through the streams. The head's first
    compute takes ``head_delay`` s and its last copy moves ``head_size`` bytes."""
    def schedule(session: Session) -> None:
        for i in session.loop_runs((("head", 1), ("body", n)), self_contained=self_contained):
            shapes = [(1e-3, 4e6)] * 6
            if i == 0:
                shapes[0], shapes[-1] = (head_delay, 4e6), (1e-3, head_size)
            for j in session.loop(tuple(shapes)):
                delay, size = shapes[j]
                compute = session.add(Task(f"c{i}.{j}", "gpu", "forward", "compute", delay))
                session.add(Task(f"x{i}.{j}", "io", "forward", "copy", 1e-5, size, (("link", 1.0),), deps=(compute,)))
    return schedule


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), head_delay=st.sampled_from([1e-3, 5e-3]), head_size=st.sampled_from([4e6, 3e7]))
def test_a_self_contained_loop_compares_its_first_block_with_the_head(n: int, head_delay: float,
                                                                        head_size: float) -> None:
    """A run's first block, after an iteration of another key, is compared by its pending
    tasks' roles: where the head's last tasks are alike those of a body iteration (whatever it
    did before) the run skips a block sooner; where they are not (a longer copy still in flight)
    it only simulates on. Either way the whole graph's results."""
    capacity = {"link": 1e10}.__getitem__
    fast, _full = _fast_and_full(entered_schedule(n, head_delay, head_size, True), capacity)
    plain, _ = run_schedule(entered_schedule(n, head_delay, head_size, False), capacity)
    assert fast.events <= plain.events
    if n >= 3:
        assert (fast.events < plain.events) == (head_size == 4e6)


def preceded_schedule(n: int, before_size: float, self_contained: bool) -> Callable[[Session], None]:
    """Six computes, each result copied on another stream (the last copy moving ``before_size``
    bytes), then a loop of ``n`` iterations of six alike ones (4e6 bytes each copy); an
    iteration waits for the one before it, and the first for what came before the loop, only
    through the streams."""
    def six(session: Session, name: str, last_size: float) -> None:
        sizes = (4e6,) * 5 + (last_size,)
        for j in session.loop(sizes):
            compute = session.add(Task(f"c{name}.{j}", "gpu", "forward", "compute", 1e-3))
            session.add(Task(f"x{name}.{j}", "io", "forward", "copy", 1e-5, sizes[j], (("link", 1.0),),
                             deps=(compute,)))

    def schedule(session: Session) -> None:
        six(session, "before", before_size)
        for i in session.loop_runs((("body", n),), self_contained=self_contained):
            six(session, str(i), 4e6)
    return schedule


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), before_size=st.sampled_from([4e6, 3e7]))
def test_a_self_contained_loop_compares_its_first_iteration_with_what_came_before(n: int,
                                                                                 before_size: float) -> None:
    """A self-contained loop also takes the state where it begins, the tasks pending from
    before it in the roles of an iteration's last ones (``Session._start``): where what came
    before ends as an iteration does, the loop skips after its first iteration, one sooner; where
    it does not (a longer copy still in flight), it skips when a plain loop does. Either way the
    whole graph's results."""
    capacity = {"link": 1e10}.__getitem__
    fast, _full = _fast_and_full(preceded_schedule(n, before_size, True), capacity)
    plain, _ = run_schedule(preceded_schedule(n, before_size, False), capacity)
    assert fast.events <= plain.events
    if n >= 3:
        assert (fast.events < plain.events) == (before_size == 4e6)


def lagging_copies(n: int, compute: float, size: float, reads: float, writes: float, latency: float = 8e-6,
                   last_compute: float | None = None) -> Callable[[Session], None]:
    """Layers of a backward: each computes for ``compute`` s, then its gradient is copied up and
    back down (``size`` bytes each way, one after the other), both through host memory that a
    byte up loads by ``reads`` and a byte down by ``writes`` of its capacity: where the two
    directions overlap they share it, and how far the copies lag the compute settles by a
    constant ratio per layer. ``last_compute``: the last layer's compute time, if it differs
    (under the same key: a schedule that breaks the ``repeat`` contract)."""
    def schedule(session: Session) -> None:
        for i in session.loop(("layer",) * n):
            seconds = last_compute if last_compute is not None and i == n - 1 else compute
            done = session.add(Task(f"c{i}", "gpu", "backward", "compute", seconds))
            up = session.add(Task(f"u{i}", "h2d", "backward", "copy", latency, size, (("up", 1.0), ("mem", reads)),
                                  deps=(done,)))
            session.add(Task(f"d{i}", "d2h", "backward", "copy", latency, size, (("down", 1.0), ("mem", writes)),
                             deps=(up,)))
    return schedule


LAGGING_CAPACITY = {"up": 52e9, "down": 52e9, "mem": 52e9}.__getitem__


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=st.integers(2, 80), compute=st.floats(3e-3, 2e-2), size=st.floats(1e8, 8e8), reads=st.floats(0.1, 1.0),
       writes=st.floats(0.1, 1.2), latency=st.sampled_from([0.0, 8e-6, 1e-3]))
def test_copies_that_settle_geometrically_give_the_full_run(n: int, compute: float, size: float, reads: float,
                                                            writes: float, latency: float) -> None:
    """Whether the lag settles, grows or repeats at once, the fast-forward (skipping a settling
    lag in closed form) gives the whole graph's makespan and counters. The same examples every
    run: an exact repeat is taken at 1e-11 s per second of the run, so over periods of a few
    milliseconds well under a second in, a skip's counters can drift past 1e-9 (about one
    draw in 5,000 here; ``_TIME_TOL``)."""
    _fast_and_full(lagging_copies(n, compute, size, reads, writes, latency), LAGGING_CAPACITY)


def test_a_settling_lag_is_skipped_in_closed_form() -> None:
    """Copies sharing host memory lag the compute by an amount that halves about every layer: a
    state never repeats to float residue before some 20 layers, but four show the ratio, and
    the rest of the 80 layers but one are skipped in closed form (the last checks it)."""
    schedule = lagging_copies(80, 15e-3, 4e8, 0.6, 0.78)
    settled, plain = FastForwardSession(LAGGING_CAPACITY), FastForwardSession(LAGGING_CAPACITY, geometric=False)
    schedule(settled)
    schedule(plain)
    fast, slow = settled.finish(), plain.finish()
    full, _ = _fast_and_full(schedule, LAGGING_CAPACITY)
    assert slow.makespan == pytest.approx(full.makespan, rel=REL)
    assert len(settled.graph.tasks) < 30 < len(plain.graph.tasks)
    assert fast.events < slow.events / 3


def test_a_skip_over_a_transient_is_checked_by_the_block_after() -> None:
    """A schedule whose last layer computes longer under the same key (breaking the ``repeat``
    contract) does not land where the closed form says: the session raises ``GeometricSkipMissed``, and
    ``run_schedule`` runs it again without such skips."""
    schedule = lagging_copies(80, 15e-3, 4e8, 0.6, 0.78, last_compute=30e-3)
    with pytest.raises(GeometricSkipMissed):
        schedule(FastForwardSession(LAGGING_CAPACITY))
    again, _ = run_schedule(schedule, LAGGING_CAPACITY)
    plain = FastForwardSession(LAGGING_CAPACITY, geometric=False)
    schedule(plain)
    assert again.makespan == plain.finish().makespan


@settings(max_examples=12, deadline=None, derandomize=True)
@given(micro=st.integers(2, 5), devices=st.integers(3, 6), dram_weight=st.integers(8, 16),
       cxl_weight=st.integers(3, 7))
def test_cxl_accumulation_gives_the_full_run(micro: int, devices: int, dram_weight: int, cxl_weight: int) -> None:
    """70B on CXL-interleaved host memory with gradient accumulation, whose backward copies read
    and write CXL pages one at a time (deferred, at fixed rates) where they lag the compute or
    not, on few devices or many: the full simulation's results."""
    overrides = [f"training.global_batch={4 * micro}", f"hardware.cxl.count={devices}",
                 f"strategies.cxl.dram_weight={dram_weight}", f"strategies.cxl.cxl_weight={cxl_weight}"]
    config = load_scenario(SEVENTY_B, overrides, ["cxl"], force=True)[0]
    assert_same(simulate(config), simulate(config, fast_forward=False))


def drive_bound(config: RunConfig) -> RunConfig:
    """``config`` with the host figures these engine tests were written for, so that its NVMe
    step stays bound by the drives: a measured 20 GB/s for pageable copies and CPU Adam at
    1.1e8 params/s per core (the host-side mechanisms would otherwise bound it)."""
    hw = config.hardware
    assert hw.link is not None
    link = replace(hw.link, pageable_bandwidth=20e9)
    return replace(config, hardware=replace(hw, link=link, cpu=replace(hw.cpu, adam_params_per_core=1.1e8)))


def test_a_pipelined_nvme_step_settles_in_closed_form() -> None:
    """A pipelined NVMe step (16 layers on 4 GPUs, 7 drives at queue depth 1, 36 sub-groups) whose
    reads and writes share the drives and settle geometrically is skipped in closed form: fewer
    events than a session without such skips, and the full simulation's results."""
    overrides = ["model.layers=16", "training.global_batch=8", "training.zero_stage=3", "training.sub_group_size=1e8",
                 "hardware.nvme.count=7", "strategies.nvme.buffer_count=16", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=true", "strategies.nvme.queue_depth=1"]
    config = drive_bound(zero_one(load_scenario(SEVENTY_B, overrides, ["nvme"], force=True)[0]))
    plan = STRATEGIES[config.strategy](config.options).plan(build_step(config.model, config.training),
                                                            config.hardware)
    assert plan.schedule is not None and plan.capacity_of is not None
    events = {}
    for geometric in (True, False):
        session = FastForwardSession(plan.capacity_of, geometric=geometric)
        plan.schedule(session)
        events[geometric] = session.finish().events
    fast = simulate(config)
    assert events[True] == fast.events < events[False]
    assert_same(fast, simulate(config, fast_forward=False))


def test_a_pipelined_nvme_step_that_repeats_every_two_sub_groups_is_skipped() -> None:
    """A pipelined NVMe step (16 layers on 4 GPUs, 6 drives at queue depth 8, 8 swap buffers, 15
    sub-groups) whose reads and writes share the drives settles into a period of two sub-groups,
    each unlike the one before: its states are compared two sub-groups apart (``REPEAT_LAGS``)
    and whole periods skipped, with fewer events than a session comparing only consecutive
    states, and the full simulation's results."""
    overrides = ["model.layers=16", "hardware.gpus=4", "hardware.sockets=2", "training.global_batch=8",
                 "training.zero_stage=3", "training.sub_group_size=1e8", "training.activation_checkpointing=false",
                 "hardware.nvme.count=6", "strategies.nvme.buffer_count=8", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=true", "strategies.nvme.queue_depth=8"]
    config = load_scenario(SEVENTY_B, overrides, ["nvme"], force=True)[0]
    plan = STRATEGIES[config.strategy](config.options).plan(build_step(config.model, config.training),
                                                            config.hardware)
    assert plan.schedule is not None and plan.capacity_of is not None
    events = {}
    for lags in ((), (2,)):
        session = FastForwardSession(plan.capacity_of, lags=lags)
        plan.schedule(session)
        events[lags] = session.finish().events
    fast = simulate(config)
    assert events[(2,)] == fast.events < events[()]
    assert_same(fast, simulate(config, fast_forward=False))


def test_runs_of_finds_runs_and_repeating_patterns() -> None:
    """Equal keys in a row are one run; a pattern of a few keys repeated three times or more is
    one run of blocks."""
    assert runs_of(("a", "a", "a", "b")) == (("a", 3, 1), ("b", 1, 1))
    assert runs_of(tuple("xbcbcbcbcdddd")) == (("x", 1, 1), (("period", ("b", "c")), 4, 2), ("d", 4, 1))
    assert runs_of(tuple("aabaabaab")) == ((("period", ("a", "a", "b")), 3, 3),)
    assert runs_of(tuple("abab")) == (("a", 1, 1), ("b", 1, 1), ("a", 1, 1), ("b", 1, 1))  # two blocks: no skip
    keys = tuple("q") + tuple("rst") * 20 + tuple("uu")
    assert sum(count * width for _key, count, width in runs_of(keys)) == len(keys)


@settings(max_examples=40, deadline=None)
@given(blocks=st.integers(1, 30), pattern=st.lists(st.integers(1, 4), min_size=2, max_size=5), shared=st.booleans())
def test_a_loop_of_repeating_size_patterns_gives_the_full_run(blocks: int, pattern: list[int], shared: bool) -> None:
    """Sub-groups of a few sizes in turn (as a layer's tensors split): skipped block by block,
    with the whole graph's makespan and counters."""
    sizes = tuple(pattern) * blocks

    def schedule(session: Session) -> None:
        done: list[str] = []
        for i in session.loop(tuple((i == 0, size) for i, size in enumerate(sizes))):
            deps = (done[-1],) if i else ()
            read = session.add(Task(f"r{i}", "read", "step", "copy", 1e-5, 1e8 * sizes[i], (("nvme", 1.0),), deps=deps))
            done.append(session.add(Task(f"u{i}", "cpu", "step", "adam", 1e-3 * sizes[i], deps=(read,))))
            link = "nvme" if shared else "nvme_w"
            session.add(Task(f"w{i}", "write", "step", "copy", 1e-5, 1e8 * sizes[i], ((link, 1.0),), deps=(done[-1],)))
    capacity = {"nvme": 2e10, "nvme_w": 1e11}.__getitem__
    fast, full = _fast_and_full(schedule, capacity)
    assert fast.accounts.busy == pytest.approx(full.accounts.busy, rel=REL)
    if blocks >= 10 and len(set(pattern)) > 1:
        assert not fast.complete and fast.events < full.events


def test_a_late_lazy_task_falls_back_to_the_whole_graph() -> None:
    """An iteration whose second task could start before its first: building it when the
    previous iteration's first task starts would be late, so the run is built whole."""
    def schedule(session: Session) -> None:
        session.add(Task("slow", "a", "forward", "compute", 1.0))
        for i in session.loop(("x",) * 5):
            session.add(Task(f"wait.{i}", "a", "forward", "compute", 0.1, deps=("slow",)))
            session.add(Task(f"free.{i}", f"b{i}", "forward", "compute", 0.1))
    run, graph = run_schedule(schedule, lambda name: 1.0, fast_forward=True)
    assert run.complete and len(graph.tasks) == 11
    assert run.makespan == pytest.approx(1.5)
    assert [run.start[graph.tasks.index(t)] for t in graph.tasks if t.name.startswith("free")] == [0.0] * 5


def test_deferred_copies_that_could_be_slowed_are_fast_forwarded_in_the_event_run() -> None:
    """NVMe on 4 GPUs of one socket with 16 drives: the boundary's deferred copies and drive
    writes could together take more than a rank's share of DRAM, so ``credit_deferred`` refuses them
    (``DeferredFlowContended``) and the schedule runs again with them in the event run, still skipping
    repeats: the full simulation's results, and the same events from 3 micro-steps to 10^6
    (before, it was simulated whole)."""
    overrides = ["model.layers=6", "hardware.gpus=4", "hardware.sockets=1", "training.zero_stage=3",
                 "training.sub_group_size=3e7", "training.activation_checkpointing=true", "hardware.nvme.count=16",
                 "strategies.nvme.buffer_count=5", "strategies.nvme.pipeline_read=true",
                 "strategies.nvme.pipeline_write=false", "strategies.nvme.queue_depth=64"]
    configs = {micro: zero_one(load_scenario(SEVENTY_B, [*overrides, f"training.global_batch={4 * micro}"], ["nvme"],
                                             force=True)[0]) for micro in (3, 30, 10**6)}
    step = build_step(configs[3].model, configs[3].training)
    plan = STRATEGIES["nvme"](configs[3].options).plan(step, configs[3].hardware)
    assert plan.schedule is not None and plan.capacity_of is not None
    deferring = FastForwardSession(plan.capacity_of)
    with pytest.raises(DeferredFlowContended):
        plan.schedule(deferring)
        deferring.finish()
    fast = {micro: simulate(config) for micro, config in configs.items()}
    for micro in (3, 30):
        full = simulate(configs[micro], fast_forward=False)
        assert_same(fast[micro], full)
        assert fast[micro].events < full.events
    assert fast[3].events == fast[30].events == fast[10**6].events


@pytest.mark.parametrize("scenario", ["quickstart", "llama2-70b-offload", "seed-20b", "seed-70b"])
def test_bundled_scenarios_are_the_same_with_and_without_fast_forward(scenario: str) -> None:
    for config in load_scenario(ROOT / "scenarios" / f"{scenario}.yaml"):
        assert_same(simulate(config), simulate(config, fast_forward=False))


NICS = ["slingshot-11", "ib-ndr400-cx7", "ib-hdr200-cx6", "roce-400g"]


@st.composite
def generated(draw: st.DrawFn) -> RunConfig:
    """Small and mid-sized scenarios over every strategy and the settings that shape loops, dense
    or with experts (expert-parallel where DeepSpeed runs it)."""
    gpus = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if gpus % t == 0]))
    nodes = draw(st.sampled_from([1, 1, 2, 4]))
    micro = draw(st.integers(1, 8))
    stage = draw(st.integers(1, 3))
    strategy = draw(st.sampled_from(["gpu", "dram", "cxl", "nvme"]))
    overrides = [
        f"model.layers={draw(st.integers(1, 12))}",
        f"hardware.gpus={gpus}",
        f"hardware.nodes={nodes}",
        "hardware.sockets=2",
        f"training.global_batch={gpus * nodes // tp * micro}",
        f"training.tensor_parallel={tp}",
        f"training.sequence_parallel={draw(st.booleans())}",
        f"training.zero_stage={3 if strategy == 'nvme' else stage}",
        f"training.sub_group_size={draw(st.sampled_from(['1e7', '3e7', '1e8', '1e9']))}",
        f"training.activation_checkpointing={draw(st.booleans())}",
        f"hardware.nvme.count={draw(st.integers(1, 8))}",
        f"strategies.nvme.buffer_count={draw(st.sampled_from([4, 5, 8, 16, 40]))}",
        f"strategies.nvme.pipeline_read={draw(st.booleans())}",
        f"strategies.nvme.pipeline_write={draw(st.booleans())}",
        f"strategies.nvme.queue_depth={draw(st.sampled_from([1, 8, 64]))}",
    ]
    if draw(st.booleans()):  # collectives over the PCIe links the gradient copies use
        overrides.append("hardware.fabric=pcie-p2p-gen5")
    if nodes > 1:  # and over the NICs, whose bytes also cross the PCIe links
        nic, count, direct = draw(st.sampled_from(NICS)), draw(st.integers(1, 4)), draw(st.booleans())
        overrides.append(f"hardware.network={{device: {nic}, count: {count}, gpudirect: {str(direct).lower()}}}")
    if draw(st.booleans()):  # experts, split over a node's ranks below ZeRO-3 without TP (all-to-alls)
        split = stage < 3 and strategy != "nvme" and tp == 1
        ep = draw(st.sampled_from([e for e in (1, 2, 4) if gpus % e == 0])) if split else 1
        overrides += ["model.experts=4", "model.experts_per_token=2", "model.expert_ffn=2048",
                      f"training.expert_parallel={ep}"]
    config = load_scenario(draw(st.sampled_from([QUICKSTART, SEVENTY_B])), overrides, [strategy])[0]
    return replace(config, training=replace(config.training, zero_stage=stage))  # nvme below ZeRO-3: zero_one


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=generated())
def test_generated_scenarios_are_the_same_with_and_without_fast_forward(config: RunConfig) -> None:
    assert_agrees(config, simulate(config), simulate(config, fast_forward=False))


@pytest.mark.parametrize("options", [[], ["strategies.nvme.pipeline_read=true", "strategies.nvme.pipeline_write=true"]])
def test_a_skip_before_the_swap_buffers_are_reused_gives_the_full_run(options: list[str]) -> None:
    """70B on NVMe with 64 swap buffers: a sub-group's swap-in waits for the swap-out 16
    sub-groups back (buffer reuse), but the sub-groups before that repeat as well and are
    skipped; the later ones reach back over the skip (``iterations_back``) and still give the
    full run, building fewer sub-groups than there are buffers in flight."""
    config = drive_bound(load_scenario(
        SEVENTY_B, ["training.global_batch=4", "strategies.nvme.buffer_count=64", *options], ["nvme"])[0])
    fast, full = simulate(config), simulate(config, fast_forward=False)
    assert_same(fast, full)
    built, every = ([t for t in r.built.tasks if t.name.endswith(".swap_in")] for r in (fast, full))
    assert len(built) < config.options.groups_in_flight == 16 and len(every) == 82


def test_trace_true_keeps_every_task_and_a_fast_result_traces_on_request() -> None:
    config = load_scenario(SEVENTY_B, ["training.global_batch=64"], ["dram"])[0]
    fast, traced = simulate(config), simulate(config, trace=True)
    assert fast.engine is not None and not fast.engine.complete
    assert traced.engine is not None and traced.engine.complete
    assert len(fast.built.tasks) < len(traced.graph.tasks) / 10
    assert len(fast.trace) == len(traced.trace) == len(traced.graph.tasks)
    assert fast.trace["end"].max() == pytest.approx(fast.iteration_time_s, rel=REL)


@pytest.mark.parametrize("strategy", ["dram", "cxl", "nvme"])
def test_events_follow_distinct_parts_not_repeats(strategy: str) -> None:
    """70B from 2 micro-steps to 10^6: the same events (the first micro-step, whose repeat shows
    by the end of the next forward, for accumulating ones give what it gives, and the boundary);
    fewer at 1. Where collectives cross the PCIe links the gradient copies use (a fabric through
    the host bridges), the order of those copies matters: the first micro-step and one
    accumulating one are simulated, from 3 micro-steps on."""
    for overrides, alike in (([], True), (["hardware.fabric=pcie-p2p-gen5"], False)):
        events = {}
        for micro_steps in (1, 2, 3, 4, 1024, 10**6):
            config = load_scenario(SEVENTY_B, [f"training.global_batch={4 * micro_steps}", *overrides], [strategy],
                                   force=True)[0]
            events[micro_steps] = simulate(config).events
        assert events[1] < events[2] <= events[3] == events[4] == events[1024] == events[10**6]
        assert (events[2] == events[3]) == alike
