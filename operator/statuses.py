"""Status documents the operator writes: a job's come from the core's one builder
(`ultraplane.documents.jobstatuses`, re-exported here for the operator's modules); an UltraServer's
capacity view is the operator's own.
"""

from __future__ import annotations

from datetime import datetime

from ultraplane.documents.jobstatuses import (
    Status,
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

__all__ = [
    "Status",
    "admitted",
    "admitted_replicas",
    "allocation",
    "condition",
    "ended",
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
    "ultraserver",
]


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
