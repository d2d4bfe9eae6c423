"""Tenant queues and power budgets: what each team holds, borrows and waits for, and the
watts each budget allows, predicts and caps."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from ultraplane.api.access.auth import require_fleet_read
from ultraplane.api.errors import ApiError, ErrorBody
from ultraplane.api.routers.deps import BackendDep, NamePath

from ultraplane.resources.budgets import PowerBudget
from ultraplane.resources.tenantqueues import TenantQueue

router = APIRouter(prefix="/v1", tags=["queues"], dependencies=[Depends(require_fleet_read)])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody}, 403: {"model": ErrorBody},
                                           404: {"model": ErrorBody}}


@router.get("/tenantqueues", responses=ERRORS, response_model_exclude_none=True)
def list_queues(backend: BackendDep) -> dict[str, list[TenantQueue]]:
    """List the tenant queues: nominal chips, cohort, and used, borrowed and waiting now."""
    return {"items": [TenantQueue.model_validate(q) for q in backend.tenant_queues()]}


@router.get("/tenantqueues/{name}", responses=ERRORS, response_model_exclude_none=True)
def get_queue(backend: BackendDep, name: NamePath) -> TenantQueue:
    """One tenant queue with its usage."""
    return TenantQueue.model_validate(_named(backend.tenant_queues(), "TenantQueue", name))


@router.get("/powerbudgets", responses=ERRORS, response_model_exclude_none=True)
def list_budgets(backend: BackendDep) -> dict[str, list[PowerBudget]]:
    """List the power budgets: watts, and the predicted and measured draw, headroom and
    capped jobs now."""
    return {"items": [PowerBudget.model_validate(b) for b in backend.power_budgets()]}


@router.get("/powerbudgets/{name}", responses=ERRORS, response_model_exclude_none=True)
def get_budget(backend: BackendDep, name: NamePath) -> PowerBudget:
    """One power budget with its draw and headroom."""
    return PowerBudget.model_validate(_named(backend.power_budgets(), "PowerBudget", name))


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object called `name`, or a 404 naming it."""
    for obj in objects:
        if obj["metadata"]["name"] == name:
            return obj
    raise ApiError(404, "NotFound", "name", f"{kind} {name} does not exist")
