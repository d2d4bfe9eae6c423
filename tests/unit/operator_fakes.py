"""An in-memory API server for the operator's unit tests, and helpers to drive a Controller."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ultraplane.operator.controllers import Controller
from ultraplane.operator.kube import Conflict, Gone

from ultraplane.ids import JobKey

KINDS = {"trainingjobs": "TrainingJob", "inferencejobs": "InferenceJob"}


class FakeKube:
    """Stores objects, bumps resourceVersion on every write, enforces the precondition.

    `jobs` holds TrainingJobs and `ijobs` InferenceJobs, each by name; `log` records every
    status write as (name, phase) and every UltraServer status write as (name, "us").
    """

    def __init__(self) -> None:
        self.rv = 10
        self.objects: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in KINDS}
        self.jobs = self.objects["trainingjobs"]
        self.ijobs = self.objects["inferencejobs"]
        self.servers: list[dict[str, Any]] = []
        self.us_status: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []
        self.conflicts = 0
        self.created = 0

    def bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    def _add(self, plural: str, name: str, spec: dict[str, Any],
             status: dict[str, Any]) -> dict[str, Any]:
        obj = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": KINDS[plural],
               "metadata": {"namespace": "ns", "name": name, "uid": f"{plural}-{name}",
                            "creationTimestamp": f"2026-01-01T00:{self.created // 60:02d}:"
                                                 f"{self.created % 60:02d}Z"},
               "spec": spec, "status": status}
        self.created += 1
        self.objects[plural][name] = obj
        return self.bump(obj)

    def add_job(self, name: str, chips: int, priority: int = 0, **status: Any) -> dict[str, Any]:
        spec = {"chips": chips, "priority": priority, "topology": {"requiredLevel": "ultraserver"}}
        return self._add("trainingjobs", name, spec, status)

    def add_inference(self, name: str, replicas: int, chips_per_replica: int, priority: int = 0,
                      level: str = "ultraserver", **status: Any) -> dict[str, Any]:
        spec = {"replicas": replicas, "chipsPerReplica": chips_per_replica, "priority": priority,
                "topology": {"requiredLevel": level}, "model": {"name": "llama"},
                "load": {"requestsPerSecond": 10}}
        return self._add("inferencejobs", name, spec, status)

    def list_ultraservers(self, fleet: str | None) -> list[dict[str, Any]]:
        return copy.deepcopy(self.servers)

    def list_jobs(self, namespaces: list[str] | None) -> list[dict[str, Any]]:
        return copy.deepcopy([o for objs in self.objects.values() for o in objs.values()])

    def get_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.objects[plural]:
            raise Gone(name)
        return copy.deepcopy(self.objects[plural][name])

    def patch_job_status(self, plural: str, namespace: str, name: str,
                         status: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        obj = self.objects[plural][name]
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
        self.log.append((name, str(status.get("phase", "-"))))
        return self.bump(obj)

    def set_finalizer(self, plural: str, namespace: str, name: str, finalizers: list[str],
                      present: bool, resource_version: str) -> dict[str, Any]:
        if name not in self.objects[plural]:
            raise Gone(name)
        obj = self.objects[plural][name]
        obj["metadata"]["finalizers"] = ["ultraplane.dev/release-chips"] if present else []
        return self.bump(obj)

    def list_tenantqueues(self, fleet: str | None) -> list[dict[str, Any]]:
        return []

    def patch_tenantqueue_status(self, name: str, status: Mapping[str, Any]) -> None:
        pass

    def list_tenantcohorts(self, fleet: str | None) -> list[dict[str, Any]]:
        return []

    def patch_tenantcohort_status(self, name: str, status: Mapping[str, Any]) -> None:
        pass

    def list_powerbudgets(self, fleet: str | None) -> list[dict[str, Any]]:
        return []

    def patch_powerbudget_status(self, name: str, status: Mapping[str, Any]) -> None:
        pass

    def patch_ultraserver_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.us_status[name] = copy.deepcopy(dict(status))
        self.log.append((name, "us"))


def controller(kube: FakeKube, servers: int = 1) -> Controller:
    kube.servers = [{"metadata": {"name": f"gen2-{i:04d}"},
                     "spec": {"profile": "trn3-gen2", "network": ["block-000"]}}
                    for i in range(servers)]
    return Controller(kube, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
                      emit=lambda *a: None, batch_seconds=0, us_seconds=0)


async def settle(c: Controller, cycles: int = 3) -> None:
    for _ in range(cycles):
        await c.run_cycle()
        await c.positions_written()


async def until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (on the running loop) until `check()` holds; fail naming `what` after `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def stopped(task: asyncio.Task[None]) -> None:
    """Cancel a Controller's `run()` task and wait for it to end."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass
class Gate:
    """A launch backlog (`admission.LaunchGate`) set by hand: `why` holds the cycles, `pods`
    is each cycle's budget, `owed` records what admissions owe."""

    why: str | None = None
    pods: int | None = None
    owed: list[tuple[JobKey, int]] = field(default_factory=list)

    def held(self) -> str | None:
        return self.why

    def budget(self) -> int | None:
        return self.pods

    def owe(self, key: JobKey, pods: int) -> None:
        self.owed.append((key, pods))
