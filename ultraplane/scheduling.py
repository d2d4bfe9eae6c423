"""The admission queue and the scheduling cycle, shared by the operator, the API and the simulator.

Why a separate, pure module: the operator (Kubernetes), the REST API's embedded fleet and the
simulator's offline replay must admit jobs in exactly the same order with exactly the same
preemption rule, so the rule lives once, here, on top of the core allocator. It holds no clock
and talks to no API; callers persist what a cycle decided (the operator writes job status before
it trusts an allocation) and feed back what they observe (`cancel`, `restore`).

Order: priority descending, then `seq` ascending (FIFO by creation). The cycle is best-effort
FIFO: a job that does not fit does not block smaller, later jobs that do (Kueue's
BestEffortFIFO), because a strict head-of-line queue would leave most of a fleet idle behind one
large gang. A high-priority job that does not fit evicts lower-priority work instead of waiting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ultraplane.allocator import Allocator, NoFit, Placement, PlacementRequest
from ultraplane.ids import ChipId, JobKey
from ultraplane.preemption import plan_preemption

__all__ = ["CycleResult", "QueuedJob", "Scheduler"]


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for chips; `seq` orders jobs of equal priority (smaller = older)."""

    key: JobKey
    request: PlacementRequest
    priority: int = 0
    seq: int = 0
    preemptible: bool = True

    def order(self) -> tuple[int, int, str]:
        """Sort key: highest priority first, then oldest, then key for a total order."""
        return (-self.priority, self.seq, self.key)


@dataclass
class CycleResult:
    """What one cycle decided. The caller must persist `preempted` before `admitted`."""

    admitted: list[tuple[JobKey, Placement]] = field(default_factory=list)
    preempted: list[tuple[JobKey, JobKey]] = field(default_factory=list)
    pending: list[tuple[JobKey, NoFit, int]] = field(default_factory=list)


class Scheduler:
    """A priority queue of `QueuedJob`s admitted through one `Allocator`."""

    def __init__(self, allocator: Allocator, *, preemption: bool = True) -> None:
        self.allocator = allocator
        self.preemption = preemption
        self._queued: dict[JobKey, QueuedJob] = {}
        self._running: dict[JobKey, QueuedJob] = {}

    # -- observations ------------------------------------------------------------------
    def submit(self, job: QueuedJob) -> None:
        """Queue a job; resubmitting a queued key replaces it (spec edits, repeated events)."""
        if job.key in self._running:
            raise ValueError(f"job {job.key} already holds chips; cancel it before resubmitting")
        self._queued[job.key] = job

    def cancel(self, key: JobKey) -> frozenset[ChipId]:
        """Forget a job: dequeue it, or release its chips. Returns the chips released."""
        self._queued.pop(key, None)
        if self._running.pop(key, None) is None:
            return frozenset()
        return self.allocator.release(key)

    def requeue(self, key: JobKey) -> QueuedJob | None:
        """Release a running job's chips and queue it again with its original FIFO rank."""
        job = self._running.pop(key, None)
        if job is None:
            return self._queued.get(key)
        self.allocator.release(key)
        self._queued[key] = job
        return job

    def restore(
        self,
        key: JobKey,
        chip_ids: Iterable[ChipId],
        priority: int = 0,
        *,
        request: PlacementRequest | None = None,
        seq: int = 0,
        preemptible: bool = True,
    ) -> None:
        """Re-adopt a job that already holds chips (after a restart, from its persisted status).

        Raises `AllocationConflict` (from the allocator) when a chip is unknown or taken, so the
        caller can requeue the job instead of double-allocating.
        """
        chips = tuple(chip_ids)
        self._queued.pop(key, None)
        req = request if request is not None else PlacementRequest(chips=len(chips))
        self.allocator.assign(key, chips, req)
        self._running[key] = QueuedJob(key, req, priority, seq, preemptible)

    # -- queries -----------------------------------------------------------------------
    def queued(self) -> list[QueuedJob]:
        """Waiting jobs in admission order."""
        return sorted(self._queued.values(), key=QueuedJob.order)

    def running(self) -> Mapping[JobKey, QueuedJob]:
        return dict(self._running)

    def is_queued(self, key: JobKey) -> bool:
        return key in self._queued

    def is_running(self, key: JobKey) -> bool:
        return key in self._running

    def positions(self) -> dict[JobKey, int]:
        """1-based queue position of every waiting job."""
        return {job.key: i for i, job in enumerate(self.queued(), start=1)}

    # -- the cycle ---------------------------------------------------------------------
    def cycle(self) -> CycleResult:
        """Admit what fits, in order; preempt for jobs that do not; report the rest."""
        result = CycleResult()
        position = 0
        for job in self.queued():
            outcome = self.allocator.allocate(job.key, job.request)
            if isinstance(outcome, NoFit) and self.preemption and outcome.kind == "NoCapacity":
                outcome = self._preempt_for(job, outcome, result)
            if isinstance(outcome, Placement):
                del self._queued[job.key]
                self._running[job.key] = job
                result.admitted.append((job.key, outcome))
            else:
                position += 1
                result.pending.append((job.key, outcome, position))
        return result

    def _preempt_for(self, job: QueuedJob, nofit: NoFit, result: CycleResult) -> Placement | NoFit:
        victims_pool = {k: j.priority for k, j in self._running.items() if j.preemptible}
        if not any(p < job.priority for p in victims_pool.values()):
            return nofit
        plan = plan_preemption(self.allocator, job.request, job.priority, victims_pool)
        if isinstance(plan, NoFit):
            return nofit
        for victim in plan.victims:
            self.requeue(victim)
            result.preempted.append((victim, job.key))
        placed = self.allocator.allocate(job.key, job.request)
        if isinstance(placed, NoFit):
            # The plan said the domain frees up; if the allocator disagrees, fall back to the
            # planned chips rather than leave the victims evicted for nothing.
            self.allocator.assign(job.key, plan.placement.chip_ids)
            placed = plan.placement
        return placed

