"""Dry-run placement: where a request would land now, without taking anything."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from starlette.concurrency import run_in_threadpool
from ultraplane.api.auth import require_fleet_read
from ultraplane.api.deps import BackendDep
from ultraplane.api.schemas import DryRunRequest, DryRunResult

router = APIRouter(prefix="/v1", tags=["placements"], dependencies=[Depends(require_fleet_read)])


@router.post("/placements:dryRun", response_model=DryRunResult, response_model_exclude_none=True)
async def dry_run(body: DryRunRequest, backend: BackendDep) -> Response:
    """Where a gang request would land now: placement, score, alternatives, and the jobs it would preempt at its priority."""
    # Inline when the fleet is free (no thread hop); otherwise wait in a worker thread so a
    # scheduling tick holding the fleet never stalls the event loop and every other request.
    nowait = getattr(backend, "dry_run_nowait", None)
    result: DryRunResult | None = nowait(body) if nowait is not None else None
    if result is None:
        result = await run_in_threadpool(backend.dry_run, body)
    # Serialized here, once: returning the model would validate it a second time.
    return Response(result.model_dump_json(by_alias=True, exclude_none=True),
                    media_type="application/json")
