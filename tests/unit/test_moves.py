"""Moves: running jobs taken off an UltraServer and placed at once elsewhere, so that a job
within its queue's unused quota finds one UltraServer (`ultraplane.scheduling.moves`).

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each), drawn above each
case. Running jobs are put on exact chips after a first cycle at t=0, so they
count as started then (`Scheduler.restore_job`); the cycle under test runs at t=1000 with checkpoints every 600 s.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.quotas import QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions
from ultraplane.scheduling.decisions import Decisions
from ultraplane.scheduling.moves import MoveRules
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"
HOURS = 36_000.0  # expected run time of the running jobs: far beyond any threshold
_seq = iter(range(1_000_000))
ON = MoveRules(enabled=True)


def chips(us: int, first_server: int, servers: int) -> list[ChipId]:
    """The chips of `servers` whole servers of UltraServer `us` from `first_server` on."""
    return [ChipId(f"gen2-{us:04d}/s{s:02d}/c{c:02d}")
            for s in range(first_server, first_server + servers) for c in range(4)]


def job(key: str, queue: str, n: int, **kw: object) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=n, required_level="ultraserver"), 0,
                     next(_seq), queue=queue, expected_s=kw.pop("expected_s", HOURS),  # type: ignore[arg-type]
                     checkpoint_s=600.0, **kw)  # type: ignore[arg-type]


def fleet(nominal: dict[str, int], count: int, running: Sequence[tuple[QueuedJob, list[ChipId]]],
          rules: MoveRules = ON) -> Admissions:
    book = QuotaBook([QueueSpec(q, {GEN2: c}, cohort="all") for q, c in nominal.items()])
    adm = Admissions(Allocator(build_fleet(GEN2, count)), reservation=False, quotas=book,
                     moves=rules)
    adm.cycle(0.0)
    for j, ids in running:
        adm.scheduler.restore_job(adm.ranked(j), ids)
        adm.expect_end(j.key, HOURS)
    return adm


def no_chip_twice(adm: Admissions) -> None:
    held = [c for p in adm.allocator.allocations().values() for c in p.chip_ids]
    assert len(held) == len(set(held))


def two_fragments() -> tuple[Admissions, QueuedJob]:
    # gen2-0000 [ a1 56 | b1 44 | free 44 ]   gen2-0001 [ b2 100 | free 44 ]
    # A: nominal 144 (56 used), B: 144 (144 used). w (A, 88) fits A's unused quota but no
    # UltraServer; nobody borrows, so reclaim has no victim. Moving b1 to gen2-0001 frees 88.
    adm = fleet({"A": 144, "B": 144}, 2, [
        (job("a1", "A", 56), chips(0, 0, 14)),
        (job("b1", "B", 44), chips(0, 14, 11)),
        (job("b2", "B", 100), chips(1, 0, 25)),
    ])
    return adm, job("w", "A", 88)


def test_a_guaranteed_job_starts_by_moving_a_job_elsewhere() -> None:
    adm, w = two_fragments()
    adm.submit(w)
    d = adm.cycle(1000.0)
    assert [m.key for m in d.moved] == ["b1"]
    moved = d.moved[0]
    assert moved.by == "w" and moved.origin == ("gen2-0000",)
    assert moved.placement.ultraservers == ("gen2-0001",)
    assert [a.key for a in d.admitted] == ["w"] and d.admitted[0].placements[0].ultraservers == (
        "gen2-0000",)
    assert not d.preempted and adm.is_running(JobKey("b1"))  # moved, never queued again
    assert "w" in moved.message and "gen2-0000" in moved.message and "gen2-0001" in moved.message
    assert moved.lost_s == 400.0  # 1000 s since its start, a checkpoint every 600 s
    no_chip_twice(adm)


def test_without_moves_the_guaranteed_job_waits() -> None:
    adm = fleet({"A": 144, "B": 144}, 2, [
        (job("a1", "A", 56), chips(0, 0, 14)),
        (job("b1", "B", 44), chips(0, 14, 11)),
        (job("b2", "B", 100), chips(1, 0, 25)),
    ], MoveRules(enabled=False))
    adm.submit(job("w", "A", 88))
    d = adm.cycle(1000.0)
    assert not d.moved and not d.admitted and [p.key for p in d.pending] == ["w"]


def test_a_borrower_is_reclaimed_to_make_room_for_the_moved_job() -> None:
    # gen2-0000 [ c1 56 | c2 44 | free 44 ]   gen2-0001 [ a1 100 | b3 44 (borrowed) ]
    # A: nominal 188 (100 used); C: 100 (100 used); B: 0 (44 used: b3 borrows). w (A, 88):
    # reclaiming b3 alone frees 44 chips, no domain. The plan moves c2 to gen2-0001, where
    # b3 is reclaimed for it, and w takes the 88 chips of gen2-0000.
    adm = fleet({"A": 188, "C": 100, "B": 0}, 2, [
        (job("c1", "C", 56), chips(0, 0, 14)),
        (job("c2", "C", 44), chips(0, 14, 11)),
        (job("a1", "A", 100), chips(1, 0, 25)),
        (job("b3", "B", 44), chips(1, 25, 11)),
    ])
    d = moved_for(adm, job("w", "A", 88))
    assert [(m.key, m.placement.ultraservers) for m in d.moved] == [("c2", ("gen2-0001",))]
    assert [(p.key, p.by) for p in d.preempted] == [("b3", "w")]
    assert "reclaimed" in d.preempted[0].message
    assert [a.key for a in d.admitted] == ["w"] and adm.is_waiting(JobKey("b3"))


def three_fragments(**y: object) -> Admissions:
    # gen2-0000 [ fa 56 | x 44 | free 44 ]  gen2-0001 [ fb 56 | y 44 | free 44 ]
    # gen2-0002 [ fc 100 | free 44 ]
    # Either x or y can move to the free 44 of another UltraServer; the cheaper one goes.
    return fleet({"A": 144, "B": 288}, 3, [
        (job("fa", "A", 56), chips(0, 0, 14)),
        (job("x", "B", 44), chips(0, 14, 11)),
        (job("fb", "B", 56), chips(1, 0, 14)),
        (job("y", "B", 44, **y), chips(1, 14, 11)),
        (job("fc", "B", 100), chips(2, 0, 25)),
    ])


def moved_for(adm: Admissions, w: QueuedJob, now: float = 1000.0) -> Decisions:
    adm.submit(w)
    d = adm.cycle(now)
    no_chip_twice(adm)
    return d


def test_the_cheapest_move_wins_a_job_that_saves_on_notice_loses_only_the_save() -> None:
    d = moved_for(three_fragments(notice_s=20.0), job("w", "A", 88))
    assert [m.key for m in d.moved] == ["y"] and d.moved[0].lost_s == 20.0
    assert [a.key for a in d.admitted] == ["w"]


def test_a_job_that_does_not_allow_moves_stays() -> None:
    d = moved_for(three_fragments(notice_s=20.0, movable=False), job("w", "A", 88))
    assert [m.key for m in d.moved] == ["x"]


def test_a_job_is_moved_at_most_once_per_interval() -> None:
    adm = three_fragments(notice_s=20.0)
    first = moved_for(adm, job("w", "A", 88))
    assert [m.key for m in first.moved] == ["y"]
    # y now sits on gen2-0000 or gen2-0002; w ends, and v needs the same room again
    adm.withdraw(JobKey("w"))
    second = moved_for(adm, job("v", "A", 88), now=2000.0)
    assert "y" not in [m.key for m in second.moved]


def test_no_move_when_the_wait_without_it_is_short() -> None:
    # b1 ends at 1300: w's wait without a move (300 s) is below the 600 s threshold
    adm, w = two_fragments()
    adm.expect_end(JobKey("b1"), 1300.0)
    d = moved_for(adm, w)
    assert not d.moved and [p.key for p in d.pending] == ["w"]


def test_moves_serve_only_jobs_within_their_queues_nominal_quota() -> None:
    # the same fleet, but A's nominal quota is only 100: w (88) would borrow
    adm = fleet({"A": 100, "B": 188}, 2, [
        (job("a1", "A", 56), chips(0, 0, 14)),
        (job("b1", "B", 44), chips(0, 14, 11)),
        (job("b2", "B", 100), chips(1, 0, 25)),
    ])
    d = moved_for(adm, job("w", "A", 88))
    assert not d.moved


@st.composite
def fragmented(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Jobs of queue B as (UltraServer, first server, servers), with random gaps between
    them on each of 3 UltraServers (36 servers each)."""
    out: list[tuple[int, int, int]] = []
    for us in range(3):
        at = draw(st.integers(0, 6))
        while at < 36:
            n = draw(st.integers(1, 14))
            if at + n > 36:
                break
            out.append((us, at, n))
            at += n + draw(st.integers(0, 8))
    return out


@settings(max_examples=60, deadline=None)
@given(fragmented(), st.sampled_from([40, 64, 88, 100, 120]), st.booleans())
def test_moves_never_double_book_and_every_move_names_the_job_it_serves(
        layout: list[tuple[int, int, int]], want: int, notice: bool) -> None:
    # B's jobs scattered over 3 UltraServers, within B's nominal 288; A (nominal 144,
    # nothing running) asks for `want`
    assume(sum(4 * n for _, _, n in layout) <= 288)
    running = [(job(f"b{i}", "B", 4 * n, notice_s=20.0 if notice else None), chips(us, at, n))
               for i, (us, at, n) in enumerate(layout)]
    adm = fleet({"A": 144, "B": 288}, 3, running)
    before = {k: adm.placements(k) for k in adm.running()}
    d = moved_for(adm, job("w", "A", want))
    assert len(d.moved) <= 3 and not d.preempted  # nobody borrows: nobody is evicted
    admitted = {a.key for a in d.admitted}
    for m in d.moved:
        assert m.by == "w" and "w" in admitted and adm.is_running(m.key)
        assert adm.placements(m.key) == (m.placement,)
        assert before[m.key][0].chip_ids != m.placement.chip_ids
        assert "job w" in m.message
    if d.moved:
        w_chips = set(d.admitted[0].chip_ids)
        assert not any(w_chips & set(m.placement.chip_ids) for m in d.moved)
        assert set(before) == set(adm.running()) - {"w"}  # every job still runs


def test_spec_movable_and_checkpoint_on_notice_reach_the_queue_entry() -> None:
    from ultraplane.documents.conversions import InvalidJobError, queued_job

    base = {"chips": 8, "work": {"durationSeconds": 3600}}
    plain = queued_job("TrainingJob", "ns", "t", base, 1)
    assert plain.may_move and plain.checkpoint_s == 600.0 and plain.notice_s is None
    pinned = queued_job("TrainingJob", "ns", "t", {**base, "preemptible": False}, 1)
    assert not pinned.may_move
    saving = queued_job("TrainingJob", "ns", "t", {
        **base, "movable": False, "checkpointIntervalSeconds": 0,
        "checkpoint": {"onNotice": True, "gracePeriodSeconds": 45}}, 1)
    assert not saving.may_move and saving.checkpoint_s is None and saving.notice_s == 45.0
    try:
        queued_job("TrainingJob", "ns", "t", {**base, "movable": "yes"}, 1)
    except InvalidJobError as exc:
        assert "spec.movable" in str(exc)
    else:
        raise AssertionError("a non-boolean spec.movable was accepted")


def test_the_moved_jobs_status_names_where_it_went_and_the_job_it_made_room_for() -> None:
    from datetime import UTC, datetime

    from ultraplane.documents.jobstatuses import status_of

    adm, w = two_fragments()
    adm.submit(w)
    moved = adm.cycle(1000.0).moved[0]
    status = status_of({"phase": "Running", "restarts": 0, "attempt": 1}, moved,
                       datetime(2026, 1, 1, tzinfo=UTC))
    assert status["reason"] == "Moved" and status["restarts"] == 1
    assert status["allocation"]["ultraServers"] == ["gen2-0001"]
    assert "job w of queue A" in status["message"] and "from UltraServer gen2-0000" in status[
        "message"]


def test_why_of_a_moved_job_says_where_it_went_and_for_whom() -> None:
    from datetime import UTC, datetime

    from ultraplane.documents.explanation_inputs import waiting_job
    from ultraplane.documents.explanations import explain
    from ultraplane.documents.jobstatuses import apply, running, status_of

    adm, w = two_fragments()
    adm.submit(w)
    moved = adm.cycle(1000.0).moved[0]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    current = {"phase": "Running", "attempt": 1}
    current = apply(current, status_of(current, moved, now))
    current = apply(current, running(current, "PodsRunning", "2 pods run", now))
    body = {"kind": "TrainingJob", "metadata": {"namespace": "b", "name": "b1"},
            "spec": {"chips": 44}, "status": current}
    said = explain(waiting_job(body), [], now_s=0.0).summary
    assert "is Running" in said
    assert "Moved from UltraServer gen2-0000 to gen2-0001 to make room for job w" in said



def test_a_job_re_adopted_after_a_restart_may_be_moved_losing_at_most_a_checkpoint_interval(
        ) -> None:
    # as two_fragments, but the running jobs are re-adopted before any cycle (an adapter's
    # restart): their start is unknown, so b1's loss is bounded by its checkpoint interval
    book = QuotaBook([QueueSpec(q, {GEN2: 144}, cohort="all") for q in ("A", "B")])
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False, quotas=book, moves=ON)
    for j, ids in ((job("a1", "A", 56), chips(0, 0, 14)), (job("b1", "B", 44), chips(0, 14, 11)),
                   (job("b2", "B", 100), chips(1, 0, 25))):
        adm.scheduler.restore_job(adm.ranked(j), ids)
        adm.expect_end(j.key, HOURS)
    adm.submit(job("w", "A", 88))
    d = adm.cycle(1000.0)
    assert [(m.key, m.lost_s) for m in d.moved] == [("b1", 600.0)]
    assert [a.key for a in d.admitted] == ["w"]
    no_chip_twice(adm)
