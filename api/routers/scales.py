"""Scaling an InferenceJob: `PATCH` of its replicas, and its `scale` as Kubernetes has it.

Why both: a person edits the job (`PATCH` with `{"spec": {"replicas": N}}`, as `kubectl
patch`), while `kubectl scale`, an HPA and KEDA speak `autoscaling/v1` Scale on the job's
`/scale` path. Both reach one backend call (`Backend.scale_job`): the embedded fleet hands the
new count to the core (`Admissions.rescale`: removed replicas go at once, added ones are
placed by the next cycles, the others keep their chips); on a cluster it is the API server's
own scale subresource, and the operator does the same. (No `from __future__ import
annotations`: FastAPI must see the body models as classes.)
"""

from typing import Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import require_access
from ultraplane.api.errors import ErrorBody
from ultraplane.api.routers.deps import BackendDep, NamePath, NamespacePath
from ultraplane.api.schemas import (
    InferenceJobPatch,
    JobResource,
    Scale,
    ScaleMeta,
    ScaleSpec,
    ScaleStatus,
)

PATH = "/namespaces/{namespace}/inferencejobs/{name}"
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody},
    409: {"model": ErrorBody}, 422: {"model": ErrorBody},
}
router = APIRouter(prefix="/v1", tags=["inferencejobs"], responses=ERRORS)


def may(verb: str) -> list[Any]:
    return [Depends(require_access(verb, "inferencejobs"))]


def scale_of(job: JobResource) -> Scale:
    """The job as a Scale: spec.replicas wanted, status.replicas placed, the pods' selector."""
    status = job.status or {}
    return Scale(
        metadata=ScaleMeta(name=job.metadata.name, namespace=job.metadata.namespace,
                           uid=job.metadata.uid,
                           creation_timestamp=job.metadata.creation_timestamp),
        spec=ScaleSpec(replicas=int(job.spec.get("replicas", 1))),
        status=ScaleStatus(replicas=int(status.get("replicas") or 0),
                           selector=status.get("selector")))


@router.patch(PATH, response_model=JobResource, dependencies=may("patch"),
              summary="Change an InferenceJob's replicas (the only field that may change)")
async def patch(namespace: NamespacePath, name: NamePath, body: InferenceJobPatch,
                backend: BackendDep) -> JobResource:
    return await run_in_threadpool(backend.scale_job, namespace, name, body.spec.replicas)


@router.get(PATH + "/scale", response_model=Scale, dependencies=may("get"),
            summary="Get an InferenceJob's scale (autoscaling/v1 Scale)")
async def get_scale(namespace: NamespacePath, name: NamePath, backend: BackendDep) -> Scale:
    job = await run_in_threadpool(backend.get_job, "InferenceJob", namespace, name)
    return scale_of(job)


@router.put(PATH + "/scale", response_model=Scale, dependencies=may("patch"),
            summary="Set an InferenceJob's replicas through its scale (autoscaling/v1 Scale)")
async def put_scale(namespace: NamespacePath, name: NamePath, body: Scale,
                    backend: BackendDep) -> Scale:
    job = await run_in_threadpool(backend.scale_job, namespace, name, body.spec.replicas)
    return scale_of(job)
