"""The same resource bodies, read by every adapter through `ultraplane.documents.conversions`.

    UltraServer us-a (trn3-gen2 with spec.servers: 18 -> 18 servers x 4 chips = 72 chips)
      s00: c00 c01 c02 c03   <- TrainingJob ns/same (Running, 4 chips)
      s01: c00 c01 c02 c03   <- InferenceJob ns/same replica 0 (Running)
      s02: c00 c01 c02 c03   <- InferenceJob ns/same replica 1 (Running)

A TrainingJob and an InferenceJob of one name, and the InferenceJob's status carries the union
`allocation.chips` next to its replicas, as the operator writes it. Every adapter must see
72 chips, 12 of them held by two jobs.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from ultraplane.api.backends.kubernetes import KubernetesBackend
from ultraplane.api.schemas import DryRunRequest
from ultraplane.api.settings import Settings
from ultraplane.api.store import make_engine, migrate
from ultraplane.simulator.kubelets import VirtualKubelet

from tests.unit.operator_fakes import FakeKube, controller
from ultraplane.documents import conversions


def chips(server: int) -> list[str]:
    return [f"us-a/s{server:02d}/c{c:02d}" for c in range(4)]


US = {"apiVersion": conversions.API_VERSION, "kind": "UltraServer",
      "metadata": {"name": "us-a"},
      "spec": {"profile": "trn3-gen2", "servers": 18, "network": ["block-000"]}}
TRAINING = {"apiVersion": conversions.API_VERSION, "kind": "TrainingJob",
            "metadata": {"namespace": "ns", "name": "same", "uid": "t-1",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"chips": 4, "topology": {"requiredLevel": "ultraserver"},
                     "work": {"durationSeconds": 3600}},
            "status": {"phase": "Running", "attempt": 1, "allocation": {"chips": chips(0)}}}
INFERENCE = {"apiVersion": conversions.API_VERSION, "kind": "InferenceJob",
             "metadata": {"namespace": "ns", "name": "same", "uid": "i-1",
                          "creationTimestamp": "2026-01-01T00:00:01Z"},
             "spec": {"replicas": 2, "chipsPerReplica": 4,
                      "topology": {"requiredLevel": "ultraserver"},
                      "model": {"name": "llama", "parametersBillions": 8},
                      "load": {"requestsPerSecond": 10}},
             "status": {"phase": "Running", "attempt": 1, "allocation": {
                 "chips": chips(1) + chips(2),
                 "replicas": [{"index": 0, "chips": chips(1)}, {"index": 1, "chips": chips(2)}]}}}


def test_the_operator_reads_servers_and_both_jobs() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.servers = [copy.deepcopy(US)]
        kube.jobs["same"] = copy.deepcopy(TRAINING)
        kube.ijobs["same"] = copy.deepcopy(INFERENCE)
        await c.sync()
        report = c.allocator.capacity()
        assert report.cluster.total == 72  # not 144: spec.servers counts
        assert report.cluster.allocated == 12
        assert set(c.admissions.running()) == {"tj/ns/same", "ij/ns/same"}
        await c.views.flush()
        assert kube.us_status["us-a"]["capacity"]["chips"] == 72

    asyncio.run(scenario())


def test_the_virtual_kubelet_reads_servers_and_both_jobs() -> None:
    k = VirtualKubelet(clock=lambda: 1_000_000.0)
    k.sync_ultraservers([US])
    assert k.runtime.shape.total_chips == 72
    assert k.sync_jobs([TRAINING, INFERENCE]) == []
    assert set(k.runtime.keys()) == {"tj/ns/same", "ij/ns/same"}


class FakeCustomObjects:
    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    def list_cluster_custom_object(self, group: str, version: str,
                                   plural: str) -> dict[str, Any]:
        assert (group, version) == (conversions.GROUP, conversions.VERSION)
        return {"items": copy.deepcopy(self.objects.get(plural, []))}


@pytest.fixture
def snapshot(tmp_path: Path) -> KubernetesBackend:
    engine = make_engine(f"sqlite:///{tmp_path / 'k.db'}")
    migrate(engine)
    backend = KubernetesBackend(Settings(backend="kubernetes", db=str(engine.url)), engine,
                                clock=lambda: 1_767_225_600.0, api_client=object())
    backend.custom = FakeCustomObjects({  # type: ignore[assignment]
        conversions.ULTRASERVERS: [US], conversions.TRAINING: [TRAINING],
        conversions.INFERENCE: [INFERENCE]})
    backend.poll()
    return backend


def test_the_rest_snapshot_holds_every_replica_once_and_both_kinds(
        snapshot: KubernetesBackend) -> None:
    cluster = snapshot.capacity()["cluster"]
    assert (cluster["total"], cluster["allocated"]) == (72, 12)
    held = snapshot.allocator.allocations()
    assert set(held) == {"tj/ns/same", "ij/ns/same#0", "ij/ns/same#1"}
    # 72 chips of one UltraServer cannot fit while 12 are held, not even at a higher priority
    # (the jobs are preemptible, so the plan must name both of them)
    result = snapshot.dry_run(DryRunRequest(chips=72, required_level="ultraserver",
                                            priority=0))
    assert not result.fits


def test_one_ultraserver_reading_for_every_adapter() -> None:
    us, _spec = conversions.ultraserver_from_body(US)
    assert (us.server_count, us.chip_count) == (18, 72)
    with pytest.raises(ValueError, match="servers"):
        conversions.ultraserver_from_body({"metadata": {"name": "x"},
                                           "spec": {"profile": "trn3-gen2", "servers": 99}})
    assert conversions.held_parts("InferenceJob", "ns", "same", INFERENCE["status"]) == {
        "ij/ns/same#0": tuple(chips(1)), "ij/ns/same#1": tuple(chips(2))}
    assert conversions.allocated_chips(INFERENCE["status"]) == tuple(chips(1) + chips(2))


def test_kubernetes_accounting_takes_chip_hours_from_the_simulated_clock(
        tmp_path: Path) -> None:
    # One wall hour between startTime and completionTime, but the simulator (time scale 60)
    # ran 60 simulated hours: 4 chips x 60 h = 240 chip-hours, next to the energy of 60 h.
    from sqlmodel import Session
    from ultraplane.api import store

    done = copy.deepcopy(TRAINING)
    done["status"].update({"phase": "Succeeded", "startTime": "2026-01-01T00:00:00Z",
                           "completionTime": "2026-01-01T01:00:00Z", "chipHours": 240.0,
                           "energyKWh": 102.95})
    engine = make_engine(f"sqlite:///{tmp_path / 'acct.db'}")
    migrate(engine)
    backend = KubernetesBackend(Settings(backend="kubernetes", db=str(engine.url)), engine,
                                clock=lambda: 1_767_232_800.0, api_client=object())
    backend.custom = FakeCustomObjects({  # type: ignore[assignment]
        conversions.ULTRASERVERS: [US], conversions.TRAINING: [done]})
    backend.poll()
    with Session(engine) as session:
        (row,) = store.list_accounting(session)
    assert row.chip_hours == pytest.approx(240.0)
    assert row.energy_kwh == pytest.approx(102.95)


def test_a_dry_run_names_victims_as_users_know_them(snapshot: KubernetesBackend) -> None:
    result = snapshot.dry_run(DryRunRequest(chips=72, required_level="ultraserver",
                                            priority=10))
    victims = result.model_dump(by_alias=True).get("preemption") or {}
    named = victims.get("victims") or []
    assert named and set(named) <= {"ns/same"}
