"""Tenant queues: each team's quota and what it holds, borrows and waits for."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from ultraplane.api.auth import require_fleet_read
from ultraplane.api.deps import BackendDep, NamePath
from ultraplane.api.errors import ApiError, ErrorBody

from ultraplane.resources.tenantqueues import TenantQueue

router = APIRouter(prefix="/v1", tags=["queues"], dependencies=[Depends(require_fleet_read)])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody}, 403: {"model": ErrorBody},
                                           404: {"model": ErrorBody}}


@router.get("/tenantqueues", responses=ERRORS)
def list_queues(backend: BackendDep) -> dict[str, list[TenantQueue]]:
    """List the tenant queues: nominal chips, cohort, and used, borrowed and waiting now."""
    return {"items": [TenantQueue.model_validate(q) for q in backend.tenant_queues()]}


@router.get("/tenantqueues/{name}", responses=ERRORS)
def get_queue(backend: BackendDep, name: NamePath) -> TenantQueue:
    """One tenant queue with its usage."""
    for q in backend.tenant_queues():
        if q["metadata"]["name"] == name:
            return TenantQueue.model_validate(q)
    raise ApiError(404, "NotFound", "name", f"TenantQueue {name} does not exist")
