"""Power budgets through `ultraplane serve --power-budgets FILE` (the real app, embedded fleet,
SQLite, an injected clock): admission within headroom, a cap, the budgets and their gauges.

Fleet: 8 Gen2 UltraServers (1,152 chips idling at the assumed 300 W: 345.6 kW). A 144-chip job
is predicted 90.5 kW over idle (Predicted, 5% margin), 43.2 kW at the lowest cap (600 W). The
budget allows 100 kW over idle: two jobs fit only with both capped (86.4 kW at the floor), a
third waits for headroom.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ultraplane.api.settings import Settings

from tests.integration.test_api_endpoints import NS, Fleet, make_fleet

IDLE = 1152 * 300.0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    path = tmp_path / "budgets.yaml"
    path.write_text(f"- name: hall\n  watts: {IDLE + 100_000}\n")
    yield from make_fleet(tmp_path, power_budgets=str(path))


def test_jobs_are_admitted_within_the_budget_capped_to_fit_and_held_past_it(
        fleet: Fleet) -> None:
    for name in ("a", "b", "c"):
        fleet.submit(name, 144, duration=36_000)
        fleet.advance(1)
    status = {n: fleet.job(n)["status"] for n in ("a", "b", "c")}
    assert status["a"]["phase"] == status["b"]["phase"] == "Running"
    assert status["c"]["phase"] == "Pending" and status["c"]["reason"] == "NoPower"
    assert "of headroom in budget hall" in status["c"]["message"]
    fleet.advance(1)  # the tick after the admissions sets the caps
    for name in ("a", "b"):
        capped = fleet.job(name)["status"]
        assert 600 <= capped["powerCapWatts"] < 1000 and capped["cappedSince"]
    fleet.advance(1)  # the simulated chips draw what the caps allow: the measurement agrees
    drawn = {n: fleet.job(n)["status"]["powerWatts"] for n in ("a", "b")}
    for name in ("a", "b"):
        assert drawn[name] <= 144 * fleet.job(name)["status"]["powerCapWatts"] + 1e-6
    [hall] = fleet.client.get("/v1/powerbudgets").json()["items"]
    assert hall["spec"] == {"watts": IDLE + 100_000, "policy": "Predicted", "margin": 0.05}
    assert hall["status"]["predictedWatts"] <= IDLE + 100_000 + 0.1
    assert {c["job"] for c in hall["status"]["capped"]} == {f"tj/{NS}/a", f"tj/{NS}/b"}
    assert IDLE < hall["status"]["measuredWatts"] <= IDLE + 100_000  # the capped chips' draw
    one = fleet.client.get("/v1/powerbudgets/hall").json()
    assert one["metadata"]["name"] == "hall"
    assert fleet.client.get("/v1/powerbudgets/nope").status_code == 404
    metrics = fleet.client.get("/metrics").text
    assert f'ultraplane_power_budget_watts{{budget="hall"}} {IDLE + 100_000}' in metrics
    assert 'ultraplane_power_budget_capped_jobs{budget="hall"} 2.0' in metrics
    assert "ultraplane_fleet_energy_joules_total " in metrics

    r = fleet.client.delete(f"/v1/namespaces/{NS}/trainingjobs/a")
    assert r.status_code == 200
    fleet.advance(1)
    assert fleet.job("c")["status"]["phase"] == "Running"


@pytest.mark.parametrize(("text", "says"), [
    ("- name: a\n  watts: -1\n", "power budget a: watts"),
    ("- name: a\n  watts: 10\n  parent: b\n", "parent b is not a budget"),
    ("[]", "non-empty YAML list"),
    ("- name: a\n  watts: [\n", "not valid YAML"),
])
def test_a_bad_budgets_file_is_one_sentence(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=says):
        Settings(db=f"sqlite:///{tmp_path / 'x.db'}", power_budgets=str(path))
