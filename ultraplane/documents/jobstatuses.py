"""The one status builder: a decision of the core plus a job's current status gives the status
document to write, for every adapter.

Why here, in the core: the operator's writers, the embedded REST backend and the simulator's
kubelet each built job statuses their own way, and they drifted (one wrote no conditions, one a
`Deleted` phase the CRD does not have, one no union of an InferenceJob's replicas' chips). Now
`status_of(current, decision, now)` is the only way a decision becomes a status, and the
result is checked against the resources' own models (`TrainingJobStatus`,
`InferenceJobStatus`) before any adapter persists it.

Why pure builders that take the current status: a status write is rebuilt from the *latest*
body after a 409 conflict, so they return the new status from the one in hand and keep fields
other writers own (the runtime's `Running`/`Finished` conditions, `progress`) as they are. A
None value means "remove the field" (a JSON merge patch), which is how the embedded backend
applies it too (`apply`).

The runtime half (what a job's runtime says: its phase `ran`, its figures `measured`) is built
here as well, so the simulator's kubelet and the embedded REST backend write one shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from ultraplane.placement.allocator import Placement
from ultraplane.resources.inferencejobs import InferenceJobStatus
from ultraplane.resources.trainingjobs import TrainingJobStatus
from ultraplane.scheduling.decisions import (
    Admitted,
    Evicted,
    Failed,
    Finished,
    Moved,
    Pending,
    Preempted,
    Replaced,
    Requeued,
    Restarted,
    ScaledDown,
    ScaledUp,
    ScalingUp,
    preempted_message,
)

__all__ = [
    "FAIR_SHARING",
    "RESERVED_MARK",
    "PendingSaid",
    "Rewrite",
    "Status",
    "StatusDecision",
    "admitted",
    "admitted_replicas",
    "allocation",
    "apply",
    "checked",
    "condition",
    "ended",
    "failed",
    "finished",
    "measured",
    "moved",
    "pending",
    "pending_changed",
    "pending_rewrite",
    "pending_said",
    "power_cap",
    "preempted",
    "preempted_message",
    "ran",
    "readmitted",
    "replica_allocation",
    "rescaled",
    "reservation_said",
    "running",
    "runtime_conditions",
    "stamp",
    "status_of",
    "succeeded",
]

Status = dict[str, Any]
StatusDecision = (Admitted | Replaced | Moved | Pending | Preempted | Evicted | Restarted | Requeued
                  | Failed | Finished | ScaledDown | ScalingUp | ScaledUp)


# The reason of a job preempted because its queue held more than its fair share
# (`ultraplane.scheduling.fairsharing`); `why` names fair sharing from it.
FAIR_SHARING = "FairSharing"

def stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def power_cap(cap_w: float | None, capped_for_s: float | None, now: datetime) -> Status:
    """A running job's power cap (`PowerBook.caps`, `capped_for`) as its status fields: the
    per-chip watts and since when; both removed (None) when it is not capped."""
    if cap_w is None:
        return {"powerCapWatts": None, "cappedSince": None}
    return {"powerCapWatts": round(cap_w, 1),
            "cappedSince": stamp(now - timedelta(seconds=capped_for_s or 0.0))}


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
        "conditions": readmitted(current, reason, message, now),
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
        "replicas": len(placements),
        "desiredReplicas": len(placements),
        "admittedTime": stamp(now),
        "attempt": int(current.get("attempt") or 0) + 1,
        "conditions": readmitted(current, reason, message, now),
    }


def rescaled(decision: ScaledDown | ScalingUp | ScaledUp) -> Status:
    """A running InferenceJob resized in place: the allocation per replica as it is now (the
    running replicas' entries unchanged), the desired count, and why replicas still wait.
    Phase, admission time and attempt stay: no replica restarted."""
    if isinstance(decision, ScalingUp):
        return {"desiredReplicas": decision.desired,
                "scalingMessage": _because(f"Scaling up from {decision.replicas} to "
                                           f"{decision.desired} replicas.", decision.reason)}
    placements = decision.placements
    status: Status = {"allocation": replica_allocation(placements) if placements else None,
                      "chips": sum(p.chips for p in placements), "replicas": len(placements)}
    if isinstance(decision, ScaledDown):
        status["desiredReplicas"] = decision.replicas
        status["scalingMessage"] = _because(
            f"Scaled down to {decision.replicas} replicas; released "
            f"{', '.join(decision.removed) or 'nothing'}.", decision.reason)
    else:
        status["desiredReplicas"] = decision.desired
        status["scalingMessage"] = decision.message or (
            f"Scaled up to {decision.replicas} replicas.")
    return status


def _because(said: str, reason: str) -> str:
    return f"{said} {reason}" if reason else said


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


def finished(current: Mapping[str, Any], phase: str | None = None) -> Status:
    """Succeeded or Failed (its runtime's write): the chips are free again, so the status no
    longer names them; the phase (`phase`, else the runtime's) becomes the reason (an `Admitted`
    reason on a finished job would mislead), its message is kept."""
    phase = phase or str(current.get("phase") or "Succeeded")
    return {
        "phase": phase,
        "reason": phase,
        "message": str(current.get("message") or f"The job {phase.lower()}; its chips are free."),
        "queuePosition": None,
        "allocation": None,
    }


def runtime_conditions(current: Mapping[str, Any], phase: str, message: str | None,
                       now: datetime) -> list[dict[str, Any]]:
    """The runtime's conditions (Running, Finished) set; the admission's kept as they are."""
    done = phase != "Running"
    running_says = message or ("work finished" if done else "running on virtual chips")
    finished_says = message or ("all work done" if phase == "Succeeded" else "not finished")
    reason = phase if done else "Running"
    conditions = condition(current, "Running", not done, reason, running_says, now)
    return condition({"conditions": conditions}, "Finished", done, reason, finished_says, now)


def ran(current: Mapping[str, Any], phase: str, message: str | None, now: datetime, *,
        started: datetime | None = None) -> Status:
    """What a job's runtime says (the simulator's kubelet, the embedded backend's runtime):
    its phase and its conditions; the admission's reason stays, the runtime's message (a
    halted job's, a final one) replaces the message. `started`: when the running attempt
    began, if the runtime tracks it (the kubelet does); else the written startTime stays."""
    status: Status = {"phase": phase,
                      "conditions": runtime_conditions(current, phase, message, now)}
    if phase == "Running":
        status["startTime"] = stamp(started) if started is not None else (
            current.get("startTime") or stamp(now))
    else:
        if started is not None:
            status["startTime"] = stamp(started)
        status["completionTime"] = stamp(now)
    if message:
        status["message"] = message
    return status


class RuntimeFigures(Protocol):
    """What a job's runtime measured (the simulator's `JobRuntimeStatus` is one)."""

    @property
    def progress_percent(self) -> float: ...
    @property
    def completed_steps(self) -> int: ...
    @property
    def checkpointed_steps(self) -> int: ...
    @property
    def utilization(self) -> float: ...
    @property
    def power_watts(self) -> float: ...
    @property
    def energy_kwh(self) -> float: ...
    @property
    def chip_hours(self) -> float: ...
    @property
    def tokens_per_second(self) -> float | None: ...
    @property
    def p50_latency_ms(self) -> float | None: ...
    @property
    def slo_met(self) -> bool | None: ...
    @property
    def tokens_per_megawatt(self) -> float | None: ...


def measured(kind: str, figures: RuntimeFigures) -> Status:
    """A running job's figures as status fields: progress (a TrainingJob's steps), utilization,
    power, energy and chip-hours, and an InferenceJob's serving figures (None removes one the
    runtime does not report)."""
    status: Status = {
        "progressPercent": round(figures.progress_percent, 3),
        "utilization": round(figures.utilization, 4),
        "powerWatts": round(figures.power_watts, 1),
        "energyKWh": round(figures.energy_kwh, 6),
        "chipHours": round(figures.chip_hours, 6),
    }
    if kind == "TrainingJob":
        status["progress"] = {"completedSteps": figures.completed_steps,
                              "checkpointedSteps": figures.checkpointed_steps,
                              "percent": status["progressPercent"]}
    else:
        tps = figures.tokens_per_second
        status.update({"tokensPerSecond": None if tps is None else round(tps, 1),
                       "p50LatencyMs": figures.p50_latency_ms, "sloMet": figures.slo_met,
                       "tokensPerMegawatt": figures.tokens_per_megawatt})
    return status


def readmitted(current: Mapping[str, Any], reason: str, message: str,
               now: datetime) -> list[dict[str, Any]]:
    """Conditions of an admission: Admitted True, and Preempted False if it was preempted."""
    conditions = condition(current, "Admitted", True, reason, message, now)
    if any(c.get("type") == "Preempted" and c.get("status") == "True" for c in conditions):
        conditions = condition({"conditions": conditions}, "Preempted", False, reason,
                               message, now)
    return conditions


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


def running(current: Mapping[str, Any], reason: str, message: str, now: datetime) -> Status:
    """Every pod of the job runs (the pod data plane; the simulator writes its own Running)."""
    return {
        "phase": "Running",
        "reason": reason,
        "message": message,
        "startTime": current.get("startTime") or stamp(now),
        "conditions": condition(current, "Running", True, reason, message, now),
    }


def succeeded(current: Mapping[str, Any], reason: str, message: str, now: datetime) -> Status:
    """The pods say the job is done; `allocation: None` releases the chips on the record."""
    return ended(current, "Succeeded", reason, message, now)


def ended(current: Mapping[str, Any], phase: str, reason: str, message: str,
          now: datetime) -> Status:
    """The job ended on its own (Succeeded, or Failed by its runtime or pods): Running False,
    Finished True, and its chips no longer on the record."""
    return {
        "phase": phase,
        "reason": reason,
        "message": message,
        "queuePosition": None,
        "allocation": None,
        "completionTime": stamp(now),
        "conditions": condition(
            {"conditions": condition(current, "Running", False, reason, message, now)},
            "Finished", True, reason, message, now),
    }


def status_of(current: Mapping[str, Any], decision: StatusDecision, now: datetime, *,
              replicated: bool = False) -> Status:
    """The status merge patch that persists `decision` on a job whose status is `current`,
    checked by the status model of its kind (an InferenceJob is the replicated kind)."""
    status = _status_of(current, decision, now, replicated=replicated)
    return checked("InferenceJob" if replicated else "TrainingJob", status)


def _status_of(current: Mapping[str, Any], decision: StatusDecision, now: datetime, *,
              replicated: bool = False) -> Status:
    if isinstance(decision, Admitted | Replaced):
        reason = "Admitted" if isinstance(decision, Admitted) else decision.reason
        if replicated:
            status = admitted_replicas(current, decision.placements, now, reason)
        else:
            status = admitted(current, decision.placements[0], now, reason, decision.message)
        if isinstance(decision, Replaced):
            status["restarts"] = int(current.get("restarts") or 0) + 1
        return status
    if isinstance(decision, Moved):  # running again at once, on its new chips
        status = admitted(current, decision.placement, now, "Moved",
                          decision.message.rstrip("."))
        status["restarts"] = int(current.get("restarts") or 0) + 1
        return status
    if isinstance(decision, ScaledDown | ScalingUp | ScaledUp):
        return rescaled(decision)
    if isinstance(decision, Pending):
        return pending(current, decision.reason, decision.message, decision.position, now)
    if isinstance(decision, Preempted):
        reason = FAIR_SHARING if decision.fair_sharing else "Preempted"
        return preempted(current, reason, decision.message, now)
    if isinstance(decision, Evicted):
        return preempted(current, decision.reason, decision.message, now)
    if isinstance(decision, Restarted):
        return preempted(current, decision.reason, decision.message, now, restart=True)
    if isinstance(decision, Requeued):  # its persisted chips are gone: it resumes elsewhere
        return preempted(current, "AllocationLost", decision.message, now, restart=True)
    if isinstance(decision, Failed):
        return failed(current, decision.reason, decision.message, now)
    return finished(current, decision.phase)  # the runtime's message (its write) is kept


# In the Pending message of the job a backfill reservation is for
# (`ultraplane.scheduling.reservations.Reservations.reserve`).
RESERVED_MARK = "reserved for it"


def reservation_said(message: str) -> str | None:
    """The part of a Pending message that names the reserved UltraServers (None when it names
    none). The predicted start after it changes with the clock, so it is left out: comparing
    it would rewrite the job every cycle."""
    return message.split(RESERVED_MARK, 1)[0] if RESERVED_MARK in message else None


def moved(old: int | None, new: int) -> bool:
    """Whether a written queue position is worth rewriting: exact near the head of the queue,
    within 10% further back (a queue of thousands would otherwise rewrite every job per cycle)."""
    if old is None:
        return True
    if new <= 50 or old <= 50:
        return old != new
    return abs(new - old) >= max(10, old // 10)


@dataclass(frozen=True, slots=True)
class PendingSaid:
    """What a waiting job's written status says, as far as rewriting it goes: its reason, its
    queue position and the reservation its message names (`reservation_said`)."""

    reason: str
    position: int | None
    reservation: str | None

    @classmethod
    def of(cls, reason: str, position: object, message: str) -> PendingSaid:
        return cls(reason, position if isinstance(position, int) else None,
                   reservation_said(message))


def pending_said(status: Mapping[str, Any]) -> PendingSaid | None:
    """What `status` says of a waiting job (None when it says another phase)."""
    if status.get("phase") != "Pending":
        return None
    return PendingSaid.of(str(status.get("reason") or ""), status.get("queuePosition"),
                          str(status.get("message") or ""))


# "now": the written status is wrong; "position": only its queue position moved (`moved`).
Rewrite = Literal["now", "position"]


def pending_rewrite(said: PendingSaid | None, waiting: Pending) -> Rewrite | None:
    """The one rule for rewriting a waiting job's status (the operator's and the embedded
    API's), from what it says now (`said`; None when it says another phase, or nothing).

    "now" when it says another phase or reason, or names another reservation; a message that
    differs only in its predicted start does not count (it moves with the clock, and would
    rewrite the job every cycle). "position" when only its queue position moved enough
    (`moved`): an adapter writes those at once, or on its next round of positions (a deep
    queue's positions are thousands of writes). None when the written status stands."""
    if said is None or said.reason != waiting.reason or (
            said.reservation != reservation_said(waiting.message)):
        return "now"
    return "position" if moved(said.position, waiting.position) else None


def pending_changed(current: Mapping[str, Any], waiting: Pending) -> bool:
    """Whether a waiting job's written status `current` is worth rewriting for `waiting`, a
    moved position included (`pending_rewrite`)."""
    return pending_rewrite(pending_said(current), waiting) is not None


def apply(current: Mapping[str, Any], patch: Mapping[str, Any]) -> Status:
    """`current` with the merge patch `patch` applied (a None value removes the field)."""
    merged = dict(current)
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


def checked(kind: str, status: Mapping[str, Any]) -> Status:
    """`status` as it stands, after the resources' model of `kind` accepted it (ValueError
    otherwise): what an adapter persists is what the CRD's schema admits."""
    model = TrainingJobStatus if kind == "TrainingJob" else InferenceJobStatus
    model.model_validate({k: v for k, v in status.items() if v is not None})
    return dict(status)
