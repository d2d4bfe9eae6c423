"""An InferenceJob's recent past, for the dashboard's chart of each inference service.

`GET /v1/namespaces/{ns}/inferencejobs/{name}/history` answers with the samples the backend
keeps of the job (`ultraplane.api.backends.histories`): offered load, replicas wanted, placed
and ready, and p99 TTFT, with the job's TTFT objective. It is read with the same right as the
job itself (`get` on inferencejobs in its namespace), and is a 404 for a job that does not exist.
"""

from typing import Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import require_access
from ultraplane.api.errors import ErrorBody
from ultraplane.api.routers.deps import BackendDep, NamePath, NamespacePath

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody},
}
router = APIRouter(prefix="/v1", tags=["inferencejobs"], responses=ERRORS)


@router.get("/namespaces/{namespace}/inferencejobs/{name}/history",
            dependencies=[Depends(require_access("get", "inferencejobs"))],
            summary="An InferenceJob's recent load, replicas and p99 TTFT, oldest first")
async def history(namespace: NamespacePath, name: NamePath, backend: BackendDep
                  ) -> dict[str, Any]:
    """Samples `{t, requestsPerSecond, desiredReplicas, replicas, readyReplicas, ttftP99Ms}`
    (t in unix seconds; null: not reported) and `ttftObjectiveMs`."""
    return await run_in_threadpool(backend.inference_history, namespace, name)
