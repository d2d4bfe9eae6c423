"""The inputs of `ultraplane.documents.explanations` read from wire documents, where no scheduler is at hand.

Why: the REST API over a cluster and `ultraplane why` through kubeconfig have no Scheduler in
their process, only documents: the job resource (its status says position, reason and
message), the UltraServers (the REST API's UltraServer views, camelCase) and the jobs that hold
chips (their `status.allocation` and progress). Both read them here, the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ultraplane.documents.conversions import allocated_chips, creation_seconds, run_estimate
from ultraplane.documents.explanations import (
    Explanation,
    Holder,
    ServerState,
    WaitingJob,
    end_from_progress,
    explain,
)
from ultraplane.documents.jobstatuses import FAIR_SHARING

__all__ = [
    "explain_documents",
    "job_name_of_key",
    "predicted_end",
    "seconds",
    "server_states",
    "waiting_job",
]


def job_name_of_key(key: str | None) -> str | None:
    """`tj/ns/name` or `ij/ns/name#2` -> `ns/name`; a plain `ns/name` stays as it is."""
    if not key:
        return None
    parts = key.split("#", 1)[0].split("/")
    return "/".join(parts[-2:])


def seconds(stamp: Any) -> float | None:
    """An RFC 3339 timestamp as epoch seconds (None when absent or unreadable)."""
    return creation_seconds({"creationTimestamp": stamp}) if stamp else None


def waiting_job(body: Mapping[str, Any]) -> WaitingJob:
    """The asked-about job from its resource document (`kind`, `metadata`, `spec`, `status`)."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    status = body.get("status") or {}
    kind = str(body.get("kind") or "TrainingJob")
    if kind == "InferenceJob":
        chips, gangs = int(spec.get("chipsPerReplica") or 0), int(spec.get("replicas") or 1)
    else:
        chips, gangs = int(spec.get("chips") or 0), 1
    position = status.get("queuePosition")
    return WaitingJob(
        name=f"{meta.get('namespace', '')}/{meta.get('name', '')}", kind=kind,
        phase=str(status.get("phase") or "Pending"), chips=chips, gangs=gangs,
        profile=spec.get("profile"), position=int(position) if position is not None else None,
        reason=status.get("reason"), message=status.get("message"),
        fair_sharing=next((str(c.get("message") or "") for c in status.get("conditions") or ()
                           if c.get("type") == "Preempted" and c.get("status") == "True"
                           and c.get("reason") == FAIR_SHARING), None),
        moved=next((str(c.get("message") or "") for c in status.get("conditions") or ()
                    if c.get("type") == "Admitted" and c.get("status") == "True"
                    and c.get("reason") == "Moved"), None))


def predicted_end(body: Mapping[str, Any], now_s: float) -> float | None:
    """A running job's predicted end: its run estimate from the spec when it gives one, else
    its progress so far scaled to 100%."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    start = seconds(status.get("startTime"))
    estimate = run_estimate(spec, str(body.get("kind") or "TrainingJob"))
    if start is not None and estimate is not None:
        return start + estimate
    percent = status.get("progressPercent")
    if percent is None:
        percent = (status.get("progress") or {}).get("percent")
    return end_from_progress(start, now_s, None if percent is None else float(percent))


def server_states(ultraservers: Iterable[Mapping[str, Any]], jobs: Iterable[Mapping[str, Any]],
                  *, now_s: float) -> list[ServerState]:
    """UltraServer views (`name`, `profile`, `chips`, `freeChips`, `failedChips`,
    `schedulable`, `reservedFor`) and the job documents holding chips -> server states."""
    held: dict[str, list[Holder]] = {}
    for body in jobs:
        meta = body.get("metadata") or {}
        chips = allocated_chips(body.get("status") or {})
        if not chips:
            continue
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        ends = predicted_end(body, now_s)
        for us, n in Counter(c.split("/", 1)[0] for c in chips).items():
            held.setdefault(us, []).append(Holder(name, n, ends))
    return [
        ServerState(
            name=str(v["name"]), profile=str(v.get("profile") or ""), chips=int(v["chips"]),
            free=int(v.get("freeChips") or 0), schedulable=bool(v.get("schedulable", True)),
            failed=len(v.get("failedChips") or ()),
            reserved_for=job_name_of_key(v.get("reservedFor")),
            holders=tuple(held.get(str(v["name"]), ())))
        for v in ultraservers]


def explain_documents(job: Mapping[str, Any], ultraservers: Iterable[Mapping[str, Any]],
                      holders: Iterable[Mapping[str, Any]], *, now_s: float,
                      visible: Callable[[str], bool] = lambda _ns: True) -> Explanation:
    """`explain` over documents: the job, the UltraServer views and the jobs holding chips;
    `visible(namespace)` says whose names the caller may read."""
    return explain(waiting_job(job), server_states(ultraservers, holders, now_s=now_s),
                   now_s=now_s, visible=visible)
