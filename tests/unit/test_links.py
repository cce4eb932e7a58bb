"""``SharedLinks``: tiersim's processor-sharing links used from SimPy processes, against closed forms."""

from __future__ import annotations

import math
from collections.abc import Generator

import pytest
import simpy

from tiersim.engine.links import SharedLinks
from tiersim.errors import ModelError


def _finishes(capacity: dict[str, float], transfers: list[tuple[float, float, dict[str, float], float]]) -> list[float]:
    """Finish times of transfers (start s, bytes, usage, latency s), each in its own process."""
    env = simpy.Environment()
    links = SharedLinks(env, capacity)
    out = [math.nan] * len(transfers)

    def process(i: int, start: float, size: float, usage: dict[str, float],
                latency: float) -> Generator[simpy.Event, object, None]:
        yield env.timeout(start)
        finished = yield links.transfer(size, usage, latency=latency)
        assert finished == env.now
        out[i] = env.now

    for i, transfer in enumerate(transfers):
        env.process(process(i, *transfer))
    env.run()
    return out


def test_one_transfer_is_latency_plus_bytes_over_bandwidth() -> None:
    assert _finishes({"pcie": 25e9}, [(0.0, 3e9, {"pcie": 1.0}, 5e-6)]) == [pytest.approx(5e-6 + 3e9 / 25e9, rel=1e-12)]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_n_equal_transfers_each_take_n_times_longer(n: int) -> None:
    finishes = _finishes({"link": 2e9}, [(0.0, 1e9, {"link": 1.0}, 0.0)] * n)
    assert finishes == [pytest.approx(n * 0.5, rel=1e-12)] * n


def test_a_late_transfer_shares_what_is_left() -> None:
    # A moves 0.5 GB alone in 0.5 s, then both share 1 GB/s: A's last 0.5 GB take 1 s.
    a, b = _finishes({"link": 1e9}, [(0.0, 1e9, {"link": 1.0}, 0.0), (0.5, 1e9, {"link": 1.0}, 0.0)])
    assert a == pytest.approx(1.5, rel=1e-12)
    assert b == pytest.approx(2.0, rel=1e-12)


def test_a_capped_transfer_leaves_the_rest_to_others() -> None:
    env = simpy.Environment()
    links = SharedLinks(env, {"link": 10e9})
    slow = links.transfer(1e9, {"link": 1.0}, cap=1e9)
    fast = links.transfer(9e9, {"link": 1.0})
    env.run()
    assert slow.value == pytest.approx(1.0, rel=1e-12)
    assert fast.value == pytest.approx(1.0, rel=1e-12)


def test_zero_bytes_finish_after_the_latency() -> None:
    assert _finishes({"link": 1e9}, [(1.0, 0.0, {"link": 1.0}, 0.25)]) == [1.25]


@pytest.mark.parametrize(("capacity", "size", "usage", "message"), [
    ({"link": 0.0}, 1.0, {"link": 1.0}, "capacity"),
    ({"link": 1e9}, -1.0, {"link": 1.0}, "size"),
    ({"link": 1e9}, 1.0, {"nvme": 1.0}, r"undeclared link\(s\) nvme"),
    ({"link": 1e9}, 1.0, {}, "finite rate cap"),
])
def test_bad_transfers_are_model_errors(capacity: dict[str, float], size: float, usage: dict[str, float],
                                        message: str) -> None:
    env = simpy.Environment()
    with pytest.raises(ModelError, match=message):
        SharedLinks(env, capacity).transfer(size, usage)
