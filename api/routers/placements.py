"""Dry-run placement: where a request would land now, without taking anything."""

from __future__ import annotations

from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import DryRunReader, Reader
from ultraplane.api.backends.fleets import redact
from ultraplane.api.routers.deps import BackendDep
from ultraplane.api.schemas import DryRunRequest, DryRunResult

router = APIRouter(prefix="/v1", tags=["placements"])


def _scoped(result: DryRunResult, reader: Reader) -> DryRunResult:
    """Victims the caller may not read are "another tenant" (a thread: reviews are calls)."""
    if result.preemption is not None:
        result.preemption.victims = redact(result.preemption.victims, reader.may_read)
    return result


@router.post("/placements:dryRun", response_model=DryRunResult, response_model_exclude_none=True)
async def dry_run(body: DryRunRequest, backend: BackendDep, reader: DryRunReader) -> Response:
    """Where a gang request would land now: placement, score, alternatives, and the jobs it would preempt at its priority."""
    # Inline when the fleet is free (no thread hop); otherwise wait in a worker thread so a
    # scheduling tick holding the fleet never stalls the event loop and every other request.
    nowait = getattr(backend, "dry_run_nowait", None)
    result: DryRunResult | None = nowait(body) if nowait is not None else None
    if result is None:
        result = await run_in_threadpool(backend.dry_run, body)
    if not reader.everything and result.preemption is not None:
        result = await run_in_threadpool(_scoped, result, reader)
    # Serialized here, once: returning the model would validate it a second time.
    return Response(result.model_dump_json(by_alias=True, exclude_none=True),
                    media_type="application/json")
