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

from ultraplane.conversions import (
    GROUP,
    HOLDING_PHASES,
    INFERENCE,
    PLURALS,
    TERMINAL_PHASES,
    TRAINING,
    ULTRASERVERS,
    VERSION,
    InvalidJobError,
    creation_seconds,
    creation_seq,
    placement_request,
    queued_job,
    replica_chips,
)
from ultraplane.ids import ChipId, JobKey, job_key, kind_of_job_key
from ultraplane.scheduling import QueuedJob

__all__ = [
    "FAILURE_POLICIES",
    "FINALIZER",
    "FLEET_LABEL",
    "GROUP",
    "HOLDING_PHASES",
    "INFERENCE",
    "PLURALS",
    "TERMINAL_PHASES",
    "TRAINING",
    "ULTRASERVERS",
    "VERSION",
    "InvalidJobError",
    "JobView",
    "creation_seq",
    "expected_end",
    "kind_of",
    "placement_request",
    "plural_of_key",
    "replica_chips",
    "view_job",
]

FINALIZER = "ultraplane.dev/release-chips"
FLEET_LABEL = "ultraplane.dev/fleet"
FAILURE_POLICIES = ("RestartAll", "ReplaceAffected", "Fail")

Body = Mapping[str, Any]


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
        queued = queued_job(kind, namespace, name, spec, creation_seq(meta),
                            creation_seconds(meta))
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
    scheduler then keeps its admission-time prediction from `work`, if it made one)."""
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
