"""The operator's collector policy (operator/gctuning.py) and the cycle summary that reports it."""

from __future__ import annotations

import gc
import logging
import re
import weakref
from collections.abc import Iterator

import pytest
from ultraplane.operator.gctuning import PAUSES, GcPauses, HeapKeeper
from ultraplane.operator.loops import CycleStats


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen (the rest of the suite runs as usual)."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    PAUSES.uninstall()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def garbage_cycle() -> weakref.ref[Node]:
    """Two objects that refer to each other and to nothing else: only the collector frees
    them."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_settle_freezes_the_heap_and_collects_fully_only_every_full_seconds() -> None:
    keeper = HeapKeeper(full_seconds=600.0)
    keeper.settle(now=0.0)  # the first settle is a full collection
    assert keeper.full_collections == 1 and gc.get_freeze_count() > 0
    cycle = garbage_cycle()
    keeper.settle(now=10.0)  # frozen with the rest: young collections no longer see it
    gc.collect(0)
    gc.collect(1)
    gc.collect()  # even a full one: frozen objects are out of its sight
    assert keeper.full_collections == 1 and cycle() is not None
    keeper.settle(now=700.0)  # the deliberate full collection thaws, collects, refreezes
    assert keeper.full_collections == 2 and cycle() is None
    assert gc.get_freeze_count() > 0


def test_frozen_objects_are_still_freed_by_reference_counting() -> None:
    keeper = HeapKeeper(full_seconds=600.0)
    held = Node()
    ref = weakref.ref(held)
    keeper.settle(now=0.0)
    del held
    assert ref() is None


def test_no_full_seconds_leaves_the_collector_alone() -> None:
    keeper = HeapKeeper(full_seconds=None)
    cycle = garbage_cycle()
    keeper.settle(now=0.0)
    keeper.settle(now=10_000.0)
    assert gc.get_freeze_count() == 0 and keeper.full_collections == 0
    gc.collect()
    assert cycle() is None


def test_pauses_are_recorded_per_collection_and_taken_once() -> None:
    pauses = GcPauses()
    pauses.install()
    pauses.install()  # idempotent: one hook
    try:
        gc.collect()
        gc.collect(0)
        taken = pauses.take()
        assert len(taken) == 2 and all(p >= 0 for p in taken)
        assert pauses.take() == []
    finally:
        pauses.uninstall()
    gc.collect()
    assert pauses.take() == []


def test_the_cycle_summary_reports_the_collector(caplog: pytest.LogCaptureFixture) -> None:
    # the format bench/operator.py parses (its _CYCLES pattern)
    PAUSES.install()
    stats = CycleStats(every=5.0)
    with caplog.at_level(logging.INFO, logger="ultraplane.operator"):
        stats.add(0.01, 0.02, now=0.0)
        gc.collect()
        stats.add(0.03, 0.05, now=6.0)
    line = next(r.getMessage() for r in caplog.records if "admission cycles" in r.getMessage())
    match = re.search(r"admission cycles: 2 in 6s; decide p50 [\d.]+s p99 0.0300s; with writes "
                      r"p50 [\d.]+s p99 0.0500s; collector (\d+) pauses, max ([\d.]+)s, "
                      r"total ([\d.]+)s", line)
    assert match is not None, line
    assert int(match.group(1)) >= 1 and float(match.group(3)) >= float(match.group(2))
