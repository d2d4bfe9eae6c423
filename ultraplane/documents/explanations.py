"""Why a job is still pending, and when it is predicted to start: one answer for every adapter.

Why in the core: `ultraplane why JOB` asks the same question of the embedded fleet (its own
Scheduler and Allocator), of the REST API over a cluster, and of a cluster read straight through
kubeconfig. Each adapter only gathers the facts it has (the job's wait, each UltraServer's free
chips and who holds the rest, when those holders are predicted to end) into the plain inputs
below; the reading of those facts (what blocks the job, which UltraServers are nearest to fitting
it, the predicted start) is decided here once, so the three answers cannot drift.

The predicted start is optimistic, as `ultraplane.scheduling.predictions.earliest_start` is: it is when
enough chips are predicted free for the job's gangs, counting only running jobs' predicted ends
(a holder with no prediction never ends) and not the jobs ahead in the queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ultraplane.scheduling.predictions import earliest_start

__all__ = [
    "HIDDEN",
    "Blocker",
    "Explanation",
    "Holder",
    "NearServer",
    "ServerState",
    "WaitingJob",
    "end_from_progress",
    "explain",
]

#: How a job the caller may not read is named.
HIDDEN = "a job in another namespace"
WAITING_PHASES = frozenset({"", "Pending", "Preempted"})


@dataclass(frozen=True)
class Holder:
    """A job holding `chips` chips of one UltraServer; `ends_s` its predicted end, if known."""

    job: str  # `namespace/name`, or HIDDEN
    chips: int
    ends_s: float | None = None


@dataclass(frozen=True)
class ServerState:
    """One UltraServer as the scheduler sees it."""

    name: str
    profile: str
    chips: int
    free: int
    schedulable: bool = True
    failed: int = 0
    reserved_for: str | None = None  # `namespace/name` of the waiting job it is held back for
    holders: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class WaitingJob:
    """The job asked about: `chips` per gang, `gangs` of them (an InferenceJob's replicas)."""

    name: str  # `namespace/name`
    kind: str
    phase: str
    chips: int
    gangs: int = 1
    profile: str | None = None
    position: int | None = None
    reason: str | None = None
    message: str | None = None
    # why fair sharing preempted it, while it waits to get its chips back (its Preempted
    # condition's message, reason FairSharing)
    fair_sharing: str | None = None
    # where its last move took it and for whom, while it holds the chips it was moved to
    # (its Admitted condition's message, reason Moved)
    moved: str | None = None


@dataclass(frozen=True)
class Blocker:
    kind: str  # NoDomainFits | Reservation | QueueAhead | Quota | Power | FairSharing | ...
    message: str


@dataclass(frozen=True)
class NearServer:
    """An UltraServer nearest to fitting one gang: `missing` chips short, held by `holders`."""

    name: str
    free: int
    missing: int
    reserved_for: str | None
    holders: tuple[Holder, ...]


@dataclass(frozen=True)
class Explanation:
    job: str
    kind: str
    phase: str
    summary: str
    position: int | None = None
    blockers: tuple[Blocker, ...] = ()
    nearest: tuple[NearServer, ...] = ()
    predicted_start_s: float | None = None
    basis: str = ""
    as_of_s: float | None = None  # the clock the prediction was made on (simulated: embedded)

    def wire(self) -> dict[str, Any]:
        """The camelCase JSON document the REST API and `why -o json` print."""
        return {
            "job": self.job, "kind": self.kind, "phase": self.phase, "summary": self.summary,
            "queuePosition": self.position,
            "blockers": [{"kind": b.kind, "message": b.message} for b in self.blockers],
            "nearestUltraServers": [
                {"name": n.name, "freeChips": n.free, "missingChips": n.missing,
                 "reservedFor": n.reserved_for,
                 "holders": [{"job": h.job, "chips": h.chips, "predictedEndSeconds": h.ends_s}
                             for h in n.holders]}
                for n in self.nearest],
            "predictedStart": _stamp(self.predicted_start_s),
            "predictedStartSeconds": self.predicted_start_s,
            "basis": self.basis,
            "asOf": _stamp(self.as_of_s),
            "asOfSeconds": self.as_of_s,
        }


def end_from_progress(start_s: float | None, now_s: float, percent: float | None) -> float | None:
    """A running job's predicted end from its progress: the time so far scaled to 100%. None
    without a start or before any progress (nothing to scale)."""
    if start_s is None or percent is None or percent <= 0.0 or now_s <= start_s:
        return None
    return start_s + (now_s - start_s) * 100.0 / min(percent, 100.0)


def explain(job: WaitingJob, servers: Sequence[ServerState], *, now_s: float,
            nearest: int = 3, visible: Callable[[str], bool] = lambda _ns: True) -> Explanation:
    """What keeps `job` waiting on `servers`, the `nearest` UltraServers to fitting one of its
    gangs and what holds them, and its predicted start (absent when nothing predicts one)."""
    if job.phase not in WAITING_PHASES:
        return Explanation(job.name, job.kind, job.phase, _not_waiting(job), as_of_s=now_s)
    usable = [s for s in servers if job.profile in (None, s.profile)]
    blockers: list[Blocker] = []
    if job.reason in ("Quota", "QuotaExceeded", "Power", "PowerHeadroom", "Unsatisfiable"):
        blockers.append(Blocker(job.reason, job.message or job.reason))
    elif not usable:
        blockers.append(Blocker("NoUltraServers", "no UltraServer of "
                                f"{'profile ' + job.profile if job.profile else 'any profile'} "
                                "is in the fleet"))
    else:
        blockers.append(Blocker("NoDomainFits", _no_fit(job, usable, job.message)))
    others = sorted({s.reserved_for for s in usable if s.reserved_for
                     and s.reserved_for != job.name})
    for holder in others:
        names = [s.name for s in usable if s.reserved_for == holder]
        shown = holder if visible(holder.split("/", 1)[0]) else HIDDEN
        blockers.append(Blocker("Reservation", f"{_list(names)} reserved for {shown}, which "
                                "waits ahead of this job"))
    if job.fair_sharing:
        blockers.append(Blocker("FairSharing", job.fair_sharing))
    mine = [s.name for s in usable if s.reserved_for == job.name]
    if job.position is not None and job.position > 1:
        blockers.append(Blocker("QueueAhead", f"{job.position - 1} job(s) are ahead of it in "
                                "the queue"))
    near = _nearest(job, usable, nearest, visible)
    start = _predicted_start(job, usable, now_s)
    basis = ("optimistic: when running jobs are predicted to free enough chips; jobs ahead "
             "in the queue may start first" if start is not None else
             "no prediction: no running job on the UltraServers it needs has a predicted end")
    summary = f"{job.kind} {job.name} is {job.phase or 'Pending'}"
    if job.position is not None:
        summary += f" at queue position {job.position}"
    if mine:
        summary += f"; {_list(mine)} reserved for it"
    return Explanation(job.name, job.kind, job.phase or "Pending", summary, job.position,
                       tuple(blockers), near, start, basis, now_s)


def _not_waiting(job: WaitingJob) -> str:
    if job.phase in ("Admitted", "Running"):
        said = f"{job.kind} {job.name} is {job.phase}: it holds its chips and waits for nothing"
        return f"{said}. {job.moved}" if job.moved else said
    why = f" ({job.message})" if job.message else ""
    return f"{job.kind} {job.name} is {job.phase}{why}: it no longer waits for chips"


def _no_fit(job: WaitingJob, servers: Sequence[ServerState], said: str | None) -> str:
    gangs = f"{job.gangs} gangs of {job.chips} chips" if job.gangs > 1 else f"{job.chips} chips"
    free = sum(s.free for s in servers if s.schedulable)
    most = max((s.free for s in servers if s.schedulable), default=0)
    text = f"no domain has room for {gangs} now ({free} chips free in the fleet, at most " \
           f"{most} on one UltraServer)"
    return f"{text}: {said}" if said else text


def _nearest(job: WaitingJob, servers: Sequence[ServerState], limit: int,
             visible: Callable[[str], bool]) -> tuple[NearServer, ...]:
    def missing(s: ServerState) -> int:
        return max(0, min(job.chips, s.chips - s.failed) - s.free)

    ranked = sorted((s for s in servers if s.schedulable),
                    key=lambda s: (missing(s), -s.free, s.name))[:limit]
    return tuple(
        NearServer(s.name, s.free, missing(s),
                   s.reserved_for if s.reserved_for is None
                   or visible(s.reserved_for.split("/", 1)[0]) else HIDDEN,
                   tuple(h if h.job == HIDDEN or visible(h.job.split("/", 1)[0])
                         else Holder(HIDDEN, h.chips, h.ends_s)
                         for h in sorted(s.holders, key=lambda h: (-h.chips, h.job))))
        for s in ranked)


def _predicted_start(job: WaitingJob, servers: Sequence[ServerState], now_s: float) -> float | None:
    """When enough UltraServers are predicted to have room for every gang (a gang larger than
    one UltraServer needs that many drained ones); None when no prediction says so."""
    open_ = [s for s in servers if s.schedulable and not (
        s.reserved_for is not None and s.reserved_for != job.name)]
    per = max((s.chips - s.failed for s in open_), default=0)
    if per <= 0:
        return None
    if job.chips <= per:
        starts = sorted(
            earliest_start({s.name: (s.free, [(h.ends_s if h.ends_s is not None else math.inf,
                                               h.chips) for h in s.holders])},
                           job.chips, now_s)
            for s in open_)
        need = job.gangs
    else:
        starts = sorted(max([now_s, *(h.ends_s if h.ends_s is not None else math.inf
                                      for h in s.holders)]) for s in open_)
        need = job.gangs * -(-job.chips // per)
    if len(starts) < need or starts[need - 1] == math.inf:
        return None
    return max(now_s, starts[need - 1])


def _stamp(t_s: float | None) -> str | None:
    if t_s is None:
        return None
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _list(names: Sequence[str]) -> str:
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"UltraServer {shown}" if len(names) == 1 else f"UltraServers {shown}"
