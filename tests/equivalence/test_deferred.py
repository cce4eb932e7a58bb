"""Deferred tasks (tiersim.fastforward.deferred): timed by recursion, they give the full simulation's
results, and a run whose deferred flows could have been slowed is run again with them in the event run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.engine import EngineRun, Task
from tiersim.engine.schedule import Session
from tiersim.fastforward.deferred import DeferredFlowContended, credit_deferred
from tiersim.fastforward.session import UNSETTLED_ITERATIONS, FastForwardSession, UnsettledAmplifyingLoop, run_schedule

REL = 1e-9


def copies_behind_compute(layers: int, compute_s: float, copy_bytes: float, writer: str) -> Callable[[Session], None]:
    """A compute stream and, per layer, a copy (D2H) then a write, slower than the compute (their
    queues grow); a marker after everything, as the optimizer step's begin waits."""
    def schedule(session: Session) -> None:
        session.add(Task("begin", "gpu", "forward", "marker"))
        session.background_copies(frozenset({"d2h", "io"}))
        last = "begin"
        for i in range(layers):
            last = session.add(Task(f"c{i}", "gpu", "backward", "compute", compute_s, deps=(last,)))
            copy = session.add(Task(f"d{i}", "d2h", "backward", "d2h", 1e-5, copy_bytes,
                                    (("pcie", 1.0), ("dram", 1.0)), deps=(last,)))
            session.add(Task(f"w{i}", "io", "backward", "nvme_write", 1e-4, copy_bytes,
                             ((writer, 1.0), ("dram", 1.0)), deps=(copy,)))
        session.background_copies(frozenset())
        session.add(Task("step", "gpu", "optimizer_step", "marker", deps=(f"d{layers - 1}", f"w{layers - 1}")))
        session.add(Task("read", "io", "optimizer_step", "nvme_read", 1e-4, copy_bytes, ((writer, 1.0),),
                         deps=("step",)))
    return schedule


CAPACITY = {"pcie": 25e9, "dram": 100e9, "nvme": 3e9, "nvme_shared": 3e9, "fabric": 1e11}


def _both(schedule: Callable[[Session], None]) -> tuple[EngineRun, EngineRun]:
    fast, _ = run_schedule(schedule, CAPACITY.__getitem__, fast_forward=True)
    full, _ = run_schedule(schedule, CAPACITY.__getitem__, fast_forward=False)
    assert fast.makespan == pytest.approx(full.makespan, rel=REL)
    for name in ("link_busy", "link_units_moved"):
        assert getattr(fast, name) == pytest.approx(getattr(full, name), rel=REL), name
    for name in ("busy", "moved", "stream_busy", "stream_bytes", "spans"):
        assert getattr(fast.accounts, name) == pytest.approx(getattr(full.accounts, name), rel=REL), name
    assert fast.accounts.exposed == pytest.approx(full.accounts.exposed, rel=REL)
    return fast, full


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 30), compute_s=st.floats(1e-4, 1e-1), copy_bytes=st.floats(1e6, 1e9))
def test_deferred_copies_give_the_full_run(layers: int, compute_s: float, copy_bytes: float) -> None:
    """Queues that grow (or not) behind a compute stream: the same makespan, phases and every
    busy and moved counter as the event run, with fewer events."""
    fast, full = _both(copies_behind_compute(layers, compute_s, copy_bytes, "nvme"))
    assert not fast.complete and fast.events < full.events


def test_a_deferred_chain_is_latency_plus_bytes_over_bandwidth() -> None:
    """One layer: the copy starts when the compute ends, the write when the copy ends, each its
    latency plus its bytes over its tightest link; the step waits for the write."""
    session = FastForwardSession(CAPACITY.__getitem__)
    copies_behind_compute(1, 1e-3, 1e8, "nvme")(session)
    run = session.finish()
    copy, write = 1e-5 + 1e8 / 25e9, 1e-4 + 1e8 / 3e9
    names = [task.name for task in session.graph.tasks]
    assert run.end[names.index("d0")] == pytest.approx(1e-3 + copy, rel=1e-12)
    assert run.end[names.index("w0")] == pytest.approx(1e-3 + copy + write, rel=1e-12)
    assert run.start[names.index("read")] == pytest.approx(1e-3 + copy + write, rel=1e-12)
    assert run.link_busy["pcie"] == pytest.approx(1e8 / 25e9, rel=1e-12)


def test_a_deferred_flow_on_a_link_that_could_saturate_is_run_again_in_the_event_run() -> None:
    """The writes share their drive with a read the step issues while they still run: the
    deferred times would be wrong, so ``credit_deferred`` refuses them, naming their stream, and
    the run is simulated again with the writes in the event run and the copies still deferred."""
    def schedule(session: Session) -> None:
        copies_behind_compute(20, 1e-3, 3e8, "nvme_shared")(session)
        session.add(Task("early_read", "io2", "backward", "nvme_read", 0.0, 3e9, (("nvme_shared", 1.0),),
                         deps=("c5",)))
    fast_session = FastForwardSession(CAPACITY.__getitem__)
    schedule(fast_session)
    fast_session.run.extend()
    fast_session.run.clock.run()
    with pytest.raises(DeferredFlowContended) as refused:
        credit_deferred(fast_session.run, fast_session.deferral)
    assert refused.value.streams == frozenset({"io"})
    fast, full = _both(schedule)
    assert not fast.complete and fast.events < full.events  # the copies deferred


def copies_then_reads(keys: tuple[int, ...], amplifies: bool) -> Callable[[Session], None]:
    """``copies_behind_compute`` over 12 layers, its writes deferred, then a loop of reads of the
    drive after them, one per key (alike where keys are equal), which ``amplifies``."""
    def schedule(session: Session) -> None:
        copies_behind_compute(12, 1e-3, 1e8, "nvme")(session)
        last = "read"
        for i in session.loop(keys, False, amplifies):
            last = session.add(Task(f"r{i}", "io", "optimizer_step", "nvme_read", 1e-4, 1e8, (("nvme", 1.0),),
                                    deps=(last,)))
    return schedule


def _without_deferring(schedule: Callable[[Session], None]) -> EngineRun:
    session = FastForwardSession(CAPACITY.__getitem__, deferring=False)
    schedule(session)
    return session.finish()


def built(schedule: Callable[[Session], None]) -> FastForwardSession:
    """A fast-forward session that has built ``schedule``."""
    session = FastForwardSession(CAPACITY.__getitem__)
    schedule(session)
    return session


def test_a_loop_that_amplifies_and_does_not_settle_is_probed() -> None:
    """A loop that amplifies a float step in its start, of more than ``UNSETTLED_ITERATIONS``
    unlike iterations (none can repeat), after deferred writes: the session is ``unsettled``, and
    the run, which nudged rates move by float residue only (reads one after another grow no
    step), stands the probe: it keeps its copies deferred and agrees with the full run to 1e-12.
    One iteration fewer is not probed."""
    keys = tuple(range(UNSETTLED_ITERATIONS + 1))
    assert built(copies_then_reads(keys, True)).unsettled
    assert not built(copies_then_reads(keys[:-1], True)).unsettled
    assert not built(copies_then_reads(keys, False)).unsettled
    fast, full = _both(copies_then_reads(keys, True))
    assert fast.events < full.events
    assert fast.makespan == pytest.approx(full.makespan, rel=1e-12)


def test_a_long_loop_that_amplifies_and_does_not_settle_is_run_whole() -> None:
    """The same loop with more than ``UNSETTLED_ITERATIONS`` still to build when it has built as
    many unsettled: the schedule is run whole at once (probing it would simulate those twice
    more), so its results are the full run's, to the bit; one fewer is probed."""
    keys = tuple(range(2 * UNSETTLED_ITERATIONS + 1))
    with pytest.raises(UnsettledAmplifyingLoop):
        built(copies_then_reads(keys, True))
    assert built(copies_then_reads(keys[:-1], True)).unsettled
    fast, full = _both(copies_then_reads(keys, True))
    assert (fast.makespan, fast.events, fast.link_busy) == (full.makespan, full.events, full.link_busy)


def test_a_probe_that_reaches_the_bound_with_more_to_go_leaves_the_run_whole() -> None:
    """The probing run's skips may differ from the first run's, and with them how many
    iterations its loop has to go at the bound: where that is more than ``UNSETTLED_ITERATIONS``
    (here a schedule that builds one more read under nudged rates), the probe fails and the
    schedule is run whole, to the bit, rather than raising."""
    def schedule(session: Session) -> None:
        capacity_of = session.graph.capacity_of
        assert capacity_of is not None
        more = capacity_of("nvme") != CAPACITY["nvme"]
        copies_then_reads(tuple(range(2 * UNSETTLED_ITERATIONS + more)), True)(session)
    assert built(schedule).unsettled
    fast, full = _both(schedule)
    assert (fast.makespan, fast.events, fast.link_busy) == (full.makespan, full.events, full.link_busy)


def skipped_then_reads(keys: tuple[int, ...]) -> Callable[[Session], None]:
    """Twelve alike layers of compute then a write (skipped after a few: nothing defers), then a
    loop of reads of the drive, one per key, which amplifies."""
    def schedule(session: Session) -> None:
        last = session.add(Task("begin", "gpu", "forward", "marker"))
        for i in session.loop((0,) * 12):
            last = session.add(Task(f"c{i}", "gpu", "backward", "compute", 1e-3, deps=(last,)))
            last = session.add(Task(f"w{i}", "gpu", "backward", "nvme_write", 1e-4, 1e6, (("nvme", 1.0),),
                                    deps=(last,)))
        for i in session.loop(keys, False, True):
            last = session.add(Task(f"r{i}", "io", "optimizer_step", "nvme_read", 1e-4, 1e8, (("nvme", 1.0),),
                                    deps=(last,)))
    return schedule


def test_a_loop_that_amplifies_after_skipped_iterations_and_does_not_settle_is_probed() -> None:
    """Skipped iterations leave their shifted times a float step off the full run's sums, which a
    loop that amplifies would grow as deferred ends would: unsettled after
    ``UNSETTLED_ITERATIONS``, the run is probed, and stands (the reads grow no step), within 1e-12
    of the full run; a loop that settles is skipped after the skipped layers, unprobed."""
    keys = tuple(range(UNSETTLED_ITERATIONS + 1))
    session = built(skipped_then_reads(keys))
    assert session.skipped > 0 and session.unsettled
    fast, full = _both(skipped_then_reads(keys))
    assert fast.events < full.events
    assert fast.makespan == pytest.approx(full.makespan, rel=1e-12)
    settling = built(skipped_then_reads((0,) * (4 * UNSETTLED_ITERATIONS)))
    assert not settling.unsettled
    settled, full = _both(skipped_then_reads((0,) * (4 * UNSETTLED_ITERATIONS)))
    assert settled.events < full.events


def test_a_loop_that_amplifies_and_settles_keeps_its_copies_deferred() -> None:
    """The same loop of alike iterations settles into a repeat after a few and is skipped: the
    writes before it stay deferred, and the results are the full run's."""
    keys = (0,) * (4 * UNSETTLED_ITERATIONS)
    fast, full = _both(copies_then_reads(keys, True))
    assert fast.events < _without_deferring(copies_then_reads(keys, True)).events < full.events


def repeating_layers(layers: int, compute_s: float, copy_bytes: float,
                     reduce_usage: tuple[tuple[str, float], ...] = (("fabric", 1.0),)) -> Callable[[Session], None]:
    """As ``copies_behind_compute``, the layers a ``repeat`` loop whose compute side repeats
    (each layer's compute after the one before; two streams share the fabric as gathers and
    reduces do, the reduces over ``reduce_usage``) while the deferred copies fall behind."""
    def schedule(session: Session) -> None:
        session.add(Task("begin", "gpu", "forward", "marker"))
        session.background_copies(frozenset({"d2h", "io"}))
        done: list[str] = []
        for i in session.loop(tuple("first" if i == 0 else "layer" for i in range(layers))):
            after = (done[-1],) if done else ("begin",)
            gather = session.add(Task(f"g{i}", "gather", "backward", "allgather", 1e-5, 2e8, (("fabric", 1.0),),
                                      deps=after))
            done.append(session.add(Task(f"c{i}", "gpu", "backward", "compute", compute_s, deps=(gather,))))
            reduce = session.add(Task(f"r{i}", "reduce", "backward", "reduce_scatter", 1e-5, 2e8,
                                      reduce_usage, deps=(done[-1],)))
            copy = session.add(Task(f"d{i}", "d2h", "backward", "d2h", 1e-5, copy_bytes,
                                    (("pcie", 1.0), ("dram", 1.0)), deps=(reduce,)))
            session.add(Task(f"w{i}", "io", "backward", "nvme_write", 1e-4, copy_bytes,
                             (("nvme", 1.0), ("dram", 1.0)), deps=(copy,)))
        session.background_copies(frozenset())
        tails = tuple(name for stream, name in session.graph.stream_tails().items() if stream in ("gpu", "d2h", "io"))
        session.add(Task("step", "gpu", "optimizer_step", "marker", deps=tails))
        session.add(Task("read", "io", "optimizer_step", "nvme_read", 1e-4, copy_bytes, (("nvme", 1.0),),
                         deps=("step",)))
    return schedule


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 60), compute_s=st.floats(1e-4, 3e-2), copy_bytes=st.floats(1e6, 1e9))
def test_a_loop_with_deferred_copies_is_skipped_and_gives_the_full_run(layers: int, compute_s: float,
                                                                      copy_bytes: float) -> None:
    """The compute side repeats, the copies' queues grow: the loop is skipped, the skipped
    layers' copies timed as copies of the last built one's, and every counter is the full run's."""
    fast, full = _both(repeating_layers(layers, compute_s, copy_bytes))
    if layers >= 20:
        assert fast.events < full.events / 3


def test_the_skipped_layers_copies_are_timed_without_being_built() -> None:
    """Copies far behind the compute (writes 20x slower than a layer): the skip builds the last
    skipped layer's copies only, the others are timed as copies, and every counter is the full run's."""
    schedule = repeating_layers(60, 1e-3, 6e7)
    _both(schedule)
    fast, built = run_schedule(schedule, CAPACITY.__getitem__, fast_forward=True)
    _full, whole = run_schedule(schedule, CAPACITY.__getitem__, fast_forward=False)
    assert fast.accounts.stream_bytes["io"] == pytest.approx(61 * 6e7, rel=REL)  # 60 writes and the read
    assert len(built.tasks) < len(whole.tasks) / 3


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 60), compute_s=st.floats(1e-4, 3e-2), copy_bytes=st.floats(1e6, 1e9),
       share=st.sampled_from([0.1, 1.0]))
def test_copies_on_a_link_the_skipped_reduces_use_give_the_full_run(layers: int, compute_s: float,
                                                                      copy_bytes: float, share: float) -> None:
    """The reduces also cross the copies' PCIe link (``share`` of their bytes, as ZeRO's
    collectives across nodes do): the skipped layers' reduces are checked against the deferred
    copies as the recorded ones are, and where the link could saturate the copies run in the
    event run while the writes stay deferred; every counter is the full run's (where the link
    is overloaded the copies' queue grows in the event run, which then skips nothing)."""
    _both(repeating_layers(layers, compute_s, copy_bytes, (("fabric", 1.0), ("pcie", share))))


def test_copies_that_could_saturate_a_link_with_the_skipped_reduces_stay_in_the_event_run() -> None:
    """A layer's copy (6 ms at the PCIe link's rate, after its reduce) still runs when the next
    layer's reduce (2 ms, a tenth of its bytes over PCIe) begins, 8 ms on, which together could
    saturate the link (6.8 ms of the 8 are used): the copies are refused and run with the
    compute, the writes (50 ms a layer) stay deferred, the loop is skipped, and 60 layers cost
    what 30 do."""
    events = {}
    for layers in (30, 60):
        schedule = repeating_layers(layers, 6e-3, 1.5e8, (("fabric", 1.0), ("pcie", 0.1)))
        session = FastForwardSession(CAPACITY.__getitem__)
        schedule(session)
        with pytest.raises(DeferredFlowContended) as refused:
            session.finish()
        assert refused.value.streams == frozenset({"d2h"})
        fast, full = _both(schedule)
        assert not fast.complete and fast.events < full.events / 3
        events[layers] = fast.events
    assert events[30] == events[60]


def test_a_refusal_the_recorded_flows_show_comes_before_the_skip() -> None:
    """Each layer's reduce (all its bytes over PCIe) meets the copy of the layer before on the
    link, which together could saturate it, before the loop repeats: the refusal comes at a
    state before the first skip (``refuse_early``), with four layers of 30 built, not at the
    end, and the run again with the copies in the event run gives the full run."""
    schedule = repeating_layers(30, 6e-3, 5e7, (("fabric", 1.0), ("pcie", 1.0)))
    session = FastForwardSession(CAPACITY.__getitem__)
    with pytest.raises(DeferredFlowContended) as refused:
        schedule(session)
    assert refused.value.streams == frozenset({"d2h"})
    assert sum(task.name.startswith("c") for task in session.graph.tasks) <= 4
    fast, full = _both(schedule)
    assert fast.events < full.events


def repeating_steps(steps: int, layers: int, compute_s: float, copy_bytes: float) -> Callable[[Session], None]:
    """A loop of ``steps`` micro-steps as a strategy's schedule has it: each is a backward over
    ``layers`` as ``repeating_layers``' (copies and writes deferred) and the next forward (a
    loop of ``layers`` computes), which begins after the last copy and write (the host
    synchronizes between micro-steps). When the forward's loop has run a few layers, every
    copy has ended, so the micro-step loop's states hold no deferred task."""
    def schedule(session: Session) -> None:
        computed = session.add(Task("begin", "gpu", "forward", "marker"))
        for m in session.loop(("step",) * steps):
            session.add(Task(f"m{m}.backward", "gpu", "backward", "marker", deps=(computed,)))
            session.background_copies(frozenset({"d2h", "io"}))
            for i in session.loop(("layer",) * layers):
                computed = session.add(Task(f"m{m}.c{i}", "gpu", "backward", "compute", compute_s, deps=(computed,)))
                copy = session.add(Task(f"m{m}.d{i}", "d2h", "backward", "d2h", 1e-5, copy_bytes,
                                        (("pcie", 1.0), ("dram", 1.0)), deps=(computed,)))
                session.add(Task(f"m{m}.w{i}", "io", "backward", "nvme_write", 1e-4, copy_bytes,
                                 (("nvme", 1.0), ("dram", 1.0)), deps=(copy,)))
            session.background_copies(frozenset())
            computed = session.add(Task(f"m{m + 1}.forward", "gpu", "forward", "marker",
                                        deps=tuple(session.graph.stream_tails().values())))
            for i in session.loop(("layer",) * layers):
                computed = session.add(Task(f"m{m + 1}.f{i}", "gpu", "forward", "compute", compute_s,
                                            deps=(computed,)))
    return schedule


@settings(max_examples=30, deadline=None)
@given(steps=st.integers(1, 12), layers=st.integers(1, 20), compute_s=st.floats(1e-4, 3e-2),
       copy_bytes=st.floats(1e6, 1e9))
def test_deferred_copies_that_end_between_iterations_are_settled_there(steps: int, layers: int, compute_s: float,
                                                                         copy_bytes: float) -> None:
    """Each micro-step's deferred copies end before the next one begins: ``credit_deferred`` counts them
    at the next state, so the micro-step loop repeats like one without deferred tasks, its
    periods' totals holding their copies, and every counter is the full run's."""
    _both(repeating_steps(steps, layers, compute_s, copy_bytes))


def test_a_loop_of_micro_steps_with_deferred_copies_costs_the_same_from_three_on() -> None:
    """Copies 20x slower than a layer's compute, settled between micro-steps: 3 micro-steps and
    300 take the same events."""
    events = {}
    for steps in (3, 300):
        fast, full = _both(repeating_steps(steps, 30, 1e-3, 6e7))
        events[steps] = fast.events
        assert fast.events < full.events
    assert events[3] == events[300]
