"""What an admission costs the API server: no finalizer, Events from a budget, deletions seen
on the watch or at the next resync (issue 16)."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ultraplane.operator.controllers import Controller
from ultraplane.operator.eventrates import EventDigests, TokenBucket

from tests.unit.operator_fakes import FakeKube, controller, settle, stopped, until
from ultraplane.ids import ChipId, JobKey
from ultraplane.scheduling.decisions import Pending


def test_an_admission_is_one_status_write_and_no_finalizer() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        for i in range(5):
            kube.add_job(f"j{i}", 8)
        await c.sync()
        await settle(c)
        writes = [name for name, what in kube.log if what != "us"]
        assert sorted(writes) == [f"j{i}" for i in range(5)]  # one status write each
        assert all(not kube.jobs[f"j{i}"]["metadata"].get("finalizers") for i in range(5))

    asyncio.run(scenario())


def test_a_deletion_missed_by_the_watch_frees_the_chips_at_resync() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("gone", 144)
        await c.sync()
        await settle(c)
        assert c.admissions.is_running("tj/ns/gone")
        del kube.jobs["gone"]  # deleted while the watch was down: no DELETED event
        await settle(c)
        assert c.admissions.is_running("tj/ns/gone")  # nothing told us yet
        await c.resync()
        assert not c.admissions.is_running("tj/ns/gone")
        c.observe_job(kube.add_job("next", 144))
        await settle(c)
        assert kube.jobs["next"]["status"]["phase"] == "Admitted"

    asyncio.run(scenario())


def test_resync_keeps_a_job_recreated_under_the_same_name() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("same", 8)
        await c.sync()
        await settle(c)
        body = kube.jobs["same"]
        body["metadata"]["uid"] = "recreated"  # deleted and created again, seen on the watch
        body["status"] = {}
        c.observe_job(kube.bump(body), deleted=False)
        await settle(c)
        await c.resync()
        assert c.admissions.is_running("tj/ns/same")

    asyncio.run(scenario())


def test_a_deleting_job_with_an_earlier_versions_finalizer_is_let_go() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        body = kube.add_job("old", 8)
        await c.sync()
        await settle(c)
        obj = kube.jobs["old"]
        obj["metadata"]["finalizers"] = ["ultraplane.dev/release-chips"]
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T01:00:00Z"
        c.observe_job(kube.bump(obj))
        await settle(c)
        assert kube.jobs["old"]["metadata"]["finalizers"] == []
        assert not c.admissions.is_running("tj/ns/old") and body

    asyncio.run(scenario())


def test_the_event_budget_passes_a_burst_then_thins_a_flood_to_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=2.0, burst=5, clock=lambda: now[0])
    assert [bucket.take() for _ in range(7)] == [True] * 5 + [False] * 2
    now[0] += 1.0  # two tokens back
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    now[0] += 100.0  # refills to the burst, never beyond
    assert sum(bucket.take() for _ in range(20)) == 5
    unlimited = TokenBucket(qps=0, burst=1, clock=lambda: now[0])
    assert all(unlimited.take() for _ in range(1000))


def _job(name: str, namespace: str = "ns") -> dict[str, object]:
    return {"kind": "TrainingJob", "metadata": {"name": name, "namespace": namespace}}


def test_a_flood_of_events_becomes_one_digest_per_key_and_window() -> None:
    # burst 3, one token per 10 s, digests of 10 s: 3 Admitted one by one, then 97 in one Event
    now = [0.0]
    digests = EventDigests(TokenBucket(qps=0.1, burst=3, clock=lambda: now[0]), seconds=10.0)
    posted = [digests.add(_job(f"j{i}"), "Normal", "Admitted", f"placed j{i}")
              for i in range(100)]
    assert [p[3] for p in posted if p] == ["placed j0", "placed j1", "placed j2"]
    assert digests.next_due() == 10.0
    now[0] = 5.0
    assert digests.due() == []  # not yet 10 s old
    # another reason (and another namespace) has a key, and a digest, of its own
    assert digests.add(_job("v", "other"), "Warning", "Preempted", "by x") is None
    now[0] = 10.0
    (body, kind, reason, message), = digests.due()
    assert (body["metadata"]["name"], kind, reason) == ("j3", "Normal", "Admitted")
    assert message.startswith("97 TrainingJobs Admitted in 10s, posted as one Event")
    assert "j3, j4," in message and "j12 and 87 more" in message and "placed j3" in message
    # still flooding: the next Admitted joins the next window's digest, with tokens to spare
    now[0] = 12.0
    assert digests.add(_job("late"), "Normal", "Admitted", "placed late") is None
    now[0] = 15.0
    (alone,) = digests.due()  # a digest of one is that job's own Event, late
    assert alone == (_job("v", "other"), "Warning", "Preempted", "by x")
    now[0] = 20.0
    assert [n[3] for n in digests.due()] == ["placed late"]
    now[0] = 25.0
    assert digests.due() == []  # Preempted's window ended empty: closed
    now[0] = 30.0
    assert digests.due() == [] and digests.next_due() is None  # Admitted's too
    assert digests.add(_job("quiet"), "Normal", "Admitted", "one by one again") is not None


async def waiting_behind_big(kube: FakeKube, waiting: int, *,
                             position_width: int | None = None) -> Controller:
    """gen2-0000 [big 144]; w0..w{waiting-1} (144 chips each) wait, positions written."""
    c = controller(kube)
    if position_width is not None:
        c.writers.position_width = position_width
    kube.add_job("big", 144)
    for i in range(waiting):
        kube.add_job(f"w{i}", 144)
    await c.sync()
    await settle(c)
    return c


def test_a_restart_does_not_rewrite_the_positions_already_written() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        await waiting_behind_big(kube, 20)
        assert kube.jobs["w19"]["status"]["queuePosition"] == 20
        kube.log.clear()
        again = controller(kube)  # kill -9 and start again on the same objects
        again.loop.position_seconds = 0
        await again.sync()
        await settle(again)
        assert [w for w in kube.log if w[1] != "us"] == []
        kube.jobs["big"]["status"]["phase"] = "Succeeded"
        again.observe_job(kube.bump(kube.jobs["big"]))
        await settle(again)
        assert kube.jobs["w0"]["status"]["phase"] == "Admitted"
        assert kube.jobs["w19"]["status"]["queuePosition"] == 19  # moved: rewritten

    asyncio.run(scenario())


def test_positions_go_head_first_and_a_newer_one_replaces_the_one_still_queued() -> None:
    # gen2-0000 [big 144]; w0..w9 wait. A deep queue's positions are one queue, head first:
    # a position queued after the tail's is still written before it, and a job's newer
    # position replaces its older one instead of being written after it.
    async def scenario() -> None:
        kube = FakeKube()
        c = await waiting_behind_big(kube, 10, position_width=1)  # positions 1..10 written
        kube.log.clear()
        for i in range(10):  # what a cycle queues; the writer has not run yet
            c.outbox.put(JobKey(f"tj/ns/w{i}"), Pending(JobKey(f"tj/ns/w{i}"), "NoCapacity",
                                                        "again", i + 1))
        c.writers.start_positions()
        c.outbox.put(JobKey("tj/ns/w9"), Pending(JobKey("tj/ns/w9"), "NoCapacity", "moved up",
                                                  1))
        c.writers.start_positions()
        await c.positions_written()
        assert [name for name, _ in kube.log] == ["w0", "w9"] + [f"w{i}" for i in range(1, 9)]
        assert kube.jobs["w9"]["status"]["message"] == "moved up"  # the newer one, once
        assert not c.writers.positions_due

    asyncio.run(scenario())


def test_a_filling_ultraserver_is_written_once_it_settles_or_falls_too_far_behind() -> None:
    # gen2-0000 [a 8 | ...]: a's admission just landed, so the view waits for it to settle;
    # once settled, or when the view has been behind for the longest it may be, it is written.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        c.views.settle_seconds, c.views.max_seconds = 1.0, 15.0
        kube.add_job("a", 8)
        await c.sync()
        await c.run_cycle()
        now = asyncio.get_running_loop().time()
        assert c.views.touched["gen2-0000"] >= now - 1.0  # a landed just now
        kube.log.clear()
        c.views.touched["gen2-0000"] = now
        await c.views.flush()
        assert kube.log == []  # put off: still filling
        c.views.dirty["gen2-0000"] = now - 15.0  # behind for too long: written while filling
        await c.views.flush()
        assert kube.log == [("gen2-0000", "us")]
        assert kube.us_status["gen2-0000"]["allocated"]["chips"] == 8
        c.observe_job(kube.add_job("b", 8))
        await c.run_cycle()
        kube.log.clear()
        c.views.touched["gen2-0000"] = now - 1.0  # b landed a settle time ago
        await c.views.flush()
        assert kube.log == [("gen2-0000", "us")]
        assert kube.us_status["gen2-0000"]["allocated"]["chips"] == 16

    asyncio.run(scenario())


def test_the_echo_of_a_position_write_leaves_the_next_cycle_carrying_the_queue() -> None:
    # gen2-0000 [big 144]; w0..w19 wait. The watch echoes every position write: those are not
    # edits, so the next cycle carries the queue over instead of ordering all of it anew.
    async def scenario() -> None:
        kube = FakeKube()
        c = await waiting_behind_big(kube, 20)
        carried: list[int | None] = []
        cycle = c.admissions.scheduler.cycle

        def spy(now: float | None = None, launch_budget: int | None = None) -> Any:
            result = cycle(now, launch_budget)
            carried.append(result.carried)
            return result

        c.admissions.scheduler.cycle = spy  # type: ignore[method-assign]
        for i in range(20):
            c.observe_job(copy.deepcopy(kube.jobs[f"w{i}"]))
        await c.run_cycle()
        assert carried[-1] is not None
        w = kube.jobs["w0"]  # an edit of a waiting job is no echo: the queue is ordered anew
        w["spec"]["priority"] = -1
        c.observe_job(kube.bump(w))
        await settle(c)
        assert carried[-3] is None
        assert kube.jobs["w0"]["status"]["queuePosition"] == 20
        assert kube.jobs["w1"]["status"]["queuePosition"] == 1

    asyncio.run(scenario())


class SlowList(FakeKube):
    """A job list that waits for `go` (the API server listing thousands of jobs)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.go.set()
        self.listing = threading.Event()

    def list_jobs(self, namespaces: list[str] | None) -> list[dict[str, Any]]:
        self.listing.set()
        assert self.go.wait(30)
        return super().list_jobs(namespaces)


def test_a_slow_resync_list_does_not_hold_back_admissions() -> None:
    async def scenario() -> None:
        kube = SlowList()
        c = controller(kube, servers=2)
        kube.add_job("gone", 144)
        await c.sync()
        await settle(c)
        del kube.jobs["gone"]  # deleted while the watch was down: only a resync can tell
        kube.go.clear()
        kube.listing.clear()
        loop = asyncio.create_task(c.run())
        c.loop.ask_resync()
        await until("the resync's list", kube.listing.is_set)
        c.observe_job(kube.add_job("fresh", 8))
        await until("fresh admitted while the list is held", lambda: (
            kube.jobs["fresh"].get("status") or {}).get("phase") == "Admitted")
        assert c.admissions.is_running("tj/ns/gone")  # the resync has not answered yet
        kube.go.set()
        await until("the resync to free the deleted job's chips",
                    lambda: not c.admissions.is_running("tj/ns/gone"))
        await stopped(loop)

    asyncio.run(scenario())


def test_the_operator_writes_a_move_only_once_no_other_record_holds_its_new_chips() -> None:
    from ultraplane.operator.movewrites import clashes, recorded_holders, stop_grace

    bodies = {
        JobKey("tj/a/moved"): {"status": {"phase": "Running",
                                          "allocation": {"chips": ["x/s00/c00"]}}},
        JobKey("tj/a/left"): {"status": {"phase": "Preempted",
                                         "allocation": {"chips": ["y/s00/c00"]}}},
        JobKey("tj/a/other"): {"status": {"phase": "Admitted",
                                          "allocation": {"chips": ["y/s00/c01"]}}},
    }
    holders = recorded_holders(bodies)
    assert holders == {"x/s00/c00": "tj/a/moved", "y/s00/c01": "tj/a/other"}
    assert clashes(JobKey("tj/a/moved"), [ChipId("x/s00/c00"), ChipId("y/s00/c00")],
                   holders) is None  # its own old chips, and chips no record holds
    assert clashes(JobKey("tj/b/w"), [ChipId("x/s00/c00")], holders) == "tj/a/moved"
    assert stop_grace({"checkpoint": {"onNotice": True, "gracePeriodSeconds": 45}}) == 45
    assert stop_grace({"checkpoint": {"onNotice": True}}) == 120
    assert stop_grace({"checkpoint": {"gracePeriodSeconds": 30}}) == 30
    assert stop_grace({}) is None and stop_grace({"checkpoint": {}}) is None


class MovingKube(FakeKube):
    """Two tenant queues of 144 chips in one cohort; status writes of the jobs in `fail`
    fail (an API error), and every write is checked: no chip in two jobs' records."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: set[str] = set()
        self.doubles: list[str] = []

    def list_tenantqueues(self, fleet: str | None) -> list[dict[str, Any]]:
        return [{"metadata": {"name": q}, "spec": {
            "nominal": {"trn3-gen2": 144}, "cohort": "all", "namespaces": ["ns"],
            **({"defaultFor": ["ns"]} if q == "qa" else {})}} for q in ("qa", "qb")]

    def patch_job_status(self, plural: str, namespace: str, name: str,
                         status: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        if name in self.fail:
            raise RuntimeError("the API server is unavailable")
        new = super().patch_job_status(plural, namespace, name, status, resource_version)
        held = [c for o in self.jobs.values()
                if (o["status"] or {}).get("phase") in ("Admitted", "Running")
                for c in (o["status"].get("allocation") or {}).get("chips") or ()]
        self.doubles += [c for c in set(held) if held.count(c) > 1]
        return new

    def add_queued(self, name: str, chips: int, queue: str) -> None:
        self.add_job(name, chips)
        self.jobs[name]["spec"].update(queueName=queue, work={"durationSeconds": 36_000})


def test_an_admission_waits_while_the_move_that_made_room_for_it_is_not_written() -> None:
    # gen2-0000 [ a1 56 | b1 44 | free 44 ]   gen2-0001 [ b2 100 | free 44 ]
    # w (queue qa, 88 chips) fits qa's unused quota but no UltraServer: b1 is moved to
    # gen2-0001. While b1's write fails, w is not written on b1's recorded chips.
    from ultraplane.scheduling.decisions import Moved

    kube = MovingKube()
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    kube.servers = [{"metadata": {"name": f"gen2-{i:04d}"},
                     "spec": {"profile": "trn3-gen2", "network": ["block-000"]}}
                    for i in range(2)]
    c = Controller(kube, clock=lambda: now[0], emit=lambda *a: None, batch_seconds=0,
                   us_seconds=0)

    async def go() -> None:
        await c.sync()
        for name, chips, queue in (("a1", 56, "qa"), ("b1", 44, "qb"), ("b2", 100, "qb")):
            kube.add_queued(name, chips, queue)
            c.observe_job(kube.get_job("trainingjobs", "ns", name))
            await settle(c, 1)
        us = {n: kube.jobs[n]["status"]["allocation"]["ultraServers"] for n in ("a1", "b1", "b2")}
        assert us == {"a1": ["gen2-0000"], "b1": ["gen2-0000"], "b2": ["gen2-0001"]}
        now[0] += timedelta(seconds=1000)
        kube.fail = {"b1"}
        kube.add_queued("w", 88, "qa")
        c.observe_job(kube.get_job("trainingjobs", "ns", "w"))
        await settle(c, 2)
        assert isinstance(c.outbox.get(JobKey("tj/ns/b1")), Moved)  # to be retried
        assert kube.jobs["w"]["status"].get("phase") != "Admitted"
        assert kube.jobs["b1"]["status"]["allocation"]["ultraServers"] == ["gen2-0000"]
        kube.fail = set()
        await settle(c, 3)
        assert kube.jobs["b1"]["status"]["reason"] == "Moved"
        assert kube.jobs["b1"]["status"]["allocation"]["ultraServers"] == ["gen2-0001"]
        assert kube.jobs["w"]["status"]["phase"] == "Admitted"
        assert kube.jobs["w"]["status"]["allocation"]["ultraServers"] == ["gen2-0000"]
        assert ("b1", "Admitted") in kube.log and kube.log.index(("b1", "Admitted")) \
            < kube.log.index(("w", "Admitted"))

    asyncio.run(go())
    assert not kube.doubles
