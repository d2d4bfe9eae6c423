"""InferenceJob admission in the operator: replicas placed whole, keys, preemption, failures,
recovery and deletion, against the in-memory API server of `operator_fakes`.

Fleets are Trn3 Gen2 UltraServers (36 servers x 4 chips = 144 chips each)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ultraplane.operator.controllers import Controller

from tests.unit.operator_fakes import FakeKube, controller, settle
from ultraplane.ids import JobKey


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def replicas_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["status"]["allocation"]["replicas"])


def us_of(chip: str) -> str:
    return chip.split("/", 1)[0]


async def admitted_fleet(servers: int, *jobs: tuple[str, int, int, int]) -> tuple[FakeKube,
                                                                                    Controller]:
    """A controller over `servers` UltraServers with inference jobs (name, replicas, chips,
    priority) created before it starts."""
    kube = FakeKube()
    c = controller(kube, servers)
    for name, replicas, chips, priority in jobs:
        kube.add_inference(name, replicas, chips, priority)
    await c.sync()
    await settle(c)
    return kube, c


def test_two_replicas_are_admitted_each_inside_its_level_on_distinct_chips() -> None:
    # gen2-0000 [144]  gen2-0001 [144]; serve: 2 x 100 chips, each replica in one UltraServer.
    async def scenario() -> None:
        kube, c = await admitted_fleet(2, ("serve", 2, 100, 0))
        status = kube.ijobs["serve"]["status"]
        assert status["phase"] == "Admitted" and status["attempt"] == 1
        assert status["chips"] == 200  # the Chips column: every replica, not one
        reps = replicas_of(kube.ijobs["serve"])
        assert [r["index"] for r in reps] == [0, 1]
        for r in reps:
            assert len(set(r["chips"])) == 100
            assert len(r["ultraServers"]) == 1
            assert {us_of(ch) for ch in r["chips"]} == set(r["ultraServers"])
        assert set(reps[0]["chips"]).isdisjoint(reps[1]["chips"])
        assert set(status["allocation"]["chips"]) == set(reps[0]["chips"]) | set(reps[1]["chips"])
        assert sorted(status["allocation"]["ultraServers"]) == ["gen2-0000", "gen2-0001"]
        assert not kube.ijobs["serve"]["metadata"].get("finalizers")  # deletion needs none
        assert set(c.allocator.allocations()) == {"ij/ns/serve#0", "ij/ns/serve#1"}
        assert any(cond["type"] == "Admitted" and cond["status"] == "True"
                   for cond in status["conditions"])

    run(scenario)


def test_a_job_is_admitted_whole_or_not_at_all_and_does_not_block_backfill() -> None:
    # gen2-0000 [144]: 2 x 100 never fits one UltraServer twice; a 40-chip job behind it runs.
    # Then gen2-0001 joins: replica 0 on the 104 left of gen2-0000, replica 1 on gen2-0001.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_inference("serve", 2, 100, priority=5)
        kube.add_job("small", 40)
        await c.sync()
        await settle(c)
        serve = kube.ijobs["serve"]["status"]
        assert serve["phase"] == "Pending" and serve["reason"] == "NoCapacity"
        assert "replica 2 of 2" in serve["message"] and "allocation" not in serve
        assert serve["queuePosition"] == 1
        assert kube.jobs["small"]["status"]["phase"] == "Admitted"
        assert set(c.allocator.allocations()) == {"tj/ns/small"}  # replica 0 was given back
        c.observe_ultraserver({"metadata": {"name": "gen2-0001"},
                               "spec": {"profile": "trn3-gen2", "network": ["block-000"]}})
        await settle(c)
        assert kube.ijobs["serve"]["status"]["phase"] == "Admitted"
        small = set(kube.jobs["small"]["status"]["allocation"]["chips"])
        chips = [set(r["chips"]) for r in replicas_of(kube.ijobs["serve"])]
        assert all(len(r) == 100 and r.isdisjoint(small) for r in chips)

    run(scenario)


def test_a_training_and_an_inference_job_of_the_same_name_never_collide() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_job("same", 40)
        kube.add_inference("same", 2, 16)
        await c.sync()
        await settle(c)
        train = set(kube.jobs["same"]["status"]["allocation"]["chips"])
        serve = set(kube.ijobs["same"]["status"]["allocation"]["chips"])
        assert len(train) == 40 and len(serve) == 32 and train.isdisjoint(serve)
        assert set(c.admissions.running()) == {"tj/ns/same", "ij/ns/same"}
        assert kube.us_status["gen2-0000"]["allocated"]["chips"] == 72
        assert kube.us_status["gen2-0000"]["jobs"] == ["ij/ns/same", "tj/ns/same"]
        # Deleting the InferenceJob frees its chips only.
        gone = kube.ijobs.pop("same")
        c.observe_job(gone, deleted=True)
        await settle(c)
        assert set(c.admissions.running()) == {"tj/ns/same"}
        assert kube.us_status["gen2-0000"]["allocated"]["chips"] == 40
        assert kube.us_status["gen2-0000"]["jobs"] == ["tj/ns/same"]
        assert set(kube.jobs["same"]["status"]["allocation"]["chips"]) == train

    run(scenario)


def test_an_inference_job_is_a_victim_as_a_whole() -> None:
    # gen2-0000 [serve#0 72 | serve#1 72]; train (144, priority 5) arrives.
    async def scenario() -> None:
        kube, c = await admitted_fleet(1, ("serve", 2, 72, 0))
        assert kube.ijobs["serve"]["status"]["phase"] == "Admitted"
        c.observe_job(kube.add_job("train", 144, priority=5))
        await settle(c)
        order = [name for name, phase in kube.log if phase in ("Preempted", "Admitted")]
        assert order.index("serve", 1) < order.index("train")
        assert order.count("serve") == 2  # one eviction for the job, not one per replica
        serve = kube.ijobs["serve"]["status"]
        assert serve["phase"] in ("Preempted", "Pending") and serve["preemptions"] == 1
        assert any(cond["type"] == "Preempted" and cond["status"] == "True"
                   for cond in serve["conditions"])
        assert "allocation" not in serve
        assert kube.jobs["train"]["status"]["phase"] == "Admitted"
        assert set(c.allocator.allocations()) == {"tj/ns/train"}

    run(scenario)


def test_an_inference_job_preempts_lower_priority_work() -> None:
    # gen2-0000 [low 144]; serve (2 x 72, priority 5) arrives.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_job("low", 144)
        await c.sync()
        await settle(c)
        c.observe_job(kube.add_inference("serve", 2, 72, priority=5))
        await settle(c)
        assert ("low", "Preempted") in kube.log
        assert kube.jobs["low"]["status"]["phase"] in ("Preempted", "Pending")
        assert "allocation" not in kube.jobs["low"]["status"]
        assert kube.ijobs["serve"]["status"]["phase"] == "Admitted"
        assert len(replicas_of(kube.ijobs["serve"])) == 2

    run(scenario)


def test_an_unplaceable_preemptor_evicts_nobody() -> None:
    # gen2-0000 [low 144]; serve (2 x 144, priority 5): replica 1 could evict low, replica 2
    # fits nowhere, so low keeps its chips and is never written Preempted.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_job("low", 144)
        await c.sync()
        await settle(c)
        chips = kube.jobs["low"]["status"]["allocation"]["chips"]
        c.observe_job(kube.add_inference("serve", 2, 144, priority=5))
        await settle(c)
        assert ("low", "Preempted") not in kube.log
        assert kube.jobs["low"]["status"]["phase"] == "Admitted"
        assert kube.jobs["low"]["status"]["allocation"]["chips"] == chips
        assert kube.ijobs["serve"]["status"]["phase"] == "Pending"
        assert sorted(c.allocator.allocations()[JobKey("tj/ns/low")].chip_ids) == sorted(chips)

    run(scenario)


def fail_chip(c: Controller, chip: str) -> None:
    us, ref = chip.split("/", 1)
    c.observe_ultraserver({"metadata": {"name": us},
                           "spec": {"profile": "trn3-gen2", "network": ["block-000"],
                                    "failedChips": [ref]}})


def test_a_failed_chip_replaces_only_the_affected_replica() -> None:
    async def scenario() -> None:
        kube, c = await admitted_fleet(2, ("serve", 2, 16, 0))
        before = replicas_of(kube.ijobs["serve"])
        victim = sorted(before[1]["chips"])[0]
        fail_chip(c, victim)
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert status["phase"] == "Admitted" and status["reason"] == "ChipReplaced"
        assert status["restarts"] == 1 and status["attempt"] == 2
        after = replicas_of(kube.ijobs["serve"])
        assert after[0]["chips"] == before[0]["chips"]
        assert victim not in after[1]["chips"] and len(set(after[1]["chips"])) == 16
        assert len(set(after[1]["chips"]) - set(before[1]["chips"])) == 1
        assert victim not in status["allocation"]["chips"]

    run(scenario)


def test_a_failed_chip_restarts_the_job_when_no_replacement_fits() -> None:
    # gen2-0000 [serve#0 72 | serve#1 72] full; a chip fails: 143 healthy chips < 2 x 72.
    async def scenario() -> None:
        kube, c = await admitted_fleet(1, ("serve", 2, 72, 0))
        victim = replicas_of(kube.ijobs["serve"])[0]["chips"][0]
        fail_chip(c, victim)
        await settle(c)
        status = kube.ijobs["serve"]["status"]
        assert ("serve", "Pending") in kube.log
        assert status["phase"] == "Pending" and status["restarts"] == 1
        assert "allocation" not in status
        assert c.allocator.allocations() == {}
        assert c.admissions.is_waiting(JobKey("ij/ns/serve"))

    run(scenario)


def test_restart_readopts_every_replica_and_requeues_a_partial_allocation() -> None:
    async def scenario() -> None:
        kube, _ = await admitted_fleet(2, ("serve", 2, 100, 0))
        chips = [r["chips"] for r in replicas_of(kube.ijobs["serve"])]
        # A job whose status lists one replica for a two-replica spec cannot be re-adopted.
        kube.add_inference("half", 2, 16, phase="Admitted", allocation={
            "chips": ["gen2-0000/s00/c00"], "replicas": [
                {"index": 0, "chips": [f"gen2-0001/s{s:02d}/c0{i}"
                                       for s in range(35, 36) for i in range(4)]}]})
        second = controller(kube, 2)
        await second.sync()
        assert second.admissions.is_running(JobKey("ij/ns/serve"))
        assert [sorted(p.chip_ids) for p in second.admissions.placements(
            JobKey("ij/ns/serve"))] == [sorted(x) for x in chips]
        assert not second.admissions.is_running(JobKey("ij/ns/half"))
        await settle(second)
        half = kube.ijobs["half"]["status"]
        assert ("half", "Pending") in kube.log  # the AllocationLost restart was written
        assert half["phase"] == "Admitted" and len(replicas_of(kube.ijobs["half"])) == 2
        assert [r["chips"] for r in replicas_of(kube.ijobs["serve"])] == chips
        held = [c for p in second.allocator.allocations().values() for c in p.chip_ids]
        assert len(held) == len(set(held)) == 232

    run(scenario)


def test_invalid_inference_spec_fails_with_the_field() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, 1)
        kube.add_inference("bad", 2, 0)
        await c.sync()
        await settle(c)
        status = kube.ijobs["bad"]["status"]
        assert status["phase"] == "Failed" and status["reason"] == "InvalidSpec"
        assert "chipsPerReplica" in status["message"]

    run(scenario)
