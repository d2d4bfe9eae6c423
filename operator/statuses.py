"""Status documents the operator writes: a job's come from the core's one builder
(`ultraplane.documents.jobstatuses`, re-exported here for the operator's modules); an UltraServer's
capacity view is the operator's own.

What the operator writes on a job is a `Write`: a decision of the core, persisted as it is
(there is no operator type in between to translate it into and back), or what the job's pods
said (`PodsSaid`: the pod data plane is the job's runtime, and writes its Running and Succeeded
as the simulator's kubelet writes its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ultraplane.documents.jobstatuses import (
    Status,
    StatusDecision,
    admitted,
    admitted_replicas,
    allocation,
    apply,
    condition,
    ended,
    failed,
    finished,
    pending,
    preempted,
    readmitted,
    replica_allocation,
    running,
    stamp,
    status_of,
    succeeded,
)
from ultraplane.documents.overrides import overridden
from ultraplane.placement.capacities import DomainCapacity
from ultraplane.scheduling.decisions import (
    Admitted,
    Evicted,
    Failed,
    Finished,
    Moved,
    Pending,
    Preempted,
    Requeued,
    Restarted,
    ScaledDown,
    ScaledUp,
    ScalingUp,
)

__all__ = [
    "EVICTIONS",
    "PodsSaid",
    "Queued",
    "ReplicasReady",
    "Resized",
    "Status",
    "Write",
    "admitted",
    "admitted_replicas",
    "allocation",
    "condition",
    "document",
    "ended",
    "event_type",
    "failed",
    "finished",
    "pending",
    "preempted",
    "readmitted",
    "replica_allocation",
    "running",
    "stamp",
    "status_of",
    "succeeded",
    "total_chips",
    "ultraserver",
]


@dataclass(frozen=True, slots=True)
class PodsSaid:
    """What a job's pods say (`operator/pods.py`): every pod runs (`Running`), or the job is
    done (`Succeeded`; the core was told first, `Admissions.finished`, and the write releases
    the chips on the record). The runtime's words, not a decision of the core."""

    phase: Literal["Running", "Succeeded"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ReplicasReady:
    """How many replicas of an InferenceJob have every pod running (`operator/pods.py`):
    `status.readyReplicas`, the runtime's words like `PodsSaid`."""

    ready: int


Rescale = ScaledDown | ScalingUp | ScaledUp


@dataclass(frozen=True, slots=True)
class Resized:
    """The core's rescale decisions of one running InferenceJob not yet written, oldest
    first: each is documented by the core's builder and the documents are applied in order,
    so a newer decision (a scale-up wanted) never drops an older one's allocation (a
    scale-down's freed chips). `overridden`: the message of a condition saying another writer
    set spec.replicas of a job the core's planner sizes (spec.autoscaling)."""

    decisions: tuple[Rescale, ...]
    overridden: str = ""

    def then(self, decision: Rescale, overridden: str = "") -> Resized:
        return Resized((*self.decisions, decision), overridden or self.overridden)


Queued = StatusDecision | Resized  # what the outbox holds: the core's decisions
Write = Queued | PodsSaid | ReplicasReady
# Decisions that free chips another admission may take: written before any admission (a
# move frees its old chips and takes new ones at once, `movewrites`).
EVICTIONS = (Preempted, Evicted, Restarted, Requeued, Failed, Moved)


def document(current: Mapping[str, Any], write: Write, now: datetime, *,
             replicated: bool = False) -> Status:
    """The status merge patch of `write` on a job whose status is `current`: a decision
    through the core's one builder, what the pods said as the runtime's status."""
    if isinstance(write, PodsSaid):
        said = running if write.phase == "Running" else succeeded
        return said(current, write.reason, write.message, now)
    if isinstance(write, ReplicasReady):
        return {"readyReplicas": write.ready}
    if isinstance(write, Resized):
        status: Status = {}
        for decision in write.decisions:
            status.update(status_of(apply(current, status), decision, now, replicated=True))
        if write.overridden:
            status.update(overridden(current, write.overridden, now))
        return status
    return status_of(current, write, now, replicated=replicated)


def event_type(write: Write, phase_before: str) -> str | None:
    """The Event a written status posts (`Normal` / `Warning`), or None: a Pending job whose
    reason or position moved posts nothing (every transition, not every rewrite)."""
    if isinstance(write, Pending) and phase_before == "Pending":
        return None
    if isinstance(write, ReplicasReady | Resized):
        return None  # no transition: the status's scalingMessage says what changed
    normal = isinstance(write, Admitted | Pending | PodsSaid) or (
        isinstance(write, Finished) and phase_before == "Succeeded")
    return "Normal" if normal else "Warning"


def total_chips(spec: Mapping[str, Any]) -> int | None:
    """An InferenceJob's chips, every replica together (None for a spec that cannot say)."""
    replicas, per = spec.get("replicas", 1), spec.get("chipsPerReplica")
    if isinstance(replicas, int) and isinstance(per, int):
        return replicas * per
    return None


def ultraserver(cap: DomainCapacity, jobs: list[str], now: datetime) -> Status:
    """UltraServer capacity by level, from `Allocator.capacity()`."""
    return {
        "allocated": {"chips": cap.allocated},
        "free": {
            "chips": cap.free,
            "wholeServers": cap.free_whole_servers,
            "wholeRacks": cap.free_whole_racks,
            "wholeUltraServer": bool(cap.free_whole_ultraservers),
        },
        "capacity": {"chips": cap.total},
        "utilization": round(cap.allocated / cap.total, 4) if cap.total else 0.0,
        "jobs": sorted(jobs),
        "heartbeatTime": stamp(now),
    }
