"""Preemption in the cycle: who a job that does not fit may evict, evicting, and undoing it.

Why a policy of its own: the rule is shared by every path that frees chips or headroom for a
job (a placement that finds no capacity, a power budget with no headroom, `powergates`), and
the undo must put back exactly what was taken. Without tenant queues a job may evict running
preemptible jobs of lower priority (the plan evicts as few as it can, `plan_preemption`);
with them the `QuotaBook` names the victims, borrowers first (reclaim), and their order is the
plan's. Every eviction requeues the victim (it keeps its rank) and clears the cycle's no-fit
memo: chips came free, so a request that did not fit may fit now.

A job that evicts and is then not admitted (a later replica does not fit, or a power budget
still refuses) puts its victims back on their own chips (`undo`): a victim loses its chips
only to a job that runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import AllocationConflict, Allocator, NoFit, Placement
from ultraplane.placement.preemption import plan_preemption
from ultraplane.scheduling.cycles import CycleState
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["Evicted", "Evictions"]

# The jobs evicted for one job so far, each with what it held (to put it back).
Evicted = list[tuple[QueuedJob, dict[JobKey, Placement]]]


class Evictions:
    """Preemption for one scheduler (`enabled`: the scheduler's `preemption`)."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 quotas: QuotaGate, *, enabled: bool) -> None:
        self._allocator = allocator
        self._roster = roster
        self._state = state
        self._quotas = quotas
        self.enabled = enabled
        self._lowest: int | None = None  # lowest preemptible running priority, cycle start

    def begin(self) -> None:
        """At a cycle's start. Jobs admitted during a cycle rank above the ones after them,
        so the lowest running priority at its start bounds every later victim: below it,
        nothing can preempt."""
        self._lowest = self._roster.lowest()

    def may_preempt(self, job: QueuedJob) -> bool:
        """Whether some running job is a victim `job` may take chips from."""
        if not self.enabled:
            return False
        quotas = self._quotas.book
        if quotas is not None:
            return quotas.may_preempt(job)
        return self._lowest is not None and self._lowest < job.priority

    def outranks(self, priority: int) -> bool:
        """Whether a job of `priority` could evict some job running at the cycle's start
        (without tenant queues)."""
        return self.enabled and self._lowest is not None and self._lowest < priority

    def victims(self, job: QueuedJob) -> list[QueuedJob]:
        """The running jobs `job` may evict, the first to go first."""
        quotas = self._quotas.book
        if quotas is not None:
            return quotas.victims(job)
        return sorted((j for j in self._roster.running.values()
                       if j.preemptible and j.priority < job.priority),
                      key=lambda j: (j.priority, -j.seq))

    def evict(self, keys: Sequence[JobKey], evicted: Evicted) -> None:
        """Requeue the running jobs `keys`, noting in `evicted` what each held."""
        if not keys:
            return
        held = self._allocator.allocations()
        for key in keys:
            victim = self._roster.running[key]
            evicted.append((victim, {p: held[p] for p in victim.parts() if p in held}))
            self._roster.requeue(key)
        self._state.forget_failures()

    def preempt_for(self, job: QueuedJob, part: JobKey, nofit: NoFit, evicted: Evicted
                    ) -> Placement | NoFit:
        """Place `part` of `job` where evicting lower-ranked jobs makes room, evicting them
        (noted in `evicted`); `nofit` when no such place exists."""
        quotas = self._quotas.book
        if quotas is not None:
            # Tenant queues decide who may be evicted; their best-first order becomes the
            # plan's priorities (all below the preemptor's 0).
            ranked = quotas.victims(job)
            victims_pool = {p: i - len(ranked) for i, j in enumerate(ranked) for p in j.parts()}
            priority = 0
        else:
            victims_pool = {p: j.priority for j in self._roster.running.values()
                            if j.preemptible for p in j.parts()}
            priority = job.priority
        if not any(p < priority for p in victims_pool.values()):
            return nofit
        plan = plan_preemption(self._allocator, job.request, priority, victims_pool,
                               in_order=quotas is not None)
        if isinstance(plan, NoFit):
            if quotas is not None:
                quotas.reclaim_failed(job)
            return nofit
        # each victim once: the parts of a replicated victim all name it
        owners = dict.fromkeys(self._roster.owners.get(p, p) for p in plan.victims)
        self.evict([key for key in owners if key in self._roster.running], evicted)
        placed = self._allocator.allocate(part, job.request)
        if isinstance(placed, NoFit):
            # The plan said the domain frees up; if the allocator disagrees, fall back to the
            # planned chips rather than leave the victims evicted for nothing.
            self._allocator.assign(part, plan.placement.chip_ids, job.request)
            placed = plan.placement
        return placed

    def undo(self, evicted: Evicted) -> list[JobKey]:
        """Put jobs evicted for a job that was not admitted back on their chips; returns the
        ones that could not be put back (they stay requeued and count as preempted)."""
        lost: list[JobKey] = []
        for victim, placements in reversed(evicted):
            done: list[JobKey] = []
            try:
                for part, placement in placements.items():
                    self._allocator.assign(part, placement.chip_ids, victim.request)
                    done.append(part)
            except (AllocationConflict, ValueError, KeyError):
                for part in done:
                    self._allocator.release(part)
                lost.append(victim.key)
                continue
            self._roster.hold(victim)
        return lost
