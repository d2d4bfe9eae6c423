"""Tenant queues in the scheduling cycle: quota, borrowing, weighted fair share and reclaim.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each), drawn above each case.
"""

from __future__ import annotations

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.quotas import INADMISSIBLE, NO_QUOTA, QueueSpec, QuotaBook, equal_shares
from ultraplane.scheduling.admissions import Admissions
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"


def queues(*specs: QueueSpec, count: int = 2) -> Admissions:
    return Admissions(Allocator(build_fleet(GEN2, count)), reservation=False,
                      quotas=QuotaBook(list(specs)))


def q(name: str, chips: int, **kw: object) -> QueueSpec:
    return QueueSpec(name, {GEN2: chips}, cohort=kw.pop("cohort", "all"), **kw)  # type: ignore[arg-type]


_seq = iter(range(1_000_000))


def job(key: str, queue: str | None, chips: int, priority: int = 0) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=chips, required_level="ultraserver"),
                     priority, next(_seq), queue=queue)


def run(adm: Admissions, *jobs: QueuedJob) -> tuple[list[str], dict[str, str], list[tuple[str, str]]]:
    for j in jobs:
        adm.submit(j)
    d = adm.cycle(0.0)
    return ([a.key for a in d.admitted], {p.key: p.reason for p in d.pending},
            [(p.key, p.by) for p in d.preempted])


def test_within_nominal_admitted_and_over_it_waits_without_a_cohort() -> None:
    # gen2-0000 [ a1 72 | a2 72 ]  gen2-0001 [ 144 idle ]   A: nominal 144, no cohort
    adm = queues(QueueSpec("A", {GEN2: 144}))
    admitted, pending, _ = run(adm, job("a1", "A", 72), job("a2", "A", 72), job("a3", "A", 4))
    assert admitted == ["a1", "a2"]
    assert pending == {"a3": NO_QUOTA}
    assert adm.quotas is not None and adm.quotas.used("A") == 144


def test_borrows_idle_cohort_quota_up_to_its_borrowing_limit() -> None:
    # gen2-0000 [ a1 144 ]  gen2-0001 [ a2 72 | idle 72 ]   A, B: nominal 144 each; B idle
    adm = queues(q("A", 144, borrowing_limit=72), q("B", 144))
    admitted, pending, _ = run(adm, job("a1", "A", 144), job("a2", "A", 72), job("a3", "A", 4))
    assert admitted == ["a1", "a2"]
    assert pending == {"a3": NO_QUOTA}
    assert adm.quotas is not None and adm.quotas.borrowed("A") == 72


def test_lending_limit_keeps_the_rest_of_the_lenders_quota() -> None:
    # B lends 36 of its 144: A may go to 180, not beyond.
    adm = queues(q("A", 144), q("B", 144, lending_limit=36))
    admitted, pending, _ = run(adm, job("a1", "A", 144), job("a2", "A", 36), job("a3", "A", 4))
    assert admitted == ["a1", "a2"] and pending == {"a3": NO_QUOTA}


def test_unknown_queue_waits_with_a_reason() -> None:
    adm = queues(q("A", 144))
    d = (adm.submit(job("x", "nope", 4)), adm.cycle(0.0))[1]
    assert d.pending[0].reason == INADMISSIBLE and "does not exist" in d.pending[0].message


def test_reclaim_evicts_a_whole_domain_of_borrowers_never_scattered_chips() -> None:
    # gen2-0000 [ a1 72 | a2 72 ]   gen2-0001 [ a3 72 | a4 72 ]   A: 144 nominal, borrowing 144
    # B (nominal 144) submits 144 chips: both jobs of ONE UltraServer go (the most recent
    # pair, a3 and a4), never one from each (288 - 144 free chips scattered over two).
    adm = queues(q("A", 144), q("B", 144))
    for k in ("a1", "a2", "a3", "a4"):
        run(adm, job(k, "A", 72))
    admitted, _, preempted = run(adm, job("b1", "B", 144))
    assert admitted == ["b1"]
    assert sorted(preempted) == [("a3", "b1"), ("a4", "b1")]
    assert adm.placements(JobKey("b1"))[0].ultraservers == ("gen2-0001",)


def test_reclaim_takes_the_lowest_priority_then_the_most_recent_borrower() -> None:
    # gen2-0000 [ a1 p5 144 ]  gen2-0001 [ a2 p0 144 ]  -> B reclaims 144: a2 (lower priority)
    adm = queues(q("A", 144), q("B", 144))
    run(adm, job("a1", "A", 144, priority=5))
    run(adm, job("a2", "A", 144, priority=0))
    assert run(adm, job("b1", "B", 144))[2] == [("a2", "b1")]
    # equal priorities: the most recently admitted goes
    adm = queues(q("A", 144), q("B", 144))
    run(adm, job("a1", "A", 144))
    run(adm, job("a2", "A", 144))
    assert run(adm, job("b1", "B", 144))[2] == [("a2", "b1")]


def test_no_reclaim_beyond_nominal_nor_under_policy_never() -> None:
    adm = queues(q("A", 144), q("B", 144))
    run(adm, job("a1", "A", 144), job("a2", "A", 144))
    # B asks for more than its nominal quota: it can only borrow, never reclaim.
    assert run(adm, job("b1", "B", 288))[1] == {"b1": NO_QUOTA}
    adm = queues(q("A", 144), q("B", 144, reclaim_within_cohort="Never"))
    run(adm, job("a1", "A", 144), job("a2", "A", 144))
    admitted, pending, preempted = run(adm, job("b1", "B", 144))
    assert (admitted, preempted) == ([], []) and pending == {"b1": "NoCapacity"}


def test_lower_priority_reclaim_spares_higher_priority_borrowers() -> None:
    adm = queues(q("A", 144), q("B", 144, reclaim_within_cohort="LowerPriority"))
    run(adm, job("a1", "A", 144, priority=9), job("a2", "A", 144, priority=9))
    assert run(adm, job("b1", "B", 144, priority=1))[2] == []
    assert run(adm, job("b2", "B", 144, priority=10))[2] != []


def test_priority_preempts_only_inside_the_queue() -> None:
    # gen2-0000 [ a1 p0 144 ]  gen2-0001 [ b1 p0 144 ]   both within nominal
    adm = queues(q("A", 288), q("B", 144), count=2)
    run(adm, job("a1", "A", 144), job("b1", "B", 144))
    # a high-priority job of A takes A's own low-priority chips, never B's (within nominal)
    admitted, _, preempted = run(adm, job("a2", "A", 144, priority=100))
    assert admitted == ["a2"] and preempted == [("a1", "a2")]
    adm = queues(q("A", 288), q("B", 144), count=2)
    run(adm, job("b1", "B", 144), job("a1", "A", 144, priority=0))
    admitted, _, preempted = run(adm, job("b2", "B", 144, priority=100))
    assert preempted == [] or preempted == [("b1", "b2")]


def test_borrowed_capacity_is_split_by_weight() -> None:
    # 3 UltraServers (432 chips); C holds 288 nominal but is idle; A (weight 2) and B
    # (weight 1) each hold 72 nominal and queue many 4-chip jobs: of the 288 idle chips A
    # borrows two thirds and B one third.
    adm = queues(q("A", 72, weight=2.0), q("B", 72), q("C", 288), count=3)
    jobs = [job(f"{t}{i}", t, 4) for i in range(100) for t in ("A", "B")]
    run(adm, *jobs)
    book = adm.quotas
    assert book is not None
    assert book.borrowed("A") == 192 and book.borrowed("B") == 96


def test_a_borrower_goes_beside_borrowers_not_into_a_hole_beside_a_guaranteed_job() -> None:
    # gen2-0000 [ b1 36 | c1 72 | 36 free ]  gen2-0001 [ b2 72 | 72 free ]  gen2-0002 [ idle ]
    # A (288, idle) lends; B (72) borrows with b2. b3 (36, B still borrowing) would fit
    # gen2-0000's hole best, beside C's guaranteed c1: it goes beside b2, so gen2-0001 stays
    # one UltraServer of borrowers that a reclaim by A can free whole.
    adm = queues(q("A", 288), q("B", 72), q("C", 72), count=3)
    run(adm, job("b1", "B", 36))
    run(adm, job("c1", "C", 72))
    run(adm, job("b2", "B", 72))
    assert adm.placements(JobKey("b2"))[0].ultraservers == ("gen2-0001",)
    assert run(adm, job("b3", "B", 36))[0] == ["b3"]
    assert adm.placements(JobKey("b3"))[0].ultraservers == ("gen2-0001",)
    # A takes the idle UltraServer, then reclaims gen2-0001 whole (only B's jobs there go)
    assert run(adm, job("a1", "A", 144))[0] == ["a1"]
    admitted, _, preempted = run(adm, job("a2", "A", 144))
    assert admitted == ["a2"] and sorted(preempted) == [("b2", "a2"), ("b3", "a2")]


def test_a_guaranteed_gang_smaller_than_an_ultraserver_reserves_one_to_drain() -> None:
    # gen2-0000 [ b1 108 (ends at 1000) | 36 free ]  gen2-0001 [ b2 108 (ends at 5000) | 36 free ]
    # A's whole nominal quota (72) is unused, but as 36 free chips on each UltraServer, and no
    # borrower runs to reclaim: a1 (72) reserves gen2-0000, the one that drains first. A job
    # queued behind it (b3, which borrows A's idle quota) goes to gen2-0001, not into the
    # reserved UltraServer's hole, and a1 starts there when b1 ends.
    from dataclasses import replace

    adm = Admissions(Allocator(build_fleet(GEN2, 2)),
                     quotas=QuotaBook([q("A", 72), q("B", 216)]))
    for key, ends in (("b1", 1000.0), ("b2", 5000.0)):
        adm.submit(replace(job(key, "B", 108), expected_s=ends))
        adm.cycle(0.0)
    adm.submit(job("a1", "A", 72))
    adm.submit(replace(job("b3", "B", 36), expected_s=10_000.0))
    d = adm.cycle(0.0)
    assert d.reservation is not None and d.reservation.key == "a1"
    assert d.reservation.ultraservers == ("gen2-0000",)
    assert [a.key for a in d.admitted] == ["b3"]
    assert adm.placements(JobKey("b3"))[0].ultraservers == ("gen2-0001",)
    adm.withdraw(JobKey("b1"))
    d = adm.cycle(1000.0)
    assert [a.key for a in d.admitted] == ["a1"]
    assert adm.placements(JobKey("a1"))[0].ultraservers == ("gen2-0000",)


def test_each_queue_below_nominal_reserves_an_ultraserver_for_its_guarantee() -> None:
    # gen2-0000 [ b1 96 (ends at 1000) | 48 free ]  gen2-0001 [ b2 96 (ends at 2000) | 48 free ]
    # gen2-0002 [ b3 96 (ends at 5000) | 48 free ]
    # B runs at its nominal quota; A's and C's (72 each) are unused, but only as 48 free chips
    # per UltraServer, and no borrower runs to reclaim. a1 reserves gen2-0000 (it drains
    # first), c1 gen2-0001 (the next): one reservation per queue, not one per cycle. b4,
    # queued behind them (it borrows), goes to gen2-0002, not into c1's UltraServer.
    from dataclasses import replace

    adm = Admissions(Allocator(build_fleet(GEN2, 3)),
                     quotas=QuotaBook([q("A", 72), q("B", 288), q("C", 72)]))
    for key, ends in (("b1", 1000.0), ("b2", 2000.0), ("b3", 5000.0)):
        adm.submit(replace(job(key, "B", 96), expected_s=ends))
        adm.cycle(0.0)
    adm.submit(job("a1", "A", 72))
    adm.submit(job("c1", "C", 72))
    adm.submit(replace(job("b4", "B", 36), expected_s=10_000.0))
    d = adm.cycle(0.0)
    assert d.reservation is not None and d.reservation.key == "a1"
    assert d.reservation.ultraservers == ("gen2-0000",)
    said = {p.key: p.message for p in d.pending}
    assert "UltraServer gen2-0001 reserved for it" in said["c1"]
    assert [a.key for a in d.admitted] == ["b4"]
    assert adm.placements(JobKey("b4"))[0].ultraservers == ("gen2-0002",)
    adm.withdraw(JobKey("b1"))
    adm.withdraw(JobKey("b2"))
    d = adm.cycle(2000.0)
    assert sorted(a.key for a in d.admitted) == ["a1", "c1"]


def test_guaranteed_jobs_of_the_queue_furthest_below_nominal_go_first() -> None:
    # A (nominal 72) already uses 36, B (nominal 72) nothing; both queue a 36-chip job within
    # nominal, A's first: B's is tried first (B would use half its quota, A all of its own).
    adm = queues(q("A", 72), q("B", 72), count=1)
    run(adm, job("a0", "A", 36))
    book = adm.quotas
    assert book is not None
    assert [j.key for j in book.arrange([job("a1", "A", 36), job("b1", "B", 36)])] == ["b1", "a1"]
    # a queue's own order holds: its second job comes after the other queue's first
    order = book.arrange([job("a2", "A", 4), job("b2", "B", 36), job("b3", "B", 36)])
    assert [j.key for j in order] == ["b2", "a2", "b3"]


def test_equal_shares_add_up_to_the_fleet() -> None:
    specs = equal_shares(["x", "y", "z"], {GEN2: 1000})
    assert [s.nominal[GEN2] for s in specs] == [334, 333, 333]
    assert {s.cohort for s in specs} == {"fleet"}


# -- properties ------------------------------------------------------------------------------
from dataclasses import replace as dc_replace  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ultraplane.placement.preemption import PreemptionPlan, plan_preemption  # noqa: E402
from ultraplane.scheduling.decisions import Decisions  # noqa: E402

SIZES = (4, 36, 72, 100, 144, 144, 288)
NAMES = ("A", "B", "C")

specs_st = st.lists(
    st.tuples(st.sampled_from((72, 144, 144, 216, 0)), st.one_of(st.none(), st.sampled_from((0, 72))),
              st.one_of(st.none(), st.sampled_from((0, 72))), st.sampled_from((1.0, 2.0)),
              st.sampled_from(("Any", "Any", "LowerPriority", "Never"))),
    min_size=2, max_size=3)
submit_st = st.tuples(st.just("submit"), st.sampled_from(NAMES), st.sampled_from(SIZES),
                      st.integers(0, 3))
steps_st = st.lists(st.one_of(submit_st, submit_st, submit_st, st.tuples(
    st.just("finish"), st.integers(0, 40), st.just(0), st.just(0))), min_size=4, max_size=30)


def _settle(adm: Admissions) -> Decisions:
    """Cycles until nothing moves (bounded): the state any later event starts from."""
    for _ in range(6):
        d = adm.cycle(0.0)
        if not d.admitted and not d.preempted:
            break
    return d


@settings(max_examples=150, deadline=None)
@given(specs_st, steps_st, st.booleans())
def test_quota_properties(raw: list[tuple[int, int | None, int | None, float, str]],
                          steps: list[tuple[str, str | int, int, int]], reservation: bool) -> None:
    specs = [QueueSpec(NAMES[i], {GEN2: n}, cohort="all", borrowing_limit=b, lending_limit=lend,
                       weight=w, reclaim_within_cohort=r)  # type: ignore[arg-type]
             for i, (n, b, lend, w, r) in enumerate(raw)]
    book = QuotaBook(specs)
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=reservation, quotas=book)
    keys: list[JobKey] = []
    for i, (what, arg, chips, prio) in enumerate(steps):
        if what == "submit":
            if arg not in book.queues:
                continue
            keys.append(JobKey(f"j{i}"))
            # a predicted run time for two in three: guaranteed gangs may then reserve
            adm.submit(dc_replace(job(f"j{i}", str(arg), chips, prio),
                                  expected_s=(None, 100.0, 5000.0)[i % 3]))
        elif keys:
            adm.withdraw(keys[int(arg) % len(keys)])
        settled = _settle(adm)
        for spec in specs:
            used = book.used(spec.name)
            # no queue exceeds nominal plus its borrowing limit
            if spec.borrowing_limit is not None:
                assert used <= spec.nominal[GEN2] + spec.borrowing_limit
            # the usage the book keeps is the allocator's
            held = sum(p.chips for k, j in adm.running().items() if j.queue == spec.name
                       for p in adm.placements(k))
            assert held == used
        # no job that fits one domain is split
        for k in adm.running():
            for p in adm.placements(k):
                assert len(p.ultraservers) == 1
        # a queue under nominal with waiting demand is never kept waiting by a borrower
        # once reclaim is possible: no domain frees for it by evicting borrowers now
        for w in adm.scheduler.queued():
            if not book.within_nominal(w):
                continue
            # (its own queue's lower-priority jobs are not borrowers: within-queue preemption
            # is a priority rule, not reclaim)
            victims = [v for v in book.victims(w) if v.queue != w.queue]
            spec = book.queues[str(w.queue)]
            if spec.reclaim_within_cohort == "Never":
                continue
            pool = {p: i - len(victims) for i, v in enumerate(victims) for p in v.parts()}
            plan = plan_preemption(adm.allocator, w.request, 0, pool)
            reserved = settled.reservation
            if isinstance(plan, PreemptionPlan) and reserved is not None and set(
                    plan.placement.ultraservers) & set(reserved.ultraservers):
                # chips it could use are held back by the EASY reservation, which only a job
                # within its own nominal quota gets ahead of it (never a borrower)
                assert book.within_nominal(
                    next(j for j in adm.scheduler.queued() if j.key == reserved.key)), (w, plan)
                continue
            assert not isinstance(plan, PreemptionPlan), (w, plan)
