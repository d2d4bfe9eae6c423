"""An InferenceJob's history (`GET .../inferencejobs/{name}/history`) and the serving gauges of
`/metrics`, through the real app on the embedded fleet with an injected clock.

Fleet (8 Gen2 UltraServers of 144 chips); the job's replicas are 100 chips inside one
UltraServer each, so each sits alone on its UltraServer:

    block-000: [gen2-0000] [gen2-0001] ... [gen2-0007]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_api_endpoints import NS, Fleet, make_fleet
from tests.integration.test_api_scale import PATH, serve

OBJECTIVE = {"timeToFirstTokenMs": 800, "timePerOutputTokenMs": 50}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    yield from make_fleet(tmp_path)


def test_history_follows_the_replicas_of_a_running_job(fleet: Fleet) -> None:
    serve(fleet, 2, latencySLO=OBJECTIVE)  # not autoscaled: the embedded planner leaves it be
    body = fleet.client.get(f"{PATH}/serve/history").json()
    assert body["kind"] == "InferenceJobHistory"
    assert body["metadata"]["name"] == "serve" and body["metadata"]["namespace"] == NS
    assert body["ttftObjectiveMs"] == 800
    last = body["samples"][-1]
    assert last["replicas"] == last["readyReplicas"] == 2
    # a job without autoscaling is offered no simulated load: none is made up
    assert last["requestsPerSecond"] is None and last["ttftP99Ms"] is None

    r = fleet.client.patch(f"{PATH}/serve", json={"spec": {"replicas": 4}})
    assert r.status_code == 200, r.text
    fleet.advance(1)
    samples = fleet.client.get(f"{PATH}/serve/history").json()["samples"]
    assert samples[0]["readyReplicas"] == 2
    assert samples[-1]["readyReplicas"] == samples[-1]["desiredReplicas"] == 4
    times = [s["t"] for s in samples]
    assert times == sorted(times) and times[-1] > times[0]

    text = fleet.client.get("/metrics").text
    job = f'name="serve",namespace="{NS}"'
    assert f'ultraplane_inferencejob_replicas{{{job},state="desired"}} 4.0' in text
    assert f'ultraplane_inferencejob_replicas{{{job},state="ready"}} 4.0' in text
    assert f"ultraplane_inferencejob_ttft_objective_seconds{{{job}}} 0.8" in text
    # no observed load, no gauge sample (not a zero that would read as an idle service)
    assert f"ultraplane_inferencejob_requests_per_second{{{job}}}" not in text


def test_history_is_bounded_and_samples_only_changes_between_intervals(fleet: Fleet) -> None:
    serve(fleet, 1)
    backend = fleet.app.state.backend
    for _ in range(5):  # nothing changes and little time passes: one sample, not five
        fleet.client.get(f"{PATH}/serve/history")
    assert len(fleet.client.get(f"{PATH}/serve/history").json()["samples"]) == 1
    histories = backend.histories
    uid = fleet.job("serve", "inferencejobs")["metadata"]["uid"]
    histories.samples = 3
    histories.forget(uid)
    for i in range(10):
        histories.observe(uid, 2e9 + 100 * i, {"replicas": 1 + i % 2}, {"replicas": 1})
    series = histories.series(uid)
    assert len(series) == 3 and series[-1]["t"] == 2e9 + 900


def test_unknown_jobs_and_other_tenants_get_no_history(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("admin name=admin\ntok-b namespaces=team-b name=b\n")
    for fleet in make_fleet(tmp_path, token_file=str(tmp_path / "tokens"),
                            api_protect_reads=True):
        admin = {"Authorization": "Bearer admin"}
        r = fleet.client.post(PATH, headers=admin, json={"metadata": {"name": "serve"}, "spec": {
            "replicas": 1, "chipsPerReplica": 4, "model": {"name": "llama"},
            "load": {"requestsPerSecond": 10}}})
        assert r.status_code == 201, r.text
        fleet.advance(1)
        assert fleet.client.get(f"{PATH}/serve/history", headers=admin).status_code == 200
        missing = fleet.client.get(f"{PATH}/nobody/history", headers=admin)
        assert missing.status_code == 404 and "nobody" in missing.json()["message"]
        other = fleet.client.get(f"{PATH}/serve/history",
                                 headers={"Authorization": "Bearer tok-b"})
        assert other.status_code == 403
