"""TrainingJobs and InferenceJobs: one router per kind, built by one function.

Both kinds have the same verbs and paths (`/v1/namespaces/{ns}/<plural>`);
only the body model differs, and it is the CRD's own spec model. (No `from __future__
import annotations` here: the body annotation is the closure's model class, which
FastAPI must see as a class, not as a string to resolve in module globals.)
"""

from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Query, status
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import require_access
from ultraplane.api.backends import Backend
from ultraplane.api.errors import ApiError, ErrorBody
from ultraplane.api.routers.deps import NAME_PATTERN, BackendDep, NamePath, NamespacePath
from ultraplane.api.schemas import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    InferenceJobCreate,
    JobKind,
    JobList,
    JobResource,
    ListMeta,
    TrainingJobCreate,
)

from ultraplane.documents.conversions import PLURALS

LimitQuery = Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX, description="Items per page.")]
ContinueQuery = Annotated[str | None, Query(
    alias="continue", max_length=1024,
    description="`metadata.continue` of the previous page: the next page.")]

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody},
    409: {"model": ErrorBody}, 422: {"model": ErrorBody},
}


def job_router(kind: JobKind, create_model: type[TrainingJobCreate] | type[InferenceJobCreate]) -> APIRouter:
    plural = PLURALS[kind]
    router = APIRouter(prefix="/v1", tags=[plural], responses=ERRORS)
    def may(verb: str) -> list[Any]:
        return [Depends(require_access(verb, plural))]

    async def page(backend: Backend, namespace: str | None, limit: int, cont: str | None) -> JobList:
        got = await run_in_threadpool(backend.list_jobs, kind, namespace, limit=limit, cont=cont)
        return JobList(items=got.items, metadata=ListMeta.model_validate({"continue": got.next}))

    @router.get(f"/{plural}", response_model=JobList, dependencies=may("list"),
                summary=f"List {kind}s in all namespaces, a page at a time")
    async def list_all(
        backend: BackendDep, limit: LimitQuery = LIST_LIMIT_DEFAULT, cont: ContinueQuery = None,
        namespace: str | None = Query(default=None, min_length=1, max_length=63,
                                      pattern=NAME_PATTERN, description="Only this namespace."),
    ) -> JobList:
        return await page(backend, namespace, limit, cont)

    @router.get(f"/namespaces/{{namespace}}/{plural}", response_model=JobList, dependencies=may("list"),
                summary=f"List {kind}s in a namespace, a page at a time")
    async def list_in(namespace: NamespacePath, backend: BackendDep,
                      limit: LimitQuery = LIST_LIMIT_DEFAULT, cont: ContinueQuery = None) -> JobList:
        return await page(backend, namespace, limit, cont)

    @router.get(f"/namespaces/{{namespace}}/{plural}/{{name}}", response_model=JobResource,
                dependencies=may("get"), summary=f"Get one {kind} with its status")
    async def get(namespace: NamespacePath, name: NamePath, backend: BackendDep) -> JobResource:
        return await run_in_threadpool(backend.get_job, kind, namespace, name)

    @router.post(f"/namespaces/{{namespace}}/{plural}", response_model=JobResource,
                 status_code=status.HTTP_201_CREATED, dependencies=may("create"),
                 summary=f"Create a {kind} (the body's spec is the CRD spec)")
    async def create(namespace: NamespacePath, body: create_model, backend: BackendDep) -> JobResource:  # type: ignore[valid-type]
        created = cast(TrainingJobCreate | InferenceJobCreate, body)
        if created.metadata.namespace not in (None, namespace):
            raise ApiError(422, "ValidationError", "body.metadata.namespace",
                           f"body.metadata.namespace: {created.metadata.namespace} is not the "
                           f"namespace of the path ({namespace}); leave it out or make them match")
        return await run_in_threadpool(backend.create_job, kind, namespace,
                                       created.metadata.name, created.spec,
                                       created.metadata.labels)

    @router.delete(f"/namespaces/{{namespace}}/{plural}/{{name}}", response_model=JobResource,
                   dependencies=may("delete"),
                   summary=f"Delete a {kind}; its accounting record stays")
    async def delete(namespace: NamespacePath, name: NamePath, backend: BackendDep) -> JobResource:
        return await run_in_threadpool(backend.delete_job, kind, namespace, name)

    return router


training_router = job_router("TrainingJob", TrainingJobCreate)
inference_router = job_router("InferenceJob", InferenceJobCreate)
