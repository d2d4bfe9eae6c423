"""Elastic replicas: a running replicated job (an InferenceJob) grows or shrinks in place.

Why a policy of its own: a serving job's replica count follows its load (the planner,
`ultraplane.serving.planners`, or a user's edit of `spec.replicas`), and a resize must not
restart the replicas that serve. So a resize of a running job is not a resubmission:

- Shrinking releases the highest-index replicas (`key#n` ..) at once and never touches the
  others (`shrink`): their chips, pods and caches stay as they are.
- Growing queues the added replicas (`request`); the cycle places them (`grow`) as new gangs,
  each inside one domain like every gang, at the job's priority and queue order: before the
  first waiting job it outranks, after every waiting job that outranks it. A replica that
  finds no capacity may evict lower-priority preemptible work exactly as an admission does
  (`evictions`; the victims are `Preempted` by the job). Each added replica must also fit
  the job's tenant queue (one replica's chips more, `QuotaBook.refuse`) and the power
  budgets over where it lands (one replica's draw more, `PowerBook.refuse`; refused, it is
  released and its victims put back), and it spends the launch allowance like an admission.
- Replicas are all-or-nothing only at first admission (`replicas`). Added replicas are placed
  one by one and a partial scale-up holds what it placed: serving capacity is useful per
  replica (three of four added replicas serve three quarters of the extra load), whereas a
  gang of a training job is useless in part. The first added replica that does not fit stops
  the rest (they have the same request, so they would not fit either) and the job keeps
  running at the size it reached; the missing replicas wait, with the reason, said again
  only when it changes.

Deep queues: a cycle that carries the last one over tries only new arrivals; a pending
scale-up would be skipped there, so while one waits every cycle is a full one
(`Scheduler.cycle` forgets the carry-over when `pending` is not empty).
"""

from __future__ import annotations

from dataclasses import replace

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.scheduling.cycles import DEFERRED, CycleResult, CycleState
from ultraplane.scheduling.evictions import Evicted, Evictions
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob, replica_key

__all__ = ["Elasticity"]


class Elasticity:
    """The pending scale-ups of one scheduler's running replicated jobs, and resizing them."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 quotas: QuotaGate, evictions: Evictions, power: PowerGate) -> None:
        self._allocator = allocator
        self._quotas = quotas
        self._roster = roster
        self._state = state
        self._evictions = evictions
        self._power = power
        self.pending: dict[JobKey, int] = {}  # running job -> the replica count it wants
        self._tried: set[JobKey] = set()  # grown (or tried) this cycle: once a cycle each
        # Why each scale-up waits, as last said: a cycle that places nothing and would say
        # the same says nothing (as an unchanged Pending is not written again).
        self._said: dict[JobKey, str] = {}

    def shrink(self, key: JobKey, replicas: int) -> tuple[tuple[JobKey, ...], frozenset[ChipId]]:
        """`key` (running) keeps its replicas below `replicas`; the rest are released.
        Returns the removed parts and the chips they freed."""
        job = self._roster.running[key]
        current = job.replicas or 1
        self.forget(key)
        removed = tuple(replica_key(key, i) for i in range(replicas, current))
        freed: set[ChipId] = set()
        for part in removed:
            self._roster.owners.pop(part, None)
            freed |= self._allocator.release(part)
        if removed:
            self._roster.hold(replace(job, replicas=replicas))
        return removed, frozenset(freed)

    def request(self, key: JobKey, replicas: int) -> None:
        """`key` (running) wants `replicas`, more than it holds: the next cycles place them
        (and say anew why any wait: the status now says it is scaling up)."""
        self.pending[key] = replicas
        self._said.pop(key, None)

    def forget(self, key: JobKey) -> None:
        """`key` stopped running (finished, deleted, requeued): nothing to grow."""
        self.pending.pop(key, None)
        self._said.pop(key, None)

    def grow(self, before: QueuedJob | None, result: CycleResult) -> None:
        """Place the pending scale-ups of every job that comes before `before` in queue order
        (all of them when None: the cycle's end), in that order, each once a cycle."""
        if not self.pending:
            self._tried.clear()
            return
        running = self._roster.running
        jobs = sorted((running[k] for k in self.pending
                       if k in running and k not in self._tried), key=QueuedJob.order)
        for job in jobs:
            if before is not None and job.order() >= before.order():
                break
            self._tried.add(job.key)
            now = running.get(job.key)
            if now is not None:  # (not evicted by a scale-up just before it)
                self._grow(now, result)
        # A job evicted meanwhile waits again as it was admitted: its scale-up is dropped
        # (the planner, or the spec edit, asks again once it runs).
        for gone in [k for k in self.pending if k not in running]:
            self.forget(gone)
        if before is None:
            self._tried.clear()

    def _grow(self, job: QueuedJob, result: CycleResult) -> None:
        """Place `job`'s added replicas one by one, holding each as it is placed."""
        state, want = self._state, self.pending[job.key]
        added: list[tuple[int, Placement]] = []
        evicted: Evicted = []
        outcome: Placement | NoFit | None = None
        index = job.replicas or 1
        while index < want:
            if state.budget is not None and state.budget <= 0:
                outcome = DEFERRED
                break
            part = replica_key(job.key, index)
            outcome = self._refused(job)
            if outcome is not None:
                break
            known = state.failed.get(job.request)
            outcome = known if known is not None else self._power.allocate(part, job)
            if isinstance(outcome, NoFit) and known is None:
                state.failed[job.request] = outcome
            mark = len(evicted)
            if (isinstance(outcome, NoFit) and outcome.kind == "NoCapacity"
                    and self._evictions.may_preempt(job)):
                outcome = self._evictions.preempt_for(job, part, outcome, evicted)
            if isinstance(outcome, Placement):
                outcome = self._within_power(job, part, outcome, mark, evicted, result)
            if isinstance(outcome, NoFit):
                break
            added.append((index, outcome))
            index += 1
            job = replace(job, replicas=index)
            self._roster.hold(job)
            if job.launches and state.budget is not None:
                state.budget -= len(outcome.servers)
        result.preempted.extend((victim.key, job.key) for victim, _ in evicted)
        if index >= want:
            del self.pending[job.key]
        waiting = None
        if isinstance(outcome, NoFit) and index < want:
            waiting = (f"{want - index} of {want - (index - len(added))} added replicas wait: "
                       f"{outcome.kind}: {outcome.message}")
        if added or (waiting is not None and waiting != self._said.get(job.key)):
            result.scaled_up.append((job.key, tuple(added), waiting))
        if waiting is None:
            self._said.pop(job.key, None)
        else:
            self._said[job.key] = waiting

    def _refused(self, job: QueuedJob) -> NoFit | None:
        """Why `job`'s tenant queue has no room for one more replica (`NoQuota`), or None."""
        book = self._quotas.book
        return book.refuse(replace(job, replicas=None)) if book is not None else None

    def _within_power(self, job: QueuedJob, part: JobKey, placed: Placement, mark: int,
                      evicted: Evicted, result: CycleResult) -> Placement | NoFit:
        """`placed` if the power budgets over it can hold one more replica of `job`, else
        the `NoPower` reason, with the replica released and its victims put back."""
        book = self._power.book
        refused = book.refuse(part, job.priority, (placed,)) if book is not None else None
        if refused is None:
            return placed
        self._allocator.release(part)
        for victim in self._evictions.undo(evicted[mark:]):
            result.preempted.append((victim, job.key))
        del evicted[mark:]
        return refused
