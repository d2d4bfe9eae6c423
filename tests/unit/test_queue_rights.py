"""Who may use a tenant queue, the default queue of a namespace, and queues changed live.

Fleet: two Trn3 Gen2 UltraServers (144 chips each), one cohort:

    gen2-0000 [ 144 ]   gen2-0001 [ 144 ]
"""

from __future__ import annotations

import pytest

from ultraplane.documents.conversions import queued_job
from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import job_key
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.queuedocuments import InvalidQueueError, queue_spec, queue_status
from ultraplane.policies.quotas import INADMISSIBLE, NO_QUOTA, QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"


def fleet(*specs: QueueSpec) -> Admissions:
    return Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False,
                      quotas=QuotaBook(list(specs)))


def tj(namespace: str, name: str, chips: int, *, queue: str | None = None,
       priority: int = 0) -> QueuedJob:
    spec: dict[str, object] = {"chips": chips, "priority": priority,
                               "topology": {"requiredLevel": "ultraserver"},
                               "work": {"durationSeconds": 600}}
    if queue is not None:
        spec["queueName"] = queue
    return queued_job("TrainingJob", namespace, name, spec, seq=len(name))


def pending(adm: Admissions, now: float = 0.0) -> dict[str, tuple[str, str]]:
    return {p.key: (p.reason, p.message) for p in adm.cycle(now).pending}


def test_a_namespace_not_listed_is_refused_with_the_queue_and_who_may_use_it() -> None:
    adm = fleet(queue_spec("research", {"nominal": {GEN2: 144}, "namespaces": ["team-a"]}))
    adm.submit(tj("team-b", "sneak", 8, queue="research"))
    adm.submit(tj("team-a", "fine", 8, queue="research"))
    waits = pending(adm)
    key = job_key("TrainingJob", "team-b", "sneak")
    assert waits[key][0] == INADMISSIBLE
    assert "namespace team-b may not use queue research" in waits[key][1]
    assert "team-a" in waits[key][1]
    assert job_key("TrainingJob", "team-a", "fine") not in waits


def test_a_priority_above_the_queue_maximum_is_refused_not_admitted_over_the_quota() -> None:
    adm = fleet(queue_spec("research", {"nominal": {GEN2: 144}, "maxPriority": 100}))
    adm.submit(tj("team-a", "vip", 8, queue="research", priority=1_000_000))
    waits = pending(adm)
    reason, message = waits[job_key("TrainingJob", "team-a", "vip")]
    assert reason == INADMISSIBLE
    assert message == "priority 1000000 is above queue research's maximum of 100"


def test_a_job_naming_no_queue_uses_its_namespace_default_and_its_quota() -> None:
    # team-a's default queue holds 144 chips: the second 144-chip job waits NoQuota although
    # gen2-0001 is idle; team-b has no default, so its job is outside every quota.
    adm = fleet(queue_spec("a", {"nominal": {GEN2: 144}, "defaultFor": ["team-a"]}))
    adm.submit(tj("team-a", "one", 144))
    adm.submit(tj("team-a", "two", 144))
    waits = pending(adm)
    assert waits[job_key("TrainingJob", "team-a", "two")][0] == NO_QUOTA
    assert adm.quotas is not None and adm.quotas.used("a") == 144


def test_a_queue_created_later_counts_what_its_namespace_already_runs() -> None:
    book = QuotaBook([])
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False, quotas=book)
    adm.submit(tj("team-a", "early", 144))
    assert not pending(adm)  # no queue yet: admitted as if quotas did not exist
    book.replace([queue_spec("a", {"nominal": {GEN2: 100}, "defaultFor": ["team-a"]})])
    assert book.used("a") == 144 and book.borrowed("a") == 44
    status = queue_status(book, "a", pending=0, admitted=1, generation=3)
    assert status == {"nominalChips": 100, "usedChips": 144, "borrowedChips": 44,
                      "usage": {GEN2: 144}, "admittedJobs": 1, "pendingJobs": 0,
                      "observedGeneration": 3}


def test_an_empty_book_changes_nothing_in_the_cycle() -> None:
    with_book = Admissions(Allocator(build_fleet(GEN2, 2)), quotas=QuotaBook([]))
    without = Admissions(Allocator(build_fleet(GEN2, 2)))
    for adm in (with_book, without):
        for i, chips in enumerate((100, 100, 144, 30)):
            adm.submit(QueuedJob(job_key("TrainingJob", "ns", f"j{i}"),
                                 PlacementRequest(chips=chips, required_level="ultraserver"),
                                 seq=i))
    a, b = with_book.cycle(0.0), without.cycle(0.0)
    assert [x.key for x in a.admitted] == [x.key for x in b.admitted]
    assert [(p.key, p.reason) for p in a.pending] == [(p.key, p.reason) for p in b.pending]


@pytest.mark.parametrize(("spec", "says"), [
    ({"nominal": {}}, "nominal"),
    ({"nominal": {GEN2: -1}}, "nominal"),
    ({"nominal": {GEN2: 8}, "weight": 0}, "weight"),
    ({"nominal": {GEN2: 8}, "reclaimWithinCohort": "Sometimes"}, "reclaimWithinCohort"),
    ({"nominal": {GEN2: 8}, "namespaces": ["a"], "defaultFor": ["b"]}, "default queue"),
    ({"nominal": {GEN2: 8}, "colour": "red"}, "colour"),
])
def test_a_bad_queue_spec_is_one_sentence_naming_the_queue_and_field(
        spec: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidQueueError) as err:
        queue_spec("q1", spec)
    assert str(err.value).startswith("queue q1") and says in str(err.value)


def test_a_reclaimed_job_is_told_which_queue_took_its_borrowed_chips_back() -> None:
    # gen2-0000 [ b1 144 ]  gen2-0001 [ b2 144, borrowed ]  then a's job reclaims gen2-0001
    adm = fleet(queue_spec("a", {"nominal": {GEN2: 144}, "cohort": "lab"}),
                queue_spec("b", {"nominal": {GEN2: 144}, "cohort": "lab"}))
    adm.submit(tj("team-b", "b1", 144, queue="b"))
    adm.submit(tj("team-b", "b2", 144, queue="b"))
    assert len(adm.cycle(0.0).admitted) == 2
    adm.submit(tj("team-a", "a1", 144, queue="a"))
    decided = adm.cycle(1.0)
    assert [(p.key, p.message) for p in decided.preempted] == [(
        job_key("TrainingJob", "team-b", "b2"),
        f"Preempted: queue a reclaimed its nominal chips for job "
        f"{job_key('TrainingJob', 'team-a', 'a1')} from queue b, which was borrowing them; "
        "requeued.")]
