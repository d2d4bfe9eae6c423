"""TenantCohorts on a real API server: a team cohort's borrowing limit holds, an edit lifts it,
and a cohort whose parent closes a cycle is left out with the cycle named.

Fleet (the test's own, labelled with its namespace), two teams of one organisation:

    gen2-a [ 144 ]   gen2-b [ 144 ]
    org ── ml  (borrowingLimit 0):  queue A, nominal 144 (the namespace's default)
    org ── web:                     queue W, nominal 144, idle

A's first job fills its quota; its second would borrow W's idle quota through org, which ml's
borrowing limit forbids until the cohort is edited.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.operator_harness import GROUP, VERSION, Harness


def obj(op: Harness, kind: str, plural: str, name: str, **spec: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
            "metadata": {"name": name, "labels": {"ultraplane.dev/fleet": op.ns}},
            "spec": spec}
    op.api.create_cluster_custom_object(GROUP, VERSION, plural, body)


@pytest.fixture
def cleanup(op: Harness) -> Iterator[None]:
    try:
        yield
    finally:
        for plural in ("tenantqueues", "tenantcohorts"):
            op.api.delete_collection_cluster_custom_object(
                GROUP, VERSION, plural, label_selector=f"ultraplane.dev/fleet={op.ns}")


def cohort_status(op: Harness, name: str) -> dict[str, Any]:
    return dict(op.api.get_cluster_custom_object(GROUP, VERSION, "tenantcohorts", name)
                .get("status") or {})


def test_a_team_cohorts_borrowing_limit_holds_until_edited_and_cycles_are_left_out(
        op: Harness, cleanup: None) -> None:
    org, ml, web = f"{op.ns}-org", f"{op.ns}-ml", f"{op.ns}-web"
    obj(op, "TenantCohort", "tenantcohorts", org)
    obj(op, "TenantCohort", "tenantcohorts", ml, parent=org, borrowingLimit=0)
    obj(op, "TenantCohort", "tenantcohorts", web, parent=org)
    obj(op, "TenantQueue", "tenantqueues", f"{op.ns}-qa", nominal={"trn3-gen2": 144},
        cohort=ml, namespaces=[op.ns], defaultFor=[op.ns])
    obj(op, "TenantQueue", "tenantqueues", f"{op.ns}-qw", nominal={"trn3-gen2": 144},
        cohort=web)
    op.ultraserver(f"{op.ns}-a")
    op.ultraserver(f"{op.ns}-b")
    op.start()

    op.job("a1", 144)
    op.phase("a1", "Admitted")
    op.job("a2", 144)
    a2 = op.wait("a2 refused by ml's limit", lambda: (
        lambda s: s if s.get("reason") == "NoQuota" else None)(op.get("a2").get("status") or {}))
    assert a2["phase"] == "Pending"
    assert op.wait("ml active", lambda: (cohort_status(op, ml).get("conditions") or [{}])[0]
                   .get("status") == "True")

    op.api.patch_cluster_custom_object(GROUP, VERSION, "tenantcohorts", ml,
                                       {"spec": {"borrowingLimit": 144}})
    op.phase("a2", "Admitted", timeout=60)

    # x's parent is y, and y's parent x: the second closes the cycle and is left out
    x, y = f"{op.ns}-x", f"{op.ns}-y"
    obj(op, "TenantCohort", "tenantcohorts", x, parent=y)
    obj(op, "TenantCohort", "tenantcohorts", y, parent=x)
    refused = op.wait("y refused", lambda: next(
        (c for c in cohort_status(op, y).get("conditions") or []
         if c.get("status") == "False"), None))
    assert "cohort parents form a cycle" in refused["message"]
