"""UltraServers and the free capacity of the fleet."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from ultraplane.api.auth import require_fleet_read
from ultraplane.api.deps import BackendDep, NamePath
from ultraplane.api.errors import ApiError
from ultraplane.api.schemas import CapacityView, UltraServerList, UltraServerView

router = APIRouter(prefix="/v1", tags=["ultraservers"], dependencies=[Depends(require_fleet_read)])


@router.get("/ultraservers", response_model=UltraServerList)
async def list_ultraservers(backend: BackendDep) -> Response:
    """List the UltraServers with their allocated and free chips, power and jobs."""
    return Response(backend.ultraservers_json(), media_type="application/json")


@router.get("/ultraservers/{name}", response_model=UltraServerView)
async def get_ultraserver(name: NamePath, backend: BackendDep) -> JSONResponse:
    """One UltraServer."""
    for us in backend.ultraservers():
        if us.name == name:
            return JSONResponse(us.model_dump(mode="json", by_alias=True))
    raise ApiError(404, "NotFound", "name", f"UltraServer {name} does not exist")


@router.get("/capacity", response_model=CapacityView)
async def capacity(backend: BackendDep) -> Response:
    """Free capacity by level: free chips, whole servers, racks, UltraServers, and how many jobs of each size fit now."""
    return Response(backend.capacity_json(), media_type="application/json")
