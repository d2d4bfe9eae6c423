"""The admission loop against an in-memory API server: write order, conflicts, recovery."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ultraplane.operator.admission import Controller
from ultraplane.operator.kube import Conflict, Gone


class FakeKube:
    """Stores objects, bumps resourceVersion on every write, enforces the precondition."""

    def __init__(self) -> None:
        self.rv = 10
        self.jobs: dict[str, dict[str, Any]] = {}
        self.servers: list[dict[str, Any]] = []
        self.log: list[tuple[str, str]] = []
        self.conflicts = 0

    def bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    def add_job(self, name: str, chips: int, priority: int = 0, **status: Any) -> dict[str, Any]:
        obj = {"metadata": {"namespace": "ns", "name": name, "uid": name,
                            "creationTimestamp": f"2026-01-01T00:00:{len(self.jobs):02d}Z"},
               "spec": {"chips": chips, "priority": priority,
                        "topology": {"requiredLevel": "ultraserver"}},
               "status": status}
        self.jobs[name] = obj
        return self.bump(obj)

    def list_ultraservers(self, fleet: str | None) -> list[dict[str, Any]]:
        return copy.deepcopy(self.servers)

    def list_jobs(self, namespaces: list[str] | None) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.jobs.values()))

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.jobs:
            raise Gone(name)
        return copy.deepcopy(self.jobs[name])

    def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any],
                         resource_version: str) -> dict[str, Any]:
        obj = self.jobs[name]
        if self.conflicts:
            self.conflicts -= 1
            self.bump(obj)
        if resource_version != obj["metadata"]["resourceVersion"]:
            raise Conflict(name)
        for key, value in status.items():
            if value is None:
                obj["status"].pop(key, None)
            else:
                obj["status"][key] = copy.deepcopy(value)
        self.log.append((name, str(status["phase"])))
        return self.bump(obj)

    def set_finalizer(self, namespace: str, name: str, finalizers: list[str], present: bool,
                      resource_version: str) -> dict[str, Any]:
        obj = self.jobs[name]
        obj["metadata"]["finalizers"] = ["ultraplane.dev/release-chips"] if present else []
        return self.bump(obj)

    def patch_ultraserver_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.log.append((name, "us"))


def controller(kube: FakeKube, servers: int = 1) -> Controller:
    kube.servers = [{"metadata": {"name": f"gen2-{i:04d}"},
                     "spec": {"profile": "trn3-gen2", "network": ["block-000"]}}
                    for i in range(servers)]
    return Controller(kube, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
                      emit=lambda *a: None, batch_seconds=0)


async def settle(c: Controller, cycles: int = 3) -> None:
    for _ in range(cycles):
        await c.run_cycle()


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
        assert second.allocator.allocations().keys() == {"ns/a"}

    asyncio.run(scenario())
