"""The jobs one scheduler knows: those that wait, those that hold chips, and when they end.

Why apart from the cycle: every policy of the cycle reads the same jobs (evictions pick
victims among the running ones, reservations and split pricing read their predicted ends,
the carry-over the waiting ones), and every change of a running job must reach the allocator,
the tenant queues' usage (`QuotaBook.hold`) and the power budgets' draw (`PowerBook.hold`)
together. The roster is that one place; the policies change it only through `hold` and
`requeue`, the caller through the scheduler's `submit`, `cancel`, `requeue` and `restore`.

`epoch` moves whenever the queue changes other than by new arrivals behind it (an edit of a
job a cycle tried, a cancel, a requeue, a restore): what the last cycle decided for the jobs
it tried then no longer stands (`carryovers`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from ultraplane.ids import ChipId, JobKey, namespace_of_job_key
from ultraplane.placement.allocator import AllocationConflict, Allocator, Placement
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.quotas import QuotaBook
from ultraplane.scheduling.cycles import CycleState
from ultraplane.scheduling.predictions import placed_slowdown
from ultraplane.workloads import QueuedJob

__all__ = ["Roster"]


class Roster:
    """Waiting and running jobs, the owner of each part the allocator holds, predicted ends."""

    def __init__(self, allocator: Allocator, state: CycleState, *,
                 quotas: QuotaBook | None, power: PowerBook | None) -> None:
        self._allocator = allocator
        self._state = state
        self._quotas = quotas
        self._power = power
        self.queued: dict[JobKey, QueuedJob] = {}
        # The chips the queued jobs want, by (the queue a job names, its namespace): what a
        # tenant queue's demand is read from (`fairshares.queue_fair_shares`) at the cost of
        # a few entries, not a pass over a deep queue each cycle. Keyed by what the job says,
        # not by the queue it resolves to, so that a change of the queues needs no recount.
        self.queued_chips: Counter[tuple[str | None, str]] = Counter()
        self.arrivals: dict[JobKey, QueuedJob] = {}  # queued since the last cycle
        self.running: dict[JobKey, QueuedJob] = {}
        self.owners: dict[JobKey, JobKey] = {}  # allocator key of a running part -> its job
        self.ends: dict[JobKey, float] = {}  # predicted end of running jobs
        # When each running job last started on its chips (the cycle's clock; None without
        # one): the work a move would lose is counted from it (`moves`).
        self.since: dict[JobKey, float | None] = {}
        self.epoch = 0
        # How many preemptible running jobs hold each priority: a cycle reads the lowest
        # without a scan of every running job.
        self._preemptible: Counter[int] = Counter()

    def submit(self, job: QueuedJob) -> None:
        if job.key in self.running:
            raise ValueError(f"job {job.key} already holds chips; cancel it before resubmitting")
        if job.key in self.queued and job.key not in self.arrivals:
            self.epoch += 1  # an edit of a job the last cycle tried
        else:
            self.arrivals[job.key] = job
        self._queue(job)

    def cancel(self, key: JobKey) -> frozenset[ChipId]:
        if self._unqueue(key) is not None and self.arrivals.pop(key, None) is None:
            self.epoch += 1  # the positions behind it move
        job = self.running.pop(key, None)
        if job is None:
            return frozenset()
        self._unhold(job)
        return self._release(job)

    def requeue(self, key: JobKey) -> QueuedJob | None:
        """Release a running job's chips and queue it again with its original rank."""
        job = self.running.pop(key, None)
        if job is None:
            return self.queued.get(key)
        self._unhold(job)
        self._release(job)
        self._queue(job)
        self.epoch += 1
        return job

    def restore(self, job: QueuedJob, chips: tuple[ChipId, ...]) -> None:
        """Re-adopt a one-gang job that already holds `chips`; it leaves the queue even when
        the allocator refuses them (`AllocationConflict`)."""
        self._unqueue(job.key)
        self.arrivals.pop(job.key, None)
        self.epoch += 1
        self._allocator.assign(job.key, chips, job.request)
        self.hold(job)

    def restore_replicas(self, job: QueuedJob, chips: Sequence[Iterable[ChipId]]) -> None:
        """Re-adopt every replica of a replicated job, all or nothing (`chips[i]` for replica
        i): on `AllocationConflict` or `ValueError` nothing is held."""
        parts = job.parts()
        if len(chips) != len(parts):
            raise ValueError(f"job {job.key}: {len(chips)} replica allocations for "
                             f"{len(parts)} replicas")
        done: list[JobKey] = []
        try:
            for part, ids in zip(parts, chips, strict=True):
                self._allocator.assign(part, tuple(ids), job.request)
                done.append(part)
        except (AllocationConflict, ValueError, KeyError):
            for part in done:
                self._allocator.release(part)
            raise
        self.arrivals.pop(job.key, None)
        self.epoch += 1
        self.hold(job)

    def _queue(self, job: QueuedJob) -> None:
        """`job` waits (in place of an earlier version of it, if any, keeping its place)."""
        old = self.queued.get(job.key)
        if old is not None:
            self._untally(old)
        self.queued[job.key] = job
        self.queued_chips[_wants_key(job)] += _wants(job)

    def _unqueue(self, key: JobKey) -> QueuedJob | None:
        """`key` no longer waits; the job that did, if any."""
        job = self.queued.pop(key, None)
        if job is not None:
            self._untally(job)
        return job

    def _untally(self, job: QueuedJob) -> None:
        tally = _wants_key(job)
        self.queued_chips[tally] -= _wants(job)
        if not self.queued_chips[tally]:
            del self.queued_chips[tally]

    def hold(self, job: QueuedJob) -> None:
        """`job` holds the chips the allocator assigned to its parts: it runs."""
        self._unqueue(job.key)
        old = self.running.get(job.key)
        if old is not None:
            self._unhold(old)
        self.running[job.key] = job
        self.since.setdefault(job.key, self._state.now)
        if job.preemptible:
            self._preemptible[job.priority] += 1
        for part in job.parts():
            self.owners[part] = job.key
        if self._quotas is not None:
            self._quotas.hold(job, self._allocator)
        if self._power is not None:
            held = self._allocator.allocations()
            self._power.hold(job.key, job.priority,
                             [held[p] for p in job.parts() if p in held], self._state.now)

    def _unhold(self, job: QueuedJob) -> None:
        """`job` left `running` (the caller popped it)."""
        if self._quotas is not None:
            self._quotas.unhold(job.key)
        if self._power is not None:
            self._power.unhold(job.key, self._state.now)
        if job.preemptible:
            self._preemptible[job.priority] -= 1
            if not self._preemptible[job.priority]:
                del self._preemptible[job.priority]

    def _release(self, job: QueuedJob) -> frozenset[ChipId]:
        self.ends.pop(job.key, None)
        self.since.pop(job.key, None)
        freed: set[ChipId] = set()
        for part in job.parts():
            self.owners.pop(part, None)
            freed |= self._allocator.release(part)
        return frozenset(freed)

    def lowest(self) -> int | None:
        """The lowest priority a preemptible running job holds."""
        return min(self._preemptible) if self._preemptible else None

    # -- predictions -------------------------------------------------------------------
    def predicted_end(self, job: QueuedJob, placements: tuple[Placement, ...]) -> float | None:
        """When `job` would end placed so, started now (None without a clock or run time)."""
        now = self._state.now
        if now is None or job.expected_s is None or not placements:
            return None
        slow = max(placed_slowdown(self._allocator, p, job.request.chips) for p in placements)
        return now + job.expected_s * slow

    def releases(self) -> dict[str, list[tuple[float, int]]]:
        """UltraServer -> (predicted end, chips) of every job holding chips there."""
        out: dict[str, list[tuple[float, int]]] = {}
        for part, placement in self._allocator.allocations().items():
            end = self.ends.get(self.owners.get(part, part), math.inf)
            for us, chips in placement.chips_by_ultraserver:  # cached per placement
                out.setdefault(us, []).append((end, chips))
        return out


def _wants_key(job: QueuedJob) -> tuple[str | None, str]:
    return (job.queue, namespace_of_job_key(job.key))


def _wants(job: QueuedJob) -> int:
    return job.request.chips * (job.replicas or 1)
