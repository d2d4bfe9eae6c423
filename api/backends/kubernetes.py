"""The Kubernetes backend: the custom resources are the state; the API reads and writes them.

Jobs are created and deleted as `TrainingJob` / `InferenceJob` objects (the
operator admits them; the simulator or real workloads run them). Job reads go
to the API server, so they are never stale. The fleet view (UltraServers,
capacity, dry runs) comes from a snapshot that a poller rebuilds every tick:
it lists the UltraServers and the jobs holding chips, loads them into a core
`Allocator` exactly as the operator's cache does, and writes the accounting
rows of every job it sees, so history outlives the objects.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from ultraplane.api import store
from ultraplane.api.backends import (
    JobSpec,
    capacity_json,
    not_found,
    refuse_queue,
    scaled_spec,
)
from ultraplane.api.backends.dryruns import dry_run
from ultraplane.api.backends.histories import InferenceHistories, history_document
from ultraplane.api.errors import ApiError
from ultraplane.api.schemas import (
    DryRunRequest,
    DryRunResult,
    JobKind,
    JobPage,
    JobResource,
    ObjectMeta,
    UltraServerView,
)
from ultraplane.api.settings import Settings
from ultraplane.api.store.accounting import usage_of
from ultraplane.api.ultraserverpatches import UltraServerPatch, patched

from ultraplane import kubeclients
from ultraplane.documents.conversions import (
    GROUP,
    HOLDING_PHASES,
    PLURALS,
    TERMINAL_PHASES,
    VERSION,
    allocated_chips,
    held_parts,
    ultraserver_from_spec,
)
from ultraplane.documents.jobspecs import JobRead, read_body
from ultraplane.hardware.topology import Topology
from ultraplane.hardware.topology import UltraServer as CoreUltraServer
from ultraplane.ids import JobKey, UltraServerName
from ultraplane.placement.allocator import AllocationConflict, Allocator
from ultraplane.policies.queuedocuments import InvalidQueueError, queue_spec, resolve_queue
from ultraplane.policies.quotas import QueueSpec
from ultraplane.resources import InferenceJobSpec, UltraServer

log = logging.getLogger("ultraplane.api.kubernetes")


def _ts(value: Any) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def user_name(key: str) -> str:
    """`namespace/name` of an allocator key (`tj/ns/name`, or a replica `ij/ns/name#1`)."""
    return key.split("#", 1)[0].split("/", 1)[-1]


def _items(response: Any) -> list[dict[str, Any]]:
    """The `items` of a kubernetes client list call (typed `object` by the client)."""
    return list(response["items"])


class KubernetesBackend:
    """Reads and writes the ultraplane.dev custom resources (in-cluster or kubeconfig)."""

    name = "kubernetes"

    def __init__(
        self, settings: Settings, engine: Engine, *, clock: Callable[[], float] = time.time,
        api_client: Any = None,
    ) -> None:
        from kubernetes import client

        self.settings, self.engine, self.clock = settings, engine, clock
        if api_client is None:  # the one client set-up: in-cluster, else --kubeconfig/--context
            api_client = kubeclients.api_client(
                kubeclients.ClusterAccess(settings.kubeconfig, settings.kube_context))
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.lock = threading.RLock()
        self.allocator = Allocator(Topology(()))
        self.views: list[UltraServerView] = []
        self.capacity_report: dict[str, Any] = {}
        self.priorities: dict[JobKey, int] = {}
        self.reservation: tuple[tuple[str, ...], int] | None = None  # (UltraServers, priority)
        self.phases: dict[tuple[str, str], int] = {}
        self.queue_objects: list[dict[str, Any]] = []  # TenantQueues, as of the last poll
        self.queue_specs: dict[str, QueueSpec] = {}  # and the core's reading of them
        self.budget_objects: list[dict[str, Any]] = []  # PowerBudgets, as of the last poll
        self.histories = InferenceHistories()  # sampled at each poll and each history read
        self.services: list[dict[str, Any]] = []  # serving InferenceJobs' figures, last poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error = "not polled yet"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.poll()
        except Exception as exc:  # serve anyway; /readyz says why
            log.warning("first poll failed: %s", exc)
        self._thread = threading.Thread(target=self._loop, name="ultraplane-kube-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def ready(self) -> tuple[bool, str]:
        return (not self._error), self._error

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.tick_seconds):
            try:
                self.poll()
            except Exception as exc:
                log.warning("poll failed: %s", exc)
                self._error = f"cannot list custom resources: {exc}"

    # -- the snapshot ------------------------------------------------------------------------
    def poll(self) -> None:
        """Rebuild the fleet snapshot from the cluster and write accounting rows."""
        self.queue_objects = self.tenant_queues()
        self.queue_specs = self._queue_specs()
        self.budget_objects = self._cluster_list("powerbudgets")
        servers = _items(self.custom.list_cluster_custom_object(GROUP, VERSION, "ultraservers"))
        jobs = [
            (kind, obj)
            for kind, plural in PLURALS.items()
            for obj in _items(self.custom.list_cluster_custom_object(GROUP, VERSION, plural))
        ]
        core, views = [], []
        for obj in servers:
            try:
                us = UltraServer.model_validate(obj)
            except ValueError as exc:
                log.warning("skipping UltraServer %s: %s", obj.get("metadata", {}).get("name"), exc)
                continue
            core.append(ultraserver_from_spec(us.metadata.name, us.spec))
            views.append((us, obj.get("status") or {}))
        allocator = Allocator(Topology(tuple(core)))
        priorities: dict[JobKey, int] = {}
        phases: dict[tuple[str, str], int] = {}
        waiting: dict[str, int] = {}  # job key -> priority of jobs not holding chips
        records = []
        for kind, obj in jobs:
            job, status = read_body(obj, kind), obj.get("status") or {}
            key, phase = job.key, str(status.get("phase") or "Pending")
            # A spec the core cannot queue holds nothing it could be preempted from.
            priority, preemptible = job.priority, job.preemptible
            phases[(kind, phase)] = phases.get((kind, phase), 0) + 1
            if phase in ("Pending", "Preempted"):
                waiting[key] = priority
            if phase in HOLDING_PHASES:
                # One allocator key per replica (its own chips), never the union again.
                parts = held_parts(kind, job.namespace, job.name, status)
                placed: list[JobKey] = []
                try:
                    for part, chips in parts.items():
                        allocator.assign(part, chips)
                        placed.append(part)
                except (AllocationConflict, ValueError) as exc:
                    log.warning("job %s holds chips the snapshot cannot place: %s", key, exc)
                    for part in placed:
                        allocator.release(part)
                    placed.clear()
                if placed and preemptible:
                    priorities.update(dict.fromkeys(placed, priority))
            records.append(self._usage(job, obj, phase))
        # The operator's backfill reservation, from UltraServer.status.reservedFor.
        reserved_by: dict[str, list[str]] = {}
        for us, st in views:
            if st.get("reservedFor"):
                reserved_by.setdefault(str(st["reservedFor"]), []).append(us.metadata.name)
        reservation = next(((tuple(names), waiting[holder]) for holder, names
                            in reserved_by.items() if holder in waiting), None)
        services = self.histories.observe_jobs(
            self.clock(), (obj for kind, obj in jobs if kind == "InferenceJob"))
        with self.lock:
            self.allocator, self.priorities, self.phases = allocator, priorities, phases
            self.services = services
            self.reservation = reservation
            self.views = [self._view(us, status) for us, status in views]
            self.capacity_report = capacity_json(allocator.capacity())
        with self.engine.begin() as conn:
            store.write_accounting(conn, records=records)
        self._error = ""

    def _usage(self, job: JobRead, obj: dict[str, Any], phase: str) -> Any:
        """The job's accounting row, from the core's reading of it (`read_body`): a spec it
        cannot read counts the chips its status names."""
        meta, status, kind = obj["metadata"], obj.get("status") or {}, job.kind
        chips = job.size or len(allocated_chips(status))
        finished = _ts(status.get("completionTime")) if phase in TERMINAL_PHASES else None
        return usage_of(
            job_uid=meta.get("uid") or f"{meta['namespace']}/{meta['name']}", kind=kind,
            namespace=meta["namespace"], name=meta["name"], chips=chips, phase=phase,
            submitted_s=_ts(meta.get("creationTimestamp")), started_s=_ts(status.get("startTime")),
            finished_s=finished, now_s=self.clock(),
            energy_kwh=float(status.get("energyKWh") or 0.0),
            # the simulator's figure, on the clock of energyKWh; absent: from the timestamps
            chip_hours=None if status.get("chipHours") is None else float(status["chipHours"]),
            queue=resolve_queue(self.queue_specs, meta["namespace"], job.queue),
        )

    @staticmethod
    def _view(us: UltraServer, status: dict[str, Any]) -> UltraServerView:
        spec = us.spec
        capacity, allocated, free = (status.get(k) or {} for k in ("capacity", "allocated", "free"))
        core = CoreUltraServer(UltraServerName(us.metadata.name), str(spec.profile),
                               servers=spec.servers)
        chips = int(capacity.get("chips") or core.chip_count)
        used = int(allocated.get("chips") or 0)
        return UltraServerView(
            name=us.metadata.name, profile=str(spec.profile), network=list(spec.network),
            schedulable=spec.schedulable, chips=chips, allocated_chips=used,
            free_chips=int(free.get("chips", max(0, chips - used))),
            failed_chips=sorted(spec.failed_chips), jobs=list(status.get("jobs") or []),
            utilization=float(status.get("utilization") or 0.0),
            power_watts=float(status.get("powerWatts") or 0.0),
            reserved_for=status.get("reservedFor") or None,
        )

    # -- reads -------------------------------------------------------------------------------
    def ultraservers(self) -> list[UltraServerView]:
        return self.views

    def capacity(self) -> dict[str, Any]:
        return self.capacity_report

    def ultraservers_json(self) -> bytes:
        items = [v.model_dump(mode="json", by_alias=True) for v in self.views]
        return json.dumps({"items": items}).encode()

    def capacity_json(self) -> bytes:
        return json.dumps(self.capacity_report).encode()

    def fleet_summary(self) -> dict[str, Any]:
        views = self.views
        return {
            "chips": sum(v.chips for v in views),
            "allocated_chips": sum(v.allocated_chips for v in views),
            "power_watts": sum(v.power_watts for v in views),
            "utilization": (sum(v.utilization * v.chips for v in views) /
                            max(1, sum(v.chips for v in views))),
            "jobs": dict(self.phases),
            "inference": list(self.services),
            "queues": [{"name": q["metadata"]["name"], **(q.get("status") or {})}
                       for q in self.queue_objects],
            "budgets": [{"name": b["metadata"]["name"], "watts": (b.get("spec") or {}).get("watts"),
                         **(b.get("status") or {})} for b in self.budget_objects],
        }

    def _resource(self, kind: JobKind, obj: dict[str, Any]) -> JobResource:
        meta = obj["metadata"]
        return JobResource(
            kind=kind,
            metadata=ObjectMeta(name=meta["name"], namespace=meta["namespace"],
                                uid=meta.get("uid", ""),
                                creation_timestamp=meta.get("creationTimestamp"),
                                labels=meta.get("labels") or {}),
            spec=obj.get("spec") or {}, status=obj.get("status") or {},
        )

    def list_jobs(
        self, kind: JobKind, namespace: str | None, *, limit: int, cont: str | None
    ) -> JobPage:
        """One page from the API server itself (its own limit/continue chunking)."""
        plural = PLURALS[kind]
        paging: dict[str, Any] = {"limit": limit}
        if cont:
            paging["_continue"] = cont
        with self._errors("continue", kind, namespace or "", ""):
            if namespace is None:
                answer = self.custom.list_cluster_custom_object(GROUP, VERSION, plural, **paging)
            else:
                answer = self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, **paging)
        items = [self._resource(kind, obj) for obj in _items(answer)]
        meta: dict[str, Any] = answer.get("metadata") or {}  # type: ignore[attr-defined]
        return JobPage(items=items, next=meta.get("continue") or None)

    def get_job(self, kind: JobKind, namespace: str, name: str) -> JobResource:
        with self._errors("name", kind, namespace, name):
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURALS[kind], name)
        return self._resource(kind, obj)

    def inference_history(self, namespace: str, name: str) -> dict[str, Any]:
        """An InferenceJob's samples, taken at each poll, the figures of now included."""
        job = self.get_job("InferenceJob", namespace, name)
        uid = str(job.metadata.uid or "")
        self.histories.observe(uid, self.clock(), job.status, job.spec)
        return history_document(job.model_dump(by_alias=True), self.histories.series(uid))

    # -- writes ------------------------------------------------------------------------------
    def _queue_specs(self) -> dict[str, QueueSpec]:
        """The core's specs of the TenantQueues of the last poll (ones it cannot use left out,
        as the operator leaves them out)."""
        specs = {}
        for queue in self.queue_objects:
            name = str(queue["metadata"]["name"])
            try:
                specs[name] = queue_spec(name, queue.get("spec") or {})
            except InvalidQueueError:
                continue
        return specs

    def tenant_queues(self) -> list[dict[str, Any]]:
        """The cluster's TenantQueues as the operator last wrote their statuses."""
        return self._cluster_list("tenantqueues")

    def power_budgets(self) -> list[dict[str, Any]]:
        """The cluster's PowerBudgets as the operator last wrote their statuses (last poll)."""
        return self.budget_objects

    def _cluster_list(self, plural: str) -> list[dict[str, Any]]:
        try:
            items = _items(self.custom.list_cluster_custom_object(GROUP, VERSION, plural))
        except Exception as exc:  # the CRD is not installed (404), or the API is down
            if getattr(exc, "status", None) == 404:
                return []
            raise
        return sorted(items, key=lambda q: str(q.get("metadata", {}).get("name")))

    def create_job(
        self, kind: JobKind, namespace: str, name: str, spec: JobSpec, labels: dict[str, str]
    ) -> JobResource:
        # the queues as of the last poll: the operator, which sees every change, decides in
        # the end; this refuses at once what it would never admit (a queue not seen yet may
        # have just been created: the job waits for it, as it would if applied with kubectl)
        if spec.queue_name is None or spec.queue_name in self.queue_specs:
            refuse_queue(self.queue_specs, namespace, spec.queue_name, spec.priority)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
            "metadata": {"name": name, "labels": labels},
            "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        with self._errors("metadata.name", kind, namespace, name):
            obj: dict[str, Any] = self.custom.create_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURALS[kind], body)
        return self._resource(kind, obj)

    def delete_job(self, kind: JobKind, namespace: str, name: str) -> JobResource:
        last = self.get_job(kind, namespace, name)
        with self._errors("name", kind, namespace, name):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS[kind], name)
        return last

    def scale_job(self, namespace: str, name: str, replicas: int) -> JobResource:
        """The job's scale subresource patched, as `kubectl scale` does (checked first as the
        embedded backend checks it; the API server's own rules apply too); the operator
        rescales it when it sees the change."""
        current = self.get_job("InferenceJob", namespace, name)
        if str(current.status.get("phase")) in ("Succeeded", "Failed"):
            raise ApiError(409, "Conflict", "spec.replicas",
                           f"InferenceJob {namespace}/{name} is {current.status['phase']}: a "
                           "finished job cannot be scaled")
        scaled_spec(InferenceJobSpec.model_validate(current.spec), replicas)
        with self._errors("spec.replicas", "InferenceJob", namespace, name):
            self.custom.patch_namespaced_custom_object_scale(
                GROUP, VERSION, namespace, PLURALS["InferenceJob"], name,
                {"spec": {"replicas": replicas}}, _content_type="application/merge-patch+json")
        return self.get_job("InferenceJob", namespace, name)

    def patch_ultraserver(self, name: str, patch: UltraServerPatch) -> UltraServerView:
        """A JSON merge patch of the UltraServer's `failedChips` / `cordonedServers`: the
        object is patched (checked first as the embedded backend checks it); the operator
        applies the failure policies when it sees the change."""
        from kubernetes.client.exceptions import ApiException

        with self.lock:
            current = (self.allocator.topology.ultraserver(name)
                       if name in self.allocator.topology else None)
        if current is not None:
            patched(current, patch)  # a 422 naming the field, before the API server sees it
        with self._errors("name", "TrainingJob", "", name):
            try:
                obj: dict[str, Any] = self.custom.patch_cluster_custom_object(  # type: ignore[assignment]
                    GROUP, VERSION, "ultraservers", name, {"spec": patch.spec_fields()},
                    _content_type="application/merge-patch+json")
            except ApiException as exc:
                if exc.status == 404:
                    raise ApiError(404, "NotFound", "name",
                                   f"UltraServer {name} does not exist") from exc
                raise
        us = UltraServer.model_validate(obj)
        return self._view(us, obj.get("status") or {})

    def dry_run(self, request: DryRunRequest) -> DryRunResult:
        with self.lock:
            return dry_run(self.allocator, request, running=self.priorities,
                           job_name=user_name, reservation=self.reservation)

    def _errors(self, field: str, kind: JobKind, namespace: str, name: str) -> Any:
        return _ApiErrors(field, kind, namespace, name)


class _ApiErrors:
    """Maps the API server's errors to the REST API's 4xx shape (and 503 when unreachable)."""

    def __init__(self, field: str, kind: JobKind, namespace: str, name: str) -> None:
        self.field, self.kind, self.namespace, self.name = field, kind, namespace, name

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if exc is None:
            return
        if isinstance(exc, ApiException):
            message, details = exc.reason or "error", dict[str, Any]()
            try:
                body = json.loads(exc.body or "{}")
                message, details = body.get("message") or message, body.get("details") or {}
            except (ValueError, AttributeError):
                pass
            if exc.status == 404:
                if self.name and details.get("kind") != "namespaces":
                    raise not_found(self.kind, self.namespace, self.name) from exc
                raise ApiError(404, "NotFound", "namespace", message) from exc
            if exc.status == 409:
                raise ApiError(409, "AlreadyExists", self.field, message) from exc
            if exc.status == 410:  # a continue token the API server no longer keeps
                raise ApiError(410, "Expired", self.field, message) from exc
            if exc.status in (400, 422):
                field = self.field if self.field == "continue" else "body.spec"
                raise ApiError(422, "ValidationError", field, message) from exc
            if exc.status in (401, 403):
                raise ApiError(503, "ClusterForbidden", None,
                               f"the API server refused this API's credentials: {message}") from exc
            raise ApiError(502, "ClusterError", None, f"the API server answered {exc.status}: {message}") from exc
        if isinstance(exc, HTTPError | OSError):
            raise ApiError(503, "ClusterUnavailable", None, f"the API server is unreachable: {exc}") from exc
