"""The admission queue: order, best-effort backfill, preemption, cancel/restore, invariants.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.allocator import Allocator, NoFit, PlacementRequest
from ultraplane.ids import JobKey
from ultraplane.scheduling import QueuedJob, Scheduler
from ultraplane.topology import build_fleet


def fleet(count: int, *, preemption: bool = True) -> Scheduler:
    return Scheduler(Allocator(build_fleet("trn3-gen2", count)), preemption=preemption)


def job(
    key: str, chips: int, priority: int = 0, seq: int = 0, *, level: str | None = "ultraserver",
    preemptible: bool = True,
) -> QueuedJob:
    return QueuedJob(
        JobKey(key), PlacementRequest(chips=chips, required_level=level), priority, seq, preemptible
    )


# Order: one UltraServer, three 100-chip jobs; only one fits at a time.
#   gen2-0000 [144 chips]   queue: b(p5,seq2)  c(p0,seq0)  a(p0,seq1)
ORDER_CASES = [
    # (jobs, admitted, pending order)
    ([job("a", 100, 0, 1), job("b", 100, 5, 2), job("c", 100, 0, 0)], ["b"], ["c", "a"]),
    ([job("a", 100, 0, 1), job("b", 100, 0, 1), job("c", 100, 0, 1)], ["a"], ["b", "c"]),
    ([job("z", 100, -1, 0), job("y", 100, 0, 9)], ["y"], ["z"]),
]


@pytest.mark.parametrize(("jobs", "admitted", "pending"), ORDER_CASES)
def test_priority_then_fifo(jobs: list[QueuedJob], admitted: list[str], pending: list[str]) -> None:
    sched = fleet(1, preemption=False)
    for j in jobs:
        sched.submit(j)
    result = sched.cycle()
    assert [k for k, _ in result.admitted] == admitted
    assert [(k, pos) for k, _, pos in result.pending] == [(k, i + 1) for i, k in enumerate(pending)]
    assert sched.positions() == {k: i + 1 for i, k in enumerate(pending)}


def test_backfill_small_job_behind_a_big_one() -> None:
    # gen2-0000 [ 100 used by r | 44 free ]   queue: big(144) first, small(4) second
    sched = fleet(1, preemption=False)
    sched.submit(job("r", 100))
    sched.cycle()
    sched.submit(job("big", 144, 0, 1))
    sched.submit(job("small", 4, 0, 2))
    result = sched.cycle()
    assert [k for k, _ in result.admitted] == ["small"]
    (key, nofit, pos), = result.pending
    assert (key, nofit.kind, pos) == ("big", "NoCapacity", 1)


def test_placement_is_a_gang_of_the_requested_size() -> None:
    sched = fleet(2)
    sched.submit(job("a", 72))
    ((key, placement),) = sched.cycle().admitted
    assert key == "a" and len(set(placement.chip_ids)) == 72
    assert len(placement.ultraservers) == 1


# Preemption: two UltraServers, both full of low-priority work.
#   gen2-0000 [lo1 144]   gen2-0001 [lo2 100 | 44 free]
PREEMPT_CASES = [
    # (incoming, expected victims, admitted?)
    (job("hi", 144, 10, 5), {"lo2"}, True),  # the smaller victim set that frees one domain
    (job("eq", 144, 0, 5), set(), False),  # equal priority never preempts
    (job("hi", 300, 10, 5), set(), False),  # Unsatisfiable: larger than any domain
]


@pytest.mark.parametrize(("incoming", "victims", "admitted"), PREEMPT_CASES)
def test_preemption(incoming: QueuedJob, victims: set[str], admitted: bool) -> None:
    sched = fleet(2)
    sched.submit(job("lo1", 144, 0, 0))
    sched.submit(job("lo2", 100, 0, 1))
    assert len(sched.cycle().admitted) == 2
    sched.submit(incoming)
    result = sched.cycle()
    assert {v for v, _ in result.preempted} == victims
    assert all(by == incoming.key for _, by in result.preempted)
    assert ([k for k, _ in result.admitted] == [incoming.key]) is admitted
    for victim in victims:
        assert sched.is_queued(JobKey(victim)) and not sched.is_running(JobKey(victim))
    if not admitted:
        assert result.pending[0][0] == incoming.key


def test_non_preemptible_jobs_are_never_victims() -> None:
    sched = fleet(1)
    sched.submit(job("lo", 144, 0, 0, preemptible=False))
    sched.cycle()
    sched.submit(job("hi", 144, 9, 1))
    result = sched.cycle()
    assert result.preempted == [] and result.admitted == []


def test_victim_keeps_its_fifo_rank_when_requeued() -> None:
    sched = fleet(1)
    sched.submit(job("lo", 144, 0, 0))
    sched.cycle()
    sched.submit(job("later", 144, 0, 7))
    sched.submit(job("hi", 144, 5, 9))
    sched.cycle()
    assert [j.key for j in sched.queued()] == ["lo", "later"]


def test_cancel_releases_and_dequeues() -> None:
    sched = fleet(1)
    sched.submit(job("a", 144))
    sched.submit(job("b", 144, 0, 1))
    sched.cycle()
    assert len(sched.cancel(JobKey("a"))) == 144
    assert sched.cancel(JobKey("nope")) == frozenset()
    assert [k for k, _ in sched.cycle().admitted] == ["b"]
    sched.submit(job("c", 4))
    assert sched.cancel(JobKey("c")) == frozenset() and not sched.is_queued(JobKey("c"))


def test_restore_adopts_chips_and_refuses_a_double_allocation() -> None:
    sched = fleet(1)
    chips = [f"gen2-0000/s00/c0{i}" for i in range(4)]
    sched.restore(JobKey("old"), chips, 3)
    assert sched.allocator.job_of(chips[0]) == "old"  # type: ignore[arg-type]
    with pytest.raises(Exception, match=r"."):
        sched.restore(JobKey("dup"), chips[:1], 0)
    assert not sched.is_running(JobKey("dup"))
    with pytest.raises(ValueError, match="already holds chips"):
        sched.submit(job("old", 4))


def test_submit_replaces_a_queued_job() -> None:
    sched = fleet(1, preemption=False)
    sched.submit(job("a", 200))
    sched.submit(job("a", 4))
    assert [k for k, _ in sched.cycle().admitted] == ["a"]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from([1, 4, 16, 36, 72, 144]), st.integers(0, 3)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("cycle"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_invariants_hold_under_any_sequence(steps: list[tuple[str, int, int]]) -> None:
    sched = fleet(2)
    seq = 0
    for op, a, b in steps:
        if op == "submit":
            sched.submit(job(f"j{seq}", a, b, seq))
            seq += 1
        elif op == "cancel":
            sched.cancel(JobKey(f"j{a}"))
        else:
            result = sched.cycle()
            positions = [pos for _, _, pos in result.pending]
            assert positions == list(range(1, len(positions) + 1))
            assert all(isinstance(n, NoFit) for _, n, _ in result.pending)
        allocations = sched.allocator.allocations()
        assert set(allocations) == set(sched.running())
        seen: set[str] = set()
        for key, placement in allocations.items():
            assert len(placement.chip_ids) == sched.running()[key].request.chips
            assert seen.isdisjoint(placement.chip_ids)
            seen.update(placement.chip_ids)
        assert set(sched.running()).isdisjoint(j.key for j in sched.queued())
