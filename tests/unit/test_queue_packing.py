"""Queue packing: a tenant queue's guaranteed jobs go to the UltraServers it already uses,
among those the allocator's best fit finds about as good (`ultraplane.placement.packings`).

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each, two racks of 18
servers); the jobs already running are re-adopted on the chips drawn above each case.
"""

from __future__ import annotations

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import ChipId, JobKey, chip_id
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.placement.packings import DEFAULT_SLACK, place_packed
from ultraplane.policies.quotas import QueueSpec, QuotaBook
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"
_seq = iter(range(1_000_000))


def chips(us: int, n: int) -> list[ChipId]:
    """The first `n` chips of UltraServer `us` (whole servers from server 0)."""
    return [chip_id(f"gen2-{us:04d}", c // 4, c % 4) for c in range(n)]


def job(key: str, queue: str | None, n: int) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=n, required_level="ultraserver"),
                     0, next(_seq), queue=queue)


def fleet(running: dict[str, tuple[str | None, int, int]], *, count: int = 2,
          packing: bool = True, queues: bool = True) -> Scheduler:
    """A scheduler whose `running` jobs (key -> (queue, UltraServer, chips)) hold their
    chips; queues A, B and C of 144 nominal chips each share one cohort."""
    book = QuotaBook([QueueSpec(q, {GEN2: 144}, cohort="all") for q in "ABC"]) if queues else None
    sched = Scheduler(Allocator(build_fleet(GEN2, count)), reservation=False, quotas=book,
                      queue_packing=packing)
    for key, (queue, us, n) in running.items():
        sched.restore_job(job(key, queue, n), chips(us, n))
    return sched


def placed_on(sched: Scheduler, new: QueuedJob) -> tuple[str, ...]:
    sched.submit(new)
    result = sched.cycle(0.0)
    assert [k for k, _ in result.admitted] == [new.key]
    return result.admitted[0][1].ultraservers


def test_a_queues_second_job_lands_on_its_ultraserver() -> None:
    # gen2-0000 [ b1 12 | 132 free ]   gen2-0001 [ a1 8 | 136 free ]
    # a2 (A, 8 chips): best fit alone takes the fuller gen2-0000, beside B; packed, it joins
    # a1 on gen2-0001 (4 more free chips: within the slack), and gen2-0000 keeps B's room.
    running = {"b1": ("B", 0, 12), "a1": ("A", 1, 8)}
    assert placed_on(fleet(running, packing=False), job("a2", "A", 8)) == ("gen2-0000",)
    assert placed_on(fleet(running), job("a2", "A", 8)) == ("gen2-0001",)


def test_the_ultraserver_with_most_of_the_queues_chips_first() -> None:
    # gen2-0000 [ b1 16 ]   gen2-0001 [ a1 12 ]   gen2-0002 [ a2 16 ]
    # a3 (A): gen2-0002 holds the most of A's chips and is as free as gen2-0000
    running = {"b1": ("B", 0, 16), "a1": ("A", 1, 12), "a2": ("A", 2, 16)}
    assert placed_on(fleet(running, count=3), job("a3", "A", 8)) == ("gen2-0002",)


def test_only_within_the_slack_never_a_freer_ultraserver() -> None:
    # gen2-0000 [ b1 12 | 132 free ]   gen2-0001 [ a1 4 | 140 free ]
    # 8 more free chips than best fit's choice is past the slack: a2 goes where best fit puts it
    assert DEFAULT_SLACK < 8
    running = {"b1": ("B", 0, 12), "a1": ("A", 1, 4)}
    assert placed_on(fleet(running), job("a2", "A", 8)) == ("gen2-0000",)


def test_borrowers_and_jobs_without_queues_are_placed_as_today() -> None:
    # gen2-0000 [ x1 12 ]   gen2-0001 [ x2 8 ]   no queue: best fit, with packing on or off
    running: dict[str, tuple[str | None, int, int]] = {"x1": (None, 0, 12), "x2": (None, 1, 8)}
    assert placed_on(fleet(running, queues=False), job("x3", None, 8)) == ("gen2-0000",)
    # A borrows (its 144 are in use on gen2-0000): packing is for guaranteed jobs only
    running = {"a1": ("A", 0, 144), "b1": ("B", 1, 12), "a2": ("A", 2, 8)}
    sched = fleet(running, count=3)
    assert placed_on(sched, job("a3", "A", 8)) == ("gen2-0002",)  # beside borrowers (apart)


def test_place_packed_changes_nothing_and_keeps_the_level() -> None:
    # gen2-0000 [ 8 ]   gen2-0001 [ 4 ]: a 4-chip request fits one server on either
    allocator = Allocator(build_fleet(GEN2, 2))
    allocator.assign(JobKey("x"), chips(0, 8))
    allocator.assign(JobKey("y"), chips(1, 4))
    request = PlacementRequest(chips=4, required_level="ultraserver")
    names = ("gen2-0000", "gen2-0001")
    before = dict(allocator.allocations())
    today = allocator.place_without(request, (), names)
    packed = place_packed(allocator, request, names, {"gen2-0001": 4})
    assert not isinstance(today, type(None)) and not isinstance(packed, type(None))
    assert today.ultraservers == ("gen2-0000",)
    assert packed.ultraservers == ("gen2-0001",) and packed.level == today.level
    assert place_packed(allocator, request, names, {}) == today
    assert dict(allocator.allocations()) == before
