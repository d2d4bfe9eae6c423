"""Scaling an InferenceJob through `ultraplane serve`'s HTTP API (the real app, embedded
backend, SQLite, an injected clock): `PATCH` of its replicas and its `scale` as Kubernetes'
autoscaling/v1 Scale. Removed replicas give back their chips at once, added ones are placed
by the next cycle, and the replicas that stay keep their chips, across a restart too.

Fleet (8 Gen2 UltraServers of 144 chips, one block); serve's replicas are 100 chips inside one
UltraServer each, so each replica sits alone on its UltraServer:

    block-000: [gen2-0000] [gen2-0001] ... [gen2-0007]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api_endpoints import NS, Fleet, make_fleet

PATH = f"/v1/namespaces/{NS}/inferencejobs"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    yield from make_fleet(tmp_path)


def serve(fleet: Fleet, replicas: int, **spec: Any) -> None:
    body = {"metadata": {"name": "serve"},
            "spec": {"replicas": replicas, "chipsPerReplica": 100,
                     "topology": {"requiredLevel": "ultraserver"}, "model": {"name": "llama"},
                     "load": {"requestsPerSecond": 10}, **spec}}
    r = fleet.client.post(PATH, json=body)
    assert r.status_code == 201, r.text
    fleet.advance(1)


def replicas(fleet: Fleet) -> list[list[str]]:
    status = fleet.job("serve", "inferencejobs")["status"]
    return [r["chips"] for r in status["allocation"]["replicas"]]


def test_patch_and_scale_resize_in_place(fleet: Fleet) -> None:
    serve(fleet, 4)
    before = replicas(fleet)
    assert len(before) == 4
    scale = fleet.client.get(f"{PATH}/serve/scale").json()
    assert scale["apiVersion"] == "autoscaling/v1" and scale["kind"] == "Scale"
    assert scale["spec"] == {"replicas": 4}
    assert scale["status"]["replicas"] == 4 and scale["metadata"]["name"] == "serve"

    r = fleet.client.patch(f"{PATH}/serve", json={"spec": {"replicas": 2}})
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["replicas"] == 2
    status = r.json()["status"]  # at once, before any tick: the chips are free
    assert status["replicas"] == 2 and status["phase"] == "Running"
    assert "Scaled down to 2 replicas" in status["scalingMessage"]
    assert replicas(fleet) == before[:2]
    free = sum(u["freeChips"] for u in fleet.client.get("/v1/ultraservers").json()["items"])
    assert free == 1152 - 200

    r = fleet.client.put(f"{PATH}/serve/scale", json={"spec": {"replicas": 5}})
    assert r.status_code == 200, r.text
    assert r.json()["spec"] == {"replicas": 5} and r.json()["status"]["replicas"] == 2
    fleet.advance(1)  # the cycle places the added replicas
    after = replicas(fleet)
    assert after[:2] == before[:2] and len(after) == 5
    chips = [c for r in after for c in r]
    assert len(chips) == len(set(chips)) == 500
    status = fleet.job("serve", "inferencejobs")["status"]
    assert status["replicas"] == status["desiredReplicas"] == 5 and status["attempt"] == 1
    assert fleet.client.get(f"{PATH}/serve/scale").json()["status"]["replicas"] == 5


def test_bad_scales_are_refused_with_a_sentence(fleet: Fleet) -> None:
    serve(fleet, 2, autoscaling={"minReplicas": 1, "maxReplicas": 3, "objective": {
        "timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}})
    for body in ({"spec": {"replicas": -1}}, {"spec": {"replicas": 0}},
                 {"spec": {"replicas": 2.5}}, {"spec": {"replicas": "3"}},
                 {"spec": {"replicas": 4}}, {"spec": {"replicas": 2, "priority": 9}}):
        r = fleet.client.patch(f"{PATH}/serve", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["message"], r.text
    r = fleet.client.patch(f"{PATH}/serve", json={"spec": {"replicas": 4}})
    assert "at most spec.autoscaling.maxReplicas" in r.json()["message"]
    r = fleet.client.patch(f"{PATH}/serve", json={"spec": {"replicas": 0}})
    assert "spec.replicas" in r.json()["message"] and "greater than or equal to 1" in \
        r.json()["message"]
    r = fleet.client.put(f"{PATH}/serve/scale", json={"spec": {"replicas": 0}})
    assert r.status_code == 422 and "spec.replicas" in r.json()["message"]
    missing = fleet.client.get(f"{PATH}/nope/scale")
    assert missing.status_code == 404 and "does not exist" in missing.json()["message"]
    missing = fleet.client.patch(f"{PATH}/nope", json={"spec": {"replicas": 2}})
    assert missing.status_code == 404
    assert len(replicas(fleet)) == 2  # nothing refused changed anything


def test_a_restart_keeps_the_rescaled_replicas_on_their_chips(tmp_path: Path) -> None:
    gen = make_fleet(tmp_path)
    fleet = next(gen)
    serve(fleet, 4)
    before = replicas(fleet)
    assert fleet.client.patch(f"{PATH}/serve", json={"spec": {"replicas": 2}}).status_code == 200
    fleet.advance(1)
    gen.close()  # the server stops

    gen = make_fleet(tmp_path)
    fleet = next(gen)
    fleet.advance(1)
    job = fleet.job("serve", "inferencejobs")
    assert job["spec"]["replicas"] == 2 and job["status"]["phase"] == "Running"
    assert replicas(fleet) == before[:2]
    assert fleet.client.patch(f"{PATH}/serve", json={"spec": {"replicas": 3}}).status_code == 200
    fleet.advance(1)
    assert replicas(fleet)[:2] == before[:2] and len(replicas(fleet)) == 3
    gen.close()
