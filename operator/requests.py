"""Turning TrainingJob and InferenceJob bodies into the core's queue entries, and keys.

Why a module of its own: the kopf handlers, the recovery listing and the tests all need the
same conversion, and it is where a manifest the schema allowed but the core cannot honour gets
its one-sentence error (an unknown level, a non-positive chip count) instead of a traceback.

Keys carry the kind (`tj/<ns>/<name>`, `ij/<ns>/<name>`, the REST backend's scheduler keys), so
a TrainingJob and an InferenceJob of the same name never share a queue entry or a chip; an
InferenceJob's replica `i` is held in the allocator under `ij/<ns>/<name>#i`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ultraplane.allocator import PlacementRequest
from ultraplane.ids import ChipId, JobKey, job_key, kind_of_job_key
from ultraplane.placements import request_from_topology
from ultraplane.scheduling import QueuedJob

GROUP = "ultraplane.dev"
VERSION = "v1alpha1"
TRAINING = "trainingjobs"
INFERENCE = "inferencejobs"
PLURALS = {"TrainingJob": TRAINING, "InferenceJob": INFERENCE}
ULTRASERVERS = "ultraservers"
FINALIZER = "ultraplane.dev/release-chips"
FLEET_LABEL = "ultraplane.dev/fleet"
FAILURE_POLICIES = ("RestartAll", "ReplaceAffected", "Fail")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
HOLDING_PHASES = frozenset({"Admitted", "Running"})

Body = Mapping[str, Any]


class InvalidJobError(ValueError):
    """The manifest passed the CRD schema but cannot be scheduled; the message names the field."""


@dataclass(frozen=True)
class JobView:
    """What the operator needs from one job body.

    `chips` is the whole allocation; `replica_chips` the chips of each replica of an
    InferenceJob, by index (empty for a TrainingJob).
    """

    key: JobKey
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    phase: str
    deleting: bool
    has_finalizer: bool
    chips: tuple[ChipId, ...]
    replica_chips: tuple[tuple[ChipId, ...], ...]
    failure_policy: str
    queued: QueuedJob | None
    error: str | None


def plural_of_key(key: str) -> str:
    return PLURALS[kind_of_job_key(key)]


def kind_of(body: Body, default: str = "TrainingJob") -> str:
    """The job's kind from its body (watch events and listings carry it)."""
    kind = str(body.get("kind") or default)
    return kind if kind in PLURALS else default


def creation_seq(meta: Mapping[str, Any]) -> int:
    """FIFO rank from the creation timestamp (seconds); names break ties in `QueuedJob.order`."""
    stamp = str(meta.get("creationTimestamp") or "")
    digits = "".join(ch for ch in stamp if ch.isdigit())
    return int(digits) if digits else 0


def _positive(spec: Mapping[str, Any], field: str) -> int:
    value = spec.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidJobError(f"spec.{field} must be a positive integer, got {value!r}.")
    return value


def placement_request(spec: Mapping[str, Any], kind: str = "TrainingJob") -> PlacementRequest:
    """The gang of a TrainingJob, or of one replica of an InferenceJob."""
    chips = _positive(spec, "chipsPerReplica" if kind == "InferenceJob" else "chips")
    try:
        return request_from_topology(chips, spec.get("topology"), spec.get("profile"))
    except ValueError as exc:
        if not str(exc).startswith("topology."):
            raise
        raise InvalidJobError(f"spec.{exc}") from exc


def replica_chips(allocation: Mapping[str, Any]) -> tuple[tuple[ChipId, ...], ...]:
    """Chips of each replica, by index; a gap in the indices yields an empty replica."""
    by_index: dict[int, tuple[ChipId, ...]] = {}
    for replica in allocation.get("replicas") or []:
        index = replica.get("index")
        if isinstance(index, int) and index >= 0:
            by_index[index] = tuple(ChipId(c) for c in replica.get("chips") or [])
    if not by_index:
        return ()
    return tuple(by_index.get(i, ()) for i in range(max(by_index) + 1))


def view_job(body: Body, kind: str | None = None) -> JobView:
    """Read a TrainingJob or InferenceJob body; never raises (a bad spec is in `error`)."""
    kind = kind or kind_of(body)
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    key = job_key(kind, namespace, name)
    allocation = status.get("allocation") or {}
    queued: QueuedJob | None = None
    error: str | None = None
    try:
        priority = spec.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InvalidJobError(f"spec.priority must be an integer, got {priority!r}.")
        replicas = _positive({"replicas": 1, **spec}, "replicas") \
            if kind == "InferenceJob" else None
        queued = QueuedJob(
            key, placement_request(spec, kind), priority, creation_seq(meta),
            bool(spec.get("preemptible", True)), replicas,
        )
    except InvalidJobError as exc:
        error = str(exc)
    # An InferenceJob has no failurePolicy: a replica on a failed chip is replaced, and the
    # job restarts only when no replacement fits.
    policy = str(spec.get("failurePolicy") or "RestartAll") if kind == "TrainingJob" \
        else "ReplaceAffected"
    per_replica = replica_chips(allocation) if kind == "InferenceJob" else ()
    chips = tuple(ChipId(c) for c in allocation.get("chips") or [])
    if per_replica:
        chips = tuple(dict.fromkeys(c for r in per_replica for c in r))
    return JobView(
        key=key,
        kind=kind,
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        phase=str(status.get("phase") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        has_finalizer=FINALIZER in (meta.get("finalizers") or []),
        chips=chips,
        replica_chips=per_replica,
        failure_policy=policy if policy in FAILURE_POLICIES else "RestartAll",
        queued=queued,
        error=error,
    )


def expected_end(status: Mapping[str, Any], now: datetime) -> float | None:
    """A running job's predicted end (epoch seconds) from its progress: the time since
    `startTime` scaled by what is left of `progressPercent`. None before any progress (the
    scheduler then counts the job as never ending)."""
    start, percent = status.get("startTime"), status.get("progressPercent")
    if not isinstance(start, str) or not isinstance(percent, int | float) or not 0 < percent <= 100:
        return None
    try:
        began = datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        return None
    if began.tzinfo is None:
        began = began.replace(tzinfo=UTC)
    clock = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    elapsed = (clock - began).total_seconds()
    if elapsed <= 0:
        return None
    return clock.timestamp() + elapsed * (100.0 - float(percent)) / float(percent)
