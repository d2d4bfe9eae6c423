"""Limits on the real app (embedded backend): body size, labels, list pages, error shapes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

SPEC = {"chips": 4, "work": {"durationSeconds": 3600}}
BASE = "/v1/namespaces/a/trainingjobs"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'l.db'}", demo=False,
                              max_body_bytes=64 * 1024))
    with TestClient(app) as c:
        yield c


def test_large_bodies_are_413_declared_or_streamed(client: TestClient) -> None:
    labels = {f"k{i}": "v" for i in range(100_000)}  # the 11 MB job
    r = client.post(BASE, json={"metadata": {"name": "big", "labels": labels}, "spec": SPEC})
    assert r.status_code == 413
    assert r.json() == {"error": "PayloadTooLarge", "field": "body",
                        "message": "the request body is larger than 65536 bytes"}

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"metadata": {"name": "x"}, "spec": {"chips": 4}, "pad": "'
        for _ in range(200):
            yield b"x" * 1024
        yield b'"}'

    r = client.post(BASE, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert client.get(BASE).json()["items"] == []


@pytest.mark.parametrize("labels", [
    {"../x": "y'; --"}, {"": "\u0000"}, {"ok": "y'; --"}, {"k" * 64: "v"},
    {f"k{i}": "v" for i in range(65)}])
def test_labels_follow_kubernetes_rules(client: TestClient, labels: dict[str, str]) -> None:
    r = client.post(BASE, json={"metadata": {"name": "j", "labels": labels}, "spec": SPEC})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "body.metadata.labels"
    assert not r.json()["message"].startswith("body.metadata.labels: Value error")


def test_good_labels_are_kept(client: TestClient) -> None:
    labels = {"app.kubernetes.io/name": "llm", "team": "", "tier": "A_1.b-2"}
    r = client.post(BASE, json={"metadata": {"name": "j", "labels": labels}, "spec": SPEC})
    assert r.status_code == 201, r.text
    assert client.get(f"{BASE}/j").json()["metadata"]["labels"] == labels


def test_lists_come_in_pages_with_continue_tokens(client: TestClient) -> None:
    for i in range(7):
        body = {"metadata": {"name": f"j{i}"}, "spec": SPEC}
        assert client.post(BASE, json=body).status_code == 201
    seen, token, pages = [], None, 0
    while True:
        params: dict[str, str | int] = {"limit": 3, **({"continue": token} if token else {})}
        page = client.get(BASE, params=params).json()
        seen += [j["metadata"]["name"] for j in page["items"]]
        pages += 1
        token = page["metadata"]["continue"]
        if token is None:
            break
        # A job deleted between pages does not shift the next page.
        client.delete(f"{BASE}/j{len(seen)}") if pages == 1 else None
    assert seen == ["j0", "j1", "j2", "j4", "j5", "j6"] and pages == 2
    assert len(client.get("/v1/trainingjobs").json()["items"]) == 6  # default page holds all
    for params, field in (({"limit": 0}, "query.limit"), ({"limit": 1001}, "query.limit"),
                          ({"continue": "bm9wZQ"}, "continue")):
        r = client.get(BASE, params=params)
        assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_malformed_json_is_400_and_405_says_allow(client: TestClient) -> None:
    r = client.post(BASE, content=b'{"metadata": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "BadRequest", r.text
    r = client.put(f"{BASE}/j")
    assert r.status_code == 405 and r.headers["Allow"] == "DELETE, GET, HEAD"
    r = client.delete("/v1/capacity")
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD"


@pytest.mark.parametrize(("body", "field"), [
    ({"chips": True}, "body.chips"), ({"chips": "4"}, "body.chips"), ({"chips": 4.5}, "body.chips"),
    ({"chips": 4, "requiredLevel": "network-99999999999"}, "body.requiredLevel"),
    ({"chips": 4, "requiredLevel": "network-3"}, "body.requiredLevel"),  # the fleet has 1 layer
    ({"chips": 4, "preferredLevel": "network-2"}, "body.preferredLevel"),
    ({"chips": 4, "wholeServers": "yes"}, "body.wholeServers"),
    ({"chips": 4, "priority": "9"}, "body.priority"),
])
def test_dry_runs_take_strict_types_and_known_levels(
    client: TestClient, body: dict[str, object], field: str
) -> None:
    r = client.post("/v1/placements:dryRun", json=body)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert client.post("/v1/placements:dryRun",
                       json={"chips": 4, "requiredLevel": "network-1"}).json()["fits"] is True


@pytest.mark.parametrize(("spec", "field"), [
    ({**SPEC, "chips": True}, "body.spec.chips"), ({**SPEC, "chips": "4"}, "body.spec.chips"),
    ({**SPEC, "priority": "1"}, "body.spec.priority"),
    ({**SPEC, "preemptible": "false"}, "body.spec.preemptible"),
])
def test_job_specs_take_strict_types(client: TestClient, spec: dict[str, object], field: str) -> None:
    r = client.post(BASE, json={"metadata": {"name": "j"}, "spec": spec})
    assert r.status_code == 422 and r.json()["field"] == field, r.text
