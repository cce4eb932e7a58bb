"""FlowNetwork's timers: every flow ends when its last byte moves, even where a re-allocation of
other links takes back the timer it was relying on."""

from __future__ import annotations

from tiersim.engine.clock import Clock, Event
from tiersim.engine.flows import FlowNetwork


def test_a_flow_ends_on_time_when_an_unconnected_timer_is_withdrawn() -> None:
    """A (1 B on link x) arms a timer for 1 s; B (1.2 B on link y, 1 B/s) finishes at 1.2 s and
    relies on that earlier timer. At 0.5 s C joins A on x and halves its rate, so the timer at
    1 s is taken back and A now ends at 1.5 s: B must still end at 1.2 s, not at A's end."""
    clock = Clock()
    ended: dict[int, float] = {}

    def done(keys: list[int], now: float) -> None:
        ended.update(dict.fromkeys(keys, now))

    network = FlowNetwork(clock, {"x": 1.0, "y": 1.0}, done)
    network.transfer(1, 1.0, (("x", 1.0),), float("inf"))
    network.transfer(2, 1.2, (("y", 1.0),), float("inf"))

    def start_c(_event: Event) -> None:
        network.transfer(3, 10.0, (("x", 1.0),), float("inf"))

    clock.call_after(0.5, start_c)
    clock.run()
    assert ended[2] == 1.2
    assert ended[1] == 1.5
    assert ended[3] == 11.0  # 0.5 B moved at 0.5 B/s by 1.5 s, the other 9.5 B at 1 B/s
