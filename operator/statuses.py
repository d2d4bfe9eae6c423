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
from ultraplane.placement.capacities import DomainCapacity
from ultraplane.scheduling.decisions import (
    Admitted,
    Evicted,
    Failed,
    Finished,
    Pending,
    Preempted,
    Requeued,
    Restarted,
)

__all__ = [
    "EVICTIONS",
    "PodsSaid",
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


Write = StatusDecision | PodsSaid
# Decisions that free chips another admission may take: written before any admission.
EVICTIONS = (Preempted, Evicted, Restarted, Requeued, Failed)


def document(current: Mapping[str, Any], write: Write, now: datetime, *,
             replicated: bool = False) -> Status:
    """The status merge patch of `write` on a job whose status is `current`: a decision
    through the core's one builder, what the pods said as the runtime's status."""
    if isinstance(write, PodsSaid):
        said = running if write.phase == "Running" else succeeded
        return said(current, write.reason, write.message, now)
    return status_of(current, write, now, replicated=replicated)


def event_type(write: Write, phase_before: str) -> str | None:
    """The Event a written status posts (`Normal` / `Warning`), or None: a Pending job whose
    reason or position moved posts nothing (every transition, not every rewrite)."""
    if isinstance(write, Pending) and phase_before == "Pending":
        return None
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
