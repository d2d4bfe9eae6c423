"""Fair-sharing preemption: a queue below its fair share takes chips, from one UltraServer, from
queues above theirs (`ultraplane.scheduling.fairsharing`).

Fleets are Trn3 Gen2 UltraServers (144 chips each), drawn above each case. Queues A, B and C
share one cohort, 240 nominal chips each on five UltraServers (720 chips); C wants nothing, so
A and B share the fleet by weight.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.quotas import NO_QUOTA, QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions
from ultraplane.scheduling.decisions import Decisions
from ultraplane.scheduling.fairsharing import allows
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"
_seq = iter(range(1_000_000))


def fleet(count: int = 5, **kw: object) -> Admissions:
    specs = [QueueSpec(n, {GEN2: 720 // 3 if count == 5 else count * 144 // 3}, cohort="org",
                       **kw) for n in "ABC"]  # type: ignore[arg-type]
    return Admissions(Allocator(build_fleet(GEN2, count)), reservation=False,
                      quotas=QuotaBook(specs))


def job(key: str, queue: str, chips: int, checkpoint_s: float | None = None) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=chips, required_level="ultraserver"),
                     0, next(_seq), queue=queue, checkpoint_s=checkpoint_s)


def cycle(adm: Admissions, t: float, *jobs: QueuedJob) -> Decisions:
    for j in jobs:
        adm.submit(j)
    return adm.cycle(t)


def a_holds_four(adm: Admissions, **checkpoints: float) -> None:
    # gen2-0000..0003 [ a1 ] [ a2 ] [ a3 ] [ a4 ]   gen2-0004 [ b1 ]   (t = 0)
    d = cycle(adm, 0.0, *(job(f"a{i}", "A", 144, checkpoints.get(f"a{i}")) for i in range(1, 5)),
              job("b1", "B", 144))
    assert len(d.admitted) == 5


def test_the_queue_below_its_share_takes_one_ultraserver_from_the_one_above() -> None:
    # A holds 576 of 720 (its fair share 360), B 144 and wants 288 more (share 360). B's
    # 144-chip job is beyond its quota's room (no idle chips): fair sharing takes one of A's
    # UltraServers, the job whose work since its last checkpoint is least (a2: 1000 s % 300).
    adm = fleet()
    a_holds_four(adm, a1=600.0, a2=300.0, a3=700.0)
    d = cycle(adm, 1000.0, job("b2", "B", 144), job("b3", "B", 144))
    assert [(p.key, p.by, p.fair_sharing) for p in d.preempted] == [("a2", "b2", True)]
    assert [a.key for a in d.admitted] == ["b2"]
    message = d.preempted[0].message
    assert "fair sharing" in message and "queue B" in message and "queue A" in message
    # b3 would leave A at 288, below its share of 360: it waits
    assert {p.key: p.reason for p in d.pending}["b3"] == NO_QUOTA


def test_victims_come_from_one_ultraserver_never_scattered() -> None:
    # gen2-0000..0003 [ a 72 | a 72 ] x4   gen2-0004 [ b1 144 ]
    # B wants 144 more: both victims are the two halves of ONE UltraServer (the chips freed
    # are where b2 runs), never one half of each of two.
    adm = fleet()
    cycle(adm, 0.0, *(job(f"a{i}", "A", 72) for i in range(8)), job("b1", "B", 144))
    d = cycle(adm, 1000.0, job("b2", "B", 144))
    assert len(d.preempted) == 2 and [a.key for a in d.admitted] == ["b2"]
    b2 = d.admitted[0].placements[0]
    assert len({us for us, _ in b2.chips_by_ultraserver}) == 1


def test_less_than_initial_share_may_take_below_the_victims_share() -> None:
    # A holds 576, B 144; B wants 72 (within its nominal 240: reclaim takes a4's UltraServer)
    # and 144 more (beyond: fair sharing's). Then A holds 432 and B 216 of their shares of
    # 360: LessThanOrEqualToFinalShare leaves A its 432 (taking 144 would put it at 288,
    # below its share); LessThanInitialShare takes it (B's share after, 360/360, is below
    # A's before, 432/360).
    for strategy, taken in (("LessThanOrEqualToFinalShare", 0), ("LessThanInitialShare", 1)):
        adm = fleet(fair_preemption=strategy)
        a_holds_four(adm)
        d = cycle(adm, 1000.0, job("b2", "B", 144), job("b3", "B", 72))
        assert next((p.key, p.by, p.fair_sharing) for p in d.preempted) == ("a4", "b3", False)
        assert sum(p.fair_sharing for p in d.preempted) == taken, strategy
        assert ("b2" in {a.key for a in d.admitted}) is bool(taken)


def test_never_and_without_a_clock_nothing_is_preempted_for_fairness() -> None:
    adm = fleet(fair_preemption="Never")
    a_holds_four(adm)
    d = cycle(adm, 1000.0, job("b2", "B", 144))
    assert not d.preempted and d.pending[0].reason == NO_QUOTA
    # jobs that started at this instant are no victims (the same cycle would admit and evict)
    adm = fleet()
    d = cycle(adm, 0.0, *(job(f"a{i}", "A", 144) for i in range(1, 5)), job("b1", "B", 144),
              job("b2", "B", 144))
    assert not d.preempted


def test_a_job_preempted_for_fairness_is_spared_for_the_interval() -> None:
    # a2 (least work lost) goes at t=1000; b2 ends, a2 is back at t=1100; at t=1200 B wants
    # 144 again: a2 has lost least again but is spared until t=1600; a job of A that was not
    # preempted goes instead. After the interval, a2 may go again.
    adm = fleet()
    a_holds_four(adm, a2=300.0)
    d = cycle(adm, 1000.0, job("b2", "B", 144))
    assert [p.key for p in d.preempted] == ["a2"]
    adm.withdraw(JobKey("b2"))
    assert [a.key for a in cycle(adm, 1100.0).admitted] == ["a2"]
    d = cycle(adm, 1200.0, job("b3", "B", 144))
    assert len(d.preempted) == 1 and d.preempted[0].key != "a2"
    victim = d.preempted[0].key
    adm.withdraw(JobKey("b3"))
    assert [a.key for a in cycle(adm, 1300.0).admitted] == [victim]
    d = cycle(adm, 1700.0, job("b4", "B", 144))
    assert [p.key for p in d.preempted] == ["a2"]


def test_without_tenant_queues_fair_sharing_changes_nothing() -> None:
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False)
    cycle(adm, 0.0, job("a1", "A", 144), job("a2", "A", 144))
    d = cycle(adm, 1000.0, job("b1", "B", 144))
    assert not d.preempted and [p.key for p in d.pending] == ["b1"]


@pytest.mark.parametrize(("strategy", "mine_after", "held", "left", "fair", "ok"), [
    ("LessThanOrEqualToFinalShare", 0.8, 432, 288, 360, False),  # victim below its share
    ("LessThanOrEqualToFinalShare", 0.8, 432, 360, 360, True),
    ("LessThanOrEqualToFinalShare", 1.1, 432, 360, 360, False),  # preemptor would pass it
    ("LessThanInitialShare", 1.0, 432, 288, 360, True),
    ("LessThanInitialShare", 1.2, 432, 288, 360, False),
    ("Never", 0.1, 432, 400, 360, False),
])
def test_strategy_rule(strategy: str, mine_after: float, held: float, left: float,
                       fair: float, ok: bool) -> None:
    assert allows(strategy, mine_after, held, left, fair) is ok  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([36, 72, 144]), min_size=4, max_size=10),
       st.lists(st.sampled_from([36, 72, 144]), min_size=1, max_size=4),
       st.sampled_from(["LessThanOrEqualToFinalShare", "LessThanInitialShare"]))
def test_fairness_preemption_properties(a_jobs: list[int], b_jobs: list[int],
                                        strategy: str) -> None:
    """Whatever A runs and B asks for: every job preempted for fairness is A's, a B job that
    took chips for fairness runs on one UltraServer, and with the default strategy A keeps
    at least its fair share."""
    adm = fleet(fair_preemption=strategy)
    cycle(adm, 0.0, *(job(f"a{i}", "A", c) for i, c in enumerate(a_jobs)))
    book = adm.quotas
    assert book is not None
    d = cycle(adm, 1000.0, *(job(f"b{i}", "B", c) for i, c in enumerate(b_jobs)))
    fair = adm.scheduler._fairsharing.shares()  # the shares the cycle decided by
    fairly = [p for p in d.preempted if p.fair_sharing]
    assert all(p.key.startswith("a") for p in fairly)
    for a in d.admitted:
        if any(p.by == a.key for p in fairly):
            assert len({us for us, _ in a.placements[0].chips_by_ultraserver}) == 1
    # (reclaims come first, guaranteed jobs being tried before borrowers)
    if fairly and strategy == "LessThanOrEqualToFinalShare":
        assert book.used("A") >= fair["A"]


def test_why_names_fair_sharing_and_get_tq_shows_the_fair_share() -> None:
    from ultraplane.api.client.views import queue_rows

    from ultraplane.documents.explanation_inputs import waiting_job
    from ultraplane.documents.explanations import ServerState, explain

    message = "Preempted for fair sharing: queue B held 144 chips, below its fair share of 360"
    body = {"kind": "TrainingJob", "metadata": {"namespace": "a", "name": "a2"},
            "spec": {"chips": 144},
            "status": {"phase": "Pending", "reason": "NoQuota", "message": "no room",
                       "conditions": [{"type": "Preempted", "status": "True",
                                       "reason": "FairSharing", "message": message}]}}
    said = explain(waiting_job(body), [ServerState("us-0", GEN2, 144, 0)], now_s=0.0)
    assert ("FairSharing", message) in {(b.kind, b.message) for b in said.blockers}
    body["status"]["conditions"][0]["reason"] = "Preempted"  # type: ignore[index]
    said = explain(waiting_job(body), [ServerState("us-0", GEN2, 144, 0)], now_s=0.0)
    assert "FairSharing" not in {b.kind for b in said.blockers}

    headers, rows = queue_rows([
        {"metadata": {"name": "A"}, "spec": {"cohort": "org"},
         "status": {"usedChips": 432, "fairShareChips": 360}},
        {"metadata": {"name": "D"}, "spec": {}, "status": {"usedChips": 4}}])
    fair = headers.index("FAIR")
    assert headers[fair - 2:fair + 1] == ["USED", "BORROWED", "FAIR"]
    assert [r[fair] for r in rows] == ["360", "<none>"]


def test_the_queue_status_counts_the_fair_share_of_running_and_waiting_jobs() -> None:
    from ultraplane.policies.queuedocuments import queue_statuses

    adm = fleet()
    a_holds_four(adm)
    adm.submit(job("b2", "B", 144))
    assert adm.quotas is not None
    got = queue_statuses(adm.quotas, adm.waiting(), adm.running().values())
    assert {q: s.get("fairShareChips") for q, s in got.items()} == {"A": 432, "B": 288, "C": 0}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["submit", "delete", "requeue", "cycle"]),
                          st.integers(0, 11), st.sampled_from("ABC"),
                          st.sampled_from([16, 72, 144])), max_size=30))
def test_the_queues_demand_kept_as_jobs_come_and_go_equals_a_recount(
        steps: list[tuple[str, int, str, int]]) -> None:
    # The shares a cycle decides by are read from the roster's running tally of what the
    # queued jobs want (not a pass over a deep queue): after any submits, edits, deletes,
    # requeues, admissions and preemptions, it gives what a recount of the queued jobs gives.
    from ultraplane.policies.fairshares import queue_fair_shares, wanted_fair_shares
    adm = fleet()
    t = 0.0
    for action, n, queue, chips in steps:
        key = f"j{n}"
        if action == "delete":
            adm.deleted(JobKey(key))
        elif action == "requeue":
            adm.requeue(JobKey(key))
        elif action == "cycle":
            t += 700.0
            adm.cycle(t)
        elif not adm.scheduler.is_running(JobKey(key)):
            adm.submit(job(key, queue, chips))
        roster = adm.scheduler._roster
        book = roster._quotas
        assert book is not None
        assert wanted_fair_shares(book, roster.queued_chips) == queue_fair_shares(
            book, roster.queued.values())
        assert all(roster.queued_chips.values())
