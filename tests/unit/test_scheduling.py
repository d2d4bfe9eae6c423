"""The admission queue: order, best-effort backfill, preemption, cancel/restore, invariants.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, PlacementRequest
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob


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


def fleet_of(count: int, *, reservation: bool = True) -> Scheduler:
    return Scheduler(Allocator(build_fleet("trn3-gen2", count)), preemption=False,
                     reservation=reservation)


def test_backfill_small_job_behind_a_big_one_without_reservation() -> None:
    # gen2-0000 [ 100 used by r | 44 free ]   queue: big(144) first, small(4) second
    sched = fleet_of(1, reservation=False)
    sched.submit(job("r", 100))
    sched.cycle()
    sched.submit(job("big", 144, 0, 1))
    sched.submit(job("small", 4, 0, 2))
    result = sched.cycle()
    assert [k for k, _ in result.admitted] == ["small"]
    (key, nofit, pos), = result.pending
    assert (key, nofit.kind, pos) == ("big", "NoCapacity", 1)
    assert result.reserved is None


# Reservation: two UltraServers, both partly used; a whole-UltraServer gang waits.
#   gen2-0000 [ r0 100 | 44 free ]   gen2-0001 [ r1 110 | 34 free ]
#   queue: big(144) first, then small(30)
def two_busy(reservation: bool = True) -> Scheduler:
    sched = fleet_of(2, reservation=reservation)
    sched.submit(job("r0", 100, 0, 0))
    sched.cycle()
    sched.submit(job("r1", 110, 0, 1))
    sched.cycle()
    assert {p.ultraservers for _, p in sched.allocator.allocations().items()} == {
        ("gen2-0000",), ("gen2-0001",)}
    return sched


def test_big_gang_reserves_the_freest_ultraserver_and_small_jobs_backfill_elsewhere() -> None:
    sched = two_busy()
    assert sched.allocator.allocations()[JobKey("r0")].ultraservers == ("gen2-0000",)
    sched.submit(job("big", 144, 0, 2))
    sched.submit(job("small", 30, 0, 3))
    result = sched.cycle()
    assert result.reserved == ("big", "gen2-0000", ("gen2-0000",))
    ((key, placement),) = result.admitted
    assert key == "small" and placement.ultraservers == ("gen2-0001",)
    ((pkey, nofit, _),) = result.pending
    assert pkey == "big" and nofit.kind == "NoCapacity"
    assert "UltraServer gen2-0000 reserved for it" in nofit.message
    # The hold lasts one cycle: between cycles the reserved UltraServer is schedulable again.
    assert sched.allocator.place(PlacementRequest(chips=44, required_level="ultraserver"))
    assert sched.allocator.free_chips(["gen2-0000", "gen2-0001"]) == 144 * 2 - 100 - 110 - 30
    # r0 ends: the reserved UltraServer drains whole and the big gang starts.
    sched.cancel(JobKey("r0"))
    result = sched.cycle()
    assert [(k, p.ultraservers) for k, p in result.admitted] == [("big", ("gen2-0000",))]


def test_without_reservation_small_jobs_starve_the_big_gang() -> None:
    # Without the reservation, s1 fits tightest in gen2-0001 and s2 then takes gen2-0000, so
    # when r0 ends the big gang still cannot start. With it, s2 waits and the big gang starts.
    for reservation, started in ((False, False), (True, True)):
        sched = two_busy(reservation)
        sched.submit(job("big", 144, 0, 2))
        sched.submit(job("s1", 30, 0, 3))
        sched.submit(job("s2", 30, 0, 4))
        sched.cycle()
        sched.cancel(JobKey("r0"))
        result = sched.cycle()
        assert ("big" in [k for k, _ in result.admitted]) is started, reservation


def test_a_job_that_fits_only_in_the_reserved_domain_waits_and_is_not_unsatisfiable() -> None:
    sched = two_busy()
    sched.submit(job("big", 144, 0, 2))
    sched.submit(job("mid", 40, 0, 3))  # fits only in gen2-0000 (44 free), which is reserved
    result = sched.cycle()
    assert result.admitted == []
    kinds = {k: n.kind for k, n, _ in result.pending}
    assert kinds == {"big": "NoCapacity", "mid": "NoCapacity"}


def test_multi_ultraserver_gang_reserves_a_whole_network_block() -> None:
    # Two blocks of 2 UltraServers. Block b0: one idle + one with 100 used; block b1: both with
    # 140 used. A 288-chip gang (2 UltraServers, one block) reserves b0, the freest.
    sched = Scheduler(Allocator(build_fleet("trn3-gen2", 4, per_block=2)), preemption=False)
    for i, (key, chips) in enumerate((("a", 100), ("b", 140), ("c", 140))):
        sched.submit(job(key, chips, 0, i))
        sched.cycle()
    by_us = {p.ultraservers[0]: k for k, p in sched.allocator.allocations().items()}
    assert len(by_us) == 3
    idle = next(u.name for u in sched.allocator.topology.ultraservers if u.name not in by_us)
    sched.submit(job("big", 288, 0, 10, level="block"))
    sched.submit(job("small", 4, 0, 11))
    result = sched.cycle()
    assert result.reserved is not None
    holder, name, reserved = result.reserved
    assert holder == "big" and name.startswith("block")
    assert idle in reserved and len(reserved) == 2
    ((key, placement),) = result.admitted
    assert key == "small" and not set(placement.ultraservers) & set(reserved)


def test_small_gangs_reserve_nothing() -> None:
    sched = fleet_of(1)
    sched.submit(job("r", 140))
    sched.cycle()
    sched.submit(job("eight", 8, 0, 1))
    sched.submit(job("one", 1, 0, 2))
    result = sched.cycle()
    assert result.reserved is None and [k for k, _ in result.admitted] == ["one"]


def test_replicated_job_reserves_one_ultraserver_per_replica_or_none() -> None:
    # gen2-0000 [r0 100 | 44]  gen2-0001 [r1 100 | 44]  gen2-0002 [r2 110 | 34]
    # rep = 2 replicas of 144: it reserves the two freest; small (30) goes to gen2-0002.
    sched = fleet_of(3)
    for i, chips in enumerate((100, 100, 110)):
        sched.submit(job(f"r{i}", chips, 0, i))
        sched.cycle()
    rep = QueuedJob(JobKey("rep"), PlacementRequest(chips=144, required_level="ultraserver"),
                    0, 10, replicas=2)
    sched.submit(rep)
    sched.submit(job("small", 30, 0, 11))
    result = sched.cycle()
    assert result.reserved == ("rep", "gen2-0000, gen2-0001", ("gen2-0000", "gen2-0001"))
    assert [(k, p.ultraservers) for k, p in result.admitted] == [("small", ("gen2-0002",))]
    ((_, nofit, _),) = result.pending
    assert "UltraServers gen2-0000, gen2-0001 reserved for it" in nofit.message
    sched.cancel(JobKey("r0"))
    sched.cancel(JobKey("r1"))
    ((key, placements),) = sched.cycle().admitted_replicas
    assert key == "rep" and sorted(p.ultraservers for p in placements) == [
        ("gen2-0000",), ("gen2-0001",)]
    # Three replicas of 144 on a 3-UltraServer fleet where one is cordoned: only two sets can
    # be found, so nothing is reserved and the job behind it still runs.
    sched = fleet_of(3)
    sched.allocator.set_schedulable("gen2-0002", False)
    sched.submit(job("r", 100))
    sched.cycle()
    sched.submit(QueuedJob(JobKey("three"), PlacementRequest(chips=144), 0, 1, replicas=3))
    sched.submit(job("tiny", 4, 0, 2))
    result = sched.cycle()
    assert result.reserved is None and [k for k, _ in result.admitted] == ["tiny"]
    assert not sched.allocator.topology.ultraservers[2].schedulable  # its cordon is kept


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


def replicated(key: str, replicas: int, chips: int, priority: int = 0, seq: int = 0) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=chips, required_level="ultraserver"),
                     priority, seq, replicas=replicas)


def test_replicas_are_placed_each_in_its_domain_under_replica_keys() -> None:
    # gen2-0000 [144]  gen2-0001 [144]; serve: 2 x 100, each inside one UltraServer.
    sched = fleet(2)
    sched.submit(replicated("serve", 2, 100))
    result = sched.cycle()
    assert result.admitted == []
    ((key, placements),) = result.admitted_replicas
    assert key == "serve" and len(placements) == 2
    assert [len(p.ultraservers) for p in placements] == [1, 1]
    assert set(placements[0].chip_ids).isdisjoint(placements[1].chip_ids)
    assert set(sched.allocator.allocations()) == {"serve#0", "serve#1"}
    assert sched.owner(JobKey("serve#1")) == "serve"
    assert sched.placements(JobKey("serve")) == placements
    assert len(sched.cancel(JobKey("serve"))) == 200 and sched.allocator.allocations() == {}


def test_replicas_are_all_or_nothing_and_let_smaller_jobs_backfill() -> None:
    # gen2-0000 [144]: 2 x 100 cannot fit; replica 0 must not stay on 100 chips.
    sched = fleet(1)
    sched.submit(replicated("serve", 2, 100, 0, 0))
    sched.submit(job("small", 44, 0, 1))
    result = sched.cycle()
    assert [k for k, _ in result.admitted] == ["small"]
    ((key, nofit, pos),) = result.pending
    assert (key, nofit.kind, pos) == ("serve", "NoCapacity", 1)
    assert nofit.message.startswith("replica 2 of 2")
    assert set(sched.allocator.allocations()) == {"small"}


def test_a_replicated_preemptor_that_cannot_be_placed_evicts_nobody() -> None:
    # gen2-0000 [lo 144]; hi: 2 x 144 at priority 9 on one UltraServer never fits whole.
    sched = fleet(1)
    sched.submit(job("lo", 144))
    ((_, before),) = sched.cycle().admitted
    sched.submit(replicated("hi", 2, 144, 9, 1))
    result = sched.cycle()
    assert result.preempted == [] and result.admitted_replicas == []
    assert sched.is_running(JobKey("lo")) and not sched.is_queued(JobKey("lo"))
    assert set(sched.allocator.allocations()[JobKey("lo")].chip_ids) == set(before.chip_ids)


def test_a_replicated_victim_is_evicted_whole_once() -> None:
    # gen2-0000 [lo#0 72 | lo#1 72]; hi (144, priority 5) needs the whole UltraServer.
    sched = fleet(1)
    sched.submit(replicated("lo", 2, 72))
    sched.cycle()
    sched.submit(job("hi", 144, 5, 1))
    result = sched.cycle()
    assert result.preempted == [("lo", "hi")]
    assert [k for k, _ in result.admitted] == ["hi"]
    assert sched.is_queued(JobKey("lo")) and set(sched.allocator.allocations()) == {"hi"}


def test_restore_replicas_is_all_or_nothing() -> None:
    sched = fleet(1)
    sched.restore(JobKey("old"), ["gen2-0000/s01/c00"])
    serve = replicated("serve", 2, 1)
    with pytest.raises(ValueError, match="already held"):
        sched.restore_replicas(serve, [["gen2-0000/s00/c00"], ["gen2-0000/s01/c00"]])  # type: ignore[list-item]
    assert not sched.is_running(serve.key) and set(sched.allocator.allocations()) == {"old"}
    with pytest.raises(ValueError, match="1 replica allocations for 2"):
        sched.restore_replicas(serve, [["gen2-0000/s00/c00"]])  # type: ignore[list-item]
    sched.restore_replicas(serve, [["gen2-0000/s00/c00"], ["gen2-0000/s02/c00"]])  # type: ignore[list-item]
    assert sched.owner(JobKey("serve#1")) == "serve"
    assert sched.allocator.job_of("gen2-0000/s02/c00") == "serve#1"


def test_submit_replaces_a_queued_job() -> None:
    sched = fleet(1, preemption=False)
    sched.submit(job("a", 200))
    sched.submit(job("a", 4))
    assert [k for k, _ in sched.cycle().admitted] == ["a"]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from([1, 4, 16, 36, 72, 144]), st.integers(0, 3)),
        st.tuples(st.just("replicas"), st.sampled_from([4, 36, 72, 100]), st.integers(1, 3)),
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
        elif op == "replicas":  # b replicas of a chips, priority by seq parity
            sched.submit(replicated(f"j{seq}", b, a, seq % 2, seq))
            seq += 1
        elif op == "cancel":
            sched.cancel(JobKey(f"j{a}"))
        else:
            order = {j.key: j.order() for j in sched.queued()}
            result = sched.cycle()
            positions = [pos for _, _, pos in result.pending]
            assert positions == list(range(1, len(positions) + 1))
            assert all(isinstance(n, NoFit) for _, n, _ in result.pending)
            if result.reserved is not None:
                # Nothing queued behind the reserving job was placed in its domain ...
                holder, _, domain = result.reserved
                for key, placement in result.admitted:
                    if order[key] > order[holder]:
                        assert not set(placement.ultraservers) & set(domain)
            # ... and the hold ends with the cycle.
            names = [u.name for u in sched.allocator.topology.ultraservers]
            assert all(u.schedulable for u in sched.allocator.topology.ultraservers), names
        allocations = sched.allocator.allocations()
        # Gang all-or-nothing: a running job holds every one of its parts, nothing else holds.
        assert set(allocations) == {p for j in sched.running().values() for p in j.parts()}
        seen: set[str] = set()
        for key, placement in allocations.items():
            owner = sched.owner(key)
            assert owner is not None
            assert len(placement.chip_ids) == sched.running()[owner].request.chips
            assert len(placement.ultraservers) == 1  # never across the required level
            assert seen.isdisjoint(placement.chip_ids)
            seen.update(placement.chip_ids)
        assert set(sched.running()).isdisjoint(j.key for j in sched.queued())


class _Forgetful(dict):  # type: ignore[type-arg]
    """A no-fit memo (`CycleState.failed`) that never remembers: every request is searched
    again."""

    def __setitem__(self, key: object, value: object) -> None:
        pass


@settings(max_examples=200, deadline=None)
@given(ops)
def test_the_no_fit_memo_changes_no_decision(steps: list[tuple[str, int, int]]) -> None:
    # Within a cycle a request that did not fit is not searched again; with the memo disabled
    # every cycle must decide exactly the same (admissions, placements, preemptions, pending).
    memo, plain = fleet(2), fleet(2)
    plain._state.failed = _Forgetful()
    seq = 0
    for op, a, b in steps:
        for sched in (memo, plain):
            if op == "submit":
                sched.submit(job(f"j{seq}", a, b, seq))
            elif op == "replicas":
                sched.submit(replicated(f"j{seq}", b, a, seq % 2, seq))
            elif op == "cancel":
                sched.cancel(JobKey(f"j{a}"))
        if op in ("submit", "replicas"):
            seq += 1
        if op != "cycle":
            continue
        got, want = memo.cycle(), plain.cycle()
        assert got.admitted == want.admitted
        assert got.admitted_replicas == want.admitted_replicas
        assert got.preempted == want.preempted
        assert [(k, n.kind, p) for k, n, p in got.pending] == [
            (k, n.kind, p) for k, n, p in want.pending]
