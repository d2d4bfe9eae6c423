"""What an admission costs the API server: no finalizer, Events from a budget, deletions seen
on the watch or at the next resync (issue 16)."""

from __future__ import annotations

import asyncio

from ultraplane.operator.budgets import TokenBucket

from tests.unit.operator_fakes import FakeKube, controller, settle


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
        assert c.scheduler.is_running("tj/ns/gone")
        del kube.jobs["gone"]  # deleted while the watch was down: no DELETED event
        await settle(c)
        assert c.scheduler.is_running("tj/ns/gone")  # nothing told us yet
        await c.resync()
        assert not c.scheduler.is_running("tj/ns/gone")
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
        assert c.scheduler.is_running("tj/ns/same")

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
        assert not c.scheduler.is_running("tj/ns/old") and body

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


def test_a_restart_does_not_rewrite_the_positions_already_written() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("big", 144)
        for i in range(20):
            kube.add_job(f"w{i}", 144)
        await c.sync()
        await settle(c)
        assert kube.jobs["w19"]["status"]["queuePosition"] == 20
        kube.log.clear()
        again = controller(kube)  # kill -9 and start again on the same objects
        again.position_seconds = 0
        await again.sync()
        await settle(again)
        assert [w for w in kube.log if w[1] != "us"] == []
        kube.jobs["big"]["status"]["phase"] = "Succeeded"
        again.observe_job(kube.bump(kube.jobs["big"]))
        await settle(again)
        assert kube.jobs["w0"]["status"]["phase"] == "Admitted"
        assert kube.jobs["w19"]["status"]["queuePosition"] == 19  # moved: rewritten

    asyncio.run(scenario())
