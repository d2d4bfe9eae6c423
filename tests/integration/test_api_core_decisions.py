"""What the core decides, seen through `ultraplane serve`'s HTTP API (the real app, embedded
backend, SQLite, an injected clock): EASY backfill by predicted ends, and a chip failed through
`PATCH /v1/ultraservers/{name}` under each failure policy, with the operator's reasons and
conditions.

Fleet (8 Gen2 UltraServers of 144 chips = 36 servers x 4 chips, one block):

    block-000: [gen2-0000] [gen2-0001] ... [gen2-0007]    1,152 chips
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api_endpoints import NS, Fleet, make_fleet


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    yield from make_fleet(tmp_path)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def fail(fleet: Fleet, chip: str) -> dict[str, Any]:
    us, _, ref = chip.partition("/")
    now = fleet.client.get(f"/v1/ultraservers/{us}").json()["failedChips"]
    r = fleet.client.patch(f"/v1/ultraservers/{us}",
                           json={"spec": {"failedChips": [*now, ref]}})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_whole_fleet_job_waits_with_its_predicted_start_and_a_short_job_backfills(
        fleet: Fleet) -> None:
    # gen2-0000..0003: long (576 chips, 10 h). whole (1,152) waits for every UltraServer and
    # holds them all; short (144, 10 min) is predicted to end long before: it backfills.
    fleet.submit("long", 576, duration=36_000, level="cluster")
    fleet.advance(1)
    fleet.submit("whole", 1152, duration=3_600, level="cluster")
    fleet.advance(1)
    whole = fleet.job("whole")["status"]
    assert whole["phase"] == "Pending" and whole["reason"] == "NoCapacity"
    assert "8 UltraServers of block-000 reserved for it" in whole["message"]
    assert "(predicted to start in 10.0 h)" in whole["message"]  # long's end, 1 min later
    assert conditions(whole) == {"Admitted": ("False", "NoCapacity")}
    reserved = {u["name"] for u in fleet.client.get("/v1/ultraservers").json()["items"]
                if u.get("reservedFor") == f"tj/{NS}/whole"}
    assert len(reserved) == 8
    fleet.submit("short", 144, duration=600)
    fleet.advance(1)
    short = fleet.job("short")["status"]
    assert short["phase"] == "Running", short
    assert set(short["allocation"]["ultraServers"]) <= reserved
    assert "Backfilled onto UltraServers reserved for a waiting job" in short["message"]
    assert conditions(short)["Admitted"] == ("True", "Admitted")
    assert conditions(short)["Running"] == ("True", "Running")
    assert fleet.job("whole")["status"]["phase"] == "Pending"


@pytest.mark.parametrize("policy", ["ReplaceAffected", "RestartAll", "Fail"])
def test_a_chip_failed_through_the_api_follows_the_failure_policy(
        fleet: Fleet, policy: str) -> None:
    # 72 chips at the rack level: 18 servers of one UltraServer. One chip fails.
    r = fleet.client.post(f"/v1/namespaces/{NS}/trainingjobs", json={
        "metadata": {"name": "train"},
        "spec": {"chips": 72, "topology": {"requiredLevel": "ultraserver"},
                 "failurePolicy": policy, "work": {"durationSeconds": 36_000}}})
    assert r.status_code == 201, r.text
    fleet.advance(1)
    before = fleet.job("train")["status"]
    chips = before["allocation"]["chips"]
    broken = sorted(chips)[5]
    view = fail(fleet, broken)
    assert broken.partition("/")[2] in view["failedChips"]
    after = fleet.job("train")["status"]  # decided at once, before the next tick
    said = conditions(after)
    if policy == "ReplaceAffected":
        assert after["phase"] == "Running" and after["reason"] == "ChipReplaced"
        assert after["restarts"] == 1 and after["attempt"] == 2
        moved = set(chips) ^ set(after["allocation"]["chips"])
        assert broken in moved and len(moved) == 2  # only the failed chip was swapped
        server = broken.rsplit("/", 1)[0]
        assert {c.rsplit("/", 1)[0] for c in set(chips) - set(after["allocation"]["chips"])} \
            == {server}
        assert said["Admitted"] == ("True", "ChipReplaced") and said["Running"][0] == "True"
    elif policy == "RestartAll":
        # requeued whole (the patch wakes the tick, which may have placed it again already)
        assert after["restarts"] == 1 and broken not in (after.get("allocation") or {}).get(
            "chips", [])
        fleet.advance(1)
        again = fleet.job("train")["status"]
        assert again["phase"] == "Running" and again["reason"] == "Admitted"
        assert again["attempt"] == 2 and broken not in again["allocation"]["chips"]
        # the restart's conditions, as the operator writes them: readmitted, not preempted
        assert conditions(again)["Preempted"] == ("False", "ChipFailed")
        assert conditions(again)["Admitted"] == ("True", "Admitted")
    else:
        assert after["phase"] == "Failed" and after["reason"] == "ChipFailed"
        assert broken in after["message"] and "allocation" not in after
        assert said["Finished"] == ("True", "ChipFailed")
    assert "Deleted" not in str(after)


def test_an_inference_replica_on_a_failed_chip_moves_alone(fleet: Fleet) -> None:
    r = fleet.client.post(f"/v1/namespaces/{NS}/inferencejobs", json={
        "metadata": {"name": "serve"},
        "spec": {"replicas": 2, "chipsPerReplica": 16, "topology": {"requiredLevel": "rack"},
                 "model": {"name": "llama-3-70b", "parametersBillions": 70},
                 "load": {"requestsPerSecond": 10}, "durationSeconds": 36_000}})
    assert r.status_code == 201, r.text
    fleet.advance(1)
    before = fleet.job("serve", "inferencejobs")["status"]["allocation"]["replicas"]
    broken = before[1]["chips"][0]
    fail(fleet, broken)
    after = fleet.job("serve", "inferencejobs")["status"]
    assert after["reason"] == "ChipReplaced" and after["restarts"] == 1
    replicas = after["allocation"]["replicas"]
    assert replicas[0]["chips"] == before[0]["chips"]  # the other replica did not move
    assert broken not in replicas[1]["chips"]
    # the union of every replica's chips, as the operator writes it
    assert sorted(after["allocation"]["chips"]) == sorted(
        c for rep in replicas for c in rep["chips"])


def test_an_ultraserver_patch_is_checked_and_authorized(fleet: Fleet) -> None:
    bad = fleet.client.patch("/v1/ultraservers/gen2-0000",
                             json={"spec": {"failedChips": ["s99/c00"]}})
    assert bad.status_code == 422 and "s99/c00" in bad.json()["message"]
    other = fleet.client.patch("/v1/ultraservers/gen2-0000", json={"spec": {"profile": "trn2"}})
    assert other.status_code == 422
    missing = fleet.client.patch("/v1/ultraservers/gen2-0099", json={"spec": {}})
    assert missing.status_code == 404
    cordon = fleet.client.patch("/v1/ultraservers/gen2-0000",
                                json={"spec": {"cordonedServers": [0, 1]}})
    assert cordon.status_code == 200
    cleared = fleet.client.patch("/v1/ultraservers/gen2-0000",
                                 json={"spec": {"cordonedServers": None}})
    assert cleared.status_code == 200


def test_an_ultraserver_patch_needs_the_patch_verb(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("reader namespaces=* verbs=get,list\nadmin\n")
    for fleet in make_fleet(tmp_path, token_file=str(tokens)):
        body = {"spec": {"failedChips": ["s00/c00"]}}
        assert fleet.client.patch("/v1/ultraservers/gen2-0000", json=body).status_code == 401
        denied = fleet.client.patch("/v1/ultraservers/gen2-0000", json=body,
                                    headers={"Authorization": "Bearer reader"})
        assert denied.status_code == 403 and "patch ultraservers" in denied.json()["message"]
        allowed = fleet.client.patch("/v1/ultraservers/gen2-0000", json=body,
                                     headers={"Authorization": "Bearer admin"})
        assert allowed.status_code == 200 and allowed.json()["failedChips"] == ["s00/c00"]
