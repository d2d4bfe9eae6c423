"""Queue order inside a priority: target start = creation + stretch x predicted run time.

Fleets: `build_fleet("trn3-gen2", n)`, n UltraServers of 144 chips. Jobs are written
`name(chips, created, run)`; `run=None` is a job without an estimate (counted as 24 h).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ultraplane.simulator.backlogs import Backlog

from ultraplane.documents.conversions import creation_seconds, queued_job, run_estimate
from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey, chip_id
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.scheduling.admissions import Admissions
from ultraplane.scheduling.queueorder import (
    FIFO,
    LARGE_GANG_CHIPS,
    TARGET_START,
    UNKNOWN_RUN_S,
    QueueOrder,
)
from ultraplane.workloads import QueuedJob

HOUR = 3600.0


def job(name: str, chips: int, created: float | None, run: float | None, *,
        seq: int = 0, priority: int = 0) -> QueuedJob:
    return QueuedJob(JobKey(name), PlacementRequest(chips=chips), priority, seq,
                     expected_s=run, created_s=created)


# -- the rank ------------------------------------------------------------------------------
def test_rank_is_creation_plus_stretch_times_run() -> None:
    order = QueueOrder(stretch=10.0)
    assert order.rank(1000.0, 8, HOUR) == 1000.0 + 10 * HOUR
    assert order.rank(1000.0, 8, None) == 1000.0 + 10 * UNKNOWN_RUN_S  # no estimate: 24 h
    assert order.rank(1000.0, 8, -5.0) == 1000.0  # a nonsense estimate buys nothing below 0
    assert order.rank(None, 8, HOUR) == 0.0  # no clock: arrival order (seq) decides
    assert FIFO.rank(1000.0, 8, HOUR) == 1000.0


def test_gangs_of_more_than_half_an_ultraserver_rank_by_creation_alone() -> None:
    assert LARGE_GANG_CHIPS == 73  # no two of them share a Gen2 UltraServer of 144
    assert TARGET_START.rank(50.0, LARGE_GANG_CHIPS, 100 * HOUR) == 50.0
    assert TARGET_START.rank(50.0, 128, 12 * 24 * HOUR) == 50.0  # the ITP traces' starved kind
    assert TARGET_START.rank(50.0, 1152, None) == 50.0
    assert TARGET_START.rank(50.0, LARGE_GANG_CHIPS - 1, HOUR) > 50.0


def test_the_large_gang_threshold_follows_the_fleets_largest_ultraserver() -> None:
    # Trn2 and Trn3 Gen1 UltraServers have 64 chips: a 40-chip gang is more than half of one
    assert TARGET_START.large_from(64) == 33
    assert TARGET_START.rank(50.0, 40, HOUR, ultraserver_chips=64) == 50.0
    assert TARGET_START.rank(50.0, 32, HOUR, ultraserver_chips=64) > 50.0
    assert TARGET_START.rank(50.0, 40, HOUR, ultraserver_chips=144) > 50.0
    assert TARGET_START.large_from(0) == LARGE_GANG_CHIPS  # no fleet known yet: Gen2 assumed
    fixed = QueueOrder(large_chips=100)
    assert fixed.large_from(64) == fixed.large_from(144) == 100
    with pytest.raises(ValueError, match="large gang threshold must be >= 1 chip"):
        QueueOrder(large_chips=0)


@pytest.mark.parametrize(("profile", "by_creation"), [("trn2", True), ("trn3-gen1", True),
                                                      ("trn3-gen2", False)])
def test_admissions_rank_by_the_fleet_they_schedule(profile: str, by_creation: bool) -> None:
    admissions = Admissions(Allocator(build_fleet(profile, 2)))
    ranked = admissions.ranked(job("a", 40, 50.0, HOUR))
    assert (ranked.rank == 50.0) is by_creation
    mixed = Allocator(build_fleet("trn2", 1))
    mixed.upsert_ultraserver(build_fleet("trn3-gen2", 1).ultraservers[0])  # the largest decides
    assert Admissions(mixed).ranked(job("a", 40, 50.0, HOUR)).rank > 50.0


@pytest.mark.parametrize("stretch", [-1.0, float("nan"), float("inf")])
def test_a_bad_stretch_is_a_clear_error(stretch: float) -> None:
    with pytest.raises(ValueError, match="stretch must be a finite number >= 0"):
        QueueOrder(stretch=stretch)


def test_ranked_keeps_the_object_when_nothing_changes() -> None:
    fresh = job("a", 8, 0.0, HOUR)
    ranked = TARGET_START.ranked(fresh)
    assert ranked.rank == 10 * HOUR and ranked is not fresh
    assert TARGET_START.ranked(ranked) is ranked


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.sampled_from([1, 4, 16, 72, 73, 128, 143, 144, 576]),
                          st.one_of(st.none(), st.floats(0, 1e5))), min_size=2, max_size=30),
       st.sampled_from([0.0, 1.0, 10.0, 100.0]))
def test_no_job_is_passed_by_one_created_more_than_stretch_times_its_run_later(
        drawn: list[tuple[float, int, float | None]], stretch: float) -> None:
    order = QueueOrder(stretch=stretch)
    jobs = [order.ranked(job(f"j{i}", chips, created, run, seq=i))
            for i, (created, chips, run) in enumerate(drawn)]
    queue = sorted(jobs, key=QueuedJob.order)
    for i, ahead in enumerate(queue):
        for behind in queue[i + 1:]:
            assert ahead.created_s is not None and behind.created_s is not None
            if ahead.created_s <= behind.created_s:
                continue  # an older job ahead: not a pass
            # `ahead` (created later) passed `behind`: by at most stretch x behind's run time,
            # and never a gang of more than half an UltraServer
            assert behind.request.chips < LARGE_GANG_CHIPS
            run = UNKNOWN_RUN_S if behind.expected_s is None else behind.expected_s
            assert ahead.created_s - behind.created_s <= stretch * run + 1e-6 * (1 + run)


# -- the scheduler follows it --------------------------------------------------------------
ROOM = 60  # what one_slot() leaves free: one job of ROOM chips at a time, ranked by its run


def one_slot(order: QueueOrder = TARGET_START) -> Admissions:
    """One UltraServer of which a running job holds all but ROOM chips for good:

        gen2-0000  [held: 84 chips][room: 60]

    The jobs below ask for ROOM chips, small enough to rank by their run time (< 73)."""
    admissions = Admissions(Allocator(build_fleet("trn3-gen2", 1)), order=order)
    ids = [chip_id("gen2-0000", c // 4, c % 4) for c in range(144 - ROOM, 144)]
    admissions.readopt(job("held", 144 - ROOM, 0.0, None), [ids])
    return admissions


def busy(admissions: Admissions, us: int) -> None:
    """A running job on the room of UltraServer `us` (withdrawn to open it)."""
    ids = [chip_id(f"gen2-{us:04d}", c // 4, c % 4) for c in range(ROOM)]
    admissions.readopt(job(f"busy{us}", ROOM, 0.0, None), [ids])


def test_a_short_job_passes_an_older_long_one_but_not_an_old_enough_one() -> None:
    admissions = one_slot()
    busy(admissions, 0)
    admissions.submit(job("long", ROOM, 0.0, 10 * HOUR))          # rank 100 h
    admissions.submit(job("short", ROOM, 5 * HOUR, HOUR))         # rank 15 h: passes
    admissions.submit(job("late", ROOM, 96 * HOUR, 0.5 * HOUR))   # rank 101 h: does not
    admissions.withdraw(JobKey("busy0"))
    got = admissions.cycle(0.0)
    assert [a.key for a in got.admitted] == ["short"]
    assert [(p.key, p.position) for p in got.pending] == [("long", 1), ("late", 2)]


def test_fifo_order_keeps_arrival_order() -> None:
    admissions = one_slot(FIFO)
    busy(admissions, 0)
    admissions.submit(job("long", ROOM, 0.0, 10 * HOUR, seq=1))
    admissions.submit(job("short", ROOM, 5 * HOUR, HOUR, seq=2))
    admissions.withdraw(JobKey("busy0"))
    assert [a.key for a in admissions.cycle(0.0).admitted] == ["long"]


def test_a_job_without_an_estimate_never_passes_one_with_it() -> None:
    admissions = one_slot()
    busy(admissions, 0)
    admissions.submit(job("guessed", ROOM, 0.0, 20 * HOUR))
    admissions.submit(job("unknown", ROOM, -1.0, None))  # older, but 24 h counted
    admissions.withdraw(JobKey("busy0"))
    assert [a.key for a in admissions.cycle(0.0).admitted] == ["guessed"]


def test_priority_still_comes_first() -> None:
    admissions = one_slot()
    busy(admissions, 0)
    admissions.submit(job("short", ROOM, 0.0, 60.0))
    admissions.submit(job("urgent-long", ROOM, 10 * HOUR, 100 * HOUR, priority=5))
    admissions.withdraw(JobKey("busy0"))
    assert [a.key for a in admissions.cycle(0.0).admitted] == ["urgent-long"]


def test_a_requeued_job_keeps_its_rank() -> None:
    admissions = one_slot()
    admissions.submit(job("first", ROOM, 0.0, HOUR))
    assert [a.key for a in admissions.cycle(0.0).admitted] == ["first"]
    admissions.submit(job("second", ROOM, 1.0, HOUR))
    again = admissions.requeue(JobKey("first"))
    assert again is not None and again.rank == 10 * HOUR
    assert [a.key for a in admissions.cycle(0.0).admitted] == ["first"]


def test_a_readopted_job_that_is_requeued_keeps_its_rank() -> None:
    admissions = one_slot()
    ids = [chip_id("gen2-0000", c // 4, c % 4) for c in range(ROOM)]
    admissions.readopt(job("old", ROOM, 0.0, HOUR), [ids])
    admissions.submit(job("new", ROOM, 2.0, HOUR))
    again = admissions.requeue(JobKey("old"))
    assert again is not None and again.rank == 10 * HOUR
    assert [a.key for a in admissions.cycle(0.0).admitted] == ["old"]


# -- the replay's backlog uses the same order ----------------------------------------------
def test_backlog_pops_in_queue_order() -> None:
    backlog = Backlog()
    for j in (job("long", 8, 0.0, 10 * HOUR, seq=0), job("short", 8, 1.0, 60.0, seq=1),
              job("big", 144, 2.0, 99 * HOUR, seq=2), job("tie", 8, 1.0, 60.0, seq=3)):
        backlog.add(TARGET_START.ranked(j))
    assert [j.key for j in backlog.take(10_000)] == ["big", "short", "tie", "long"]


# -- adapters read the facts the rank counts from -----------------------------------------
def test_run_estimate_reads_the_specs_duration_and_nothing_else() -> None:
    assert run_estimate({"work": {"durationSeconds": 600}}) == 600.0
    assert run_estimate({"work": {"steps": 10, "tokensPerStep": 4}}) is None
    assert run_estimate({"durationSeconds": 60}, "InferenceJob") == 60.0
    for bad in (True, "600", -1, 0, float("nan"), None):
        assert run_estimate({"work": {"durationSeconds": bad}}) is None
    assert run_estimate({"work": "nope"}) is None


def test_creation_seconds_parses_kubernetes_timestamps() -> None:
    assert creation_seconds({"creationTimestamp": "1970-01-01T00:01:00Z"}) == 60.0
    assert creation_seconds({"creationTimestamp": "not a time"}) is None
    assert creation_seconds({}) is None


def test_queued_job_carries_creation_and_estimate() -> None:
    queued = queued_job("TrainingJob", "ns", "a", {"chips": 8, "work": {"durationSeconds": 60}},
                        seq=3, created_s=100.0)
    assert (queued.created_s, queued.expected_s, queued.seq) == (100.0, 60.0, 3)
    assert TARGET_START.ranked(queued).rank == 100.0 + 600.0
