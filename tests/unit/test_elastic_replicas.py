"""Elastic replicas: a running InferenceJob grows and shrinks without moving its replicas.

Fleets are Trn2 UltraServers (4 servers x 16 chips = 64 chips each); a replica of 32 chips
needs two servers of one UltraServer. Drawing legend: one cell per server, `s0` .. a replica
of `serve`, `t` a training job, `.` a free server.

    us0 [s0 s0 s1 s1]   us1 [. . . .]     <- serve with 2 replicas on a 2-UltraServer fleet
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.scheduling.admissions import (
    Admissions,
    Observed,
    ScaledDown,
    ScaledUp,
    ScalingUp,
)
from ultraplane.workloads import QueuedJob

SERVE = JobKey("serve")


def fleet(count: int) -> Admissions:
    return Admissions(Allocator(build_fleet("trn2", count)))


def serve(replicas: int, priority: int = 10, chips: int = 32) -> QueuedJob:
    request = PlacementRequest(chips=chips, required_level="ultraserver", whole_servers=True)
    return QueuedJob(SERVE, request, priority, replicas=replicas)


def training(key: str, chips: int, priority: int = 0, seq: int = 1) -> QueuedJob:
    request = PlacementRequest(chips=chips, required_level="ultraserver", whole_servers=True)
    return QueuedJob(JobKey(key), request, priority, seq)


def chips_of(d: Admissions) -> list[frozenset[ChipId]]:
    return [frozenset(p.chip_ids) for p in d.placements(SERVE)]


def ultraservers(d: Admissions) -> list[set[str]]:
    return [{us for us, _ in p.chips_by_ultraserver} for p in d.placements(SERVE)]


def running(d: Admissions, n: int) -> Admissions:
    d.observe(serve(n))
    (admitted,) = d.cycle(0.0).admitted
    assert len(admitted.placements) == n
    return d


@dataclass(frozen=True)
class Resize:
    name: str
    fleet: int
    start: int
    to: int
    kept: int  # replicas that must keep their chips


@pytest.mark.parametrize("case", [
    # us0 [s0 s0 s1 s1] us1 [s2 s2 s3 s3]  ->  us0 [s0 s0 s1 s1] us1 [. . . .]
    Resize("down 4 -> 2 frees the highest replicas", fleet=2, start=4, to=2, kept=2),
    # us0 [s0 s0 s1 s1] us1 [s2 s2 . .]  ->  us0 [s0 s0 . .] us1 [. . . .]
    Resize("down 3 -> 1", fleet=2, start=3, to=1, kept=1),
    # us0 [s0 s0 . .] us1 [. . . .]  ->  us0 [s0 s0 s1 s1] us1 [s2 s2 s3 s3]
    Resize("up 1 -> 4 places three new gangs", fleet=2, start=1, to=4, kept=1),
], ids=lambda c: c.name)
def test_resize_keeps_the_running_replicas(case: Resize) -> None:
    d = running(fleet(case.fleet), case.start)
    before = chips_of(d)
    answer = d.rescale(SERVE, case.to)
    if case.to < case.start:
        assert isinstance(answer, ScaledDown)
        assert answer.removed == tuple(JobKey(f"serve#{i}") for i in range(case.to, case.start))
        assert answer.released == frozenset().union(*before[case.to:])
        assert not answer.released & frozenset().union(*chips_of(d))
    else:
        assert answer == ScalingUp(SERVE, case.start, case.to)
        (up,) = d.cycle(1.0).scaled_up
        assert isinstance(up, ScaledUp) and up.message == "" and up.replicas == case.to
        assert [i for i, _ in up.added] == list(range(case.start, case.to))
    assert chips_of(d)[:case.kept] == before[:case.kept]
    assert len(d.placements(SERVE)) == case.to
    assert all(len(us) == 1 for us in ultraservers(d))  # each replica inside one domain
    assert d.running()[SERVE].replicas == case.to


def test_scale_down_frees_chips_to_the_queue() -> None:
    # us0 [s0 s0 s1 s1], t (32 chips) waits  ->  serve 2 -> 1: us0 [s0 s0 t t].
    # A count below 1 is refused (an elastic job keeps at least one replica).
    d = running(fleet(1), 2)
    d.observe(training("t", 32))
    assert [p.key for p in d.cycle(1.0).pending] == ["t"]
    d.rescale(SERVE, 1)
    decisions = d.cycle(2.0)
    assert [a.key for a in decisions.admitted] == ["t"]
    with pytest.raises(ValueError):
        d.rescale(SERVE, 0)


def test_scale_up_preempts_lower_priority_training_with_the_reason() -> None:
    # us0 [s0 s0 . .] us1 [t t t t]  ->  serve 1 -> 3: s1 beside s0, s2 evicts t from us1.
    d = running(fleet(2), 1)
    d.observe(training("t", 64, priority=0))
    assert [a.key for a in d.cycle(1.0).admitted] == ["t"]
    before = chips_of(d)
    d.rescale(SERVE, 3)
    decisions = d.cycle(2.0)
    assert [(p.key, p.by) for p in decisions.preempted] == [("t", "serve")]
    assert decisions.preempted[0].message == (
        "Preempted by higher-priority job serve, scaling up to 3 replicas; requeued.")
    (up,) = decisions.scaled_up
    assert up.replicas == 3 and up.message == ""
    assert chips_of(d)[0] == before[0]
    assert d.is_waiting(JobKey("t"))


def test_a_scale_up_may_evict_a_lower_priority_job_that_was_growing_too() -> None:
    # us0 [s0 s0 b0 b0]: serve (priority 10) and b (5) both want 2 replicas. serve grows
    # first and evicts b whole; b's own scale-up is dropped (it waits again, as admitted).
    d = running(fleet(1), 1)
    other = JobKey("b")
    d.observe(QueuedJob(other, serve(1).request, 5, seq=1, replicas=1))
    d.cycle(0.5)
    d.rescale(SERVE, 2)
    d.rescale(other, 2)
    decisions = d.cycle(1.0)
    assert [(p.key, p.by) for p in decisions.preempted] == [("b", "serve")]
    assert [(u.key, u.replicas) for u in decisions.scaled_up] == [("serve", 2)]
    assert d.is_waiting(other) and d.scheduler.wanted(other) is None


def test_scale_up_that_does_not_fit_keeps_the_job_running_and_says_why() -> None:
    # us0 [s0 s0 . .] us1 [t t t t] (t outranks serve): serve 1 -> 3 places s1 only.
    d = running(fleet(2), 1)
    d.observe(training("t", 64, priority=20))
    d.cycle(1.0)
    before = chips_of(d)
    d.rescale(SERVE, 3)
    (up,) = d.cycle(2.0).scaled_up
    assert [i for i, _ in up.added] == [1] and up.replicas == 2 and up.desired == 3
    assert up.message.startswith("1 of 2 added replicas wait: NoCapacity")
    assert chips_of(d)[0] == before[0] and d.is_running(SERVE)
    # the next cycle tries again, still without room, and says so
    (again,) = d.cycle(3.0).scaled_up
    assert again.added == () and again.message.startswith("1 of 1 added replicas wait")
    assert d.cycle(3.5).scaled_up == []  # the same reason is not said again
    # t ends: the last replica is placed
    d.finished(JobKey("t"), "Succeeded")
    (done,) = d.cycle(4.0).scaled_up
    assert [i for i, _ in done.added] == [2] and done.message == "" and done.replicas == 3
    assert d.cycle(5.0).scaled_up == []


def test_waiting_job_rescale_replaces_the_queued_entry() -> None:
    # us0 [t t t t] (t outranks serve): serve waits with 2 replicas, edited to 1, still waits.
    d = fleet(1)
    d.observe(training("t", 64, priority=20))
    d.cycle(0.0)
    d.observe(serve(2))
    d.cycle(1.0)
    assert d.rescale(SERVE, 1) == Observed(SERVE, True)
    assert [j.replicas for j in d.waiting() if j.key == SERVE] == [1]
    assert d.rescale(JobKey("nobody"), 2) == Observed(JobKey("nobody"), False)
    with pytest.raises(ValueError):
        d.rescale(JobKey("t"), 2)  # one gang, not replicated


def test_a_waiting_scale_up_is_placed_once_chips_free_behind_a_deep_queue() -> None:
    # us0 [s0 s0 t t] (t outranks serve) with w0..w2 waiting behind: serve 1 -> 2 waits,
    # saying why; t ends and an arrival comes: the added replica goes first (serve outranks
    # the waiting jobs), and nothing more is said once it is placed.
    d = running(fleet(1), 1)
    d.observe(training("t", 32, priority=20))
    d.cycle(1.0)
    for i in range(3):
        d.observe(training(f"w{i}", 64, seq=2 + i))
    d.cycle(2.0)
    d.rescale(SERVE, 2)
    (up,) = d.cycle(3.0).scaled_up
    assert up.added == () and "NoCapacity" in up.message
    d.finished(JobKey("t"), "Succeeded")
    d.observe(training("late", 64, seq=9))
    (done,) = d.cycle(4.0).scaled_up
    assert [i for i, _ in done.added] == [1]
    # with nothing pending, carried cycles stay as they were
    assert d.cycle(5.0).scaled_up == []


def test_a_pending_scale_up_makes_every_cycle_a_full_one() -> None:
    # us0 [s0 s0 t t] (t outranks serve), w0..w2 (64 chips) wait: a deep queue whose cycles
    # carry the last one over while only arrivals come. A pending scale-up is not an arrival:
    # while it waits every cycle is full (it is tried in each), and once it is placed (t
    # ended) the carried cycles come back.
    from ultraplane.scheduling.scheduler import Scheduler

    s = Scheduler(Allocator(build_fleet("trn2", 1)))
    s.submit(serve(1))
    s.submit(training("t", 32, priority=20))
    s.cycle(0.0)
    for i in range(3):
        s.submit(training(f"w{i}", 64, seq=2 + i))
    s.cycle(1.0)
    s.submit(training("a0", 64, seq=10))
    assert s.cycle(2.0).carried is not None  # only an arrival: carried over
    s.rescale(SERVE, 2)
    for now in (3.0, 4.0):
        s.submit(training(f"a{now}", 64, seq=int(now) + 10))
        result = s.cycle(now)
        assert result.carried is None  # (the reason is said once: at 3.0)
        assert [u[2] is not None for u in result.scaled_up] == ([True] if now == 3.0 else [])
    s.cancel(JobKey("t"))
    result = s.cycle(5.0)
    assert [i for i, _ in result.scaled_up[0][1]] == [1] and result.scaled_up[0][2] is None
    s.submit(training("a9", 64, seq=99))
    assert s.cycle(6.0).carried is not None


def test_scale_up_stays_within_the_tenant_queue() -> None:
    # Queue A: 64 nominal trn2 chips, no cohort. us0 [s0 s0 . .] us1 [. . . .]:
    # serve 1 -> 3 places s1 (64 chips used), and the third replica waits NoQuota.
    from ultraplane.policies.quotas import NO_QUOTA, QueueSpec, QuotaBook

    d = Admissions(Allocator(build_fleet("trn2", 2)), reservation=False,
                   quotas=QuotaBook([QueueSpec("A", {"trn2": 64})]))
    d.observe(QueuedJob(SERVE, serve(1).request, 10, replicas=1, queue="A"))
    d.cycle(0.0)
    d.rescale(SERVE, 3)
    (up,) = d.cycle(1.0).scaled_up
    assert up.replicas == 2 and up.message.startswith(f"1 of 2 added replicas wait: {NO_QUOTA}")


def test_scale_up_stays_within_the_power_budget() -> None:
    # Two Gen2 UltraServers under one budget of idle + 100 kW (no capping): a 72-chip
    # replica adds about 45 kW over idle, so two fit and the third waits NoPower.
    from ultraplane.policies.powerbook import NO_POWER, PowerBook
    from ultraplane.policies.powerbudgets import BudgetSpec

    book = PowerBook([BudgetSpec("row", 2 * 144 * 300.0 + 100e3)], capping=False)
    d = Admissions(Allocator(build_fleet("trn3-gen2", 2)), reservation=False, power=book)
    request = PlacementRequest(chips=72, required_level="ultraserver")
    d.observe(QueuedJob(SERVE, request, 10, replicas=1))
    d.cycle(0.0)
    before = chips_of(d)
    d.rescale(SERVE, 3)
    (up,) = d.cycle(1.0).scaled_up
    assert up.replicas == 2 and up.message.startswith(f"1 of 2 added replicas wait: {NO_POWER}")
    assert chips_of(d)[0] == before[0] and len(d.allocator.allocations()) == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8),
       st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=4))
def test_no_chip_twice_and_running_replicas_never_move(counts: list[int],
                                                        trains: list[int]) -> None:
    d = running(fleet(3), 1)
    for i, size in enumerate(trains):
        d.observe(training(f"t{i}", 16 * (size + 1), priority=5 * (i % 3), seq=1 + i))
    d.cycle(0.5)
    now = 1.0
    for count in counts:
        before = chips_of(d)
        d.rescale(SERVE, count)
        d.cycle(now)
        now += 1.0
        after = chips_of(d)
        kept = min(len(before), len(after))
        assert after[:kept] == before[:kept]
        held = [c for p in d.allocator.allocations().values() for c in p.chip_ids]
        assert len(held) == len(set(held))
        assert all(len(us) == 1 for us in ultraservers(d))


# -- the documents: spec.autoscaling read once, the rescaled status built once ------------
SPEC = {"chipsPerReplica": 16, "replicas": 2, "model": {"name": "m"},
        "load": {"requestsPerSecond": 10}}
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4, "scaleDownDelaySeconds": 60,
               "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}}


def test_autoscaling_is_validated_by_the_model_and_the_crd() -> None:
    from pydantic import ValidationError

    from ultraplane.resources import crdgen
    from ultraplane.resources.inferencejobs import InferenceJobSpec

    spec = InferenceJobSpec.model_validate({**SPEC, "autoscaling": AUTOSCALING})
    assert spec.autoscaling is not None and spec.autoscaling.max_replicas == 4
    for bad in ({"minReplicas": 5}, {"minReplicas": 0}, {"scaleDownDelaySeconds": -1},
                {"objective": {"timeToFirstTokenMs": 0, "timePerOutputTokenMs": 50}}):
        with pytest.raises(ValidationError):
            InferenceJobSpec.model_validate({**SPEC, "autoscaling": {**AUTOSCALING, **bad}})
    rendered = "\n".join(crdgen.rendered_files().values())
    assert "self.minReplicas <= self.maxReplicas" in rendered
    assert "desiredReplicas" in rendered and "scalingMessage" in rendered


def test_jobspecs_reads_autoscaling() -> None:
    from ultraplane.documents.jobspecs import AutoscalingRead, read_job

    read = read_job("InferenceJob", "ns", "s", {**SPEC, "autoscaling": AUTOSCALING})
    assert read.error is None
    assert read.autoscaling == AutoscalingRead(1, 4, 1000.0, 50.0, 60.0)
    assert read_job("InferenceJob", "ns", "s", SPEC).autoscaling is None
    bad = read_job("InferenceJob", "ns", "s",
                   {**SPEC, "autoscaling": {**AUTOSCALING, "minReplicas": 9}})
    assert bad.queued is None and bad.error is not None and "spec.autoscaling" in bad.error


def test_status_of_a_rescale_keeps_the_running_replicas_entries() -> None:
    from datetime import UTC, datetime

    from ultraplane.documents.jobstatuses import status_of

    now = datetime(2026, 1, 1, tzinfo=UTC)
    d = fleet(2)
    d.observe(serve(3))
    (admitted,) = d.cycle(0.0).admitted
    before = status_of({}, admitted, now, replicated=True)
    down = d.rescale(SERVE, 2)
    assert isinstance(down, ScaledDown)
    status = status_of(before, down, now, replicated=True)
    assert status["desiredReplicas"] == 2 and status["chips"] == 64
    assert status["allocation"]["replicas"] == before["allocation"]["replicas"][:2]
    assert "phase" not in status and "serve#2" in status["scalingMessage"]
    up = d.rescale(SERVE, 9, "p99 TTFT 1.4 s over the 1 s objective at 40 req/s.")
    scaling = status_of(status, up, now, replicated=True)
    assert scaling["desiredReplicas"] == 9
    assert scaling["scalingMessage"] == ("Scaling up from 2 to 9 replicas. p99 TTFT 1.4 s "
                                         "over the 1 s objective at 40 req/s.")
    (grown,) = d.cycle(1.0).scaled_up
    after = status_of(status, grown, now, replicated=True)
    assert after["allocation"]["replicas"][:2] == status["allocation"]["replicas"]
    assert after["desiredReplicas"] == 9 and "added replicas wait" in after["scalingMessage"]

