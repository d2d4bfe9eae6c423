"""A cycle's launch budget (`Scheduler.cycle(launch_budget=...)`): the jobs whose admission starts
pods are admitted until the pods this cycle may launch are spent; the rest wait as `Deferred`,
keep their queue positions, and are tried by the next cycle (a full one)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.scheduling.admissions import Admissions
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob


def job(name: str, chips: int, seq: int, *, launches: bool = True) -> QueuedJob:
    return QueuedJob(JobKey(name), PlacementRequest(chips, required_level="ultraserver"), 0, seq,
                     launches=launches)


def pods(s: Scheduler, key: str) -> int:
    return sum(len(p.servers) for p in s.placements(JobKey(key)))


def test_the_budget_admits_until_spent_then_defers_only_the_jobs_that_launch() -> None:
    s = Scheduler(Allocator(build_fleet("trn3-gen2", 2)))
    for i in range(5):
        s.submit(job(f"j{i}", 8, i))  # 2 servers (pods) each on Gen2: 4 chips per server
    s.submit(job("plain", 8, 5, launches=False))  # no pods: the budget does not count it
    s.submit(job("early", 8, -1, launches=False))  # ahead of them all
    result = s.cycle(launch_budget=3)
    assert [k for k, _ in result.admitted] == ["early", "j0", "j1"]  # j1 spends it (3-2-2 < 0)
    assert pods(s, "j0") == pods(s, "j1") == 2
    # nothing behind the spent budget is tried, so nothing passes a job ahead of it
    assert [(k, n.kind, at) for k, n, at in result.pending] == [
        ("j2", "Deferred", 1), ("j3", "Deferred", 2), ("j4", "Deferred", 3),
        ("plain", "Deferred", 4)]
    assert result.deferred == 4
    # nothing new arrived and no chip was freed, yet the next cycle tries them: a full one
    assert [k for k, _ in s.cycle().admitted] == ["j2", "j3", "j4", "plain"]


def test_a_budget_above_zero_admits_the_first_job_whole_and_zero_admits_none() -> None:
    s = Scheduler(Allocator(build_fleet("trn3-gen2", 2)))
    s.submit(job("big", 144, 0))  # 36 pods against a budget of 1
    s.submit(job("small", 4, 1))
    assert [k for k, _ in s.cycle(launch_budget=1).admitted] == ["big"]
    assert [k for k, _ in s.cycle(launch_budget=0).admitted] == []
    assert [k for k, _ in s.cycle(launch_budget=None).admitted] == ["small"]


def test_admissions_report_deferred_jobs_apart_from_the_pending_ones() -> None:
    a = Admissions(Allocator(build_fleet("trn3-gen2", 1)))
    a.submit(job("keeper", 136, 0, launches=False))  # leaves 8 chips
    a.submit(job("wide", 12, 1))  # does not fit: waits, first in the queue
    a.submit(job("first", 8, 2))  # fits and spends the budget of 1
    a.submit(job("next", 4, 3, launches=False))
    decisions = a.cycle(0.0, launch_budget=1)
    assert [x.key for x in decisions.admitted] == ["keeper", "first"]
    assert [(p.key, p.reason, p.position) for p in decisions.pending] == [
        ("wide", "NoCapacity", 1)]
    assert decisions.deferred == ["next"]  # its written status is left as it is
    again = a.cycle(0.0)  # tried again: no room left, so now it waits with a reason
    assert not again.deferred and not again.admitted
    assert [(p.key, p.reason, p.position) for p in again.pending] == [
        ("wide", "NoCapacity", 1), ("next", "NoCapacity", 2)]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([1, 4, 8, 16, 36, 72, 144]), min_size=1, max_size=12),
       budget=st.integers(min_value=0, max_value=40))
def test_no_cycle_launches_more_than_its_budget_beyond_the_job_that_spends_it(
        sizes: list[int], budget: int) -> None:
    s = Scheduler(Allocator(build_fleet("trn3-gen2", 3)))
    for i, size in enumerate(sizes):
        s.submit(job(f"j{i}", size, i))
    admitted = [k for k, _ in s.cycle(launch_budget=budget).admitted]
    launched = [pods(s, k) for k in admitted]
    # every job but the last one admitted was admitted with budget left
    assert sum(launched[:-1]) < budget or not launched[:-1]
    if budget == 0:
        assert not admitted
    # the next cycle, without a budget, admits what the budget deferred and nothing twice
    deferred = [k for k in s.positions() if k not in admitted]
    rest = [k for k, _ in s.cycle().admitted]
    assert not set(rest) & set(admitted) and set(rest) <= set(deferred)


def test_the_operator_defers_templated_jobs_while_its_pod_plane_has_no_budget() -> None:
    from tests.unit.operator_fakes import FakeKube, Gate, controller, settle

    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        gate = c.launches = Gate(pods=0)
        body = kube.add_job("pods", 8)
        kube.jobs["pods"]["spec"]["template"] = {"spec": {"containers": [
            {"name": "main", "image": "trainer:1"}]}}
        kube.add_job("plain", 8)  # created after it: deferred too, never passing it
        await c.sync()
        await settle(c)
        assert body["metadata"]["name"] == "pods"
        for name in ("pods", "plain"):  # deferred: nothing written for them
            assert not (kube.jobs[name].get("status") or {}).get("phase"), name
        gate.pods = 10
        await settle(c)
        assert kube.jobs["pods"]["status"]["phase"] == "Admitted"
        assert kube.jobs["plain"]["status"]["phase"] == "Admitted"
        assert gate.owed == [("tj/ns/pods", 2)]  # the pod plane is told what the admission owes

    asyncio.run(scenario())
