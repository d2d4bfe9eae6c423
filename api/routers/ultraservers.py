"""UltraServers and the free capacity of the fleet."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import FleetReader, Reader, require_access, require_fleet_read
from ultraplane.api.backends.fleets import redact_view
from ultraplane.api.errors import ApiError, ErrorBody
from ultraplane.api.routers.deps import BackendDep, NamePath
from ultraplane.api.schemas import CapacityView, UltraServerList, UltraServerView
from ultraplane.api.ultraserverpatches import UltraServerPatch

router = APIRouter(prefix="/v1", tags=["ultraservers"])
reads = [Depends(require_fleet_read)]
# Authorized as job writes are: the caller's verb on the resource (`patch ultraservers`, a
# cluster-scoped resource, so only an every-namespace grant or a cluster role allows it).
writes = [Depends(require_access("patch", "ultraservers"))]


def redacted(views: list[UltraServerView], reader: Reader) -> list[UltraServerView]:
    """Other tenants' jobs unnamed (a worker thread: a cluster reader's checks are calls)."""
    return [redact_view(v, reader.may_read) for v in views]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody},
    422: {"model": ErrorBody},
}


@router.get("/ultraservers", response_model=UltraServerList)
async def list_ultraservers(backend: BackendDep, reader: FleetReader) -> Response:
    """List the UltraServers with their allocated and free chips, power and jobs."""
    if reader.everything:  # the pre-rendered bytes name every tenant's jobs
        return Response(backend.ultraservers_json(), media_type="application/json")
    views = await run_in_threadpool(redacted, backend.ultraservers(), reader)
    return JSONResponse({"items": [v.model_dump(mode="json", by_alias=True) for v in views]})


@router.get("/ultraservers/{name}", response_model=UltraServerView)
async def get_ultraserver(name: NamePath, backend: BackendDep, reader: FleetReader) -> JSONResponse:
    """One UltraServer."""
    for us in backend.ultraservers():
        if us.name == name:
            if not reader.everything:
                us = (await run_in_threadpool(redacted, [us], reader))[0]
            return JSONResponse(us.model_dump(mode="json", by_alias=True))
    raise ApiError(404, "NotFound", "name", f"UltraServer {name} does not exist")


@router.patch("/ultraservers/{name}", response_model=UltraServerView, dependencies=writes,
              responses=ERRORS)
async def patch_ultraserver(name: NamePath, body: UltraServerPatch,
                            backend: BackendDep) -> JSONResponse:
    """Mark chips failed or servers cordoned: a JSON merge patch of `spec.failedChips` and `spec.cordonedServers`."""
    view = await run_in_threadpool(backend.patch_ultraserver, name, body)
    return JSONResponse(view.model_dump(mode="json", by_alias=True))


@router.get("/capacity", response_model=CapacityView, dependencies=reads)
async def capacity(backend: BackendDep) -> Response:
    """Free capacity by level: free chips, whole servers, racks, UltraServers, and how many jobs of each size fit now."""
    return Response(backend.capacity_json(), media_type="application/json")
