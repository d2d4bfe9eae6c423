"""EASY backfilling and split-only-when-it-pays, on small drawn fleets (Scheduler.cycle(now)).

Drawing legend (Trn3 Gen2: 144 chips per UltraServer): each UltraServer as
`[name: used chips by job (ends at t)]`; `.` free chips. Blocks are network-1 groups.
Predicted ends are given with `expect_end`, as the replay does; `now` is the cycle's clock.
"""

from __future__ import annotations

import pytest

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey, chip_id
from ultraplane.placement.allocator import Allocator, Placement, PlacementRequest
from ultraplane.scheduling.predictions import earliest_start, split_slowdown
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob


def fleet(count: int, *, per_block: int = 16) -> Scheduler:
    return Scheduler(Allocator(build_fleet("trn3-gen2", count, per_block=per_block)))


def hold(sched: Scheduler, key: str, us: int, chips: int, end: float | None) -> None:
    """A running job on the first `chips` chips of UltraServer `us`, ending at `end`."""
    name = f"gen2-{us:04d}"
    ids = [chip_id(name, c // 4, c % 4) for c in range(chips)]
    sched.restore(JobKey(key), ids, request=PlacementRequest(chips=chips))
    sched.expect_end(JobKey(key), end)


def job(key: str, chips: int, seq: int, expected_s: float | None, **kw: object) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=chips, **kw),  # type: ignore[arg-type]
                     seq=seq, expected_s=expected_s)


# -- the model ------------------------------------------------------------------------------
def test_split_slowdown_is_the_simulators_model() -> None:
    from ultraplane.simulator.fleets import hardware
    from ultraplane.simulator.models import spread_slowdown

    hw = hardware("trn3-gen2")
    for chips, level in ((16, "network-1"), (128, "cluster"), (72, "ultraserver"), (4, "rack")):
        assert split_slowdown("trn3-gen2", level, chips) == pytest.approx(
            spread_slowdown(hw, level, chips))
    # 16 chips fit one rack (256 GB/s per chip); split over EFA (25 GB/s per chip): 1.92x
    assert split_slowdown("trn3-gen2", "network-1", 16) == pytest.approx(0.9 + 0.1 * 256 / 25)
    assert split_slowdown("trn3-gen2", "rack", 16) == 1.0


def test_earliest_start_adds_releases_in_end_order() -> None:
    # us-a: 40 free, jobs of 50 chips end at 100 and 300;  us-b: 10 free, 100 chips end at 200
    free = {"us-a": (40, [(300.0, 50), (100.0, 50)]), "us-b": (10, [(200.0, 100)])}
    assert earliest_start(free, 80, 0.0) == 100.0  # us-a: 40 + 50 at t=100
    assert earliest_start(free, 105, 0.0) == 200.0  # us-b: 10 + 100 at t=200 beats us-a's 300
    assert earliest_start(free, 40, 0.0) == 0.0
    assert earliest_start({"us-a": (0, [(float("inf"), 144)])}, 8, 0.0) == float("inf")


# -- EASY backfilling ---------------------------------------------------------------------
def test_reservation_goes_to_the_domain_that_drains_soonest() -> None:
    # gen2-0000 [a: 100 chips, ends t=5000 | 44 .]   gen2-0001 [b: 10 chips, ends t=500 | 134 .]
    # big (144 chips) waits: the freest UltraServer is gen2-0001 and so is the soonest to
    # drain; make gen2-0000 drain first and it wins despite fewer free chips.
    sched = fleet(2)
    hold(sched, "a", 0, 100, 400.0)
    hold(sched, "b", 1, 10, 5000.0)
    sched.submit(job("big", 144, 1, 1000.0))
    result = sched.cycle(now=0.0)
    assert result.reserved is not None and result.reserved[2] == ("gen2-0000",)
    assert result.reservation_start == 400.0
    pending = dict((k, n.message) for k, n, _ in result.pending)
    assert "predicted to start in" in pending[JobKey("big")]


def test_backfill_onto_the_reserved_domain_only_if_it_ends_before_the_reservation() -> None:
    # gen2-0000 [a: 100 chips, ends t=1000 | 44 .]   gen2-0001 [c: 144 chips, ends t=9000]
    # big (144) reserves gen2-0000 (starts t=1000). Behind it, at t=0:
    #   short (40 chips, 600 s)  -> ends t=600 < 1000: backfills onto gen2-0000
    #   long  (40 chips, 5000 s) -> ends t=5000 > 1000: waits, with the numbers
    sched = fleet(2)
    hold(sched, "a", 0, 100, 1000.0)
    hold(sched, "c", 1, 144, 9000.0)
    sched.submit(job("big", 144, 1, 3600.0))
    sched.submit(job("long", 40, 2, 5000.0))
    sched.submit(job("short", 40, 3, 600.0))
    result = sched.cycle(now=0.0)
    assert result.reserved is not None and result.reserved[2] == ("gen2-0000",)
    admitted = dict(result.admitted)
    assert set(admitted) == {JobKey("short")}
    assert admitted[JobKey("short")].ultraservers == ("gen2-0000",)
    assert "predicted to end" in result.notes[JobKey("short")]
    pending = dict((k, n.message) for k, n, _ in result.pending)
    assert "after the reservation starts" in pending[JobKey("long")]


def test_a_caller_with_no_estimate_keeps_the_admission_time_prediction() -> None:
    # gen2-0000 [a: 100 chips, admitted at t=0 for 1000 s | 44 .]   gen2-0001 [c: 144, t=9000]
    # The operator says "unknown" (None) for a running job until it reports progress: the
    # scheduler keeps its own prediction (t=1000), so big's reservation still starts at 1000;
    # a real estimate from progress then moves it.
    sched = fleet(2)
    hold(sched, "c", 1, 144, 9000.0)
    sched.submit(job("a", 100, 1, 1000.0))
    assert set(dict(sched.cycle(now=0.0).admitted)) == {JobKey("a")}
    assert sched.expected_end(JobKey("a")) == 1000.0
    sched.expect_end(JobKey("a"), None)
    assert sched.expected_end(JobKey("a")) == 1000.0
    sched.submit(job("big", 144, 2, 3600.0))
    assert sched.cycle(now=10.0).reservation_start == 1000.0
    sched.expect_end(JobKey("a"), 700.0)
    assert sched.cycle(now=20.0).reservation_start == 700.0


def test_without_a_clock_nothing_backfills_onto_the_reservation() -> None:
    # the same fleet as above, but the caller gives no clock: the reserved UltraServer is
    # held back from every job behind the large one (the rule before predictions)
    sched = fleet(2)
    hold(sched, "a", 0, 100, 1000.0)
    hold(sched, "c", 1, 144, 9000.0)
    sched.submit(job("big", 144, 1, 3600.0))
    sched.submit(job("short", 40, 3, 600.0))
    result = sched.cycle()
    assert result.reserved is not None and not result.admitted


def test_backfill_elsewhere_is_free() -> None:
    # gen2-0000 [a: 100 chips, ends t=1000 | 44 .]   gen2-0001 [c: 100 chips, ends t=9000 | 44 .]
    # big reserves gen2-0000; a long job behind it still starts at once on gen2-0001
    sched = fleet(2)
    hold(sched, "a", 0, 100, 1000.0)
    hold(sched, "c", 1, 100, 9000.0)
    sched.submit(job("big", 144, 1, 3600.0))
    sched.submit(job("long", 40, 2, 50_000.0))
    result = sched.cycle(now=0.0)
    assert result.reserved is not None and result.reserved[2] == ("gen2-0000",)
    assert dict(result.admitted)[JobKey("long")].ultraservers == ("gen2-0001",)


# -- split only when it pays --------------------------------------------------------------
def split_fleet(end_a: float) -> Scheduler:
    # gen2-0000 [a: 136 chips, ends end_a | 8 .]   gen2-0001 [b: 136 chips, ends t=90000 | 8 .]
    # (one block): a 16-chip gang fits neither alone; split 8 + 8 over EFA is 1.92x slower.
    sched = fleet(2)
    hold(sched, "a", 0, 136, end_a)
    hold(sched, "b", 1, 136, 90_000.0)
    return sched


def test_split_when_the_wait_is_longer_than_the_slowdown_costs() -> None:
    # 1,000 s of work: a split costs 0.92 x 1,000 = 924 s; one UltraServer frees at t=5,000
    sched = split_fleet(5000.0)
    sched.submit(job("j", 16, 1, 1000.0, mode="SplitWhenItPays"))
    result = sched.cycle(now=0.0)
    placed = dict(result.admitted)[JobKey("j")]
    assert placed.ultraservers == ("gen2-0000", "gen2-0001")
    note = result.notes[JobKey("j")]
    assert "1.92x over 2 UltraServers" in note and "15.4 min" in note and "83.3 min" in note
    assert sched.expected_end(JobKey("j")) == pytest.approx(1000.0 * 1.924)


def test_wait_when_one_ultraserver_frees_up_sooner() -> None:
    # the same gang; gen2-0000 frees at t=300, sooner than the 924 s the split would cost
    sched = split_fleet(300.0)
    sched.submit(job("j", 16, 1, 1000.0, mode="SplitWhenItPays"))
    result = sched.cycle(now=0.0)
    assert not result.admitted
    (_, nofit, _), = result.pending
    assert "waiting for one UltraServer rather than splitting" in nofit.message
    assert "5.0 min" in nofit.message and "15.4 min" in nofit.message


def test_local_never_splits_and_unconstrained_always_does() -> None:
    sched = split_fleet(5000.0)
    sched.submit(job("local", 16, 1, 1000.0))
    sched.submit(job("free", 16, 2, 1.0, mode="Unconstrained"))
    result = sched.cycle(now=0.0)
    assert set(dict(result.admitted)) == {JobKey("free")}
    assert JobKey("free") not in result.notes  # no prediction decided it


def test_a_placement_counts_its_chips_per_ultraserver() -> None:
    placement = Placement.from_chip_ids(["gen2-0001/s00/c00", "gen2-0001/s00/c01",
                                         "gen2-0001/s03/c02", "gen2-0007/s35/c03"])
    assert placement.chips_by_ultraserver == (("gen2-0001", 3), ("gen2-0007", 1))
    assert sum(n for _, n in placement.chips_by_ultraserver) == placement.chips
