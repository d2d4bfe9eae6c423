"""The admission loop against an in-memory API server: write order, conflicts, recovery."""

from __future__ import annotations

import asyncio

from tests.unit.operator_fakes import FakeKube, controller, settle


def test_victim_is_persisted_before_the_preemptor() -> None:
    # gen2-0000 [low 144]; high (144, priority 5) arrives.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("low", 144)
        await c.sync()
        await settle(c)
        assert kube.jobs["low"]["status"]["phase"] == "Admitted"
        c.observe_job(kube.add_job("high", 144, 5))
        await settle(c)
        order = [name for name, phase in kube.log if phase in ("Preempted", "Admitted")]
        assert order.index("low", 1) < order.index("high")
        assert kube.jobs["high"]["status"]["phase"] == "Admitted"
        assert kube.jobs["low"]["status"]["phase"] in ("Preempted", "Pending")
        assert "allocation" not in kube.jobs["low"]["status"]

    asyncio.run(scenario())


def test_conflict_rereads_and_retries() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("a", 16)
        await c.sync()
        kube.conflicts = 2
        await settle(c)
        assert kube.jobs["a"]["status"]["phase"] == "Admitted"

    asyncio.run(scenario())


def test_restart_trusts_job_status_and_never_double_allocates() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        first = controller(kube)
        kube.add_job("a", 144)
        await first.sync()
        await settle(first)
        chips = kube.jobs["a"]["status"]["allocation"]["chips"]
        # A second job claims the same chips in its status (as if written by a broken replica).
        kube.add_job("b", 144, phase="Admitted", allocation={"chips": chips})
        second = controller(kube)
        await second.sync()
        await settle(second)
        assert kube.jobs["a"]["status"]["allocation"]["chips"] == chips
        assert kube.jobs["b"]["status"]["phase"] == "Pending"
        assert second.allocator.allocations().keys() == {"tj/ns/a"}

    asyncio.run(scenario())


def test_an_edit_to_a_pending_jobs_spec_is_picked_up_without_a_restart() -> None:
    # gen2-0000 [a 100 | 44 free]; w waits for 100 chips; its spec is edited to 40: it fits.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("a", 100)
        await c.sync()
        await settle(c)
        c.observe_job(kube.add_job("w", 100))
        await settle(c)
        assert kube.jobs["w"]["status"]["phase"] == "Pending"
        obj = kube.jobs["w"]
        obj["spec"]["chips"] = 40
        c.observe_job(kube.bump(obj))
        await settle(c)
        assert kube.jobs["w"]["status"]["phase"] == "Admitted"
        assert len(kube.jobs["w"]["status"]["allocation"]["chips"]) == 40

    asyncio.run(scenario())
