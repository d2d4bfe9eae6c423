"""The launch backlog: admissions wait while the pod creates already queued would take longer
than `--launch-backlog-seconds` at the rate the API server answers them (operator/pods.py
`PodPlane.held`, operator/loops.py `Controller._hold_for_launches`)."""

from __future__ import annotations

import asyncio

from ultraplane.operator.controllers import Controller
from ultraplane.operator.pods import RATE_WINDOW, JobPods, PodInfo, PodPlane
from ultraplane.operator.statuses import Write

from tests.unit.operator_fakes import FakeKube, Gate, controller, stopped, until
from ultraplane.ids import JobKey, ServerId
from ultraplane.scheduling.decisions import Failed


def test_held_while_the_queued_creates_outlast_the_horizon_at_the_answer_rate() -> None:
    now = [100.0]

    async def scenario() -> None:
        c = controller(FakeKube())
        plane = PodPlane(FakeKube(), c, backlog_seconds=5.0, backlog_floor=10,  # type: ignore[arg-type]
                         clock=lambda: now[0])
        assert c.launches is plane  # the admission loop asks the pod plane
        plane.queued_creates = 9
        assert plane.held() is None  # a backlog below the floor never holds
        plane.queued_creates = 100
        assert "100 pod creates queued or owed (100 queued, 0 owed to" in (plane.held() or "")
        assert "0/s answered" in (plane.held() or "")
        plane.answered.extend([now[0] - 1.0] * 50)  # 10/s: 100 queued is 10 s of launches
        assert plane.create_rate() == 50 / RATE_WINDOW
        assert plane.held() is not None
        plane.answered.extend([now[0] - 0.5] * 200)  # 50/s: 100 queued is 2 s
        assert plane.held() is None
        now[0] += RATE_WINDOW + 1  # those answers are old now: the rate is unknown again
        assert plane.create_rate() == 0 and plane.held() is not None
        assert not plane.answered  # old answers are dropped, not kept forever
        plane.queued_creates = 0
        assert plane.budget() == 10  # the floor, while the rate is unknown
        plane.owe(JobKey("tj/ns/a"), 4)  # admitted, its 4 pods not yet queued
        assert plane.budget() == 6 and plane.backlog() == 4
        now[0] += 11  # owed for too long (a preemptor waiting for its victim): let go
        assert plane.budget() == 10 and not plane.owed
        off = PodPlane(FakeKube(), controller(FakeKube()), backlog_seconds=0)  # type: ignore[arg-type]
        assert off.budget() is None
        off.queued_creates = 10_000
        assert off.held() is None

    asyncio.run(scenario())


def phase(kube: FakeKube, name: str) -> str | None:
    return (kube.jobs[name].get("status") or {}).get("phase")


async def running(c: Controller) -> asyncio.Task[None]:
    await c.sync()
    return asyncio.create_task(c.run())


def test_admissions_wait_for_the_backlog_then_go() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        gate = c.launches = Gate(why="300 pod creates queued")
        kube.add_job("a", 8)
        loop = await running(c)
        await until("a held cycle", lambda: c.loop.held_seconds >= 0.4)
        assert phase(kube, "a") != "Admitted" and c.admissions.is_waiting("tj/ns/a")
        gate.why = None  # the backlog drained
        await until("a admitted", lambda: phase(kube, "a") == "Admitted")
        await stopped(loop)

    asyncio.run(scenario())


def test_an_eviction_is_never_held() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("a", 8)
        loop = await running(c)
        await until("a admitted", lambda: phase(kube, "a") == "Admitted")
        kube.add_job("b", 8)
        c.observe_job(kube.jobs["b"])
        c.launches = Gate(why="300 pod creates queued")
        c.outbox.put(JobKey("tj/ns/a"), Failed(JobKey("tj/ns/a"), "PodFailed",
                                               "pod llama-0 failed (Fail)."))
        c.wake.set()
        await until("a failed", lambda: phase(kube, "a") == "Failed")
        await stopped(loop)

    asyncio.run(scenario())


def test_pods_owed_are_let_go_when_the_job_will_not_launch_them_now() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        plane = PodPlane(kube, c)  # type: ignore[arg-type]
        await c.sync()
        plane.owe(JobKey("tj/ns/gone"), 36)  # admitted, then finished or evicted before launch
        plane.jobs[JobKey("tj/ns/gone")] = JobPods()
        await plane.reconcile(JobKey("tj/ns/gone"))
        assert not plane.owed  # not running in the scheduler: it owes nothing
        kube.add_job("a", 8)
        c.observe_job(kube.jobs["a"])
        await c.run_cycle()  # decided: the scheduler runs it while its write is on its way
        plane.owe(JobKey("tj/ns/a"), 2)
        plane.jobs[JobKey("tj/ns/a")] = JobPods()
        assert c.admissions.is_running(JobKey("tj/ns/a"))
        await plane.reconcile(JobKey("tj/ns/a"))  # no template: nothing to launch, but running
        assert JobKey("tj/ns/a") in plane.owed  # kept until its creates are queued (or 10 s)

    asyncio.run(scenario())


class DeleteLog:
    """The pod calls `_hand_on` makes: deletes recorded, nothing else expected."""

    def __init__(self) -> None:
        self.deleted: list[tuple[str, int | None]] = []

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        self.deleted.append((name, grace_seconds))


def test_a_succeeded_jobs_running_pods_stop_while_its_status_write_is_on_its_way() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        pods = DeleteLog()
        plane = PodPlane(pods, c)  # type: ignore[arg-type]
        key = JobKey("tj/ns/a")
        landed = asyncio.Event()
        written: list[str] = []

        async def slow_write(k: JobKey, change: Write) -> bool:
            await landed.wait()  # the API server is slow to answer the Succeeded write
            written.append(type(change).__name__ + getattr(change, "phase", ""))
            return True

        c.write = slow_write  # type: ignore[method-assign]
        state = plane.jobs[key] = JobPods()
        for rank, phase in enumerate(("Succeeded", "Running", "Running")):
            state.pods[f"a-{rank}"] = PodInfo(
                name=f"a-{rank}", namespace="ns", uid="u", attempt=0, group=0, rank=rank,
                server=ServerId(f"us/s{rank:02d}"), chips=(), phase=phase)
        hand_on = asyncio.create_task(plane._hand_on(key, state, "Succeeded", "PodsSucceeded",
                                                     "Pods: rank 0 succeeded.", release=True))
        await until("the running pods deleted", lambda: len(pods.deleted) == 2)
        assert not written and not hand_on.done()  # before the write landed
        # the pods' own grace period (a checkpoint may be on its way); rank 0 (done) is kept
        assert sorted(pods.deleted) == [("a-1", None), ("a-2", None)]
        landed.set()
        await hand_on
        assert written == ["PodsSaidSucceeded"]

    asyncio.run(scenario())
