"""PowerBudgets on a real API server, through the operator: a job held for headroom and
admitted when a job ends, a cap on the running job, the budget's status, CEL.

Fleet (the test's own): two Trn3 Gen2 UltraServers, 288 chips idling at the assumed 300 W
(86.4 kW). A 144-chip job is predicted 90.5 kW over idle (Predicted policy, 5% margin) and
43.2 kW at the lowest cap (600 W a chip). The budget gives 80 kW over idle:

    gen2-a [ first 144, capped to fit 80 kW ]   gen2-b [ second: waits for headroom ]
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.operator_harness import GROUP, VERSION, Harness

IDLE = 2 * 144 * 300.0


@pytest.fixture
def budgets(op: Harness) -> Any:
    yield op
    op.api.delete_collection_cluster_custom_object(
        GROUP, VERSION, "powerbudgets", label_selector=f"ultraplane.dev/fleet={op.ns}")


def budget(op: Harness, name: str, watts: float, **spec: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PowerBudget",
            "metadata": {"name": name, "labels": {"ultraplane.dev/fleet": op.ns}},
            "spec": {"watts": watts, **spec}}
    op.api.create_cluster_custom_object(GROUP, VERSION, "powerbudgets", body)


def budget_status(op: Harness, name: str) -> dict[str, Any]:
    return dict(op.api.get_cluster_custom_object(GROUP, VERSION, "powerbudgets", name)
                .get("status") or {})


def test_a_job_waits_for_headroom_and_starts_when_the_running_one_ends(budgets: Harness) -> None:
    op = budgets
    name = f"{op.ns}-hall"
    op.ultraserver(f"{op.ns}-a")
    op.ultraserver(f"{op.ns}-b")
    budget(op, name, IDLE + 80_000, ultraServers={"matchLabels": {"ultraplane.dev/fleet": op.ns}})
    op.start()
    op.job("first", 144, topology={"requiredLevel": "ultraserver"})
    op.phase("first", "Admitted")
    op.job("second", 144, topology={"requiredLevel": "ultraserver"})
    second = op.wait("second held for power", lambda: (lambda s: s if s.get("reason") ==
                     "NoPower" else None)(op.get("second").get("status") or {}))
    assert second["phase"] == "Pending"
    assert f"of headroom in budget {name}" in second["message"]

    # first draws 90.5 kW over idle uncapped: it is capped to keep the budget
    capped = op.wait("first capped", lambda: (lambda s: s if s.get("powerCapWatts") else None)(
        op.get("first").get("status") or {}))
    assert 600 <= capped["powerCapWatts"] < 1000 and capped["cappedSince"]
    status = op.wait("the budget's status", lambda: (lambda s: s if s.get("capped") else None)(
        budget_status(op, name)))
    assert status["ultraServers"] == 2 and status["capped"][0]["job"] == f"tj/{op.ns}/first"
    assert status["predictedWatts"] <= IDLE + 80_000 + 1
    assert status["headroomWatts"] == pytest.approx(IDLE + 80_000 - status["predictedWatts"],
                                                    abs=0.2)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Active": "True"}

    op.set_status("first", {"phase": "Succeeded"})
    op.phase("second", "Admitted", timeout=60)
    columns = op.env.kubectl("get", "powerbudgets", name).stdout.split("\n")[0].split()
    assert columns[:6] == ["NAME", "WATTS", "PREDICTED", "MEASURED", "HEADROOM", "POLICY"]


def test_the_api_server_refuses_a_selector_that_selects_nothing_and_a_self_parent(
        op: Harness) -> None:
    manifest = f"""
apiVersion: ultraplane.dev/v1alpha1
kind: PowerBudget
metadata: {{name: {op.ns}-row, labels: {{ultraplane.dev/fleet: {op.ns}}}}}
spec:
  watts: 100000
  parent: {op.ns}-row
  ultraServers: {{}}
"""
    result = op.env.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert result.returncode != 0
    assert "spec.ultraServers must name UltraServers, blocks or labels" in result.stderr
    assert "spec.parent names this budget itself" in result.stderr
    bad_watts = manifest.replace("watts: 100000", "watts: -5")
    result = op.env.kubectl("apply", "-f", "-", input=bad_watts, check=False)
    assert result.returncode != 0 and "spec.watts" in result.stderr


def test_a_budget_that_does_not_nest_is_left_out_and_says_why(budgets: Harness) -> None:
    op = budgets
    a, b = f"{op.ns}-a", f"{op.ns}-b"
    op.ultraserver(b)  # the fleet is b alone; the row covers only a (not built yet)
    budget(op, f"{op.ns}-row", IDLE, ultraServers={"names": [a]})
    budget(op, f"{op.ns}-us", 1.0, ultraServers={"names": [b]}, parent=f"{op.ns}-row")
    op.start()

    def active(name: str) -> dict[str, str] | None:
        conditions = budget_status(op, name).get("conditions") or []
        return conditions[0] if conditions else None

    child = op.wait("the child's condition", lambda: active(f"{op.ns}-us"))
    assert (child["status"], child["reason"]) == ("False", "InvalidSpec")
    assert f"covers {b}, which its parent {op.ns}-row does not" in child["message"]
    assert op.wait("the parent's condition", lambda: active(f"{op.ns}-row"))["status"] == "True"
    # the child's 1 W limit is not applied: a job runs on b
    op.job("small", 4, topology={"requiredLevel": "server"})
    assert op.phase("small", "Admitted")["status"]["allocation"]["ultraServers"] == [b]
