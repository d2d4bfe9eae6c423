"""The event engine: ordering at one instant, cancellation, reproducibility."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ultraplane.simulator.events import END, SUBMIT, TICK, Engine, Event


@pytest.mark.parametrize(
    ("scheduled", "expected"),
    [
        # same instant: an END frees chips before a SUBMIT is considered
        ([(5.0, SUBMIT, "s"), (5.0, END, "e")], ["e", "s"]),
        # same instant and priority: insertion order
        ([(1.0, SUBMIT, "a"), (1.0, SUBMIT, "b")], ["a", "b"]),
        # time first, whatever the priority
        ([(2.0, END, "late"), (1.0, TICK, "early")], ["early", "late"]),
    ],
)
def test_order(scheduled: list[tuple[float, int, str]], expected: list[str]) -> None:
    eng = Engine()
    for at, prio, name in scheduled:
        eng.schedule(at, prio, Event(name))
    seen: list[str] = []
    eng.run(lambda ev: seen.append(ev.kind))
    assert seen == expected
    assert eng.processed == len(expected)


def test_cancel_and_clock() -> None:
    eng = Engine(start=10.0)
    keep = eng.schedule(12.0, END, Event("keep"))
    drop = eng.schedule(11.0, END, Event("drop"))
    eng.cancel(drop)
    assert len(eng) == 1 and keep != drop
    assert eng.peek_time() == 12.0
    assert [ev.kind for _, ev in eng.pop_instant()] == ["keep"]
    assert eng.now == 12.0
    with pytest.raises(ValueError, match="before now"):
        eng.schedule(3.0, END, Event("past"))


def test_until_stops_and_moves_clock() -> None:
    eng = Engine()
    eng.schedule(1.0, END, Event("a"))
    eng.schedule(9.0, END, Event("b"))
    seen: list[str] = []
    eng.run(lambda ev: seen.append(ev.kind), until=5.0)
    assert seen == ["a"] and eng.now == 5.0 and len(eng) == 1


def test_seeded_rng_reproducible() -> None:
    assert Engine(seed=7).rng.random() == Engine(seed=7).rng.random()
    assert Engine(seed=7).rng.random() != Engine(seed=8).rng.random()


@given(st.lists(st.tuples(st.floats(0, 1e6), st.integers(0, 3)), max_size=60))
def test_pops_in_nondecreasing_time(items: list[tuple[float, int]]) -> None:
    eng = Engine()
    for at, prio in items:
        eng.schedule(at, prio, Event("x", at))
    times = [ev.payload for _, ev in eng.events()]
    assert times == sorted(times) and len(times) == len(items)
