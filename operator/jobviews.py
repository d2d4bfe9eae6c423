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
from typing import Any

from ultraplane.documents.conversions import (
    GROUP,
    HOLDING_PHASES,
    INFERENCE,
    PLURALS,
    POWERBUDGETS,
    TENANTCOHORTS,
    TENANTQUEUES,
    TERMINAL_PHASES,
    TRAINING,
    ULTRASERVERS,
    VERSION,
    InvalidJobError,
    creation_seq,
    placement_request,
    replica_chips,
)
from ultraplane.documents.jobspecs import expected_end, read_body
from ultraplane.ids import ChipId, JobKey, kind_of_job_key
from ultraplane.resources.trainingjobs import FailurePolicy
from ultraplane.workloads import QueuedJob

__all__ = [
    "FINALIZER",
    "FLEET_LABEL",
    "GROUP",
    "HOLDING_PHASES",
    "INFERENCE",
    "PLURALS",
    "POWERBUDGETS",
    "TENANTCOHORTS",
    "TENANTQUEUES",
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
    failure_policy: FailurePolicy
    queued: QueuedJob | None
    error: str | None


def plural_of_key(key: str) -> str:
    return PLURALS[kind_of_job_key(key)]


def kind_of(body: Body, default: str = "TrainingJob") -> str:
    """The job's kind from its body (watch events and listings carry it)."""
    kind = str(body.get("kind") or default)
    return kind if kind in PLURALS else default


def view_job(body: Body, kind: str | None = None) -> JobView:
    """Read a TrainingJob or InferenceJob body through the core's one reader
    (`ultraplane.documents.jobspecs`); never raises (a bad spec is in `error`)."""
    kind = kind or kind_of(body)
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    read = read_body(body, kind)
    return JobView(
        key=read.key,
        kind=kind,
        namespace=read.namespace,
        name=read.name,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        phase=str(status.get("phase") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        has_finalizer=FINALIZER in (meta.get("finalizers") or []),
        chips=read.chips,
        replica_chips=read.replica_chips,
        failure_policy=read.failure_policy,
        queued=read.queued,
        error=read.error,
    )
