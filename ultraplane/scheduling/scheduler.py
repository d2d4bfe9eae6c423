"""The scheduling cycle: a short driver that asks the cycle's policies, in a fixed order.

Why one driver, shared by the operator, the API and the simulator: the operator (Kubernetes),
the REST API's embedded fleet and the simulator's offline replay must admit jobs in exactly
the same order with exactly the same rules, so the rules live once, here, on top of the core
allocator. It holds no clock and talks to no API; callers persist what a cycle decided (the
operator writes job status before it trusts an allocation) and feed back what they observe
(`cancel`, `restore`).

Order: priority descending, then `rank` ascending (a target start: creation plus a multiple
of the predicted run time, `ultraplane.scheduling.queueorder`), then `seq` (FIFO by
creation). The cycle is best-effort: a job that does not fit does not block smaller, later
jobs that do (Kueue's BestEffortFIFO), because a strict head-of-line queue would leave most
of a fleet idle behind one large gang. A high-priority job that does not fit evicts
lower-priority work instead of waiting.

The policies, one module each, share the jobs (`rosters.Roster`) and the cycle's clock,
launch allowance and no-fit memo (`cycles.CycleState`); each module says why its rule is so:

- `quotagates`: tenant queues (fair-share order, refusal beyond quota, guarantees);
- `powergates`: power budgets (powered UltraServers first, admission within headroom);
- `evictions`: preemption, and putting the victims back when the job is not admitted;
- `fairsharing`: a tenant queue below its fair share preempts, from one domain, queues
  above theirs;
- `replicas`: every part of a job placed, or none;
- `elasticity`: a running replicated job's added replicas, placed one by one (`rescale`);
- `splits`: a `SplitWhenItPays` job split over UltraServers when it pays;
- `moves`: running jobs moved elsewhere so a guaranteed job finds one domain;
- `reservations`: the first large job that does not fit reserves where it starts soonest;
- `backfills`: a job onto reserved UltraServers when it ends before they are due;
- `carryovers`: a deep queue's cycle that tries only the new arrivals.

A cycle, in this fixed order (`cycle`, `_full`, `_carried`, `_try`):

1. The jobs to try. While the last cycle's outcome stands (`CarryOver.stands`), only the
   arrivals behind it, with its pending carried over and its reservation made again
   (`CarryOver.resume`; with tenant queues, in fair-share order after every job the last
   cycle tried, `QuotaBook.arrange_after`); otherwise every waiting job in queue order, in
   fair-share order with tenant queues (`QuotaGate.order`), with the power book's and the
   evictions' cycle begun and the no-fit memos cleared.
2. Each job in turn, after the pending scale-ups of the running jobs ahead of it in queue
   order (`Elasticity.grow`; those behind every waiting job after the last), until one step
   decides it:
   a. the launch allowance is spent: it waits, `Deferred` (so does every job after it);
   b. its tenant queue has no room for it (`QuotaBook.refuse`): it waits, unless fair
      sharing may preempt for it (`FairSharing.may_preempt`; then to step g);
   c. its request already failed this cycle and no step below could change that
      (`_settled`): it waits for the same reason, at the cost of a lookup;
   d. placement, every part or none (`Replicas.place`): each part where
      `PowerGate.allocate` puts it, evicting for it if it may (`Evictions.preempt_for`),
      then the power budgets' word (`PowerGate.refuses`, `PowerGate.place_beside`);
   e. no capacity for its one gang: split if it pays (`Splits.split`), else onto reserved
      UltraServers if it ends before they are due (`Backfills.backfill`);
   f. a job within its tenant queue's unused quota: running jobs moved out of one domain
      for it, when its wait would be long (`Moves.move_for`);
   g. still no room or capacity: fair sharing takes chips for it from queues above their
      fair share, in one domain, if its queue is below its own (`FairSharing.preempt_for`);
   h. still no capacity: it reserves where it would start soonest, if it may
      (`Reservations.reserve`), and waits; the jobs behind it go elsewhere;
   i. placed: it holds its chips with its predicted end (`Roster.hold`) and spends its
      pods from the launch allowance.
3. What stands for the next cycle (`CarryOver.tried`, `CarryOver.settle`).

A new policy is one module beside these, built in `Scheduler.__init__`, and one line at its
step in `_try`; if it can change the outcome of a job whose request already failed this
cycle, also one condition in `_settled`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.quotas import QuotaBook
from ultraplane.scheduling.backfills import Backfills
from ultraplane.scheduling.carryovers import CarryOver
from ultraplane.scheduling.cycles import DEFERRED, CycleResult, CycleState
from ultraplane.scheduling.elasticity import Elasticity
from ultraplane.scheduling.evictions import Evictions
from ultraplane.scheduling.fairsharing import FairSharing
from ultraplane.scheduling.moves import MoveRules, Moves
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.replicas import Replicas
from ultraplane.scheduling.reservations import Reservations
from ultraplane.scheduling.rosters import Roster
from ultraplane.scheduling.splits import Splits
from ultraplane.workloads import QueuedJob

__all__ = ["DEFERRED", "CycleResult", "Scheduler"]


class Scheduler:
    """A priority queue of `QueuedJob`s admitted through one `Allocator`."""

    def __init__(self, allocator: Allocator, *, preemption: bool = True,
                 reservation: bool = True, quotas: QuotaBook | None = None,
                 power: PowerBook | None = None, moves: MoveRules | None = None,
                 queue_packing: bool = False) -> None:
        self.allocator = allocator
        # Tenant queues: admission within quota, fair-share order, reclaim (policies.quotas)
        self.quotas = quotas
        # Power budgets: admission within headroom, powered UltraServers first (powerbook)
        self.power = power
        state = self._state = CycleState()
        roster = self._roster = Roster(allocator, state, quotas=quotas, power=power)
        # `queue_packing`: a queue's guaranteed jobs packed onto its UltraServers (quotagates)
        gate = self._quotas = QuotaGate(quotas, allocator, packing=queue_packing)
        evictions = self._evictions = Evictions(allocator, roster, state, gate,
                                                enabled=preemption)
        reservations = self._reservations = Reservations(allocator, roster, state, gate,
                                                         enabled=reservation)
        self._power = PowerGate(power, allocator, roster, state, gate, evictions, reservations)
        self._replicas = Replicas(allocator, state, evictions, self._power)
        self._splits = Splits(allocator, roster, state, self._power)
        self._backfills = Backfills(allocator, state, reservations, self._power)
        self._carryover = CarryOver(allocator, roster, state, evictions, reservations, gate,
                                    self._power)
        self._elasticity = Elasticity(allocator, roster, state, gate, evictions,
                                      self._power)
        self._fairsharing = FairSharing(allocator, roster, state, gate, evictions, self._power)
        # Moves for guaranteed jobs of tenant queues (off unless the caller persists them)
        self._moves = Moves(allocator, roster, state, gate, moves or MoveRules())

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
        self._elasticity.forget(key)
        return self._roster.cancel(key)

    def requeue(self, key: JobKey) -> QueuedJob | None:
        """Release a running job's chips and queue it again with its original rank."""
        self._elasticity.forget(key)
        return self._roster.requeue(key)

    def rescale(self, key: JobKey, replicas: int) -> tuple[tuple[JobKey, ...], frozenset[ChipId]]:
        """A running replicated job wants `replicas`: fewer releases the highest-index
        replicas now (returns the parts removed and the chips freed); more are placed by
        the next cycles, which are full ones until they are (`elasticity`)."""
        job = self._roster.running[key]
        self._carryover.forget()
        if replicas > (job.replicas or 1):
            self._elasticity.request(key, replicas)
            return (), frozenset()
        return self._elasticity.shrink(key, replicas)

    def wanted(self, key: JobKey) -> int | None:
        """The replica count a running job's pending scale-up wants, if one waits."""
        return self._elasticity.pending.get(key)

    def queued_job(self, key: JobKey) -> QueuedJob | None:
        """The waiting entry of `key`, if it waits."""
        return self._roster.queued.get(key)

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
        req = request if request is not None else PlacementRequest(chips=len(chips))
        self._roster.restore(QueuedJob(key, req, priority, seq, preemptible, rank=rank), chips)

    def restore_job(self, job: QueuedJob, chip_ids: Iterable[ChipId]) -> None:
        """Re-adopt a one-gang job on `chip_ids` keeping every field of `job` (its queue, run
        time, checkpoints); raises `AllocationConflict` as `restore` does."""
        self._roster.restore(job, tuple(chip_ids))

    def restore_replicas(self, job: QueuedJob, chips: Sequence[Iterable[ChipId]]) -> None:
        """Re-adopt every replica of a replicated job, all or nothing (`chips[i]` for replica
        i). Raises `AllocationConflict` or `ValueError` and holds nothing when any replica
        cannot be re-adopted."""
        self._roster.restore_replicas(job, chips)

    # -- queries -----------------------------------------------------------------------
    def queued(self) -> list[QueuedJob]:
        """Waiting jobs in admission order."""
        return sorted(self._roster.queued.values(), key=QueuedJob.order)

    def queued_count(self) -> int:
        """How many jobs wait (without sorting them)."""
        return len(self._roster.queued)

    def running(self) -> Mapping[JobKey, QueuedJob]:
        return dict(self._roster.running)

    def running_job(self, key: JobKey) -> QueuedJob | None:
        """The running entry of `key`, if it runs (without copying every running job)."""
        return self._roster.running.get(key)

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
        self._state.now, self._state.budget = now, launch_budget
        self._fairsharing.begin()
        if self._power.book is not None:  # the headroom moves with the clock and the
            self._carryover.forget()  # telemetry: every cycle is a full one
        result = None
        if self._carryover.stands():
            with self._reservations.fencing(carried=True):
                result = self._carried()
        if result is None:
            with self._reservations.fencing(carried=False):
                result = self._full()
        self._roster.arrivals.clear()
        self._carryover.settle(result)
        if self._elasticity.pending:
            # A carried cycle judges only arrivals against what stands; a waiting scale-up
            # may preempt, or fit chips freed since, so it is tried in a full one.
            self._carryover.forget()
        return result

    def _full(self) -> CycleResult:
        """A cycle over every waiting job."""
        result = CycleResult()
        queue = self._quotas.order(self.queued(), self._state.now)
        self._power.begin()
        self._evictions.begin()
        self._state.forget_failures()
        self._try(queue, result)
        self._carryover.tried(queue, result)
        return result

    def _carried(self) -> CycleResult | None:
        """A cycle over the new arrivals behind every job the last one tried, or None when
        a full cycle is needed instead."""
        result = CycleResult()
        self._evictions.begin()
        arrivals = self._carryover.resume(result)
        if arrivals is None:
            return None
        self._try(arrivals, result)
        self._carryover.tried(arrivals, result)
        return result

    def _try(self, queue: Sequence[QueuedJob], result: CycleResult) -> None:
        """Try `queue` in order, appending to `result` (positions continue after its pending)."""
        state, quotas = self._state, self._quotas.book
        position = len(result.pending)
        for index, job in enumerate(queue):
            self._elasticity.grow(job, result)
            if state.budget is not None and state.budget <= 0:  # every job after it waits too
                position += 1
                result.pending.append((job.key, DEFERRED, position))
                result.deferred += 1
                continue
            refused = quotas.refuse(job) if quotas is not None else None
            if refused is not None and not self._fairsharing.may_preempt(job):
                position += 1
                result.pending.append((job.key, refused, position))
                continue
            known = state.failed.get(job.request)
            if refused is None and known is not None and self._settled(job, known, result):
                position += 1  # what the full path below would decide, without its cost
                result.pending.append((job.key, known, position))
                continue
            outcome = refused if refused is not None else self._replicas.place(job, result)
            if isinstance(outcome, NoFit) and outcome.kind == "NoCapacity" and job.replicas is None:
                if job.request.mode == "SplitWhenItPays":
                    outcome = self._splits.split(job, outcome, result)
                if isinstance(outcome, NoFit) and self._reservations.fenced:
                    outcome = self._backfills.backfill(job, outcome, result)
                if isinstance(outcome, NoFit):
                    outcome = self._moves.move_for(job, outcome, result)
            if isinstance(outcome, NoFit):
                outcome = self._fairsharing.preempt_for(job, outcome, result)
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
            if job.launches and state.budget is not None:
                state.budget -= sum(len(p.servers) for p in outcome)
            if job.replicas is None:
                result.admitted.append((job.key, outcome[0]))
            else:
                result.admitted_replicas.append((job.key, outcome))
        self._elasticity.grow(None, result)

    def _settled(self, job: QueuedJob, known: NoFit, result: CycleResult) -> bool:
        """Whether `job`, whose request already failed this cycle, just waits with `known`:
        no preemption, split, backfill or reservation could change its outcome (a deep queue
        of such jobs then costs a lookup each)."""
        return (job.replicas is None and job.request.mode != "SplitWhenItPays"
                and not self._evictions.may_preempt(job)
                and not self._fairsharing.may_preempt(job)
                and not (self._reservations.fenced and job.expected_s is not None)
                and not self._moves.may_move(job)
                and (known.kind != "NoCapacity"
                     or not self._reservations.may_reserve(job, result)))
