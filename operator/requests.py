"""Turning TrainingJob bodies into the core's queue entries, and back-references into keys.

Why a module of its own: the kopf handlers, the recovery listing and the tests all need the
same conversion, and it is where a manifest the schema allowed but the core cannot honour gets
its one-sentence error (an unknown level, a non-positive chip count) instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ultraplane.allocator import PlacementRequest
from ultraplane.ids import ChipId, JobKey
from ultraplane.scheduling import QueuedJob
from ultraplane.topology import parse_level

GROUP = "ultraplane.dev"
VERSION = "v1alpha1"
TRAINING = "trainingjobs"
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
    """What the operator needs from one job body."""

    key: JobKey
    namespace: str
    name: str
    uid: str
    resource_version: str
    phase: str
    deleting: bool
    has_finalizer: bool
    chips: tuple[ChipId, ...]
    failure_policy: str
    queued: QueuedJob | None
    error: str | None


def job_key(namespace: str, name: str) -> JobKey:
    return JobKey(f"{namespace}/{name}")


def creation_seq(meta: Mapping[str, Any]) -> int:
    """FIFO rank from the creation timestamp (seconds); names break ties in `QueuedJob.order`."""
    stamp = str(meta.get("creationTimestamp") or "")
    digits = "".join(ch for ch in stamp if ch.isdigit())
    return int(digits) if digits else 0


def placement_request(spec: Mapping[str, Any]) -> PlacementRequest:
    chips = spec.get("chips")
    if not isinstance(chips, int) or isinstance(chips, bool) or chips < 1:
        raise InvalidJobError(f"spec.chips must be a positive integer, got {chips!r}.")
    topo = spec.get("topology") or {}
    required = topo.get("requiredLevel")
    preferred = topo.get("preferredLevel")
    for field, level in (("requiredLevel", required), ("preferredLevel", preferred)):
        if level is not None:
            try:
                parse_level(str(level))
            except ValueError as exc:
                raise InvalidJobError(f"spec.topology.{field}: {exc}") from exc
    return PlacementRequest(
        chips=chips,
        required_level=required,
        preferred_level=preferred,
        whole_servers=bool(topo.get("wholeServers", False)),
        profile=spec.get("profile"),
    )


def view_job(body: Body) -> JobView:
    """Read a TrainingJob body; never raises (a bad spec is reported in `error`)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    key = job_key(namespace, name)
    allocation = status.get("allocation") or {}
    queued: QueuedJob | None = None
    error: str | None = None
    try:
        priority = spec.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InvalidJobError(f"spec.priority must be an integer, got {priority!r}.")
        queued = QueuedJob(
            key, placement_request(spec), priority, creation_seq(meta),
            bool(spec.get("preemptible", True)),
        )
    except InvalidJobError as exc:
        error = str(exc)
    policy = str(spec.get("failurePolicy") or "RestartAll")
    return JobView(
        key=key,
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        phase=str(status.get("phase") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        has_finalizer=FINALIZER in (meta.get("finalizers") or []),
        chips=tuple(ChipId(c) for c in allocation.get("chips") or []),
        failure_policy=policy if policy in FAILURE_POLICIES else "RestartAll",
        queued=queued,
        error=error,
    )
