"""TenantQueues on a real API server: borrowing, reclaim, rights and status, through the operator.

Fleet (the test's own, labelled with its namespace), one cohort of two queues:

    gen2-a [ 144 ]   gen2-b [ 144 ]
    queue A: nominal 144, namespace A (its default queue)
    queue B: nominal 144, namespace B

B runs two 144-chip jobs (one on A's idle quota); A's job then reclaims a whole UltraServer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.operator_harness import GROUP, VERSION, Harness


@pytest.fixture
def team_b(op: Harness) -> Iterator[str]:
    name = f"{op.ns}-b"
    op.env.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        op.env.kubectl("delete", "namespace", name, "--wait=false", check=False)
        op.api.delete_collection_cluster_custom_object(
            GROUP, VERSION, "tenantqueues", label_selector=f"ultraplane.dev/fleet={op.ns}")


def queue(op: Harness, name: str, **spec: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TenantQueue",
            "metadata": {"name": name, "labels": {"ultraplane.dev/fleet": op.ns}},
            "spec": spec}
    op.api.create_cluster_custom_object(GROUP, VERSION, "tenantqueues", body)


def submit(op: Harness, namespace: str, name: str, chips: int, **spec: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"chips": chips, "topology": {"requiredLevel": "ultraserver"},
                     "work": {"durationSeconds": 3600}, **spec}}
    op.api.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs", body)


def status(op: Harness, namespace: str, name: str) -> dict[str, Any]:
    body = op.api.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs", name)
    return dict(body.get("status") or {})


def test_a_lender_reclaims_a_whole_ultraserver_from_a_borrower(
        op: Harness, team_b: str) -> None:
    qa, qb = f"{op.ns}-qa", f"{op.ns}-qb"
    queue(op, qa, nominal={"trn3-gen2": 144}, cohort=op.ns, namespaces=[op.ns],
          defaultFor=[op.ns])
    queue(op, qb, nominal={"trn3-gen2": 144}, cohort=op.ns, namespaces=[team_b])
    op.ultraserver(f"{op.ns}-a")
    op.ultraserver(f"{op.ns}-b")
    op.start("-n", team_b)

    submit(op, team_b, "b1", 144, queueName=qb)
    op.wait("b1 admitted", lambda: status(op, team_b, "b1").get("phase") == "Admitted")
    submit(op, team_b, "b2", 144, queueName=qb)  # on A's idle nominal quota: borrowed
    op.wait("b2 admitted", lambda: status(op, team_b, "b2").get("phase") == "Admitted")
    b2_chips = set(status(op, team_b, "b2")["allocation"]["chips"])
    op.wait("queue B borrowing 144", lambda: (op.api.get_cluster_custom_object(
        GROUP, VERSION, "tenantqueues", qb).get("status") or {}).get("borrowedChips") == 144)

    submit(op, op.ns, "a1", 144)  # no queueName: its namespace's default queue, A
    a1 = op.phase("a1", "Admitted", timeout=60)
    # the most recent borrower gave back one whole UltraServer, and only it
    b2 = op.wait("b2 reclaimed", lambda: (lambda s: s if s.get("phase") in (
        "Preempted", "Pending") else None)(status(op, team_b, "b2")))
    assert b2["preemptions"] == 1 and not b2.get("allocation")
    assert set(a1["status"]["allocation"]["chips"]) == b2_chips
    assert status(op, team_b, "b1")["phase"] == "Admitted"

    def counted() -> dict[str, Any] | None:
        both = {q: op.api.get_cluster_custom_object(GROUP, VERSION, "tenantqueues", q)
                .get("status") or {} for q in (qa, qb)}
        want = ({"usedChips": 144, "borrowedChips": 0, "admittedJobs": 1},
                {"usedChips": 144, "borrowedChips": 0, "admittedJobs": 1, "pendingJobs": 1})
        got = tuple({k: both[q].get(k) for k in w} for q, w in zip((qa, qb), want, strict=True))
        return both if got == want else None

    both = op.wait("queue statuses", counted)
    assert both[qa]["nominalChips"] == 144
    assert {c["type"]: c["status"] for c in both[qa]["conditions"]} == {"Active": "True"}
    columns = op.env.kubectl("get", "tenantqueues", qb).stdout
    assert columns.split("\n")[0].split()[:7] == [
        "NAME", "COHORT", "NOMINAL", "USED", "BORROWED", "FAIR", "PENDING"]


def test_a_namespace_without_the_right_and_a_priority_over_the_maximum_are_refused(
        op: Harness, team_b: str) -> None:
    qa = f"{op.ns}-qa"
    queue(op, qa, nominal={"trn3-gen2": 144}, namespaces=[op.ns], maxPriority=10)
    op.ultraserver(f"{op.ns}-a")
    op.start("-n", team_b)
    submit(op, team_b, "sneak", 8, queueName=qa)
    op.job("vip", 8, priority=1000, queueName=qa)
    op.job("fine", 8, priority=10, queueName=qa)
    op.phase("fine", "Admitted")
    sneak = op.wait("sneak refused", lambda: (lambda s: s if s.get("reason") == "Inadmissible"
                                              else None)(status(op, team_b, "sneak")))
    assert sneak["phase"] == "Pending"
    assert f"namespace {team_b} may not use queue {qa}" in sneak["message"]
    vip = op.wait("vip refused", lambda: (lambda s: s if s.get("reason") == "Inadmissible"
                                          else None)(op.get("vip").get("status") or {}))
    assert f"priority 1000 is above queue {qa}'s maximum of 10" in vip["message"]


def test_the_api_server_refuses_a_queue_whose_default_namespace_may_not_use_it(
        op: Harness) -> None:
    manifest = f"""
apiVersion: ultraplane.dev/v1alpha1
kind: TenantQueue
metadata: {{name: {op.ns}-bad, labels: {{ultraplane.dev/fleet: {op.ns}}}}}
spec:
  nominal: {{trn3-gen2: 144, trn9: 4}}
  namespaces: [a]
  defaultFor: [b]
"""
    result = op.env.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert result.returncode != 0
    assert "spec.defaultFor names a namespace that spec.namespaces does not allow" in result.stderr
    assert "spec.nominal names a hardware profile Ultraplane does not know" in result.stderr
