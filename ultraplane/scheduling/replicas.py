"""All or nothing: every part of a job placed (one gang, or one per replica), or none held.

Why: replicated jobs (an InferenceJob's replicas) are one queue entry with one gang per
replica, each held in the allocator under `key#i`, and are admitted whole or not at all. If
a later replica does not fit, the earlier ones are released and any job evicted for them is
put back on its own chips (`Evictions.undo`), so a half-placed job never holds chips and
never costs a victim anything. The same holds for a one-gang job its power budgets refuse
after it was placed (`powergates`).

Each part is placed by `PowerGate.allocate` (powered UltraServers first); a part that finds
no capacity may evict for it (`evictions`). The first part's request that does not fit goes
into the cycle's no-fit memo, so the jobs of the same shape behind it wait without a search.
"""

from __future__ import annotations

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.evictions import Evicted, Evictions
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.workloads import QueuedJob

__all__ = ["Replicas"]


class Replicas:
    """Places the parts of one scheduler's jobs, all or nothing."""

    def __init__(self, allocator: Allocator, state: CycleState, evictions: Evictions,
                 power: PowerGate) -> None:
        self._allocator = allocator
        self._state = state
        self._evictions = evictions
        self._power = power

    def place(self, job: QueuedJob, result: CycleResult) -> tuple[Placement, ...] | NoFit:
        """Every part of `job` placed, or nothing held and every victim of this job back."""
        parts = job.parts()
        placed: list[tuple[JobKey, Placement]] = []
        evicted: Evicted = []
        failed = self._state.failed
        for index, part in enumerate(parts):
            known = failed.get(job.request)
            outcome = known if known is not None else self._power.allocate(part, job)
            if isinstance(outcome, NoFit) and index == 0:
                failed[job.request] = outcome
            if (isinstance(outcome, NoFit) and outcome.kind == "NoCapacity"
                    and self._evictions.may_preempt(job)):
                outcome = self._evictions.preempt_for(job, part, outcome, evicted)
            if isinstance(outcome, Placement):
                placed.append((part, outcome))
                continue
            for key, _ in placed:
                self._allocator.release(key)
            for victim in self._evictions.undo(evicted):
                result.preempted.append((victim, job.key))
            if len(parts) > 1:
                outcome = NoFit(outcome.kind, f"replica {index + 1} of {len(parts)}: "
                                f"{outcome.message}", outcome.blocking)
            return outcome
        refused = self._power.refuses(job, tuple(p for _, p in placed), evicted)
        if refused is not None and not evicted:
            placed = self._power.place_beside(job, placed, refused)
            refused = None if placed else refused
        if refused is not None:
            for key, _ in placed:
                self._allocator.release(key)
            for victim in self._evictions.undo(evicted):
                result.preempted.append((victim, job.key))
            return refused
        result.preempted.extend((victim.key, job.key) for victim, _ in evicted)
        return tuple(p for _, p in placed)
