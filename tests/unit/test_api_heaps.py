"""The embedded fleet's collector policy (`ultraplane.api.backends.heaps`): the heap frozen after each
tick, a full collection every `full_seconds`, CPython's schedule again once released."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from ultraplane.api.backends.heaps import Heap


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen (the rest of the suite runs as usual)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def garbage_cycle() -> weakref.ref[Node]:
    """Two objects that refer to each other and to nothing else: only the collector frees them."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_tick_freezes_the_heap_and_a_full_collection_comes_every_full_seconds() -> None:
    now = [0.0]
    heap = Heap(full_seconds=600.0, clock=lambda: now[0])
    heap.settle()  # the app collected and froze at start-up: this tick freezes only
    assert gc.get_freeze_count() > 0
    cycle = garbage_cycle()
    now[0] = 10.0
    heap.settle()  # frozen with the rest: collections no longer see it
    gc.collect()
    assert cycle() is not None
    now[0] = 700.0
    heap.settle()  # the full collection thaws, collects and freezes again
    assert cycle() is None and gc.get_freeze_count() > 0


def test_released_the_heap_is_on_cpythons_schedule_again() -> None:
    heap = Heap(clock=lambda: 0.0)
    cycle = garbage_cycle()
    heap.settle()
    heap.release()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert cycle() is None
