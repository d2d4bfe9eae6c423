"""Status documents the operator writes, built from what the core decided.

Why pure builders: a status write is rebuilt from the *latest* body after a 409 conflict, so the
builders take the current status and return the new one; they keep fields other writers own
(the simulator's `Running`/`Finished` conditions, `progress.checkpointedSteps`) untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ultraplane.allocator import Placement
from ultraplane.capacities import DomainCapacity

Status = dict[str, Any]


def stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    current: Mapping[str, Any], type_: str, ok: bool, reason: str, message: str, now: datetime
) -> list[dict[str, Any]]:
    """`current.conditions` with `type_` set; others (owned by the simulator) kept as they are."""
    kept = [dict(c) for c in current.get("conditions") or [] if c.get("type") != type_]
    previous = next((c for c in current.get("conditions") or [] if c.get("type") == type_), None)
    status = "True" if ok else "False"
    since = (
        previous.get("lastTransitionTime")
        if previous and previous.get("status") == status
        else stamp(now)
    )
    kept.append(
        {"type": type_, "status": status, "reason": reason, "message": message,
         "lastTransitionTime": since}
    )
    return sorted(kept, key=lambda c: str(c["type"]))


def allocation(placement: Placement) -> dict[str, Any]:
    return {
        "ultraServers": list(placement.ultraservers),
        "servers": list(placement.servers),
        "chips": list(placement.chip_ids),
        "level": placement.level,
        "score": placement.score,
    }


def admitted(current: Mapping[str, Any], placement: Placement, now: datetime,
             reason: str = "Admitted", note: str = "") -> Status:
    """`note`: the scheduler's reason when a prediction placed the job (a split that pays,
    a backfill onto reserved UltraServers), appended to the message."""
    where = ", ".join(placement.ultraservers)
    message = f"{len(placement.chip_ids)} chips in one {placement.level} on {where}."
    if note:
        message += f" {note[:1].upper()}{note[1:]}."
    return {
        "phase": "Admitted",
        "reason": reason,
        "message": message,
        "queuePosition": None,
        "allocation": allocation(placement),
        "admittedTime": stamp(now),
        "attempt": int(current.get("attempt") or 0) + 1,
        "conditions": condition(current, "Admitted", True, reason, message, now),
    }


def replica_allocation(placements: Sequence[Placement]) -> dict[str, Any]:
    """An InferenceJob's allocation: each replica's chips, plus the union of them all (what
    `kubectl`, the REST API and the simulator read without walking the replicas)."""

    def union(lists: Sequence[Sequence[str]]) -> list[str]:
        return list(dict.fromkeys(item for items in lists for item in items))

    return {
        "ultraServers": union([p.ultraservers for p in placements]),
        "servers": union([p.servers for p in placements]),
        "chips": union([p.chip_ids for p in placements]),
        "replicas": [
            {"index": i, "ultraServers": list(p.ultraservers), "servers": list(p.servers),
             "chips": list(p.chip_ids)}
            for i, p in enumerate(placements)
        ],
    }


def admitted_replicas(current: Mapping[str, Any], placements: Sequence[Placement],
                      now: datetime, reason: str = "Admitted") -> Status:
    """Admitted with every replica placed (an InferenceJob is admitted whole or not at all)."""
    alloc = replica_allocation(placements)
    levels = ", ".join(sorted({str(p.level) for p in placements}))
    message = (f"{len(placements)} replica(s) of {placements[0].chips} chips, each in one "
               f"{levels}, on {', '.join(alloc['ultraServers'])}.")
    return {
        "phase": "Admitted",
        "reason": reason,
        "message": message,
        "queuePosition": None,
        "allocation": alloc,
        "admittedTime": stamp(now),
        "attempt": int(current.get("attempt") or 0) + 1,
        "conditions": condition(current, "Admitted", True, reason, message, now),
    }


def pending(current: Mapping[str, Any], reason: str, message: str, position: int | None,
            now: datetime) -> Status:
    return {
        "phase": "Pending",
        "reason": reason,
        "message": message,
        "queuePosition": position,
        "allocation": None,
        "conditions": condition(current, "Admitted", False, reason, message, now),
    }


def preempted(current: Mapping[str, Any], reason: str, message: str, now: datetime,
              *, restart: bool = False) -> Status:
    """Evicted and requeued; `progress` is left alone so the job resumes from its checkpoint."""
    status: Status = {
        "phase": "Pending" if restart else "Preempted",
        "reason": reason,
        "message": message,
        "allocation": None,
        "conditions": condition(
            {"conditions": condition(current, "Admitted", False, reason, message, now)},
            "Preempted", not restart, reason, message, now),
    }
    if restart:
        status["restarts"] = int(current.get("restarts") or 0) + 1
    else:
        status["preemptions"] = int(current.get("preemptions") or 0) + 1
    return status


def failed(current: Mapping[str, Any], reason: str, message: str, now: datetime) -> Status:
    return {
        "phase": "Failed",
        "reason": reason,
        "message": message,
        "queuePosition": None,
        "allocation": None,
        "conditions": condition(
            {"conditions": condition(current, "Admitted", False, reason, message, now)},
            "Finished", True, reason, message, now),
    }


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
