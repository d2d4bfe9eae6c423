"""The real FastAPI app (embedded backend, SQLite) driven over HTTP with a fake clock.

Fleet in every test (8 Gen2 UltraServers, 144 chips = 36 servers x 4 chips each):

    block-000: [gen2-0000] [gen2-0001] ... [gen2-0007]    1,152 chips

The clock is injected, so simulated time moves only when a test says so
(`fleet.advance(wall_seconds)`; time scale 60x) and every tick is explicit: the app runs no
background ticks, so a create never races a test's own tick.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

NS = "team-a"


@dataclass
class Fleet:
    client: TestClient
    app: Any
    now: list[float]

    def advance(self, wall_seconds: float) -> None:
        self.now[0] += wall_seconds
        self.app.state.backend.tick()

    def job(self, name: str, plural: str = "trainingjobs") -> dict[str, Any]:
        r = self.client.get(f"/v1/namespaces/{NS}/{plural}/{name}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def submit(self, name: str, chips: int, *, priority: int = 0, duration: int = 3600,
               level: str | None = "ultraserver") -> dict[str, Any]:
        spec: dict[str, Any] = {"chips": chips, "priority": priority,
                                "work": {"durationSeconds": duration}}
        if level:
            spec["topology"] = {"requiredLevel": level}
        r = self.client.post(f"/v1/namespaces/{NS}/trainingjobs",
                             json={"metadata": {"name": name}, "spec": spec})
        assert r.status_code == 201, r.text
        return dict(r.json())


def make_fleet(tmp_path: Path, **overrides: Any) -> Iterator[Fleet]:
    now = [1_767_225_600.0]  # 2026-01-01T00:00:00Z
    values: dict[str, Any] = {"db": f"sqlite:///{tmp_path / 'api.db'}", "demo": False,
                              "tick_seconds": 3600.0, "time_scale": 60.0}
    values.update(overrides)
    app = create_app(Settings(**values), clock=lambda: now[0], background_ticks=False)
    with TestClient(app) as client:
        yield Fleet(client, app, now)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    yield from make_fleet(tmp_path)


def test_health_ready_and_metrics(fleet: Fleet) -> None:
    assert fleet.client.get("/healthz").json()["status"] == "ok"
    assert fleet.client.get("/readyz").status_code == 200
    fleet.client.get("/v1/ultraservers")
    text = fleet.client.get("/metrics").text
    assert "ultraplane_fleet_chips 1152.0" in text
    assert 'ultraplane_http_requests_total{method="GET",route="/v1/ultraservers",status="200"}' in text


def test_ultraservers_and_capacity(fleet: Fleet) -> None:
    items = fleet.client.get("/v1/ultraservers").json()["items"]
    assert [u["name"] for u in items] == [f"gen2-{i:04d}" for i in range(8)]
    assert {u["chips"] for u in items} == {144}
    one = fleet.client.get("/v1/ultraservers/gen2-0003").json()
    assert one["freeChips"] == 144 and one["network"] == ["block-000"]
    missing = fleet.client.get("/v1/ultraservers/nope-0001")
    assert missing.status_code == 404
    assert missing.json()["field"] == "name"
    fleet.submit("big", 144)
    fleet.advance(1)
    cap = fleet.client.get("/v1/capacity").json()
    assert set(cap) == {"cluster", "ultraServers", "levels", "fits", "utilization"}
    assert cap["cluster"] == {
        "name": "cluster", "level": "cluster", "total": 1152, "allocated": 144, "free": 1008,
        "unusable": 0, "freeWholeServers": 7 * 36, "freeWholeRacks": cap["cluster"]["freeWholeRacks"],
        "freeWholeUltraServers": 7}
    assert [u["name"] for u in cap["ultraServers"]] == [f"gen2-{i:04d}" for i in range(8)]
    assert sorted(u["allocated"] for u in cap["ultraServers"]) == [0] * 7 + [144]
    assert cap["fits"]["144"] == 7 and cap["fits"]["1"] == 1008
    assert cap["utilization"] == 144 / 1152
    assert {d["name"] for ds in cap["levels"].values() for d in ds} >= {"block-000"}
    busy = [u for u in fleet.client.get("/v1/ultraservers").json()["items"] if u["allocatedChips"]]
    assert len(busy) == 1 and busy[0]["allocatedChips"] == 144 and busy[0]["jobs"] == [f"tj/{NS}/big"]


def test_job_lifecycle_and_accounting(fleet: Fleet) -> None:
    created = fleet.submit("llm", 72, duration=3600)
    assert created["kind"] == "TrainingJob" and created["status"]["phase"] == "Pending"
    assert created["spec"]["chips"] == 72
    fleet.advance(1)
    job = fleet.job("llm")
    assert job["status"]["phase"] == "Running"
    chips = job["status"]["allocation"]["chips"]
    assert len(chips) == 72 and len({c.split("/")[0] for c in chips}) == 1  # one NeuronSwitch domain
    fleet.advance(30)  # 30 min simulated
    assert 0 < fleet.job("llm")["status"]["progressPercent"] < 100
    fleet.advance(60)  # well past its hour of work
    job = fleet.job("llm")
    assert job["status"]["phase"] == "Succeeded"
    [record] = fleet.client.get("/v1/accounting/jobs", params={"namespace": NS}).json()
    # An hour of work plus checkpoint/restart overheads, on 72 chips.
    assert 72.0 <= record["chipHours"] <= 72 * 1.25
    assert record["energyKWh"] > 0 and record["completionTimeS"] >= 3600
    [ns] = fleet.client.get("/v1/accounting/namespaces").json()
    assert ns["namespace"] == NS and ns["finishedJobs"] == 1
    assert ns["chipHours"] == pytest.approx(record["chipHours"])
    days = fleet.client.get("/v1/accounting/days").json()
    assert [d["day"] for d in days] == ["2026-01-01"]
    assert days[0]["energyKWh"] == pytest.approx(record["energyKWh"])
    # Chips are free again.
    assert all(u["allocatedChips"] == 0 for u in fleet.client.get("/v1/ultraservers").json()["items"])


def test_usage_crossing_midnight_is_split_by_day(fleet: Fleet) -> None:
    fleet.now[0] += 23 * 60  # 23:00 simulated
    fleet.submit("night", 4, duration=7200, level="server")
    fleet.advance(1)
    for _ in range(4):
        fleet.advance(40)
    days = {d["day"]: d for d in fleet.client.get("/v1/accounting/days").json()}
    assert set(days) == {"2026-01-01", "2026-01-02"}
    assert days["2026-01-01"]["chipHours"] == pytest.approx(4 * 59 / 60, rel=0.05)


def test_create_conflict_list_and_delete(fleet: Fleet) -> None:
    fleet.submit("a", 4, level="server")
    dup = fleet.client.post(f"/v1/namespaces/{NS}/trainingjobs",
                            json={"metadata": {"name": "a"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}})
    assert dup.status_code == 409 and dup.json()["field"] == "metadata.name"
    fleet.submit("b", 16, level="rack")
    fleet.advance(1)
    names = [j["metadata"]["name"] for j in fleet.client.get(f"/v1/namespaces/{NS}/trainingjobs").json()["items"]]
    assert names == ["a", "b"]
    assert fleet.client.get("/v1/trainingjobs", params={"namespace": "other"}).json()["items"] == []
    gone = fleet.client.delete(f"/v1/namespaces/{NS}/trainingjobs/a")
    # the job as it was when deleted: the CRD's phases have no Deleted (issue 27)
    assert gone.status_code == 200 and gone.json()["status"]["phase"] == "Running"
    assert fleet.client.get(f"/v1/namespaces/{NS}/trainingjobs/a").status_code == 404
    assert fleet.client.delete(f"/v1/namespaces/{NS}/trainingjobs/a").status_code == 404
    records = {r["name"]: r for r in fleet.client.get("/v1/accounting/jobs").json()}
    assert records["a"]["phase"] == "Deleted"  # accounting outlives the job


def test_inference_job_places_each_replica(fleet: Fleet) -> None:
    body = {"metadata": {"name": "chat"},
            "spec": {"replicas": 2, "chipsPerReplica": 16, "topology": {"requiredLevel": "rack"},
                     "model": {"name": "llama-3-70b", "parametersBillions": 70},
                     "load": {"requestsPerSecond": 50}, "durationSeconds": 3600}}
    r = fleet.client.post(f"/v1/namespaces/{NS}/inferencejobs", json=body)
    assert r.status_code == 201, r.text
    fleet.advance(1)
    job = fleet.job("chat", "inferencejobs")
    assert job["status"]["phase"] == "Running"
    replicas = job["status"]["allocation"]["replicas"]
    assert [rep["index"] for rep in replicas] == [0, 1]
    assert all(len(rep["chips"]) == 16 for rep in replicas)
    assert job["status"]["chips"] == 32  # every replica together, as the CRD's Chips column
    assert not set(replicas[0]["chips"]) & set(replicas[1]["chips"])
    fleet.advance(1)  # serving is sampled from the tick after the one that placed it
    assert fleet.job("chat", "inferencejobs")["status"]["tokensPerSecond"] > 0


def test_preemption_frees_one_domain_for_a_high_priority_job(fleet: Fleet) -> None:
    for i in range(8):
        fleet.submit(f"low-{i}", 144, priority=0, duration=20_000)
    fleet.advance(1)
    fleet.submit("urgent", 144, priority=100)
    fleet.advance(1)
    assert fleet.job("urgent")["status"]["phase"] == "Running"
    # the victim waits again at once (as the operator's next cycle writes it): Pending, with
    # the Preempted condition naming who took its chips
    phases = [fleet.job(f"low-{i}")["status"]["phase"] for i in range(8)]
    assert phases.count("Pending") == 1 and phases.count("Running") == 7
    victim = fleet.job(f"low-{phases.index('Pending')}")["status"]
    preempted = {c["type"]: c for c in victim["conditions"]}["Preempted"]
    assert victim["preemptions"] == 1 and preempted["status"] == "True"
    assert "urgent" in preempted["message"] and victim["queuePosition"] == 1


def test_dry_run_placement_alternatives_and_preemption(fleet: Fleet) -> None:
    r = fleet.client.post("/v1/placements:dryRun",
                          json={"chips": 144, "requiredLevel": "ultraserver", "alternatives": 3})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["fits"] and len(out["placement"]["chipIds"]) == 144
    assert len(out["alternatives"]) == 3
    seen = [tuple(out["placement"]["ultraServers"])] + [tuple(a["ultraServers"]) for a in out["alternatives"]]
    assert len(set(seen)) == 4  # each alternative is another UltraServer
    for i in range(8):
        fleet.submit(f"low-{i}", 144, priority=0, duration=20_000)
    fleet.advance(1)
    full = fleet.client.post("/v1/placements:dryRun",
                             json={"chips": 144, "requiredLevel": "ultraserver", "priority": 50}).json()
    assert not full["fits"] and full["reason"]["kind"] == "NoCapacity"
    [victim] = full["preemption"]["victims"]
    assert victim.startswith(f"{NS}/low-")
    same = fleet.client.post("/v1/placements:dryRun",
                             json={"chips": 144, "requiredLevel": "ultraserver", "priority": 0}).json()
    assert "preemption" not in same  # equal priority never preempts
    # The dry run took nothing.
    assert sum(u["allocatedChips"] for u in fleet.client.get("/v1/ultraservers").json()["items"]) == 1152


def test_dry_run_keeps_a_gang_that_fits_one_ultraserver_local_unless_it_opts_in(
        fleet: Fleet) -> None:
    # 8 UltraServers, each [100 chips used | 44 free]: 72 chips fit no single one.
    for i in range(8):
        fleet.submit(f"part-{i}", 100, duration=20_000)
    fleet.advance(1)
    local = fleet.client.post("/v1/placements:dryRun", json={"chips": 72}).json()
    assert not local["fits"] and local["reason"]["kind"] == "NoCapacity"
    spread = fleet.client.post("/v1/placements:dryRun",
                               json={"chips": 72, "mode": "Unconstrained"}).json()
    assert spread["fits"] and len(spread["placement"]["ultraServers"]) == 2
    block = fleet.client.post("/v1/placements:dryRun",
                              json={"chips": 72, "requiredLevel": "block"}).json()
    assert block["fits"]  # a required level above the UltraServer opts in too


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("post", f"/v1/namespaces/{NS}/trainingjobs",
         {"metadata": {"name": "x"}, "spec": {"chips": 0, "work": {"durationSeconds": 60}}}, 422, "body.spec.chips"),
        ("post", f"/v1/namespaces/{NS}/trainingjobs",
         {"metadata": {"name": "x"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}, "chipz": 1}}, 422, "body.spec.chipz"),
        ("post", f"/v1/namespaces/{NS}/trainingjobs",
         {"metadata": {"name": "Bad_Name"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}}, 422, "body.metadata.name"),
        ("post", "/v1/namespaces/UPPER/trainingjobs",
         {"metadata": {"name": "x"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}}, 422, "path.namespace"),
        ("post", "/v1/placements:dryRun", {"chips": 4, "requiredLevel": "galaxy"}, 422, "body.requiredLevel"),
        ("post", "/v1/placements:dryRun", {"chips": 4, "profile": "trn9"}, 422, "body.profile"),
        ("post", "/v1/placements:dryRun", {"chips": "many"}, 422, "body.chips"),
        ("post", "/v1/placements:dryRun", {"chips": 4, "mode": "Sometimes"}, 422, "body.mode"),
        ("post", f"/v1/namespaces/{NS}/trainingjobs",
         {"metadata": {"name": "x"}, "spec": {"chips": 4, "work": {"durationSeconds": 60},
                                              "topology": {"mode": "Often"}}},
         422, "body.spec.topology.mode"),
        ("get", "/v1/accounting/days?since=yesterday", None, 422, "query.since"),
        ("get", f"/v1/namespaces/{NS}/inferencejobs/ghost", None, 404, "name"),
    ],
)
def test_bad_input_gets_4xx_naming_the_field(
    fleet: Fleet, method: str, path: str, body: Any, status: int, field: str
) -> None:
    r = fleet.client.request(method.upper(), path, json=body)
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["field"] == field
    assert payload["error"] and payload["message"]


def test_malformed_json_is_a_400_not_a_500(fleet: Fleet) -> None:
    r = fleet.client.post(f"/v1/namespaces/{NS}/trainingjobs", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "BadRequest"
    assert r.json()["message"].startswith("the request body is not valid JSON")


@pytest.mark.parametrize(("policy", "phase"), [("RestartAll", "Running"), ("Fail", "Failed")])
def test_chip_failure_follows_the_failure_policy(fleet: Fleet, policy: str, phase: str) -> None:
    r = fleet.client.post(f"/v1/namespaces/{NS}/trainingjobs", json={
        "metadata": {"name": "fragile"},
        "spec": {"chips": 16, "topology": {"requiredLevel": "rack"}, "failurePolicy": policy,
                 "work": {"durationSeconds": 20_000}}})
    assert r.status_code == 201, r.text
    fleet.advance(1)
    fleet.advance(20)
    before = fleet.job("fragile")["status"]
    broken = before["allocation"]["chips"][0]
    assert fleet.app.state.backend.fail_chip(broken) == [f"tj/{NS}/fragile"]
    fleet.advance(1)  # the event: RestartAll requeues from the checkpoint, Fail ends the job
    fleet.advance(1)  # the next cycle places it again, away from the broken chip
    after = fleet.job("fragile")["status"]
    assert after["phase"] == phase
    if phase == "Running":
        assert after["restarts"] == 1 and broken not in after["allocation"]["chips"]
        assert after["progress"]["completedSteps"] >= before["progress"]["checkpointedSteps"]
    else:
        assert after["reason"] == "ChipFailed" and broken in after["message"]  # as the operator


def test_demo_stream_keeps_the_fleet_busy_and_bounded(tmp_path: Path) -> None:
    for fleet in make_fleet(tmp_path, demo=True):
        for _ in range(240):  # 4 simulated hours in 1-minute ticks
            fleet.advance(1)
        jobs = (fleet.client.get("/v1/trainingjobs").json()["items"]
                + fleet.client.get("/v1/inferencejobs").json()["items"])
        phases = [j["status"]["phase"] for j in jobs]
        assert phases.count("Running") >= 3
        assert "Succeeded" in phases  # demo jobs last 30 min to 4 h
        busy = sum(u["allocatedChips"] for u in fleet.client.get("/v1/ultraservers").json()["items"])
        assert busy >= 1152 // 4
        [usage] = fleet.client.get("/v1/accounting/namespaces").json()
        assert usage["namespace"] == "demo" and usage["chipHours"] > 0
        assert usage["finishedJobs"] >= 1 and usage["meanCompletionTimeS"] > 0


def test_embedded_fleet_shows_the_backfill_reservation(fleet: Fleet) -> None:
    # 8 UltraServers, each 100 chips used: a 144-chip gang waits and reserves one of them.
    # Seven 30-chip jobs behind it fill the other seven (14 free each), never the reserved one.
    for i in range(8):
        fleet.submit(f"r{i}", 100)
    fleet.advance(1)
    fleet.submit("big", 144)
    fleet.advance(1)
    big = fleet.job("big")
    assert big["status"]["phase"] == "Pending" and "reserved for it" in big["status"]["message"]
    items = fleet.client.get("/v1/ultraservers").json()["items"]
    reserved = [u["name"] for u in items if u.get("reservedFor") == f"tj/{NS}/big"]
    assert len(reserved) == 1
    assert all(u.get("reservedFor") in (None, f"tj/{NS}/big") for u in items)
    for i in range(7):
        fleet.submit(f"f{i}", 30)
    fleet.advance(1)
    for i in range(7):
        job = fleet.job(f"f{i}")
        assert job["status"]["allocation"]["ultraServers"] != reserved, job["status"]

    # A dry run answers as the scheduler would place: a 40-chip request queued behind the gang
    # (same priority) does not fit, since only the reserved UltraServer has room; one that
    # outranks the gang goes there.
    def dry(priority: int) -> dict[str, Any]:
        r = fleet.client.post("/v1/placements:dryRun", json={
            "chips": 40, "requiredLevel": "ultraserver", "priority": priority,
            "alternatives": 0})
        assert r.status_code == 200, r.text
        return dict(r.json())

    behind = dry(0)
    assert not behind["fits"] and behind["reason"]["kind"] == "NoCapacity"
    ahead = dry(10)
    assert ahead["fits"] and ahead["placement"]["ultraServers"] == reserved
    fleet.submit("mid", 40)
    fleet.advance(1)
    assert fleet.job("mid")["status"]["phase"] == "Pending"
    # The dry runs left the fleet as it was: the reserved UltraServer still has 44 free.
    one = fleet.client.get(f"/v1/ultraservers/{reserved[0]}").json()
    assert one["freeChips"] == 44 and one["reservedFor"] == f"tj/{NS}/big"
