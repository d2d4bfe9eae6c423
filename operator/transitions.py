"""What the operator persists for each decision: a `Transition`, and the job status it becomes.

Why a module of its own: the cycle (`loops`) decides which transitions to queue and the
writers (`writers`) send them; what a transition *means* on the wire (which status fields, which
conditions, which kind of Event) is pure and tested on its own, with no API client in sight.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ultraplane.documents import jobstatuses
from ultraplane.documents.jobstatuses import RESERVED_MARK, moved, reservation_said
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Placement
from ultraplane.scheduling.decisions import Admitted, Failed, Pending, Replaced, Restarted

__all__ = ["RESERVED_MARK", "Transition", "decision_of", "event_type", "moved", "reservation_said",
           "status_of", "total_chips"]

@dataclass(frozen=True)
class Transition:
    """A status change to persist: `kind` is admit | replace | pending | preempt | restart | fail
    | finish (a job the simulator finished: its chips are released, so is its allocation)
    | run | succeed (what a job's pods said, `operator/pods.py`).

    `placements` (admit, replace) holds one placement for a TrainingJob, one per replica for an
    InferenceJob.
    """

    kind: str
    reason: str
    message: str = ""
    placements: tuple[Placement, ...] = ()
    position: int | None = None


def total_chips(spec: Mapping[str, Any]) -> int | None:
    """An InferenceJob's chips, every replica together (None for a spec that cannot say)."""
    replicas, per = spec.get("replicas", 1), spec.get("chipsPerReplica")
    if isinstance(replicas, int) and isinstance(per, int):
        return replicas * per
    return None


def decision_of(key: JobKey, change: Transition,
                replicated: bool) -> jobstatuses.StatusDecision | None:
    """The core decision an outbox entry persists (None for what the pods said: run, finish)."""
    if change.kind == "admit":
        return Admitted(key, change.placements, replicated, change.message)
    if change.kind == "replace":
        return Replaced(key, change.placements, replicated, change.reason, change.message, ())
    if change.kind == "pending":
        return Pending(key, change.reason, change.message, change.position or 0)
    if change.kind == "fail":
        return Failed(key, change.reason, change.message)
    if change.kind == "restart":
        return Restarted(key, change.reason, change.message)
    return None


def status_of(current: Mapping[str, Any], change: Transition, now: datetime, *,
              replicated: bool = False) -> dict[str, Any]:
    """The status merge patch of `change` on a job whose status is `current`, from the core's
    one status builder (`ultraplane.documents.jobstatuses`)."""
    decision = decision_of(JobKey(""), change, replicated)
    if decision is not None:
        status = jobstatuses.status_of(current, decision, now, replicated=replicated)
        if change.kind == "pending":
            status["queuePosition"] = change.position
        return status
    if change.kind == "finish":
        return jobstatuses.finished(current)
    if change.kind == "run":
        return jobstatuses.running(current, change.reason, change.message, now)
    if change.kind == "succeed":
        return jobstatuses.succeeded(current, change.reason, change.message, now)
    # preempt (a victim, or a drained job): its message names who or why
    return jobstatuses.preempted(current, change.reason, change.message, now)


def event_type(change: Transition, phase_before: str) -> str | None:
    """The Event a written transition posts (`Normal` / `Warning`), or None: a Pending job
    whose reason or position moved posts nothing (every transition, not every rewrite)."""
    if change.kind == "pending" and phase_before == "Pending":
        return None
    normal = change.kind in ("admit", "pending", "run", "succeed") or (
        change.kind == "finish" and phase_before == "Succeeded")
    return "Normal" if normal else "Warning"
