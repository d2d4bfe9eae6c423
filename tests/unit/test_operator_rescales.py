"""An admitted InferenceJob's spec.replicas edited (the scale subresource): the operator hands
the core the new count and writes what it decides, against the in-memory API server of
`operator_fakes`. The replicas that stay never move; a restart re-adopts a rescaled job.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from ultraplane.operator.controllers import Controller

from tests.unit.operator_fakes import FakeKube, controller, settle
from ultraplane.ids import JobKey

SERVE = JobKey("ij/ns/serve")


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def replicas_of(obj: dict[str, Any]) -> list[list[str]]:
    return [r["chips"] for r in obj["status"]["allocation"]["replicas"]]


def scaled(kube: FakeKube, name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    """`kubectl scale`: a new spec.replicas (a new generation), as the watch delivers it."""
    obj = kube.ijobs[name]
    obj["spec"] = {**obj["spec"], "replicas": replicas, **spec}
    return kube.bump(obj)


def held(c: Any) -> list[str]:
    return [ch for p in c.allocator.allocations().values() for ch in p.chip_ids]


def test_scale_down_then_up_keeps_the_running_replicas_where_they_are() -> None:
    # gen2-0000 [144] gen2-0001 [144]: serve 4 x 32 chips (each in one UltraServer).
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 2)
        kube.add_inference("serve", 4, 32)
        await c.sync()
        await settle(c)
        before = replicas_of(kube.ijobs["serve"])
        assert kube.ijobs["serve"]["status"]["replicas"] == 4
        assert kube.ijobs["serve"]["status"]["selector"] == \
            "ultraplane.dev/job-uid=inferencejobs-serve"

        c.observe_job(scaled(kube, "serve", 2))
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert replicas_of(kube.ijobs["serve"]) == before[:2]  # the highest two went
        assert status["replicas"] == 2 and status["desiredReplicas"] == 2
        assert status["attempt"] == 1 and status["phase"] == "Admitted"  # nothing restarted
        assert "Scaled down to 2 replicas" in status["scalingMessage"]
        assert sorted(held(c)) == sorted(before[0] + before[1])

        c.observe_job(scaled(kube, "serve", 5))
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        after = replicas_of(kube.ijobs["serve"])
        assert after[:2] == before[:2] and len(after) == 5
        assert status["replicas"] == 5 and status["desiredReplicas"] == 5
        assert status["attempt"] == 1
        chips = [ch for r in after for ch in r]
        assert len(chips) == len(set(chips)) == 5 * 32 and sorted(chips) == sorted(held(c))

    run(scenario)


def test_a_scale_up_that_does_not_fit_keeps_what_it_placed_and_says_why() -> None:
    # gen2-0000 [144]: serve 2 x 64 asks for 4; one more fits (16 chips left after it).
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_inference("serve", 2, 48)
        await c.sync()
        await settle(c)
        c.observe_job(scaled(kube, "serve", 4))
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert status["replicas"] == 3 and status["desiredReplicas"] == 4
        assert "wait: NoCapacity" in status["scalingMessage"]

    run(scenario)


def test_an_autoscaled_job_scaled_by_another_writer_says_so_in_a_condition() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_inference("serve", 2, 16)
        kube.ijobs["serve"]["spec"]["autoscaling"] = {
            "minReplicas": 1, "maxReplicas": 6,
            "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}}
        await c.sync()
        await settle(c)
        c.observe_job(scaled(kube, "serve", 3))
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert status["replicas"] == 3
        (cond,) = [x for x in status["conditions"] if x["type"] == "AutoscalingOverridden"]
        assert cond["status"] == "True" and cond["reason"] == "ReplicasSetOutsideAutoscaling"
        assert "spec.replicas was set to 3" in cond["message"]

    run(scenario)


def test_a_restart_readopts_the_rescaled_allocation_and_follows_the_spec() -> None:
    # The operator scaled serve 4 -> 2 and stopped; spec.replicas then went to 3 while it was
    # down. The next one re-adopts the two replicas on the record and places a third.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 2)
        kube.add_inference("serve", 4, 32)
        await c.sync()
        await settle(c)
        c.observe_job(scaled(kube, "serve", 2))
        await settle(c)
        kept = replicas_of(kube.ijobs["serve"])
        scaled(kube, "serve", 3)

        second = controller(kube, 2)
        second.bodies.clear()
        await second.sync()
        assert [sorted(p.chip_ids) for p in second.admissions.placements(SERVE)][:2] == \
            [sorted(r) for r in kept]
        await settle(second)
        status = kube.ijobs["serve"]["status"]
        assert replicas_of(kube.ijobs["serve"])[:2] == kept
        assert status["replicas"] == 3 and status["attempt"] == 1
        assert ("serve", "Pending") not in kube.log  # never requeued

    run(scenario)


def test_a_scale_written_before_the_admission_lands_waits_for_it() -> None:
    # The edit arrives while serve's admission is only decided: the rescale follows the
    # admission's write, so the record never goes back to the older allocation.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 2)
        kube.add_inference("serve", 4, 32)
        await c.sync()
        pending_body = copy.deepcopy(kube.ijobs["serve"])
        pending_body["spec"]["replicas"] = 1
        kube.ijobs["serve"]["spec"]["replicas"] = 1
        pending_body = kube.bump(kube.ijobs["serve"])
        await c.run_cycle(wait=False)  # admitted with 4; its write in flight
        c.observe_job(pending_body)
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert status["replicas"] == 1 and len(replicas_of(kube.ijobs["serve"])) == 1
        assert len(held(c)) == 32

    run(scenario)


def test_each_rescale_posts_a_normal_event_with_its_message() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        controller(kube, 1)  # the fleet
        events: list[tuple[str, str, str]] = []
        c = Controller(kube, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
                       emit=lambda body, kind, reason, message: events.append(
                           (kind, reason, message)), batch_seconds=0, us_seconds=0)
        kube.add_inference("serve", 3, 16)
        await c.sync()
        await settle(c)
        c.observe_job(scaled(kube, "serve", 1))
        await settle(c)
        (said,) = [e for e in events if e[1] == "Rescaled"]
        assert said[0] == "Normal" and said[2].startswith("Scaled down to 1 replicas")

    run(scenario)


def test_the_planners_own_scale_is_no_override() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_inference("serve", 2, 16)
        kube.ijobs["serve"]["spec"]["autoscaling"] = {
            "minReplicas": 1, "maxReplicas": 6,
            "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}}
        await c.sync()
        await settle(c)
        c.cache.planned[SERVE] = (4, "scaled 2 → 4: forecast 90 req/s")  # `autoscalers`
        c.observe_job(scaled(kube, "serve", 4))
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert status["replicas"] == 4
        assert "AutoscalingOverridden" not in {x["type"] for x in status.get("conditions", [])}
        assert SERVE not in c.cache.planned
        c.observe_job(scaled(kube, "serve", 5))  # then someone else: an override
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert "AutoscalingOverridden" in {x["type"] for x in status["conditions"]}

    run(scenario)
