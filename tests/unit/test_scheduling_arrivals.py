"""Cycles that only try new arrivals decide exactly what a full cycle over the queue would.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each), two per network
block, so gangs of several UltraServers and their reservations are in play."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.quotas import QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions, Pending
from ultraplane.scheduling.decisions import Decisions
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob


def scheduler(count: int = 4, *, reservation: bool = True) -> Scheduler:
    return Scheduler(Allocator(build_fleet("trn3-gen2", count, per_block=2)),
                     reservation=reservation)


class CountingAllocator(Allocator):
    """An allocator that counts the placement searches a cycle asks of it."""

    searches = 0

    def allocate(self, job: JobKey, request: PlacementRequest) -> Any:
        self.searches += 1
        return super().allocate(job, request)


def test_a_cycle_over_a_deep_queue_tries_only_the_new_arrivals() -> None:
    # gen2-0000..0003 [all 576 chips held by `load`]   queue: 300 jobs of 576 chips, waiting
    allocator = CountingAllocator(build_fleet("trn3-gen2", 4, per_block=4))
    sched = Scheduler(allocator)
    sched.submit(QueuedJob(JobKey("load"), PlacementRequest(chips=576), seq=0))
    for i in range(300):
        sched.submit(QueuedJob(JobKey(f"q{i:03d}"), PlacementRequest(chips=576), seq=1 + i))
    first = sched.cycle()
    assert [k for k, _ in first.admitted] == ["load"]
    before = allocator.searches
    sched.submit(QueuedJob(JobKey("late"), PlacementRequest(chips=576), seq=400))
    sched.submit(QueuedJob(JobKey("tiny"), PlacementRequest(chips=1), seq=401))
    second = sched.cycle()
    assert allocator.searches - before <= 2  # the two arrivals (the shape cache may save one)
    assert second.admitted == []
    assert [(k, p) for k, _, p in second.pending][-2:] == [("late", 301), ("tiny", 302)]
    assert len(second.pending) == 302
    # Chips freed: the next cycle looks at every job again and admits the oldest.
    sched.cancel(JobKey("load"))
    third = sched.cycle()
    assert [k for k, _ in third.admitted] == ["q000"]
    assert [(k, p) for k, _, p in third.pending][:1] == [("q001", 1)]


def test_an_arrival_ahead_of_waiting_jobs_gets_a_full_cycle() -> None:
    # gen2-0000 [100 used | 44 free]   queue: a(100, p0); then b(40, p5) arrives ahead of it
    sched = scheduler(1)
    sched.submit(QueuedJob(JobKey("r"), PlacementRequest(chips=100), seq=0))
    sched.submit(QueuedJob(JobKey("a"), PlacementRequest(chips=100), seq=1))
    sched.cycle()
    sched.submit(QueuedJob(JobKey("b"), PlacementRequest(chips=40), priority=5, seq=2))
    result = sched.cycle()
    assert [k for k, _ in result.admitted] == ["b"]
    assert [(k, p) for k, _, p in result.pending] == [("a", 1)]


# -- the property: twin schedulers, one carrying the last cycle over, one always full ----------

@dataclass(frozen=True)
class Submit:
    chips: int
    priority: int
    mode: str | None
    replicas: int | None
    expected_s: float | None
    queue: str | None = None  # a tenant queue, where the scheduler has them


@dataclass(frozen=True)
class Cancel:
    index: int


@dataclass(frozen=True)
class Edit:
    index: int
    priority: int


@dataclass(frozen=True)
class Expect:
    index: int
    end: float


@dataclass(frozen=True)
class Break:
    chip: int
    failed: bool


@dataclass(frozen=True)
class Cycle:
    timed: bool


SUBMITS = st.builds(Submit, chips=st.sampled_from([1, 4, 40, 100, 144, 200, 288, 432, 720]),
              priority=st.integers(0, 2),
              mode=st.sampled_from([None, None, "SplitWhenItPays", "Unconstrained"]),
              replicas=st.sampled_from([None, None, None, 2]),
              expected_s=st.sampled_from([None, 60.0, 600.0, 6000.0]),
              queue=st.sampled_from([None, "a", "a", "b"]))
CYCLES = st.builds(Cycle, timed=st.booleans())
OPS = st.one_of(
    SUBMITS, SUBMITS, SUBMITS, CYCLES, CYCLES,
    st.builds(Cancel, index=st.integers(0, 40)),
    st.builds(Edit, index=st.integers(0, 40), priority=st.integers(0, 3)),
    st.builds(Expect, index=st.integers(0, 40), end=st.sampled_from([50.0, 500.0, 5000.0])),
    st.builds(Break, chip=st.integers(0, 4 * 144 - 1), failed=st.booleans()),
)


def decided(decisions: Decisions) -> tuple[Any, ...]:
    """What must agree: who holds which chips, who was evicted or failed, who waits where, the
    reservation (pending messages may be the last full cycle's)."""
    return (
        [(a.key, a.chip_ids) for a in decisions.admitted],
        [(p.key, p.by) for p in decisions.preempted],
        [(f.key, f.reason) for f in decisions.failed],
        [(p.key, p.reason, p.position) for p in decisions.pending],
        decisions.reservation and (decisions.reservation.key, decisions.reservation.ultraservers,
                                   decisions.reservation.start),
    )


def tenant_queues() -> QuotaBook:
    """Two queues sharing the 4 UltraServers (576 chips) in one cohort; `b` borrows at most one."""
    return QuotaBook([QueueSpec("a", {"trn3-gen2": 288}, cohort="lab"),
                      QueueSpec("b", {"trn3-gen2": 288}, cohort="lab", borrowing_limit=144,
                                weight=2.0)])


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(OPS, min_size=8, max_size=60), reservation=st.booleans(),
       queues=st.booleans())
def test_carrying_the_last_cycle_over_decides_what_a_full_cycle_would(
    ops: list[Any], reservation: bool, queues: bool
) -> None:
    def admissions() -> Admissions:
        return Admissions(Allocator(build_fleet("trn3-gen2", 4, per_block=2)),
                          reservation=reservation, quotas=tenant_queues() if queues else None)

    carried, full = admissions(), admissions()
    keys: list[JobKey] = []
    clock = 0.0
    chips = [ChipId(f"gen2-{u:04d}/s{s:02d}/c{c:02d}") for u in range(4) for s in range(36)
             for c in range(4)]
    listed: dict[JobKey, Pending] = {}
    for op in ops:
        for sched in (carried.scheduler, full.scheduler):
            if isinstance(op, Submit):
                key = JobKey(f"j{len(keys)}")
                request = PlacementRequest(chips=op.chips, mode=op.mode)  # type: ignore[arg-type]
                sched.submit(QueuedJob(key, request, op.priority, len(keys), True, op.replicas,
                                       op.expected_s, queue=op.queue))
            elif isinstance(op, Cancel) and keys:
                sched.cancel(keys[op.index % len(keys)])
            elif isinstance(op, Edit) and keys:
                key = keys[op.index % len(keys)]
                queued = {j.key: j for j in sched.queued()}.get(key)
                if queued is not None:
                    sched.submit(QueuedJob(key, queued.request, op.priority, queued.seq,
                                           True, queued.replicas, queued.expected_s,
                                           queue=queued.queue))
            elif isinstance(op, Expect) and keys:
                sched.expect_end(keys[op.index % len(keys)], clock + op.end)
            elif isinstance(op, Break):
                sched.allocator.set_chip_failed(chips[op.chip], op.failed)
        if isinstance(op, Submit):
            keys.append(JobKey(f"j{len(keys)}"))
        if isinstance(op, Cycle):
            clock += 100.0
            # `Admissions.cycle` always takes a clock (no adapter may run without predictions)
            now = clock
            full.scheduler._carryover.forget()  # the twin always runs the full cycle
            got = carried.cycle(now)
            assert decided(got) == decided(full.cycle(now))
            assert dict(carried.allocator.allocations()) == dict(full.allocator.allocations())
            # `fresh`: every waiting job's entry is new, or the very object of the last cycle
            fresh = {id(p) for p in got.fresh}
            assert all(id(p) in fresh or listed.get(p.key) is p for p in got.pending)
            assert fresh <= {id(p) for p in got.pending}
            listed = {p.key: p for p in got.pending}


# -- the per-cycle shortcuts (a request that already failed, one no domain can be reserved
# for) decide what the full path for every job would ----------------------------------------

class _Unremembering(set):  # type: ignore[type-arg]
    """A memo of unreservable requests that never remembers one."""

    def add(self, item: object) -> None:
        pass


class EveryJobInFull(Scheduler):
    """A scheduler that takes no per-cycle shortcut: every waiting job goes the whole way
    (placement, split, backfill, reservation attempt) on every cycle."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reservations.unreservable = _Unremembering()

    def _settled(self, job: QueuedJob, known: Any, result: Any) -> bool:
        return False


class CountingReleases(Scheduler):
    """A scheduler that counts its scans of every allocation for predicted ends."""

    scans = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        releases = self._roster.releases

        def counted() -> dict[str, list[tuple[float, int]]]:
            self.scans += 1
            return releases()

        self._roster.releases = counted  # type: ignore[method-assign]


def test_a_deep_queue_of_small_jobs_makes_no_reservation_attempt_each() -> None:
    # gen2-0000..0003 [each: 143 chips held, 1 free]   queue: 400 jobs of 4 chips, waiting
    # (gangs smaller than one UltraServer never get a reservation, so no job's attempt can
    # change anything: the predicted ends of the running jobs are not even looked at)
    sched = CountingReleases(Allocator(build_fleet("trn3-gen2", 4, per_block=2)))
    for u in range(4):
        sched.submit(QueuedJob(JobKey(f"load{u}"), PlacementRequest(chips=143), seq=u,
                               expected_s=600.0))
    for i in range(400):
        sched.submit(QueuedJob(JobKey(f"q{i:03d}"), PlacementRequest(chips=4 + i % 3),
                               seq=10 + i, expected_s=60.0))
    result = sched.cycle(now=0.0)
    assert len(result.admitted) == 4 and len(result.pending) == 400
    assert result.reserved is None
    assert sched.scans == 0
    sched.cancel(JobKey("load0"))  # room: a full cycle, still no scan
    result = sched.cycle(now=10.0)
    assert len(result.admitted) == 29  # the 144 chips of gen2-0000: (4 + 5 + 6) x 9 + 4 + 5
    assert sched.scans == 0


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OPS, min_size=8, max_size=60), reservation=st.booleans())
# Found by this property: a replicated gang with no reservation (gen2-0000 has a failed chip,
# so no block has two sound UltraServers for each replica) got one on gen2-0000 as soon as a
# predicted end let the EASY pass rank domains by drain time, which a carrying cycle never
# recomputes. The EASY pass and the allocator now choose among the same sound UltraServers.
@example(ops=[Submit(100, 0, None, None, None), Submit(1, 0, None, None, None),
              Submit(1, 0, None, None, None), Break(0, True), Submit(200, 0, None, 2, None),
              Cycle(True), Submit(1, 0, None, None, None), Expect(0, 50.0), Cycle(True)],
         reservation=True)
def test_the_cycles_shortcuts_decide_what_the_whole_path_for_every_job_would(
    ops: list[Any], reservation: bool
) -> None:
    fast = Admissions(Allocator(build_fleet("trn3-gen2", 4, per_block=2)),
                      reservation=reservation)
    slow = Admissions(Allocator(build_fleet("trn3-gen2", 4, per_block=2)),
                      reservation=reservation)
    slow.scheduler = EveryJobInFull(slow.allocator, reservation=reservation)
    keys: list[JobKey] = []
    clock = 0.0
    chips = [ChipId(f"gen2-{u:04d}/s{s:02d}/c{c:02d}") for u in range(4) for s in range(36)
             for c in range(4)]
    for op in ops:
        for sched in (fast.scheduler, slow.scheduler):
            if isinstance(op, Submit):
                request = PlacementRequest(chips=op.chips, mode=op.mode)  # type: ignore[arg-type]
                sched.submit(QueuedJob(JobKey(f"j{len(keys)}"), request, op.priority, len(keys),
                                       True, op.replicas, op.expected_s))
            elif isinstance(op, Cancel) and keys:
                sched.cancel(keys[op.index % len(keys)])
            elif isinstance(op, Expect) and keys:
                sched.expect_end(keys[op.index % len(keys)], clock + op.end)
            elif isinstance(op, Break):
                sched.allocator.set_chip_failed(chips[op.chip], op.failed)
        if isinstance(op, Submit):
            keys.append(JobKey(f"j{len(keys)}"))
        if isinstance(op, Cycle):
            clock += 100.0
            # `Admissions.cycle` always takes a clock (no adapter may run without predictions)
            now = clock
            slow.scheduler._carryover.forget()  # and no carried-over cycle either
            assert decided(fast.cycle(now)) == decided(slow.cycle(now))
            assert dict(fast.allocator.allocations()) == dict(slow.allocator.allocations())


# -- what may move between carried cycles: the reservation's predicted start, tenant queues --

def test_a_reservation_whose_predicted_start_moves_still_carries_the_queue_over() -> None:
    # gen2-0000..0001 [load: 288 chips, predicted to end at 10,000 s]  gen2-0002..0003 [free]
    # queue: 300 jobs of 576 chips (the whole fleet): the first reserves all four UltraServers;
    # the others, though short, fit nowhere even there, whenever the reservation starts
    allocator = CountingAllocator(build_fleet("trn3-gen2", 4, per_block=4))
    sched = Scheduler(allocator)
    sched.submit(QueuedJob(JobKey("load"), PlacementRequest(chips=288), seq=0))
    sched.cycle(now=0.0)
    sched.expect_end(JobKey("load"), 10_000.0)
    for i in range(300):
        sched.submit(QueuedJob(JobKey(f"q{i:03d}"), PlacementRequest(chips=576), seq=1 + i,
                               expected_s=600.0))
    first = sched.cycle(now=1.0)
    assert first.reservation_start == 10_000.0
    before = allocator.searches
    sched.expect_end(JobKey("load"), 10_500.0)  # re-estimated from its progress
    sched.submit(QueuedJob(JobKey("late"), PlacementRequest(chips=576), seq=400,
                           expected_s=600.0))
    second = sched.cycle(now=2.0)
    assert second.carried == 300  # the queue carried over, only `late` tried
    assert second.reservation_start == 10_500.0
    assert allocator.searches - before <= 1
    assert [(k, p) for k, _, p in second.pending][-1] == ("late", 301)


def test_a_later_start_that_lets_a_waiting_job_backfill_gets_a_full_cycle() -> None:
    # gen2-0000..0001 [load: 288 chips, predicted to end at 1,000 s]  gen2-0002..0003 [free]
    # queue: big (576, reserves all four from 1,000 s), short (288 for 1,500 s: ends after
    # the reservation starts, so it may not backfill the two free UltraServers)
    sched = scheduler(4)
    sched.submit(QueuedJob(JobKey("load"), PlacementRequest(chips=288), seq=0))
    sched.cycle(now=0.0)
    sched.expect_end(JobKey("load"), 1_000.0)
    sched.submit(QueuedJob(JobKey("big"), PlacementRequest(chips=576), seq=1, expected_s=60.0))
    sched.submit(QueuedJob(JobKey("short"), PlacementRequest(chips=288), seq=2,
                           expected_s=1_500.0))
    first = sched.cycle(now=0.0)
    assert [k for k, _, _ in first.pending] == ["big", "short"] and first.admitted == []
    # the load's end moves to 5,000 s: `short` now ends before the reservation starts
    sched.expect_end(JobKey("load"), 5_000.0)
    second = sched.cycle(now=10.0)
    assert second.carried is None
    assert [k for k, _ in second.admitted] == ["short"]
    assert "backfilled" in second.notes[JobKey("short")]


def test_with_tenant_queues_a_deep_queue_is_carried_over_too() -> None:
    # gen2-0000..0003 [load: 576 chips, outside the queues]
    # queue: 300 jobs of queue b (432 chips: over its 288 nominal, borrowing a's idle half)
    allocator = CountingAllocator(build_fleet("trn3-gen2", 4, per_block=4))
    sched = Scheduler(allocator, quotas=tenant_queues())
    sched.submit(QueuedJob(JobKey("load"), PlacementRequest(chips=576), seq=0))
    sched.cycle(now=0.0)
    for i in range(300):
        sched.submit(QueuedJob(JobKey(f"b{i:03d}"), PlacementRequest(chips=432), seq=1 + i,
                               queue="b"))
    sched.cycle(now=1.0)  # the whole queue, arranged by fair share once
    sched.submit(QueuedJob(JobKey("late"), PlacementRequest(chips=432), seq=400, queue="b"))
    second = sched.cycle(now=2.0)
    assert second.carried == 300
    assert [(k, p) for k, _, p in second.pending][-1] == ("late", 301)
    # queue a is below its nominal quota: fair share tries its job before every borrower,
    # so the queue is arranged again and it waits first
    sched.submit(QueuedJob(JobKey("a-small"), PlacementRequest(chips=4), seq=401, queue="a"))
    third = sched.cycle(now=3.0)
    assert third.carried is None
    assert third.pending[0][0::2] == ("a-small", 1)


def test_every_queue_s_reservation_holds_back_the_arrivals_of_a_carried_cycle() -> None:
    # gen2-0000 [100 of 144 used]  gen2-0001 [100 of 144 used]  gen2-0002, 0003 [full]
    # (all of it outside the queues); then a1 (queue a) and b1 (queue b), 144 chips each and
    # within their queues' nominal quota, each reserve an UltraServer to drain: both of
    # gen2-0000 and 0001 are held back, and `late` (40 chips, queue a) fits nowhere else
    def twin() -> Admissions:
        return Admissions(Allocator(build_fleet("trn3-gen2", 4, per_block=4)),
                          quotas=tenant_queues())

    carried, full = twin(), twin()
    for admissions in (carried, full):
        sched = admissions.scheduler
        for i, chips in enumerate((100, 100, 144, 144)):
            sched.submit(QueuedJob(JobKey(f"load{i}"), PlacementRequest(chips=chips), seq=i))
        admissions.cycle(0.0)
        sched.submit(QueuedJob(JobKey("a1"), PlacementRequest(chips=144), seq=10, queue="a"))
        sched.submit(QueuedJob(JobKey("b1"), PlacementRequest(chips=144), seq=11, queue="b"))
    for now in (1.0, 2.0):
        if now == 2.0:
            for admissions in (carried, full):
                admissions.scheduler.submit(QueuedJob(JobKey("late"), PlacementRequest(chips=40),
                                                      seq=12, queue="a"))
        full.scheduler._carryover.forget()
        got = carried.cycle(now)
        assert decided(got) == decided(full.cycle(now))
    assert [p.key for p in got.pending] == ["a1", "b1", "late"]
