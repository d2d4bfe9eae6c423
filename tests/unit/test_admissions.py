"""The scheduling driver: what follows from a cycle, as typed transitions.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each)."""

from __future__ import annotations

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.scheduling.admissions import Admissions, Admitted, Failed, Readopted, Requeued
from ultraplane.workloads import QueuedJob


def driver(count: int = 1) -> Admissions:
    return Admissions(Allocator(build_fleet("trn3-gen2", count)))


def job(key: str, chips: int, priority: int = 0, seq: int = 0, *, level: str = "ultraserver",
        whole: bool = False, replicas: int | None = None) -> QueuedJob:
    request = PlacementRequest(chips=chips, required_level=level, whole_servers=whole)
    return QueuedJob(JobKey(key), request, priority, seq, replicas=replicas)


def test_unsatisfiable_fails_and_is_not_counted_in_queue_positions() -> None:
    # gen2-0000 [full: a 144]   queue: never (500 > fleet), b (100), c (100)
    d = driver()
    d.submit(job("a", 144))
    d.cycle(0.0)
    d.submit(job("never", 500, seq=1, level="cluster"))
    d.submit(job("b", 100, seq=2))
    d.submit(job("c", 100, seq=3))
    decisions = d.cycle(0.0)
    assert decisions.failed == [Failed(JobKey("never"), "Unsatisfiable",
                                       decisions.failed[0].message)]
    assert [(p.key, p.position) for p in decisions.pending] == [("b", 1), ("c", 2)]
    assert not d.is_waiting(JobKey("never"))
    assert next(iter(decisions)) == decisions.failed[0]  # persist order: evictions first


def test_an_empty_fleet_fails_nothing() -> None:
    d = Admissions(Allocator(build_fleet("trn3-gen2", 1)))
    d.allocator.remove_ultraserver("gen2-0000")
    d.submit(job("a", 4))
    decisions = d.cycle(0.0)
    assert not decisions.failed and [p.key for p in decisions.pending] == ["a"]


def test_preemption_comes_before_the_admission_that_reuses_the_chips() -> None:
    d = driver()
    d.submit(job("low", 144))
    d.cycle(0.0)
    d.submit(job("high", 144, priority=5, seq=1))
    decisions = d.cycle(0.0)
    kinds = [type(t).__name__ for t in decisions]
    assert kinds == ["Preempted", "Admitted"]
    assert decisions.preempted[0].by == "high" and d.is_waiting(JobKey("low"))


def test_replicas_admitted_together_with_one_placement_each() -> None:
    d = driver(2)
    d.submit(job("serve", 100, replicas=2))
    (admitted,) = d.cycle(0.0).admitted
    assert admitted.replicated and len(admitted.placements) == 2
    assert len(set(admitted.chip_ids)) == 200


def test_submit_replaces_a_waiting_jobs_spec_but_not_a_running_one() -> None:
    # gen2-0000 [a 100 | 44 free]; w waits for 100 chips, then is edited to 40: it fits.
    d = driver()
    d.submit(job("a", 100))
    d.cycle(0.0)
    d.submit(job("w", 100, seq=1))
    assert [p.key for p in d.cycle(0.0).pending] == ["w"]
    assert d.submit(job("w", 40, seq=1))
    assert [a.key for a in d.cycle(0.0).admitted] == ["w"]
    assert not d.submit(job("w", 4, seq=1))  # it holds chips now: the edit waits


def test_readopt_all_replicas_or_requeue() -> None:
    d = driver(2)
    d.submit(job("serve", 100, replicas=2))
    (admitted,) = d.cycle(0.0).admitted
    chips = [p.chip_ids for p in admitted.placements]
    fresh = driver(2)
    assert isinstance(fresh.readopt(job("serve", 100, replicas=2), chips), Readopted)
    assert fresh.is_running(JobKey("serve"))
    other = driver(2)
    outcome = other.readopt(job("serve", 100, replicas=2), [chips[0], []])
    assert isinstance(outcome, Requeued) and other.is_waiting(JobKey("serve"))
    assert not other.allocator.allocations()  # the first replica was not kept either


def test_replace_affected_keeps_whole_servers_whole() -> None:
    # gen2-0000: s00-s01 [w w w w | w w w w], s02 [o . . .], rest free.
    # A chip of w fails: a swapped chip next to w would share s02 with o or split a server;
    # a whole-server job is placed afresh on whole servers instead.
    d = driver()
    d.submit(job("w", 8, whole=True))
    d.cycle(0.0)
    d.submit(job("o", 1, seq=1))
    d.cycle(0.0)
    lost = ChipId("gen2-0000/s00/c00")
    d.allocator.set_chip_failed(lost, True)
    replaced = d.replace(JobKey("w"), {JobKey("w"): [lost]})
    assert isinstance(replaced, Admitted)
    chips = replaced.chip_ids
    assert lost not in chips and len(chips) == 8
    servers = {c.rsplit("/", 1)[0] for c in chips}
    assert len(servers) == 2  # two whole servers of four chips
    o_server = {c.rsplit("/", 1)[0] for c in d.placements(JobKey("o"))[0].chip_ids}
    assert not servers & o_server


def test_reservation_skips_an_ultraserver_that_can_never_host_the_gang() -> None:
    # gen2-0000 [a 36 | 108 free]   gen2-0001 [143 free: one failed chip, no job]
    # big (144) waits: it can only ever start on gen2-0000 (a whole, sound UltraServer), so
    # that is what is reserved, not the one with more free chips; small (36) behind it
    # backfills on gen2-0001.
    d = driver(2)
    d.submit(job("a", 36))
    (a,) = d.cycle(0.0).admitted
    assert a.placements[0].ultraservers == ("gen2-0000",)
    d.allocator.set_chip_failed(ChipId("gen2-0001/s00/c00"), True)
    d.submit(job("big", 144, seq=1))
    d.submit(job("small", 36, seq=2))
    decisions = d.cycle(0.0)
    assert decisions.reservation is not None
    assert decisions.reservation.ultraservers == ("gen2-0000",)
    (small,) = decisions.admitted
    assert small.key == "small" and small.placements[0].ultraservers == ("gen2-0001",)


def test_a_pending_message_offers_no_release_where_no_job_runs() -> None:
    # gen2-0000 [no job; servers 0-8 cordoned: 108 usable]; a 120-chip job cannot fit.
    from ultraplane.hardware.topology import Topology, UltraServer
    from ultraplane.ids import UltraServerName

    us = UltraServer(UltraServerName("gen2-0000"), "trn3-gen2", ("block-000",),
                     cordoned_servers=frozenset(range(9)))
    d = Admissions(Allocator(Topology((us,))))
    d.submit(job("w", 120))
    (waiting,) = d.cycle(0.0).pending
    assert "releasing its jobs" not in waiting.message
    assert "runs no jobs" in waiting.message
