"""`GET .../{plural}/{name}/explanation`: why a job is pending and when it should start.

The answer is the core's (`ultraplane.documents.explanations`). The embedded backend builds it from its
own scheduler state; any other backend from documents (the job, the UltraServer views and the
jobs holding chips there). Holders and reservations are named `namespace/name` only in
namespaces the caller may read; the others are "a job in another namespace".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import Access, Credentials, Guard, require_access
from ultraplane.api.backends import Backend
from ultraplane.api.errors import ApiError, ErrorBody
from ultraplane.api.routers.deps import BackendDep, NamePath, NamespacePath
from ultraplane.api.schemas import JobKind

from ultraplane.documents.conversions import PLURALS
from ultraplane.documents.explanation_inputs import explain_documents, job_name_of_key
from ultraplane.ids import kind_of_job_key

router = APIRouter(prefix="/v1", tags=["explanations"],
                   responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody},
                              404: {"model": ErrorBody}})


def visibility(guard: Guard, credentials: HTTPAuthorizationCredentials | None
               ) -> Callable[[str], bool]:
    """namespace -> whether the caller may read its jobs (every namespace with auth off)."""
    if not guard.enabled:
        return lambda _ns: True
    caller = guard.authenticate(credentials)
    seen: dict[str, bool] = {}

    def visible(namespace: str) -> bool:
        if namespace not in seen:
            try:
                guard.authorize(caller, Access("list", tuple(PLURALS.values()), namespace))
                seen[namespace] = True
            except ApiError:
                seen[namespace] = False
        return seen[namespace]

    return visible


def from_documents(backend: Backend, kind: JobKind, namespace: str, name: str,
                   visible: Callable[[str], bool], now_s: float) -> dict[str, Any]:
    job = backend.get_job(kind, namespace, name).model_dump(by_alias=True)
    views = [v.model_dump(by_alias=True) for v in backend.ultraservers()]
    holders = []
    for key in sorted({k.split("#", 1)[0] for v in views for k in v.get("jobs") or ()}):
        ns_name = job_name_of_key(key) or ""
        holder_ns, _, holder_name = ns_name.partition("/")
        try:
            holders.append(backend.get_job(kind_of_job_key(key),  # type: ignore[arg-type]
                                           holder_ns, holder_name).model_dump(by_alias=True))
        except ApiError:
            continue  # gone since the views were taken
    return explain_documents(job, views, holders, now_s=now_s, visible=visible).wire()


def _route(kind: JobKind) -> None:
    plural = PLURALS[kind]

    @router.get(f"/namespaces/{{namespace}}/{plural}/{{name}}/explanation",
                dependencies=[Depends(require_access("get", plural))],
                summary=f"Why a {kind} is pending: blockers, nearest UltraServers, predicted start")
    async def explanation(namespace: NamespacePath, name: NamePath, backend: BackendDep,
                          request: Request, credentials: Credentials) -> dict[str, Any]:
        guard: Guard = request.app.state.guard
        visible = await run_in_threadpool(visibility, guard, credentials)
        explain = getattr(backend, "explain_job", None)
        if explain is not None:
            result: dict[str, Any] = await run_in_threadpool(explain, kind, namespace, name,
                                                             visible)
            return result
        clock = getattr(backend, "clock", None)
        now = clock() if callable(clock) else time.time()
        return await run_in_threadpool(from_documents, backend, kind, namespace, name,
                                       visible, float(now))


_route("TrainingJob")
_route("InferenceJob")
