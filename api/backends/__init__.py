"""The one interface the routers talk to, and what both backends share.

`EmbeddedBackend` (ultraplane.api.backends.embedded) runs the core scheduler and the
simulator's JobRuntime in-process; `KubernetesBackend`
(ultraplane.api.backends.kubernetes) reads and writes the custom resources.
Routers never know which one they have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy import Engine
from ultraplane.api.errors import ApiError
from ultraplane.api.schemas import (
    CapacityView,
    DomainCapacityView,
    DryRunRequest,
    DryRunResult,
    JobKind,
    JobPage,
    JobResource,
    NoFitView,
    PlacementView,
    UltraServerView,
)
from ultraplane.api.settings import Settings
from ultraplane.api.ultraserverpatches import UltraServerPatch

from ultraplane.placement.allocator import CapacityReport, NoFit, Placement, PlacementRequest
from ultraplane.placement.capacities import DomainCapacity
from ultraplane.placement.placements import request_from_topology
from ultraplane.policies.queuedocuments import refusal_at_create
from ultraplane.policies.quotas import QueueSpec
from ultraplane.resources import InferenceJobSpec, TrainingJobSpec
from ultraplane.resources.commons import problem_of

JobSpec = TrainingJobSpec | InferenceJobSpec


class Backend(Protocol):
    """What the REST API needs from a fleet."""

    name: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def ready(self) -> tuple[bool, str]: ...
    def ultraservers(self) -> list[UltraServerView]: ...
    def capacity(self) -> dict[str, Any]: ...
    def ultraservers_json(self) -> bytes: ...  # `{"items": [...]}`, pre-rendered for speed
    def capacity_json(self) -> bytes: ...
    def tenant_queues(self) -> list[dict[str, Any]]: ...  # TenantQueue objects, with status
    def power_budgets(self) -> list[dict[str, Any]]: ...  # PowerBudget objects, with status
    def list_jobs(
        self, kind: JobKind, namespace: str | None, *, limit: int, cont: str | None
    ) -> JobPage: ...
    def get_job(self, kind: JobKind, namespace: str, name: str) -> JobResource: ...
    def create_job(
        self, kind: JobKind, namespace: str, name: str, spec: JobSpec, labels: dict[str, str]
    ) -> JobResource: ...
    def delete_job(self, kind: JobKind, namespace: str, name: str) -> JobResource: ...
    def scale_job(self, namespace: str, name: str, replicas: int) -> JobResource: ...
    def inference_history(self, namespace: str, name: str) -> dict[str, Any]: ...
    def dry_run(self, request: DryRunRequest) -> DryRunResult: ...
    def patch_ultraserver(self, name: str, patch: UltraServerPatch) -> UltraServerView: ...
    def fleet_summary(self) -> dict[str, Any]: ...


def make_backend(
    settings: Settings, engine: Engine, *, clock: Callable[[], float] | None = None,
    background_ticks: bool = True,
) -> Backend:
    """The backend `settings.backend` names; `clock` (wall seconds) and, for the embedded
    fleet, `background_ticks=False` (ticks only when a test calls `tick()`) are for tests."""
    clock = clock or time.time
    if settings.backend == "kubernetes":
        from ultraplane.api.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(settings, engine, clock=clock)
    from ultraplane.api.backends.embedded import EmbeddedBackend

    return EmbeddedBackend(settings, engine, clock=clock, background=background_ticks)


# --- conversions shared by both backends ----------------------------------------------------


def capacity_json(report: CapacityReport) -> dict[str, Any]:
    """The `GET /v1/capacity` body (camelCase, as the rest of the API) of a core report."""

    def domain(d: DomainCapacity) -> DomainCapacityView:
        return DomainCapacityView(
            name=d.name, level=d.level, total=d.total, allocated=d.allocated, free=d.free,
            unusable=d.unusable, free_whole_servers=d.free_whole_servers,
            free_whole_racks=d.free_whole_racks, freeWholeUltraServers=d.free_whole_ultraservers)

    view = CapacityView(
        cluster=domain(report.cluster),
        ultra_servers=[domain(u) for u in report.ultraservers],
        levels={level: [domain(d) for d in ds] for level, ds in report.levels.items()},
        fits={str(size): n for size, n in report.fits.items()},
        utilization=report.utilization,
    )
    return view.model_dump(mode="json", by_alias=True)


def placement_view(placement: Placement) -> PlacementView:
    return PlacementView(
        chip_ids=list(placement.chip_ids),
        ultra_servers=list(placement.ultraservers),
        servers=list(placement.servers),
        level=str(placement.level),
        score=float(placement.score),
    )


def nofit_view(nofit: NoFit) -> NoFitView:
    return NoFitView(kind=str(nofit.kind), message=nofit.message)


def request_of(body: DryRunRequest) -> PlacementRequest:
    """Validated dry-run body (levels and profile are enums there) -> core request; what
    only the core can judge (a mode with a level) becomes a 422 naming the field."""
    wire = body.model_dump(mode="json", by_alias=True, exclude_none=True)
    profile = None if body.profile is None else str(body.profile.value)
    try:
        return request_from_topology(body.chips, wire, profile)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0].removeprefix("topology.")
        raise ApiError(422, "ValidationError", f"body.{field}", str(exc).split(": ", 1)[-1]
                       ) from exc


def refuse_queue(queues: Mapping[str, QueueSpec], namespace: str, queue: str | None,
                 priority: int) -> None:
    """A job its queue would never admit is refused at create, with the core's reason
    (`queuedocuments.refusal_at_create`): 403 for a namespace without the right to the queue,
    422 for an unknown queue or a priority above the queue's maximum."""
    why = refusal_at_create(queues, namespace, queue, priority)
    if why is None:
        return
    if why.rule == "NamespaceNotAllowed":
        raise ApiError(403, "Forbidden", "spec.queueName", why.message)
    field = "spec.priority" if why.rule == "PriorityAboveMaximum" else "spec.queueName"
    raise ApiError(422, "Invalid", field, why.message)


def not_found(kind: JobKind, namespace: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", "name", f"{kind} {namespace}/{name} does not exist")


def scaled_spec(spec: InferenceJobSpec, replicas: int) -> InferenceJobSpec:
    """`spec` with `replicas`, checked as the CRD checks it (at least 1, at most
    spec.autoscaling.maxReplicas, every replica's chips within a job's limit): a 422 naming
    spec.replicas otherwise."""
    wire = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    try:
        return InferenceJobSpec.model_validate({**wire, "replicas": replicas})
    except ValidationError as exc:
        said = problem_of(exc)
        if said.startswith("replicas: "):
            said = "spec." + said
        raise ApiError(422, "ValidationError", "spec.replicas", said) from exc
