"""The planner of `ultraplane serve`'s embedded fleet (the real app, SQLite, an injected clock,
ticks driven by the test): an autoscaled InferenceJob offered a stepped request trace scales
up when the load steps up and back down once the scale-down delay has passed, through the one
rescale path (its replica 0 keeps its chips); status.load reaches the job and its history;
a job without spec.autoscaling keeps its spec.replicas and gets no load.

Each tick is 60 simulated seconds (time scale 60, one wall second a tick) and the planner
steps every 60 simulated seconds on its last ten steps (10 minutes).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ultraplane.api.settings import Settings

from tests.integration.test_api_endpoints import NS, Fleet, make_fleet

PATH = f"/v1/namespaces/{NS}/inferencejobs"
LOW, HIGH = 0.5, 20.0  # requests/s of the trace before, during and after its step
STEP_UP_S, STEP_DOWN_S, END_S = 900, 1800, 7200
DELAY_S = 120


def write_trace(path: Path) -> Path:
    """An Azure-format trace: LOW req/s, HIGH from STEP_UP_S to STEP_DOWN_S, then LOW."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows, t = ["TIMESTAMP,ContextTokens,GeneratedTokens"], 0.0
    while t < END_S:
        stamp = (start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f")
        rows.append(f"{stamp},1024,256")
        t += 1.0 / (HIGH if STEP_UP_S <= t < STEP_DOWN_S else LOW)
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    yield from make_fleet(tmp_path, inference_trace=str(write_trace(tmp_path / "trace.csv")),
                          autoscale_seconds=60.0)


def create(fleet: Fleet, name: str, replicas: int, chips: int, **spec: Any) -> None:
    body = {"metadata": {"name": name},
            "spec": {"replicas": replicas, "chipsPerReplica": chips,
                     "topology": {"requiredLevel": "ultraserver"},
                     "model": {"name": "llama-3.3-70b"}, "load": {"requestsPerSecond": 1},
                     **spec}}
    r = fleet.client.post(PATH, json=body)
    assert r.status_code == 201, r.text


def test_an_autoscaled_job_follows_the_stepped_load(fleet: Fleet) -> None:
    start = fleet.now[0]
    create(fleet, "chat", 1, 2, autoscaling={
        "minReplicas": 1, "maxReplicas": 6, "scaleDownDelaySeconds": DELAY_S,
        "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}})
    create(fleet, "plain", 2, 100)
    fleet.advance(1)
    first = fleet.job("chat", "inferencejobs")["status"]["allocation"]["replicas"][0]["chips"]

    counts: list[tuple[float, int]] = []  # (simulated seconds since creation, spec.replicas)
    loads: list[tuple[float, dict[str, Any]]] = []
    while (fleet.now[0] - start) * 60.0 < STEP_DOWN_S + 1200:
        fleet.advance(1)
        job = fleet.job("chat", "inferencejobs")
        t = (fleet.now[0] - start) * 60.0
        counts.append((t, job["spec"]["replicas"]))
        status = job["status"]
        assert status["desiredReplicas"] == job["spec"]["replicas"]
        loads.append((t, status["load"]))
        plain = fleet.job("plain", "inferencejobs")
        assert plain["spec"]["replicas"] == 2 and "load" not in plain["status"]
        assert plain["status"]["replicas"] == 2

    # the offered load is the trace's: LOW before the step (a window of whole low seconds)
    before = [load for t, load in loads if 180 <= t <= STEP_UP_S]
    assert before and all(abs(x["requestsPerSecond"] - LOW) < 0.1 for x in before)
    assert all(x["promptTokensPerRequest"] == 1024 and x["outputTokensPerRequest"] == 256
               and x["ttftP99Ms"] > 0 and x["tpotP99Ms"] > 0 and 0 < x["sloAttainment"] <= 1
               for x in before)
    assert any(abs(x["requestsPerSecond"] - HIGH) < 0.5 for t, x in loads if t > STEP_UP_S)

    assert all(n == 1 for t, n in counts if t <= STEP_UP_S)
    up = next(t for t, n in counts if n > 1)
    assert up <= STEP_UP_S + 120  # the first window that saw the step, or the next
    peak = max(n for _, n in counts)
    assert peak > 1
    # more than one replica all through the step; one again only after the window has
    # forgotten the step's last minute and the scale-down delay has passed
    assert all(n > 1 for t, n in counts if up <= t <= STEP_DOWN_S), counts
    down = next(t for t, n in counts if t > up and n == 1)
    assert down >= STEP_DOWN_S + DELAY_S, counts
    assert counts[-1][1] == 1
    final = fleet.job("chat", "inferencejobs")["status"]
    assert final["replicas"] == 1 and final["allocation"]["replicas"][0]["chips"] == first
    assert "scaled" in final["scalingMessage"] or "kept 1" in final["scalingMessage"]

    history = fleet.client.get(f"{PATH}/chat/history").json()["samples"]
    assert max(s["requestsPerSecond"] or 0 for s in history) > HIGH / 2
    assert max(s["desiredReplicas"] for s in history) == peak
    # the planner's own counts are no override
    assert "AutoscalingOverridden" not in {c["type"] for c in final.get("conditions", [])}


def test_a_count_set_outside_autoscaling_is_applied_and_said(fleet: Fleet) -> None:
    """`PUT …/scale` on an autoscaled job (as an HPA would): the count is applied and the
    job says it was set outside its autoscaling; a job without autoscaling says nothing."""
    create(fleet, "chat", 1, 2, autoscaling={
        "minReplicas": 1, "maxReplicas": 6, "scaleDownDelaySeconds": DELAY_S,
        "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}})
    create(fleet, "plain", 1, 2)
    fleet.advance(1)
    for name in ("chat", "plain"):
        r = fleet.client.put(f"{PATH}/{name}/scale", json={"spec": {"replicas": 3}})
        assert r.status_code == 200 and r.json()["spec"]["replicas"] == 3, r.text
    fleet.advance(1)
    chat = fleet.job("chat", "inferencejobs")
    (cond,) = [c for c in chat["status"]["conditions"] if c["type"] == "AutoscalingOverridden"]
    assert cond["status"] == "True" and cond["reason"] == "ReplicasSetOutsideAutoscaling"
    assert "spec.replicas was set to 3" in cond["message"]
    # (the planner may size it again since: the low load wants one replica)
    plain = fleet.job("plain", "inferencejobs")
    assert plain["status"]["replicas"] == 3
    assert "AutoscalingOverridden" not in {c["type"] for c in plain["status"].get("conditions", [])}


def test_a_trace_that_cannot_be_read_is_refused_with_a_sentence(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    for path, sentence in ((bad, "a request trace needs the columns"),
                           (tmp_path / "missing.csv", "cannot read")):
        with pytest.raises(ValueError, match=sentence):
            Settings(inference_trace=str(path))
