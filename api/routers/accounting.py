"""Accounting: chip-hours, energy and completion time per job, per namespace, per day."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from ultraplane.api import store
from ultraplane.api.access.auth import require_access
from ultraplane.api.routers.deps import SessionDep
from ultraplane.api.store.tables import AccountingPublic, DayUsage, NamespaceUsage, QueueUsage

router = APIRouter(prefix="/v1/accounting", tags=["accounting"], dependencies=[Depends(require_access("list", "trainingjobs", "inferencejobs"))])

DAY = r"^\d{4}-\d{2}-\d{2}$"
NamespaceQuery = Annotated[str | None, Query(max_length=63, description="Only this namespace.")]


@router.get("/jobs", response_model=list[AccountingPublic])
def jobs(
    session: SessionDep,
    namespace: NamespaceQuery = None,
    name: Annotated[str | None, Query(max_length=253)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> list[AccountingPublic]:
    """Per job: chips, chip-hours, energy (kWh), and completion time once finished."""
    rows = store.list_accounting(session, namespace=namespace, name=name, limit=limit, offset=offset)
    return [AccountingPublic.model_validate(row, from_attributes=True) for row in rows]


@router.get("/namespaces", response_model=list[NamespaceUsage])
def namespaces(session: SessionDep) -> list[NamespaceUsage]:
    """Per namespace: jobs, chip-hours, energy and mean job completion time."""
    return store.usage_by_namespace(session)


@router.get("/queues", response_model=list[QueueUsage])
def queues(session: SessionDep) -> list[QueueUsage]:
    """Per tenant queue (sacct's accounts): jobs, chip-hours, energy and mean completion
    time; `queue: null` sums the jobs outside every quota."""
    return store.usage_by_queue(session)


@router.get("/days", response_model=list[DayUsage])
def days(
    session: SessionDep,
    namespace: NamespaceQuery = None,
    since: Annotated[str | None, Query(pattern=DAY, description="First UTC day, YYYY-MM-DD.")] = None,
    until: Annotated[str | None, Query(pattern=DAY, description="Last UTC day, YYYY-MM-DD.")] = None,
) -> list[DayUsage]:
    """Per UTC day (of simulated time in the embedded backend): jobs, chip-hours and energy."""
    return store.usage_by_day(session, namespace=namespace, since=since, until=until)
