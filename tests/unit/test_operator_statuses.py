"""Pure pieces of the operator: body conversion, inventory diffs, status documents."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ultraplane.operator import statuses
from ultraplane.operator.inventory import Inventory, ultraserver_from_body
from ultraplane.operator.jobviews import view_job

from ultraplane.documents.jobstatuses import moved
from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, Placement, PlacementRequest

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def body(**spec: object) -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": "j", "uid": "u1", "resourceVersion": "7",
                         "creationTimestamp": "2026-12-02T10:00:00Z"},
            "spec": {"chips": 16, **spec}}


@pytest.mark.parametrize(
    ("spec", "error"),
    [({"chips": 0}, "spec.chips"), ({"priority": "high"}, "spec.priority"),
     ({"topology": {"requiredLevel": "galaxy"}}, "requiredLevel"), ({}, None)],
)
def test_view_job_reports_bad_specs_by_field(spec: dict[str, object], error: str | None) -> None:
    view = view_job(body(**spec))
    assert view.key == "tj/ns/j"
    if error is None:
        assert view.error is None and view.queued is not None
        assert view.queued.request.chips == 16
    else:
        assert view.queued is None and view.error is not None and error in view.error


def test_fifo_rank_follows_creation_time() -> None:
    early = view_job(body())
    late_body = body()
    late_body["metadata"]["creationTimestamp"] = "2026-12-02T10:00:01Z"  # type: ignore[index]
    late = view_job(late_body)
    assert early.queued and late.queued and early.queued.seq < late.queued.seq


def us_body(name: str = "gen2-0000", **spec: object) -> dict[str, object]:
    return {"metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"profile": "trn3-gen2", "network": ["block-000"], **spec}}


def test_inventory_diff_names_new_failures_cordons_and_drains() -> None:
    inv = Inventory()
    inv.upsert(ultraserver_from_body(us_body(failedChips=["s00/c00"])))
    change = inv.upsert(ultraserver_from_body(us_body(
        failedChips=["s00/c00", "s01/c02"], cordonedServers=[3], schedulable=False,
        drainPolicy="Requeue")))
    assert change.newly_failed == {"gen2-0000/s01/c02"}
    assert change.newly_cordoned == {3} and change.became_unschedulable
    assert inv.get("gen2-0000").drain_policy == "Requeue"  # type: ignore[union-attr]


def placement() -> Placement:
    alloc = Allocator(build_fleet("trn3-gen2", 1))
    placed = alloc.allocate(JobKey("ns/j"), PlacementRequest(8))
    assert isinstance(placed, Placement)
    return placed


def test_admitted_status_lists_the_allocation_and_keeps_simulator_conditions() -> None:
    current = {"attempt": 1, "conditions": [{"type": "Running", "status": "True"}]}
    status = statuses.admitted(current, placement(), NOW)
    assert status["phase"] == "Admitted" and status["attempt"] == 2
    assert len(status["allocation"]["chips"]) == 8 and status["allocation"]["ultraServers"]
    assert {c["type"] for c in status["conditions"]} == {"Admitted", "Running"}


def test_preempted_status_keeps_progress_and_counts() -> None:
    current = {"preemptions": 2, "progress": {"checkpointedSteps": 30}}
    status = statuses.preempted(current, "Preempted", "by x", NOW)
    assert status["phase"] == "Preempted" and status["preemptions"] == 3
    assert "progress" not in status and status["allocation"] is None
    restart = statuses.preempted({}, "ChipFailed", "chip", NOW, restart=True)
    assert restart["phase"] == "Pending" and restart["restarts"] == 1


@pytest.mark.parametrize(("old", "new", "write"),
                         [(None, 900, True), (3, 2, True), (400, 395, False), (400, 350, True),
                          (51, 50, True)])
def test_queue_positions_are_rewritten_only_when_they_move(old: int | None, new: int,
                                                           write: bool) -> None:
    assert moved(old, new) is write
