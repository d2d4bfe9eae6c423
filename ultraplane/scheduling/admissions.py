"""The scheduling driver: every trigger (a cycle, a job observed, a chip failed, a job finished
or deleted) and every consequence of it, as the typed decisions of `ultraplane.scheduling.decisions`.

Why a driver on top of `Scheduler`: the operator, the REST API's embedded fleet and the trace
replay each used to take a `CycleResult` apart themselves (who was preempted, who is admitted,
what an Unsatisfiable request means, what to do with a job whose persisted chips are gone after
a restart) and the three copies drifted. Here those consequences are decided once; an adapter
only persists (operator: job status; embedded API: its store) or executes (replay: its event
heap) the transitions it is handed, in the order `Decisions` lists them.

The rules, all here:
- A replicated job (an InferenceJob) is one queue entry admitted whole or not at all; an
  `Admitted` carries one placement per replica and there is no half-admitted state.
- A request that can never fit the fleet (`Unsatisfiable`) leaves the queue as `Failed`, unless
  the fleet is empty (nothing is known yet: it waits).
- Victims are `Preempted` (requeued by the Scheduler, keeping their FIFO rank) and come first:
  an admission may reuse their chips, so they must be persisted before it.
- `Pending` carries the reason and the 1-based queue position among the jobs still waiting.
- The backfill reservation, if any, is `Decisions.reservation`.
- After a restart, `readopt` puts a job back on its persisted chips, all replicas or none; when
  that is impossible the job is queued again and the caller is told why (`Requeued`).
- A failed chip (`chip_failed`) or failed pods (`pods_failed`) under a job: its failure policy
  is applied here and nowhere else (`ultraplane.scheduling.failures`). `Fail` fails it;
  `ReplaceAffected` (always an InferenceJob's, per replica) swaps the lost chips in place, or
  places the affected gang afresh when it needs whole servers or is one replica of several,
  and restarts the job only when no replacement fits; `RestartAll` requeues it whole.
- What an adapter sees but cannot judge is a trigger too: a spec that cannot be read
  (`invalid`: it fails `InvalidSpec`), pods that cannot be made (`launch_failed`), an
  UltraServer drained from under a job (`drained`), an admission whose write did not land
  (`unwritten`: it waits again). No adapter changes the Scheduler itself.
- A replicated job may change its replica count (`rescale`): a waiting one is queued again
  with the new count; a running one shrinks at once (`ScaledDown`: its highest-index replicas
  go, the others stay) or grows through the cycle (`ScalingUp`, then `ScaledUp` from each
  cycle that places replicas or leaves some waiting), one replica at a time, preempting as an
  admission does (`ultraplane.scheduling.elasticity`).
- The clock is required by `cycle`: no adapter can run without the predictions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import AllocationConflict, Allocator, Placement
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.quotas import QuotaBook
from ultraplane.scheduling.decisions import (
    Admitted,
    Decision,
    Decisions,
    Deleted,
    Evicted,
    Failed,
    Finished,
    Moved,
    Observed,
    Pending,
    Preempted,
    Readopted,
    Replaced,
    Requeued,
    Reserved,
    Restarted,
    ScaledDown,
    ScaledUp,
    ScalingUp,
    moved_message,
    preempted_message,
)
from ultraplane.scheduling.failures import CHIP, POD, apply_policy, replace
from ultraplane.scheduling.moves import MoveRules
from ultraplane.scheduling.queueorder import TARGET_START, QueueOrder
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob

__all__ = [
    "PINNED",
    "Admissions",
    "Admitted",
    "Decision",
    "Deleted",
    "Evicted",
    "Failed",
    "Finished",
    "Moved",
    "Observed",
    "Pending",
    "Preempted",
    "Readopted",
    "Replaced",
    "Requeued",
    "Reserved",
    "Restarted",
    "ScaledDown",
    "ScaledUp",
    "ScalingUp",
]

PINNED = 10**9  # the priority of chips held outside any job (`Admissions.hold`): never outranked


class Admissions:
    """Owns a `Scheduler` (and its `Allocator`) and turns its cycles into transitions."""

    def __init__(self, allocator: Allocator, *, preemption: bool = True,
                 reservation: bool = True, order: QueueOrder = TARGET_START,
                 quotas: QuotaBook | None = None, power: PowerBook | None = None,
                 moves: MoveRules | None = None, queue_packing: bool = False) -> None:
        self.allocator = allocator
        self.order = order  # ranks every job it is handed (`ultraplane.scheduling.queueorder`)
        # Tenant queues (`ultraplane.policies.quotas`): a job over its queue's quota waits `NoQuota`.
        self.quotas = quotas
        self.scheduler = Scheduler(allocator, preemption=preemption, reservation=reservation,
                                   quotas=quotas, power=power, moves=moves,
                                   queue_packing=queue_packing)
        # Power budgets (`ultraplane.policies.powerbook`): a job no budget has headroom for waits
        # `NoPower`; `power.caps()` after a cycle says which running jobs to cap.
        self.power = power
        # The last cycle's `Decisions.pending`: an unchanged entry is handed out again (the
        # same object), so adapters can skip it and a deep queue costs no allocations.
        self._listed: list[Pending] = []

    # -- what the adapters observed ----------------------------------------------------
    def submit(self, job: QueuedJob) -> bool:
        """Queue `job`, or replace the queued entry of the same key (an edit of a waiting job's
        spec: priority, size). A job holding chips keeps them: returns False then."""
        if self.scheduler.is_running(job.key):
            return False
        self.scheduler.submit(self.ranked(job))
        return True

    def ranked(self, job: QueuedJob) -> QueuedJob:
        """`job` ranked by this queue's order on this fleet (its largest UltraServer decides
        which gangs rank by creation alone, `ultraplane.scheduling.queueorder`)."""
        return self.order.ranked(job, self.allocator.largest_ultraserver())

    def observe(self, job: QueuedJob) -> Observed:
        """Trigger: a job was seen (created, or a waiting job's spec edited)."""
        return Observed(job.key, self.submit(job))

    def finished(self, key: JobKey, phase: str, message: str = "") -> Finished:
        """Trigger: the job ended on its own (its runtime or pods said so); its chips are free."""
        self.scheduler.cancel(key)
        return Finished(key, phase, message)

    def deleted(self, key: JobKey) -> Deleted:
        """Trigger: the job was deleted; out of the queue, its chips released."""
        return Deleted(key, self.scheduler.cancel(key))

    def invalid(self, key: JobKey, error: str | None) -> Failed:
        """Trigger: the job's spec cannot be read (`error`: the reader's sentence naming the
        field, `ultraplane.documents.jobspecs`). It cannot wait for anything: it leaves the
        queue and fails `InvalidSpec`."""
        self.scheduler.cancel(key)
        return Failed(key, "InvalidSpec", error or "invalid spec")

    def chip_failed(self, key: JobKey, lost: Mapping[JobKey, Sequence[ChipId]],
                    policy: str) -> Replaced | Restarted | Failed:
        """Trigger: chips `lost` (allocator key -> chips) failed under the running job `key`.
        Its failure policy decides (`ultraplane.scheduling.failures`); the message is the same
        sentence in every adapter."""
        chips = [c for part in lost.values() for c in part]
        message = f"Chip(s) {', '.join(chips)} failed under the job ({policy})."
        return apply_policy(self.scheduler, self.allocator, key, lost, policy, message, CHIP)

    def pods_failed(self, key: JobKey, lost: Mapping[JobKey, Sequence[ChipId]], policy: str,
                    message: str) -> Replaced | Restarted | Failed:
        """Trigger: pods of the job `key` failed (`message`: what they said); `lost` are the
        chips of their servers (allocator key -> chips), which `ReplaceAffected` moves off.
        Its failure policy decides, as for a failed chip; a job that holds no chips any more
        (evicted meanwhile) restarts."""
        text = f"{message} ({policy})."
        if policy == "ReplaceAffected" and not self.scheduler.is_running(key):
            policy = "RestartAll"  # nothing left to replace (the sentence names the job's own)
        return apply_policy(self.scheduler, self.allocator, key, lost, policy, text, POD)

    def rescale(self, key: JobKey, replicas: int, reason: str = ""
                ) -> ScaledDown | ScalingUp | Observed:
        """Trigger: the replicated job `key` should run `replicas` replicas (a spec edit, or
        the planner's count). Waiting: its queued entry is replaced (`Observed`). Running:
        fewer (or as many) releases the highest-index replicas now and cancels any pending
        scale-up (`ScaledDown`, possibly removing none), more are queued for the cycle
        (`ScalingUp`); the running replicas never move. Unknown: `Observed(queued=False)`.
        `reason` (the planner's, `ultraplane.serving.planners.plan`) is carried into the
        decision and its status message. Raises `ValueError` for a count below 1 or a job
        that is not replicated."""
        if replicas < 1:
            raise ValueError(f"job {key}: replicas must be at least 1, got {replicas}")
        waiting = self.scheduler.queued_job(key)
        job = waiting if waiting is not None else self.scheduler.running().get(key)
        if job is None:
            return Observed(key, False)
        if job.replicas is None:
            raise ValueError(f"job {key} is one gang, not replicated: it cannot be rescaled")
        if waiting is not None:
            return self.observe(dataclasses.replace(waiting, replicas=replicas))
        removed, released = self.scheduler.rescale(key, replicas)
        if replicas > job.replicas:
            return ScalingUp(key, job.replicas, replicas, reason)
        return ScaledDown(key, removed, self.scheduler.placements(key), released, reason)

    def launch_failed(self, key: JobKey, reason: str, message: str) -> Failed:
        """Trigger: the job's pods cannot be made at all (`reason`: no Node for one of its
        servers, its Service or a pod refused by the API server). Retrying would fail alike,
        whatever its failure policy: the job fails and its chips are free."""
        self.scheduler.cancel(key)
        return Failed(key, reason, message)

    def drained(self, key: JobKey, ultraserver: str, *, deleted: bool) -> Restarted | Evicted:
        """Trigger: an UltraServer under the running job `key` was deleted (`deleted`) or
        cordoned, with the drain policy that moves its jobs. The job waits again with its
        rank: after a deletion it restarts (a restart counts), after a cordon it is evicted as
        a preempted job is."""
        self.scheduler.requeue(key)
        if deleted:
            return Restarted(key, "Drained", f"UltraServer {ultraserver} was deleted.")
        return Evicted(key, "Drained", f"UltraServer {ultraserver} was cordoned.")

    def unwritten(self, key: JobKey) -> bool:
        """Trigger: the admission of `key` could not be persisted (its status write failed or
        no longer applied). Its chips are free again and it waits with its rank, to be decided
        anew; nothing is written. True when it held chips."""
        if not self.scheduler.is_running(key):
            return False
        self.scheduler.requeue(key)
        return True

    def withdraw(self, key: JobKey) -> frozenset[ChipId]:
        """The job finished, failed or was deleted: forget it; returns the chips released."""
        return self.scheduler.cancel(key)

    def requeue(self, key: JobKey) -> QueuedJob | None:
        """Release a running job's chips and queue it again with its rank."""
        return self.scheduler.requeue(key)

    def readopt(self, job: QueuedJob, chips: Sequence[Sequence[ChipId]]) -> Readopted | Requeued:
        """Put a job back on the chips its persisted state names (`chips[i]`: the chips of
        replica `i`; one entry for a single gang), all of them or none. When a chip is unknown,
        taken, or the replica count does not match, the job is queued instead."""
        job = self.ranked(job)
        try:
            if job.replicas is None:
                if len(chips) != 1:
                    raise ValueError(f"{len(chips)} allocations for a single gang")
                self.scheduler.restore(job.key, chips[0], job.priority, request=job.request,
                                       seq=job.seq, preemptible=job.preemptible,
                                       rank=job.rank)
            else:
                if not all(chips):
                    raise ValueError("a replica has no chips")
                self.scheduler.restore_replicas(job, chips)
        except (AllocationConflict, ValueError, KeyError) as exc:
            self.scheduler.submit(job)
            return Requeued(job.key, str(exc))
        return Readopted(job.key, self.scheduler.placements(job.key))

    def hold(self, key: JobKey, chips: Sequence[ChipId]) -> Readopted:
        """Chips held outside any job (a preset fleet's, after a restart): taken for good under
        `key`, never preempted and never offered to a job."""
        self.scheduler.restore(key, chips, priority=PINNED, preemptible=False)
        return Readopted(key, self.scheduler.placements(key))

    def replace(self, key: JobKey, lost: Mapping[JobKey, Sequence[ChipId]]) -> Admitted | str:
        """Replace the chips `lost` (allocator key -> chips) of a running job in place
        (`ultraplane.scheduling.failures.replace`): its new placements, or why not."""
        return replace(self.scheduler, self.allocator, key, lost)

    # -- the cycle ---------------------------------------------------------------------
    def expect_end(self, key: JobKey, end: float | None) -> None:
        """The caller's predicted end of a running job (the replay knows it; the operator
        estimates it from progress and work), for EASY backfilling and SplitWhenItPays."""
        self.scheduler.expect_end(key, end)

    def _why_preempted(self, victim: QueuedJob | None, by: JobKey,
                       scaling_to: int | None) -> str:
        """The victim's status message: a reclaim names both queues, so a team whose
        borrowed chips were taken back reads why, not that someone outranked it; a service's
        scale-up says so (`scaling_to`, its new replica count)."""
        book = self.quotas
        preemptor = self.scheduler.running().get(by)
        if book is None or not book.active or preemptor is None:
            return preempted_message(by, scaling_to)
        theirs = book.queue_of(preemptor)
        mine = book.queue_of(victim) if victim is not None else None
        if theirs is None or mine is None or theirs == mine:
            return preempted_message(by, scaling_to)
        return (f"Preempted: queue {theirs} reclaimed its nominal chips for job {by} from "
                f"queue {mine}, which was borrowing them; requeued.")

    def _moved(self, key: JobKey, by: JobKey, placement: Placement, origin: tuple[str, ...],
               lost_s: float) -> Moved:
        book = self.quotas
        preemptor = self.scheduler.running().get(by)
        queue = book.queue_of(preemptor) if book is not None and preemptor is not None else None
        return Moved(key, by, placement, origin, lost_s,
                     moved_message(by, queue, origin, placement.ultraservers, lost_s))

    def cycle(self, now: float, launch_budget: int | None = None) -> Decisions:
        """Trigger: run one scheduling cycle and say what follows from it (`now`: the caller's
        clock, required so no adapter runs without the predictions: EASY backfill by predicted
        ends, SplitWhenItPays pricing, the notes in `Admitted.message`; `launch_budget`: pods its admissions may start; see
        `Scheduler.cycle`). A job deferred by the budget is in `deferred`, not in `pending`:
        its written status stays as it is, and it keeps its place in the positions."""
        result = self.scheduler.cycle(now, launch_budget)
        decisions = Decisions()
        requeued = ({j.key: j for j in self.scheduler.queued()}
                    if result.preempted and self.quotas is not None and self.quotas.active
                    else {})
        fair = result.fair_preempted
        growing = {k: self.scheduler.wanted(k) or len(self.scheduler.placements(k))
                   for k, _, _ in result.scaled_up}
        decisions.preempted = [Preempted(v, by, fair[v], True) if v in fair else
                               Preempted(v, by, self._why_preempted(requeued.get(v), by,
                                                                    growing.get(by)))
                               for v, by in result.preempted]
        decisions.moved = [self._moved(*m) for m in result.moved]
        decisions.admitted = [Admitted(k, (p,), message=result.notes.get(k, ""))
                              for k, p in result.admitted]
        decisions.admitted += [Admitted(k, ps, True) for k, ps in result.admitted_replicas]
        decisions.scaled_up = [ScaledUp(k, added, self.scheduler.placements(k), growing[k],
                                        why or "")
                               for k, added, why in result.scaled_up]
        changed: Sequence[int]
        if result.carried is not None and result.carried == len(self._listed):
            # Only the entries the scheduler names changed: the rest are last cycle's Pending,
            # and the arrivals after them were not waiting then.
            carried, changed = result.carried, result.changed
            decisions.pending, last = list(self._listed), {}
        else:
            carried, changed = 0, range(len(result.pending))
            last = {p.key: p for p in self._listed}
        position = carried
        known_fleet: bool | None = None  # built only when needed (it copies the topology)
        for index in changed:
            key, nofit, _ = result.pending[index]
            if nofit.kind == "Deferred":  # never carried: a cycle that defers is followed
                position += 1             # by a full one
                decisions.deferred.append(key)
                continue
            if nofit.kind == "Unsatisfiable" and known_fleet is None:
                known_fleet = len(self.allocator.topology) > 0
            if nofit.kind == "Unsatisfiable" and known_fleet:
                self.scheduler.cancel(key)
                decisions.failed.append(Failed(key, nofit.kind, nofit.message))
                continue
            old: Pending | None
            if index < carried:  # a carried entry said anew (the reserved job's)
                old = decisions.pending[index]
                at = old.position
            else:
                position += 1
                old, at = last.get(key), position
            if old is not None and (old.position, old.reason, old.message) == (
                    at, nofit.kind, nofit.message):
                waiting = old
            else:
                waiting = Pending(key, nofit.kind, nofit.message, at)
                decisions.fresh.append(waiting)
            if index < carried:
                decisions.pending[index] = waiting
            else:
                decisions.pending.append(waiting)
        self._listed = decisions.pending
        if result.reserved is not None:
            decisions.reservation = Reserved(*result.reserved, start=result.reservation_start)
        return decisions

    # -- queries -----------------------------------------------------------------------
    def owner(self, part: JobKey) -> JobKey:
        """The job an allocator key (a replica key) belongs to."""
        return self.scheduler.owner(part) or part

    def running(self) -> Mapping[JobKey, QueuedJob]:
        return self.scheduler.running()

    def waiting(self) -> list[QueuedJob]:
        """The jobs in the queue, in queue order."""
        return self.scheduler.queued()

    def waiting_count(self) -> int:
        return self.scheduler.queued_count()

    def is_waiting(self, key: JobKey) -> bool:
        return self.scheduler.is_queued(key)

    def is_running(self, key: JobKey) -> bool:
        return self.scheduler.is_running(key)

    def placements(self, key: JobKey) -> tuple[Placement, ...]:
        return self.scheduler.placements(key)

    def desired(self, key: JobKey) -> int | None:
        """The replica count a running replicated job is headed for: its pending scale-up's,
        else what it holds (None: not running, or one gang). An adapter compares it with the
        spec to know whether an edit is new."""
        job = self.scheduler.running_job(key)
        if job is None or job.replicas is None:
            return None
        return self.scheduler.wanted(key) or job.replicas
