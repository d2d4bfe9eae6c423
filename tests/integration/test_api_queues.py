"""Tenant queues through `ultraplane serve --queues FILE` (the real app, embedded fleet, SQLite,
an injected clock): listing with usage, refusals at create, per-queue metrics, bad files.

Fleet: 8 Gen2 UltraServers (1,152 chips), one cohort of two queues of 576 nominal chips:

    research (team-a, its default)   serving (team-b, maxPriority 100)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ultraplane.api.settings import Settings

from tests.integration.test_api_endpoints import NS, Fleet, make_fleet

QUEUES = """
- name: research
  nominal: {trn3-gen2: 576}
  cohort: lab
  namespaces: [team-a]
  defaultFor: [team-a]
- name: serving
  nominal: {trn3-gen2: 576}
  cohort: lab
  namespaces: [team-b]
  maxPriority: 100
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUES)
    yield from make_fleet(tmp_path, queues=str(path))


def post(fleet: Fleet, namespace: str, name: str, chips: int, **spec: object) -> tuple[int, dict]:
    r = fleet.client.post(f"/v1/namespaces/{namespace}/trainingjobs", json={
        "metadata": {"name": name},
        "spec": {"chips": chips, "topology": {"requiredLevel": "ultraserver"},
                 "work": {"durationSeconds": 36_000}, **spec}})
    return r.status_code, r.json()


def test_a_team_borrows_idle_quota_and_the_queues_say_so(fleet: Fleet) -> None:
    assert NS == "team-a"
    for i in range(8):  # the whole fleet on research: 576 borrowed from serving's idle quota
        assert post(fleet, NS, f"r{i}", 144)[0] == 201
    fleet.advance(1)
    queues = {q["metadata"]["name"]: q for q in fleet.client.get("/v1/tenantqueues").json()["items"]}
    assert {k: queues["research"]["status"][k] for k in
            ("nominalChips", "usedChips", "borrowedChips", "admittedJobs", "pendingJobs")} == {
        "nominalChips": 576, "usedChips": 1152, "borrowedChips": 576, "admittedJobs": 8,
        "pendingJobs": 0}
    assert queues["serving"]["spec"]["maxPriority"] == 100
    one = fleet.client.get("/v1/tenantqueues/serving").json()
    assert one["status"]["usedChips"] == 0 and one["spec"]["cohort"] == "lab"
    assert fleet.client.get("/v1/tenantqueues/nope").status_code == 404
    metrics = fleet.client.get("/metrics").text
    assert 'ultraplane_queue_borrowed_chips{queue="research"} 576.0' in metrics
    assert 'ultraplane_queue_used_chips{queue="serving"} 0.0' in metrics

    # serving reclaims what it lent: research's most recent borrower gives back a whole
    # UltraServer, and the serving job runs there
    assert post(fleet, "team-b", "chat", 144, queueName="serving")[0] == 201
    fleet.advance(1)
    chat = fleet.client.get("/v1/namespaces/team-b/trainingjobs/chat").json()["status"]
    assert chat["phase"] == "Running", chat
    r7 = fleet.client.get(f"/v1/namespaces/{NS}/trainingjobs/r7").json()["status"]
    assert r7["phase"] in ("Pending", "Preempted") and r7["preemptions"] == 1
    running = [fleet.job(f"r{i}")["status"]["phase"] for i in range(7)]
    assert running == ["Running"] * 7


@pytest.mark.parametrize(("namespace", "spec", "status", "field", "says"), [
    ("team-c", {"queueName": "research"}, 403, "spec.queueName",
     "namespace team-c may not use queue research"),
    ("team-b", {"queueName": "serving", "priority": 1000}, 422, "spec.priority",
     "priority 1000 is above queue serving's maximum of 100"),
    ("team-b", {"queueName": "gpu-heaven"}, 422, "spec.queueName",
     "queue gpu-heaven does not exist"),
])
def test_a_job_its_queue_would_never_admit_is_refused_at_create(
        fleet: Fleet, namespace: str, spec: dict[str, object], status: int, field: str,
        says: str) -> None:
    code, body = post(fleet, namespace, "job", 8, **spec)
    assert (code, body["field"]) == (status, field) and says in body["message"]
    listed = fleet.client.get(f"/v1/namespaces/{namespace}/trainingjobs").json()["items"]
    assert listed == []  # nothing was kept


@pytest.mark.parametrize(("text", "says"), [
    ("- name: a\n  nominal: {trn3-gen2: -4}\n", "queue a: nominal"),
    ("- name: a\n  nominal: {trn3-gen2: 4}\n- name: a\n  nominal: {trn3-gen2: 4}\n",
     "listed twice"),
    ("{a: 1}", "must be a YAML list"),
    ("- name: a\n  nominal: [oops\n", "not valid YAML"),
])
def test_a_bad_queues_file_is_one_sentence(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=says):
        Settings(db=f"sqlite:///{tmp_path / 'x.db'}", queues=str(path))


def test_accounting_is_per_queue_like_sacct_accounts(fleet: Fleet) -> None:
    assert post(fleet, NS, "mine", 144)[0] == 201  # research, its namespace's default
    assert post(fleet, "team-b", "chat", 72, queueName="serving")[0] == 201
    assert post(fleet, "team-z", "free", 8)[0] == 201  # no default queue: outside quotas
    fleet.advance(1)
    fleet.advance(30)  # 30 simulated minutes
    fleet.app.state.backend.persist(force=True)
    rows = {r["queue"]: r for r in fleet.client.get("/v1/accounting/queues").json()}
    assert set(rows) == {"research", "serving", None}
    assert rows["research"]["jobs"] == 1 and rows["serving"]["jobs"] == 1
    assert rows["research"]["chipHours"] == pytest.approx(2 * rows["serving"]["chipHours"])
    assert rows["research"]["chipHours"] > 0
    jobs = {r["name"]: r["queue"] for r in fleet.client.get("/v1/accounting/jobs").json()}
    assert jobs == {"mine": "research", "chat": "serving", "free": None}
