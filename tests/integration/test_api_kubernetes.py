"""The Kubernetes backend on the real API server tier (kube-apiserver + etcd, CRDs applied).

    UltraServer api-<id> (trn3-gen2, 144 chips)    namespace <kube_namespace>
      s00/c00..c03 held by TrainingJob "llm"       TrainingJob llm (4 chips)

The REST API creates and deletes the custom resources; an "operator" (this
test, with kubectl) writes the status; the API's poller sees the allocation in
its capacity snapshot and writes accounting that outlives the object.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

pytestmark = pytest.mark.kube

SPEC = {"chips": 4, "topology": {"requiredLevel": "server"}, "priority": 5,
        "model": {"name": "llama-3-8b", "parametersBillions": 8},
        "work": {"durationSeconds": 3600}}


@pytest.fixture
def ultraserver(kube_env: Any) -> Iterator[str]:
    name = f"api-{uuid.uuid4().hex[:8]}"
    doc = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "UltraServer",
           "metadata": {"name": name},
           "spec": {"profile": "trn3-gen2", "network": ["block-900"]}}
    kube_env.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    yield name
    kube_env.kubectl("delete", "ultraserver", name, "--wait=false", check=False)


@pytest.fixture
def api(kube_env: Any, tmp_path: Path) -> Iterator[tuple[TestClient, Any]]:
    settings = Settings(backend="kubernetes", kubeconfig=str(kube_env.kubeconfig),
                        db=f"sqlite:///{tmp_path / 'k.db'}", tick_seconds=3600)
    app = create_app(settings)
    with TestClient(app) as client:
        yield client, app.state.backend


def _poll_until(backend: Any, check: Any, what: str) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        backend.poll()
        value = check()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def test_jobs_round_trip_through_the_custom_resources(
    api: tuple[TestClient, Any], kube_env: Any, kube_namespace: str, ultraserver: str
) -> None:
    client, backend = api
    ns = kube_namespace
    base = f"/v1/namespaces/{ns}/trainingjobs"
    r = client.post(base, json={"metadata": {"name": "llm", "labels": {"team": "a"}}, "spec": SPEC})
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["uid"]
    obj = json.loads(kube_env.kubectl("get", "-n", ns, "trainingjob", "llm", "-o", "json").stdout)
    assert obj["spec"]["chips"] == 4 and obj["metadata"]["labels"] == {"team": "a"}

    dup = client.post(base, json={"metadata": {"name": "llm"}, "spec": SPEC})
    assert dup.status_code == 409 and dup.json()["field"] == "metadata.name"
    bad = client.post(base, json={"metadata": {"name": "x"}, "spec": {**SPEC, "chips": -1}})
    assert bad.status_code == 422 and bad.json()["field"] == "body.spec.chips"
    assert [j["metadata"]["name"] for j in client.get(base).json()["items"]] == ["llm"]
    assert client.get(f"{base}/ghost").status_code == 404

    # The operator admits it and the simulator runs it: written here through the status.
    chips = [f"{ultraserver}/s00/c0{i}" for i in range(4)]
    status = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z", "energyKWh": 1.5,
              "allocation": {"ultraServers": [ultraserver], "servers": [f"{ultraserver}/s00"],
                             "chips": chips, "level": "server", "score": 1.0}}
    kube_env.kubectl("patch", "-n", ns, "trainingjob", "llm", "--subresource=status",
                     "--type=merge", "-p", json.dumps({"status": status}))
    assert client.get(f"{base}/llm").json()["status"]["phase"] == "Running"

    def ours() -> Any:
        report = client.get("/v1/capacity").json()
        rows = [u for u in report.get("ultraServers", []) if u.get("name") == ultraserver]
        return rows and rows[0].get("allocated") == 4 and rows[0]
    _poll_until(backend, ours, "the allocation to show in capacity")
    view = client.get(f"/v1/ultraservers/{ultraserver}").json()
    assert view["chips"] == 144 and view["network"] == ["block-900"]
    assert view["reservedFor"] is None
    # The operator's backfill reservation, as it writes it, shows through.
    kube_env.kubectl("patch", "ultraserver", ultraserver, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"reservedFor": f"tj/{ns}/big"}}))
    _poll_until(backend, lambda: client.get(f"/v1/ultraservers/{ultraserver}").json().get(
        "reservedFor") == f"tj/{ns}/big", "the reservation to show")
    # Once the job it names is there and waiting, dry runs queued behind it (priority <= 3)
    # avoid the reserved UltraServer.
    big = {**SPEC, "chips": 144, "priority": 3, "topology": {"requiredLevel": "ultraserver"}}
    assert client.post(base, json={"metadata": {"name": "big"}, "spec": big}).status_code == 201
    _poll_until(backend, lambda: backend.reservation == ((ultraserver,), 3), "the reservation")
    for priority, may_use in ((3, False), (4, True)):
        r = client.post("/v1/placements:dryRun", json={
            "chips": 4, "requiredLevel": "server", "priority": priority, "alternatives": 5})
        assert r.status_code == 200, r.text
        got = r.json()
        used = {u for p in [got.get("placement") or {}, *got["alternatives"]]
                for u in p.get("ultraServers", [])}
        assert may_use or ultraserver not in used, (priority, used)

    records = _poll_until(
        backend, lambda: [r for r in client.get("/v1/accounting/jobs", params={"namespace": ns}).json()
                          if r["name"] == "llm"], "an accounting row")
    assert records[0]["chips"] == 4 and records[0]["energyKWh"] == pytest.approx(1.5)
    assert records[0]["chipHours"] > 0  # running since 2026-01-01

    # A dry run sees those chips as taken and would preempt the job at a higher priority.
    dry = client.post("/v1/placements:dryRun",
                      json={"chips": 4, "requiredLevel": "server", "priority": 50}).json()
    assert dry["fits"] and not set(dry["placement"]["chipIds"]) & set(chips)

    gone = client.delete(f"{base}/llm")
    assert gone.status_code == 200 and gone.json()["status"]["phase"] == "Running"
    assert client.get(f"{base}/llm").status_code == 404
    backend.poll()
    # llm's row outlives the job; big (still waiting) has one too.
    assert sorted(r["name"] for r in client.get(
        "/v1/accounting/jobs", params={"namespace": ns}).json()) == ["big", "llm"]


def test_inference_jobs_and_unknown_namespace(
    api: tuple[TestClient, Any], kube_namespace: str
) -> None:
    client, _ = api
    body = {"metadata": {"name": "chat"},
            "spec": {"replicas": 2, "chipsPerReplica": 4, "model": {"name": "llama-3-8b"},
                     "load": {"requestsPerSecond": 10}}}
    r = client.post(f"/v1/namespaces/{kube_namespace}/inferencejobs", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["replicas"] == 2
    listed = client.get("/v1/inferencejobs", params={"namespace": kube_namespace}).json()["items"]
    assert [j["metadata"]["name"] for j in listed] == ["chat"]
    missing = client.post("/v1/namespaces/no-such-ns-xyz/inferencejobs", json=body)
    assert missing.status_code == 404 and missing.json()["field"] == "namespace"


def test_readyz_reports_an_unreachable_cluster(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))
    app = create_app(Settings(backend="kubernetes", kubeconfig=str(config),
                              db=f"sqlite:///{tmp_path / 'k.db'}", tick_seconds=3600))
    with TestClient(app) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "unavailable"
        jobs = client.get("/v1/namespaces/a/trainingjobs")
        assert jobs.status_code == 503 and jobs.json()["error"] == "ClusterUnavailable"


def test_limits_hold_in_kubernetes_mode(
    api: tuple[TestClient, Any], kube_env: Any, kube_namespace: str
) -> None:
    """The same limits as the embedded backend: 413, Kubernetes' label rules, list pages."""
    client, _ = api
    base = f"/v1/namespaces/{kube_namespace}/trainingjobs"
    labels = {f"k{i}": "v" for i in range(100_000)}
    r = client.post(base, json={"metadata": {"name": "big", "labels": labels}, "spec": SPEC})
    assert r.status_code == 413, r.text
    for bad in ({"../x": "y'; --"}, {"": "\u0000"}):
        r = client.post(base, json={"metadata": {"name": "bad", "labels": bad}, "spec": SPEC})
        assert r.status_code == 422 and r.json()["field"] == "body.metadata.labels", r.text
    for i in range(3):
        body = {"metadata": {"name": f"p{i}", "labels": {"app.kubernetes.io/part-of": "t"}},
                "spec": SPEC}
        assert client.post(base, json=body).status_code == 201
    first = client.get(base, params={"limit": 2}).json()
    assert len(first["items"]) == 2 and first["metadata"]["continue"]
    rest = client.get(base, params={"limit": 2, "continue": first["metadata"]["continue"]}).json()
    assert rest["metadata"]["continue"] is None
    assert sorted(j["metadata"]["name"] for j in first["items"] + rest["items"]) == ["p0", "p1", "p2"]
    r = client.get(base, params={"continue": "not-a-token"})
    assert r.status_code in (410, 422) and r.json()["field"] == "continue", r.text


def test_patch_ultraserver_marks_failed_chips_on_the_object(
        api: tuple[TestClient, Any], ultraserver: str, kube_env: Any) -> None:
    client, backend = api
    backend.poll()
    r = client.patch(f"/v1/ultraservers/{ultraserver}",
                     json={"spec": {"failedChips": ["s01/c02"], "cordonedServers": [3]}})
    assert r.status_code == 200, r.text
    assert r.json()["failedChips"] == ["s01/c02"]
    obj = json.loads(kube_env.kubectl("get", "ultraserver", ultraserver, "-o", "json").stdout)
    assert obj["spec"]["failedChips"] == ["s01/c02"] and obj["spec"]["cordonedServers"] == [3]
    assert obj["spec"]["profile"] == "trn3-gen2"  # a merge patch: the rest of the spec stays
    bad = client.patch(f"/v1/ultraservers/{ultraserver}",
                       json={"spec": {"failedChips": ["s99/c00"]}})
    assert bad.status_code == 422, bad.text
    gone = client.patch("/v1/ultraservers/api-missing", json={"spec": {"failedChips": []}})
    assert gone.status_code == 404, gone.text


def test_tenant_queues_are_listed_and_a_namespace_without_the_right_is_refused(
    api: tuple[TestClient, Any], kube_env: Any, kube_namespace: str
) -> None:
    client, backend = api
    name = f"q-{uuid.uuid4().hex[:8]}"
    doc = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "TenantQueue",
           "metadata": {"name": name},
           "spec": {"nominal": {"trn3-gen2": 144}, "namespaces": ["somebody-else"]}}
    kube_env.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    try:
        listed = _poll_until(backend, lambda: [q for q in client.get(
            "/v1/tenantqueues").json()["items"] if q["metadata"]["name"] == name], "the queue")
        assert listed[0]["spec"]["nominal"] == {"trn3-gen2": 144}
        r = client.post(f"/v1/namespaces/{kube_namespace}/trainingjobs", json={
            "metadata": {"name": "sneak"}, "spec": {**SPEC, "queueName": name}})
        assert r.status_code == 403, r.text
        assert f"namespace {kube_namespace} may not use queue {name}" in r.json()["message"]
        gone = kube_env.kubectl("get", "-n", kube_namespace, "trainingjobs", "-o", "name").stdout
        assert "sneak" not in gone
    finally:
        kube_env.kubectl("delete", "tenantqueue", name, "--wait=false", check=False)


def test_scale_goes_through_the_scale_subresource(
    api: tuple[TestClient, Any], kube_namespace: str, kube_env: Any
) -> None:
    client, _ = api
    path = f"/v1/namespaces/{kube_namespace}/inferencejobs"
    body = {"metadata": {"name": "chat"},
            "spec": {"replicas": 2, "chipsPerReplica": 4, "model": {"name": "llama-3-8b"},
                     "load": {"requestsPerSecond": 10}}}
    assert client.post(path, json=body).status_code == 201
    r = client.put(f"{path}/chat/scale", json={"spec": {"replicas": 3}})
    assert r.status_code == 200, r.text
    assert r.json()["spec"] == {"replicas": 3}
    got = json.loads(kube_env.kubectl("get", "-n", kube_namespace, "inferencejob", "chat",
                                      "-o", "json").stdout)
    assert got["spec"]["replicas"] == 3  # on the object: the operator takes it from there
    r = client.patch(f"{path}/chat", json={"spec": {"replicas": 1}})
    assert r.status_code == 200 and r.json()["spec"]["replicas"] == 1
    r = client.patch(f"{path}/chat", json={"spec": {"replicas": 0}})
    assert r.status_code == 422 and "spec.replicas" in r.json()["message"]
    assert client.get(f"{path}/nope/scale").status_code == 404
    assert client.patch(f"{path}/nope", json={"spec": {"replicas": 2}}).status_code == 404


def test_history_and_gauges_follow_the_status_the_operator_writes(
    api: tuple[TestClient, Any], kube_namespace: str, kube_env: Any
) -> None:
    """The operator's status (written here with kubectl): each poll and each read samples
    it; `/metrics` exports it for Grafana."""
    client, backend = api
    path = f"/v1/namespaces/{kube_namespace}/inferencejobs"
    body = {"metadata": {"name": "chat"},
            "spec": {"replicas": 2, "chipsPerReplica": 4, "model": {"name": "llama-3-8b"},
                     "load": {"requestsPerSecond": 10},
                     "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "objective": {
                         "timeToFirstTokenMs": 700, "timePerOutputTokenMs": 40}}}}
    assert client.post(path, json=body).status_code == 201

    def status(desired: int, ready: int, load: dict[str, float] | None) -> None:
        kube_env.kubectl("patch", "-n", kube_namespace, "inferencejob", "chat",
                         "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
                             "phase": "Running", "replicas": ready, "readyReplicas": ready,
                             "desiredReplicas": desired, "load": load}}))

    status(2, 2, None)  # no load read from the model servers yet
    _poll_until(backend, lambda: backend.services, "the serving job in the poll")
    assert client.get(f"{path}/chat/history").json()["samples"][-1]["requestsPerSecond"] is None
    job = f'name="chat",namespace="{kube_namespace}"'
    assert f"ultraplane_inferencejob_requests_per_second{{{job}}}" not in client.get(
        "/metrics").text
    status(3, 2, {"requestsPerSecond": 310.0, "ttftP99Ms": 820.0})  # scaling up for the load
    backend.poll()
    history = client.get(f"{path}/chat/history").json()
    assert history["ttftObjectiveMs"] == 700
    figures = [(s["desiredReplicas"], s["readyReplicas"], s["requestsPerSecond"],
                s["ttftP99Ms"]) for s in history["samples"]]
    assert figures[0] == (2, 2, None, None) and figures[-1] == (3, 2, 310.0, 820.0)
    text = client.get("/metrics").text
    assert f'ultraplane_inferencejob_replicas{{{job},state="desired"}} 3.0' in text
    assert f'ultraplane_inferencejob_replicas{{{job},state="ready"}} 2.0' in text
    assert f"ultraplane_inferencejob_requests_per_second{{{job}}} 310.0" in text
    assert f"ultraplane_inferencejob_ttft_p99_seconds{{{job}}} 0.82" in text
    assert f"ultraplane_inferencejob_ttft_objective_seconds{{{job}}} 0.7" in text
    assert client.get(f"{path}/nope/history").status_code == 404
