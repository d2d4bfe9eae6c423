"""The admission queue and the scheduling cycle, shared by the operator, the API and the simulator.

Why a separate, pure module: the operator (Kubernetes), the REST API's embedded fleet and the
simulator's offline replay must admit jobs in exactly the same order with exactly the same
preemption rule, so the rule lives once, here, on top of the core allocator. It holds no clock
and talks to no API; callers persist what a cycle decided (the operator writes job status before
it trusts an allocation) and feed back what they observe (`cancel`, `restore`).

Order: priority descending, then `rank` ascending (a target start: creation plus a multiple of
the predicted run time, `ultraplane.scheduling.queueorder`), then `seq` (FIFO by creation). The cycle is
best-effort: a job that does not fit does not block smaller, later jobs that do (Kueue's
BestEffortFIFO), because a strict head-of-line queue would leave most of a fleet idle behind one
large gang. A high-priority job that does not fit evicts lower-priority work instead of waiting.

Backfill reservation (`reservation=True`, the default): best-effort FIFO alone starves large
gangs, because the small jobs behind them keep taking the chips that free up. So the first job
of a cycle that needs whole UltraServers and still does not fit (after any preemption) reserves
where it would start soonest: the k UltraServers its gang needs, inside one domain its required
level allows, with the most free chips between them (`Allocator.reservation`; a replicated job
gets such a set per replica). For the rest of the cycle, jobs behind it are placed (and
preempt) only elsewhere. Running jobs there keep their chips; as they end, the UltraServers
drain and the gang starts. One reservation per cycle (Slurm's backfill reservation for the top
job); the cost is the reserved UltraServers' free chips while they drain. With tenant queues,
each queue also reserves for its first job that fits its unused nominal quota and finds no
place, so one queue's reservation never leaves another's guarantee to be nibbled away.

Replicated jobs (an InferenceJob's replicas) are one queue entry with one gang per replica, each
held in the allocator under `key#i`. They are admitted whole or not at all: if a later replica
does not fit, the earlier ones are released and any job evicted for them is put back on its own
chips, so a half-placed job never holds chips and never costs a victim anything.

Deep queues: a cycle that has nothing to try but new arrivals queued behind every job the last
cycle tried (the usual case: same-priority jobs created while the fleet is full) tries only
those. Everything the last cycle left waiting still waits, because the fleet has only filled up
since (`Allocator.room_epoch` has not moved), so a full cycle would decide the same; the
reservation is recomputed and must come out unchanged. Anything else (chips freed, an edit, a
cancel, a preemption, a waiting job that could now preempt, a moved reservation) makes the
next cycle a full one. Pending messages of the jobs carried over are the last full cycle's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import (
    AllocationConflict,
    Allocator,
    NoFit,
    Placement,
    PlacementRequest,
)
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.quotas import QuotaBook
from ultraplane.scheduling.backfills import Backfills
from ultraplane.scheduling.cycles import DEFERRED, CycleResult, CycleState
from ultraplane.scheduling.evictions import Evictions
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.replicas import Replicas
from ultraplane.scheduling.reservations import Reservations
from ultraplane.scheduling.rosters import Roster
from ultraplane.scheduling.splits import Splits
from ultraplane.workloads import QueuedJob

__all__ = ["DEFERRED", "CycleResult", "Scheduler"]

@dataclass(frozen=True, slots=True)
class _Standing:
    """What the last cycle left waiting, for a cycle that only has new arrivals to try."""

    pending: list[tuple[JobKey, NoFit, int]]
    last: tuple[int, float, int, str] | None  # order of the last job it tried
    room: int  # the allocator's room_epoch after it
    timed: bool  # it had a clock (predictions on)
    top: int | None  # highest priority left waiting
    volatile: bool  # a SplitWhenItPays job waits: its decision moves with every admission
    reserved: tuple[JobKey, str, tuple[str, ...]] | None
    reservation_start: float | None
    reserved_at: tuple[int, NoFit] | None  # (index in pending, its NoFit before the reservation)
    epoch: int  # the roster's epoch after it: while unmoved, nothing it tried has changed


class Scheduler:
    """A priority queue of `QueuedJob`s admitted through one `Allocator`."""

    def __init__(self, allocator: Allocator, *, preemption: bool = True,
                 reservation: bool = True, quotas: QuotaBook | None = None,
                 power: PowerBook | None = None) -> None:
        self.allocator = allocator
        # Tenant queues: admission within quota, fair-share order, reclaim (ultraplane.policies.quotas)
        self.quotas = quotas
        # Power budgets: admission within headroom, powered UltraServers first (powerbook)
        self.power = power
        self._state = CycleState()  # the clock, launch allowance and no-fit memo
        self._roster = Roster(allocator, self._state, quotas=quotas, power=power)
        self._quotas = QuotaGate(quotas, allocator)
        self._evictions = Evictions(allocator, self._roster, self._state, self._quotas,
                                    enabled=preemption)
        self._reservations = Reservations(allocator, self._roster, self._state, self._quotas,
                                          enabled=reservation)
        self._power = PowerGate(power, allocator, self._roster, self._state, self._quotas,
                                self._evictions, self._reservations)
        self._splits = Splits(allocator, self._roster, self._state, self._power)
        self._backfills = Backfills(allocator, self._state, self._reservations, self._power)
        self._replicas = Replicas(allocator, self._state, self._evictions, self._power)
        self._standing: _Standing | None = None  # what the last cycle left waiting, if valid
        self._last: tuple[int, float, int, str] | None = None  # order of the last job tried

    @property
    def preemption(self) -> bool:
        """Whether a job that does not fit may evict lower-priority jobs (`evictions`)."""
        return self._evictions.enabled

    @preemption.setter
    def preemption(self, on: bool) -> None:
        self._evictions.enabled = on

    @property
    def reservation(self) -> bool:
        """Whether the first large job that does not fit reserves (`reservations`)."""
        return self._reservations.enabled

    @reservation.setter
    def reservation(self, on: bool) -> None:
        self._reservations.enabled = on

    # -- observations ------------------------------------------------------------------
    def submit(self, job: QueuedJob) -> None:
        """Queue a job; resubmitting a queued key replaces it (spec edits, repeated events)."""
        self._roster.submit(job)

    def cancel(self, key: JobKey) -> frozenset[ChipId]:
        """Forget a job: dequeue it, or release its chips. Returns the chips released."""
        return self._roster.cancel(key)

    def requeue(self, key: JobKey) -> QueuedJob | None:
        """Release a running job's chips and queue it again with its original rank."""
        return self._roster.requeue(key)

    def expect_end(self, key: JobKey, end: float | None) -> None:
        """The caller's prediction of when a running job ends. None (the caller knows
        nothing yet, e.g. no progress reported) keeps the cycle's own prediction,
        `start + expected_s x predicted slowdown` made at admission, if it made one."""
        # Ends reach a waiting job's outcome only through the reservation (recomputed and
        # compared by a cycle that carries the queue over) and SplitWhenItPays (which makes
        # every timed cycle a full one), so a new prediction leaves the last cycle standing.
        if end is not None and key in self._roster.running:
            self._roster.ends[key] = end

    def expected_end(self, key: JobKey) -> float | None:
        return self._roster.ends.get(key)

    def restore(
        self,
        key: JobKey,
        chip_ids: Iterable[ChipId],
        priority: int = 0,
        *,
        request: PlacementRequest | None = None,
        seq: int = 0,
        preemptible: bool = True,
        rank: float = 0.0,
    ) -> None:
        """Re-adopt a job that already holds chips (after a restart, from its persisted status);
        `seq` and `rank` are where it queues again if it is requeued.

        Raises `AllocationConflict` (from the allocator) when a chip is unknown or taken, so the
        caller can requeue the job instead of double-allocating.
        """
        chips = tuple(chip_ids)
        self._roster.withdraw(key)
        req = request if request is not None else PlacementRequest(chips=len(chips))
        self.allocator.assign(key, chips, req)
        self._roster.hold(QueuedJob(key, req, priority, seq, preemptible, rank=rank))

    def restore_replicas(self, job: QueuedJob, chips: Sequence[Iterable[ChipId]]) -> None:
        """Re-adopt every replica of a replicated job, all or nothing (`chips[i]` for replica
        i). Raises `AllocationConflict` or `ValueError` and holds nothing when any replica
        cannot be re-adopted."""
        parts = job.parts()
        if len(chips) != len(parts):
            raise ValueError(f"job {job.key}: {len(chips)} replica allocations for "
                             f"{len(parts)} replicas")
        done: list[JobKey] = []
        try:
            for part, ids in zip(parts, chips, strict=True):
                self.allocator.assign(part, tuple(ids), job.request)
                done.append(part)
        except (AllocationConflict, ValueError, KeyError):
            for part in done:
                self.allocator.release(part)
            raise
        self._roster.adopt(job)

    # -- queries -----------------------------------------------------------------------
    def queued(self) -> list[QueuedJob]:
        """Waiting jobs in admission order."""
        return sorted(self._roster.queued.values(), key=QueuedJob.order)

    def queued_count(self) -> int:
        """How many jobs wait (without sorting them)."""
        return len(self._roster.queued)

    def running(self) -> Mapping[JobKey, QueuedJob]:
        return dict(self._roster.running)

    def is_queued(self, key: JobKey) -> bool:
        return key in self._roster.queued

    def is_running(self, key: JobKey) -> bool:
        return key in self._roster.running

    def owner(self, part: JobKey) -> JobKey | None:
        """The running job whose chips the allocator holds under `part` (a replica key)."""
        return self._roster.owners.get(part)

    def placements(self, key: JobKey) -> tuple[Placement, ...]:
        """Current placement of each part of a running job (replica order); empty if none."""
        job = self._roster.running.get(key)
        if job is None:
            return ()
        held = self.allocator.allocations()
        return tuple(held[p] for p in job.parts() if p in held)

    def positions(self) -> dict[JobKey, int]:
        """1-based queue position of every waiting job."""
        return {job.key: i for i, job in enumerate(self.queued(), start=1)}

    # -- the cycle ---------------------------------------------------------------------
    def cycle(self, now: float | None = None, launch_budget: int | None = None) -> CycleResult:
        """Admit what fits, in order; preempt for jobs that do not; report the rest.

        `now` (the caller's clock) turns on the predictions: running jobs' expected ends
        choose the reservation that starts soonest and allow backfill onto it (EASY), and
        `SplitWhenItPays` jobs are split only when it pays. Without it the cycle decides as
        if nothing could be predicted (see the module docstring).

        `launch_budget`: how many pods this cycle's admissions may start (a job that
        `launches` starts one per server of its placements; other jobs cost nothing). Once
        it is spent, no later job is tried (none may take the chips of one ahead of it):
        they wait as `Deferred`, holding their queue positions, and the next cycle is a
        full one. The job that spends it is admitted whole, so a budget above 0 always admits
        the first job that fits. None: no limit (the simulator's and the REST API's drivers,
        and the operator without pods)."""
        self._state.now = now
        self._state.budget = launch_budget
        if self._quotas.book is not None or self._power.book is not None:  # usage moves the order, or
            self._standing = None  # the headroom: every cycle is a full one
        result = CycleResult()
        carried = False
        if self._standing is not None and self._standing.epoch == self._roster.epoch:
            with self._reservations.fencing(carried=True):
                carried = self._append(result)
        if not carried:
            result = CycleResult()
            with self._reservations.fencing(carried=False):
                self._cycle(result)
        self._roster.arrivals.clear()
        # a deferred job was never tried: the next cycle must try it (a carried one would not)
        self._standing = None if result.preempted or result.deferred else self._stand(result)
        return result

    def _cycle(self, result: CycleResult) -> None:
        queue = self._quotas.order(self.queued())
        self._power.begin()
        self._evictions.begin()
        # Within a cycle the fleet only fills up (admissions, the reservation's hold) until a
        # preemption evicts someone: a request that did not fit still does not, so queues of
        # thousands of same-shaped jobs cost one search per shape, not one per job. Recorded
        # before a job holds any part, dropped on every eviction.
        self._state.failed.clear()
        self._try(queue, result)
        self._last = queue[-1].order() if queue else None

    def _try(self, queue: Sequence[QueuedJob], result: CycleResult) -> None:
        """Try `queue` in order, appending to `result` (positions continue after its pending)."""
        position = len(result.pending)
        quotas = self._quotas.book
        for index, job in enumerate(queue):
            if self._state.budget is not None and self._state.budget <= 0:  # every job after it waits too
                position += 1
                result.pending.append((job.key, DEFERRED, position))
                result.deferred += 1
                continue
            refused = quotas.refuse(job) if quotas is not None else None
            if refused is not None:
                position += 1
                result.pending.append((job.key, refused, position))
                continue
            known = self._state.failed.get(job.request)
            if known is not None and self._settled(job, known, result):
                position += 1  # what the full path below would decide, without its cost
                result.pending.append((job.key, known, position))
                continue
            outcome = self._replicas.place(job, result)
            if isinstance(outcome, NoFit) and outcome.kind == "NoCapacity" and job.replicas is None:
                if job.request.mode == "SplitWhenItPays":
                    outcome = self._splits.split(job, outcome, result)
                if isinstance(outcome, NoFit) and self._reservations.fenced:
                    outcome = self._backfills.backfill(job, outcome, result)
            if isinstance(outcome, NoFit):
                if (outcome.kind == "NoCapacity"
                        and self._reservations.may_reserve(job, result)):
                    outcome = self._reservations.reserve(job, outcome, result,
                                                         behind=index + 1 < len(queue))
                position += 1
                result.pending.append((job.key, outcome, position))
                continue
            self._roster.hold(job)
            end = self._roster.predicted_end(job, outcome)
            if end is not None:
                self._roster.ends[job.key] = end
            if job.launches and self._state.budget is not None:
                self._state.budget -= sum(len(p.servers) for p in outcome)
            if job.replicas is None:
                result.admitted.append((job.key, outcome[0]))
            else:
                result.admitted_replicas.append((job.key, outcome))

    def _settled(self, job: QueuedJob, known: NoFit, result: CycleResult) -> bool:
        """Whether `job`, whose request already failed this cycle, just waits with `known`:
        no preemption, split, backfill or reservation could change its outcome (a deep queue
        of such jobs then costs a lookup each)."""
        return (job.replicas is None and job.request.mode != "SplitWhenItPays"
                and not self._evictions.may_preempt(job)
                and not (self._reservations.fenced and job.expected_s is not None)
                and (known.kind != "NoCapacity"
                     or not self._reservations.may_reserve(job, result)))

    def _stand(self, result: CycleResult) -> _Standing:
        """What a cycle that tries only later arrivals may carry over from `result`."""
        before = self._standing if result.carried is not None else None
        if before is not None and before.epoch != self._roster.epoch:
            before = None  # (a job was requeued during the cycle)
        start = 0 if before is None else len(before.pending)
        queued = self._roster.queued
        waiting = [queued[key] for key, _, _ in result.pending[start:] if key in queued]
        top = max((j.priority for j in waiting), default=None)
        if before is not None and before.top is not None:
            top = before.top if top is None else max(top, before.top)
        return _Standing(
            pending=result.pending, last=self._last, room=self.allocator.room_epoch,
            timed=self._state.now is not None, top=top,
            volatile=(before is not None and before.volatile)
            or any(j.request.mode == "SplitWhenItPays" for j in waiting),
            reserved=result.reserved, reservation_start=result.reservation_start,
            reserved_at=self._reservations.first, epoch=self._roster.epoch)

    def _append(self, result: CycleResult) -> bool:
        """The cycle for new arrivals behind every job the last one tried: the last cycle's
        pending carried over, the reservation recomputed, the arrivals tried. False (and
        nothing changed) when a full cycle is needed instead."""
        st = self._standing
        assert st is not None
        arrivals = sorted((j for k, j in self._roster.arrivals.items() if k in self._roster.queued),
                          key=QueuedJob.order)
        if (st.room != self.allocator.room_epoch or st.timed != (self._state.now is not None)
                or (st.volatile and self._state.now is not None)
                or (arrivals and st.last is not None and arrivals[0].order() <= st.last)):
            return False
        self._evictions.begin()
        if st.top is not None and self._evictions.outranks(st.top):
            return False  # a job left waiting could preempt what was admitted since
        result.pending, result.carried = list(st.pending), len(st.pending)
        if st.reserved is not None and st.reserved_at is not None:
            index, base = st.reserved_at
            key, said, position = result.pending[index]
            outcome = self._reservations.reserve(self._roster.queued[key], base, result,
                                                 behind=bool(arrivals))
            if (result.reserved, result.reservation_start) != (st.reserved, st.reservation_start):
                return False  # the reservation moved: jobs behind it may fit elsewhere now
            if outcome.message != said.message:  # its predicted start is counted from now
                result.pending[index] = (key, outcome, position)
                result.changed.append(index)
        elif st.reserved is not None:
            return False
        self._reservations.first = st.reserved_at
        self._try(arrivals, result)
        result.changed += range(result.carried, len(result.pending))
        if arrivals:
            self._last = arrivals[-1].order()
        return True

    # -- predictions -------------------------------------------------------------------
