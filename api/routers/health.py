"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from ultraplane.api.routers.deps import BackendDep
from ultraplane.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz(backend: BackendDep) -> Health:
    """The process is up and serving HTTP."""
    return Health(status="ok", backend=backend.name)


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
async def readyz(backend: BackendDep) -> Response:
    """The backend can answer: the store migrated and the first cycle ran (or the cluster answers)."""
    ok, detail = backend.ready()
    body = Health(status="ok" if ok else "unavailable", backend=backend.name, detail=detail)
    return JSONResponse(body.model_dump(by_alias=True), status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus metrics of this API and its fleet."""
    data = generate_latest(request.app.state.metrics.registry)
    return Response(content=data, media_type=CONTENT_TYPE_LATEST)
