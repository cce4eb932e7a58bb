"""A host layout of tensors taken together in blocks (``Repeated``: the sub-groups of a layer,
layer after layer) is the layout of the same tensors one by one: every byte range's memory, every
sub-group's, and every label's bytes in DRAM, to the last bit, under a fill that spills and an
interleave."""

from __future__ import annotations

from dataclasses import replace

from clirun import QUICKSTART
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.document import load_scenario
from tiersim.config.hardware import Hardware
from tiersim.strategies.host_layout import Allocation, HostLayout, Repeated, blocks, fill, once, spread
from tiersim.strategies.memory import HostMemory

GB = 10**9
LABELS = ("a", "b", "c")


def hardware(dram_gb: int) -> Hardware:
    """The quickstart's CXL node with ``dram_gb`` of DRAM per socket."""
    (found,) = [c for c in load_scenario(QUICKSTART, ["model.layers=2"]) if c.strategy == "cxl"]
    return replace(found.hardware, dram_capacity_per_socket=dram_gb * GB)


tensor = st.builds(Allocation, st.sampled_from(LABELS), st.integers(0, 40).map(lambda n: n * GB // 4),
                   st.integers(0, 3).map(lambda n: n * GB // 8))
repeated = st.builds(Repeated, st.lists(tensor, min_size=1, max_size=3).map(
    lambda ts: tuple(replace(t, reserved=t.allocated + t.reserved) for t in ts)), st.integers(1, 6))


def one_by_one(tensors: list[Repeated]) -> list[Repeated]:
    """Each repeat of each tensor on its own, in allocation order."""
    return [once(t) for r in tensors for _ in range(r.count) for t in r.tensors]


def same_layout(runs_of: HostLayout, single: HostLayout, cuts: list[float]) -> None:
    """Both layouts put every byte range, every tensor and every label's bytes alike."""
    for what, pieces in single.labels().items():
        size = sum(p.allocated() for p in pieces)
        bounds = sorted(int(c * size) for c in cuts)
        for start, end in zip([0, *bounds], [*bounds, size]):
            assert runs_of.memory(what, start, end) == single.memory(what, start, end)
        assert runs_of.subgroups(what) == single.subgroups(what)
        for ranks in (1, 3):
            assert [sum(held) for held in zip(*(p.in_dram(ranks) for p in runs_of.labels()[what]))] == \
                [sum(held) for held in zip(*(p.in_dram(ranks) for p in pieces))]


@given(tensors=st.lists(repeated, min_size=1, max_size=6), dram_gb=st.integers(0, 400),
       cuts=st.lists(st.floats(0, 1), max_size=5))
@settings(max_examples=60, deadline=None)
def test_a_fill_of_runs_is_the_fill_tensor_by_tensor(tensors: list[Repeated], dram_gb: int, cuts: list[float]) -> None:
    hw = hardware(dram_gb)
    same_layout(HostLayout(hw, fill(hw, tensors), None), HostLayout(hw, fill(hw, one_by_one(tensors)), None),
                cuts)


@given(tensors=st.lists(repeated, min_size=1, max_size=6))
@settings(max_examples=20, deadline=None)
def test_an_interleave_of_runs_is_the_interleave_tensor_by_tensor(tensors: list[Repeated]) -> None:
    hw = hardware(100)
    interleave = HostMemory.interleave(hw, 12, 5)
    same_layout(HostLayout(hw, spread(tensors, interleave.dram_fraction), interleave),
                HostLayout(hw, spread(one_by_one(tensors), interleave.dram_fraction), interleave), [0.5])


def test_blocks_are_items_repeated_back_to_back() -> None:
    assert blocks([5, 5, 5, 2, 5]) == [((5,), 3), ((2,), 1), ((5,), 1)]
    assert blocks([9, 1, 2, 3, 1, 2, 3, 1, 2, 4]) == [((9,), 1), ((1, 2, 3), 2), ((1,), 1), ((2,), 1), ((4,), 1)]
    assert blocks([]) == []
    assert blocks([1, 2] * 500 + [3]) == [((1, 2), 500), ((3,), 1)]
    assert blocks([7] * 1000) == [((7,), 1000)]


@given(st.lists(st.integers(0, 3), max_size=30))
def test_blocks_keep_every_item_in_order(items: list[int]) -> None:
    assert [item for block, count in blocks(items) for item in block * count] == items
