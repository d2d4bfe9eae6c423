"""Custom resource bodies <-> core objects: the one conversion every adapter uses.

Why one module: the operator, the simulator's virtual kubelet and the REST API's Kubernetes
backend each used to read UltraServer and job bodies their own way, and the copies drifted into
bugs (one ignored `spec.servers`, one added an InferenceJob's union `allocation.chips` to every
replica and dropped the job, one keyed jobs `ns/name` so a TrainingJob and an InferenceJob of
one name collided). Bodies are read through the pydantic models of `ultraplane.resources` (the
source of the CRDs) where a whole object is read; job specs, read on every watch event, are read
field by field with the same rules and one-sentence errors.

Wire constants (`GROUP`, `VERSION`, `API_VERSION`, `PLURALS`, ...) are defined here and in
`ultraplane.resources.commons` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ultraplane.hardware.topology import UltraServer
from ultraplane.ids import ChipId, JobKey, UltraServerName, job_key
from ultraplane.placement.allocator import PlacementRequest
from ultraplane.placement.placements import request_from_topology
from ultraplane.resources.commons import API_VERSION, GROUP, VERSION, Phase
from ultraplane.resources.ultraservers import UltraServerSpec
from ultraplane.workloads import QueuedJob, replica_key

__all__ = [
    "API_VERSION",
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
    "allocated_chips",
    "creation_seconds",
    "creation_seq",
    "held_parts",
    "placement_request",
    "queued_job",
    "replica_chips",
    "run_estimate",
    "ultraserver_from_body",
    "ultraserver_from_spec",
]

TRAINING = "trainingjobs"
INFERENCE = "inferencejobs"
PLURALS: dict[str, str] = {"TrainingJob": TRAINING, "InferenceJob": INFERENCE}
ULTRASERVERS = "ultraservers"
TENANTQUEUES = "tenantqueues"
TENANTCOHORTS = "tenantcohorts"
POWERBUDGETS = "powerbudgets"
# The phase sets, once, from the CRD's own enum (a StrEnum: `"Failed" in TERMINAL_PHASES`).
TERMINAL_PHASES: frozenset[str] = frozenset({Phase.SUCCEEDED, Phase.FAILED})
HOLDING_PHASES: frozenset[str] = frozenset({Phase.ADMITTED, Phase.RUNNING})

Body = Mapping[str, Any]


class InvalidJobError(ValueError):
    """The manifest passed the CRD schema but cannot be scheduled; the message names the field."""


# -- UltraServers ------------------------------------------------------------------------
def ultraserver_from_spec(name: str, spec: UltraServerSpec) -> UltraServer:
    """The core's frozen UltraServer of a validated spec (every field, `servers` included)."""
    return UltraServer(
        name=UltraServerName(name),
        profile=str(spec.profile.value),
        network=tuple(spec.network),
        failed_chips=frozenset(spec.failed_chips),
        cordoned_servers=frozenset(spec.cordoned_servers),
        schedulable=spec.schedulable,
        servers=spec.servers,
    )


def ultraserver_from_body(body: Body) -> tuple[UltraServer, UltraServerSpec]:
    """Read an UltraServer object; raises ValueError naming the field when the spec is bad."""
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise ValueError("metadata.name is missing")
    spec = UltraServerSpec.model_validate(body.get("spec") or {})
    return ultraserver_from_spec(name, spec), spec


# -- jobs --------------------------------------------------------------------------------
def creation_seq(meta: Mapping[str, Any]) -> int:
    """FIFO rank from the creation timestamp (seconds); names break ties in `QueuedJob.order`."""
    stamp = str(meta.get("creationTimestamp") or "")
    digits = "".join(ch for ch in stamp if ch.isdigit())
    return int(digits) if digits else 0


def creation_seconds(meta: Mapping[str, Any]) -> float | None:
    """The creation timestamp as epoch seconds (None when missing or unreadable)."""
    stamp = str(meta.get("creationTimestamp") or "")
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def run_estimate(spec: Mapping[str, Any], kind: str = "TrainingJob") -> float | None:
    """The job's predicted run time (seconds, at its tightest placement) from its spec: a
    TrainingJob's `work.durationSeconds`, an InferenceJob's `durationSeconds`. None when the
    spec gives none (work in steps needs a model of the hardware: the simulator has one, the
    scheduler does not guess) or the value is not a positive number."""
    holder = spec if kind == "InferenceJob" else spec.get("work")
    value = holder.get("durationSeconds") if isinstance(holder, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12:
        return None
    return float(value)


def _positive(spec: Mapping[str, Any], field: str) -> int:
    value = spec.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidJobError(f"spec.{field} must be a positive integer, got {value!r}.")
    return value


def placement_request(spec: Mapping[str, Any], kind: str = "TrainingJob") -> PlacementRequest:
    """The gang of a TrainingJob, or of one replica of an InferenceJob (wire-form spec); the
    `topology` block is read by `placements.request_from_topology`, the one reading of it."""
    chips = _positive(spec, "chipsPerReplica" if kind == "InferenceJob" else "chips")
    profile = spec.get("profile")
    try:
        return request_from_topology(chips, spec.get("topology"),
                                     None if profile is None else str(profile))
    except ValueError as exc:
        if not str(exc).startswith("topology."):
            raise
        raise InvalidJobError(f"spec.{exc}") from exc


def queued_job(kind: str, namespace: str, name: str, spec: Mapping[str, Any],
               seq: int, created_s: float | None = None) -> QueuedJob:
    """The queue entry of a job (wire-form spec): one gang, or one per InferenceJob replica,
    with what its rank counts from (`created_s`, `run_estimate`); one with a pod template
    `launches` (its admission starts pods, which a cycle's launch budget counts)."""
    priority = spec.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidJobError(f"spec.priority must be an integer, got {priority!r}.")
    replicas = _positive({"replicas": 1, **spec}, "replicas") if kind == "InferenceJob" else None
    queue = spec.get("queueName")
    if queue is not None and (not isinstance(queue, str) or not queue):
        raise InvalidJobError(f"spec.queueName must be a queue's name, got {queue!r}.")
    movable = spec.get("movable")
    if movable is not None and not isinstance(movable, bool):
        raise InvalidJobError(f"spec.movable must be true or false, got {movable!r}.")
    every, notice = _checkpoints(spec, kind)
    return QueuedJob(job_key(kind, namespace, name), placement_request(spec, kind), priority,
                     seq, bool(spec.get("preemptible", True)), replicas,
                     expected_s=run_estimate(spec, kind), created_s=created_s,
                     launches=bool(spec.get("template")), queue=queue, movable=movable,
                     checkpoint_s=every, notice_s=notice)


def _checkpoints(spec: Mapping[str, Any], kind: str) -> tuple[float | None, float | None]:
    """How often a TrainingJob checkpoints (None: never, or an InferenceJob) and, when it
    saves on notice, its grace period: what a move of it loses (`ultraplane.scheduling.moves`)."""
    if kind != "TrainingJob":
        return None, None
    every = spec.get("checkpointIntervalSeconds", 600)
    notice = spec.get("checkpoint") or {}
    if not isinstance(every, (int, float)) or isinstance(every, bool) or every < 0:
        raise InvalidJobError(f"spec.checkpointIntervalSeconds must be seconds, got {every!r}.")
    if not isinstance(notice, Mapping):
        raise InvalidJobError(f"spec.checkpoint must be an object, got {notice!r}.")
    grace = notice.get("gracePeriodSeconds", 120)
    if not isinstance(grace, (int, float)) or isinstance(grace, bool) or grace <= 0:
        raise InvalidJobError(f"spec.checkpoint.gracePeriodSeconds must be seconds, got {grace!r}.")
    return (float(every) or None,
            float(grace) if notice.get("onNotice") is True else None)


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


def allocated_chips(status: Mapping[str, Any]) -> tuple[ChipId, ...]:
    """Every chip a job's `status.allocation` names, once (an InferenceJob's `chips` is the
    union of its replicas')."""
    allocation = status.get("allocation") or {}
    chips = [ChipId(c) for c in allocation.get("chips") or []]
    for replica in allocation.get("replicas") or []:
        chips.extend(ChipId(c) for c in replica.get("chips") or [])
    return tuple(dict.fromkeys(chips))


def held_parts(kind: str, namespace: str, name: str,
               status: Mapping[str, Any]) -> dict[JobKey, tuple[ChipId, ...]]:
    """Allocator key -> chips of a job's persisted allocation: the job's key for a
    TrainingJob, one replica key per replica of an InferenceJob (never the union twice)."""
    key = job_key(kind, namespace, name)
    allocation = status.get("allocation") or {}
    if kind == "InferenceJob":
        per = replica_chips(allocation)
        if per:
            return {replica_key(key, i): chips for i, chips in enumerate(per) if chips}
    chips = tuple(ChipId(c) for c in allocation.get("chips") or [])
    return {key: chips} if chips else {}
