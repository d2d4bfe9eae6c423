"""Reclaim: which running jobs a job may preempt, and placing borrowed chips apart so that
reclaim finds a whole UltraServer to free.

Why apart from the admission rules (`ultraplane.policies.quotas`): admission asks whether a
queue may take a job; this asks whom the job may take chips from (its own queue's
lower-priority jobs, or its cohort's borrowers when it stays within nominal), and where to put
a job so that question keeps a good answer later. Its memos (`_candidates`, `_no_reclaim`)
depend on usage and on which jobs got chips this cycle, so the ledger
(`ultraplane.policies.queueusages`) moves them.

Why a mixin of `QuotaBook` and not an object it holds: the scheduler calls `victims`,
`may_preempt`, `reclaim_failed` and `allocate_apart` on the book, and each reads the book's
queues, usage and rights (`within_nominal`, `queue_of`); held, it would reach back into the
book for each of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, Placement
from ultraplane.placement.packings import place_packed

if TYPE_CHECKING:
    from ultraplane.policies.cohorts import CohortTree
    from ultraplane.policies.queueusages import _Held
    from ultraplane.policies.quotas import QueueSpec
    from ultraplane.workloads import QueuedJob

__all__ = ["Reclaims"]


class Reclaims:
    """The quota book's reclaim: victims, and borrowers kept apart from guaranteed jobs."""

    # the book's fields (`ultraplane.policies.quotas`)
    queues: dict[str, QueueSpec]
    tree: CohortTree
    _held: dict[JobKey, _Held]
    _no_reclaim: set[tuple[object, ...]]
    _grow: int
    _freed: int
    _free_at_start: int
    _names: tuple[str, ...]
    _total: dict[str, int]
    _candidates: dict[tuple[str | None, int, bool], list[QueuedJob]]
    _epoch: int
    _fresh: set[JobKey]
    _on: dict[str, dict[str | None, int]]
    _over: tuple[int, frozenset[str]] | None

    if TYPE_CHECKING:  # the book's, from `ultraplane.policies.quotas` and `.queueusages`
        def queue_of(self, job: QueuedJob) -> str | None: ...
        def within_nominal(self, job: QueuedJob) -> bool: ...
        def borrowed(self, queue: str, profile: str | None = None) -> int: ...
        def used(self, queue: str, profile: str | None = None) -> int: ...

    # -- placing borrowers apart (called by Scheduler) -----------------------------------
    def allocate_apart(self, job: QueuedJob, part: JobKey, allocator: Allocator, *,
                       avoid: Iterable[str] = (), pack: bool = False) -> Placement | None:
        """Place one part of `job` where reclaim keeps working, or None (the caller then
        places it as usual): a job that borrows only on UltraServers that hold no chips of a
        queue within its nominal quota, a job within its nominal quota only on UltraServers
        that hold no borrower's chips (best fit, idle ones last, none of `avoid`). So borrowed
        chips gather on few UltraServers, and a lender's reclaim finds a whole one to free
        instead of borrowed chips scattered beside guaranteed jobs.

        Among UltraServers that suit it equally full, the first in fleet order: placements
        pack from one end of the fleet, so free chips gather at the other. With `pack`, a
        guaranteed job goes where its own queue holds the most chips among those about as
        good (`ultraplane.placement.packings`), so the others' unused quota stays whole."""
        if (job.request.chips > allocator.largest_ultraserver()
                or self.queue_of(job) not in self.queues):
            return None
        borrows = not self.within_nominal(job)
        skip = set(avoid)
        first = [us for us in self._names if us not in skip and self._suits(us, borrows)]
        if not first:
            return None
        if pack and not borrows:
            queue = self.queue_of(job)
            mine = {us: n for us, here in self._on.items() if (n := here.get(queue, 0))}
            got = place_packed(allocator, job.request, first, mine)
        else:
            got = allocator.place_without(job.request, (), first)
        if not isinstance(got, Placement):
            return None
        return allocator.assign(part, got.chip_ids, job.request)

    def _suits(self, us: str, borrows: bool) -> bool:
        """Whether a borrower (`borrows`) or a guaranteed job goes to UltraServer `us` first:
        an idle one suits both; else a borrower only where every job borrows, and a
        guaranteed job only where none does."""
        here = self._on.get(us)
        if not here:
            return True
        if self._over is None or self._over[0] != self._epoch:
            self._over = (self._epoch, frozenset(q for q in self.queues if self.borrowed(q)))
        over = self._over[1]
        if borrows:
            return all(q in over for q in here)
        return not any(q in over for q in here)

    # -- victims (called by Scheduler) ---------------------------------------------------
    def victims(self, job: QueuedJob) -> list[QueuedJob]:
        """The running jobs `job` may preempt, best first: lowest priority, then the most
        recently admitted."""
        within = self.within_nominal(job)
        queue = self.queue_of(job)
        memo = (queue, job.priority, within)
        if memo in self._candidates:
            return self._candidates[memo]
        spec = self.queues.get(queue) if queue is not None else None
        order = list(self._held.values())
        found: list[tuple[int, int, QueuedJob]] = []
        for recency, held in enumerate(order):
            other = held.job
            if not other.preemptible or other.key == job.key or other.key in self._fresh:
                continue
            if held.queue == queue:
                if (spec is None or spec.within_queue == "LowerPriority") \
                        and other.priority < job.priority:
                    found.append((other.priority, -recency, other))
                continue
            if spec is None or held.queue is None or not within:
                continue
            theirs = self.queues.get(held.queue)
            if (theirs is None or spec.cohort is None or theirs.cohort is None
                    or spec.reclaim_within_cohort == "Never" or not self.borrowed(theirs.name)):
                continue
            if theirs.cohort != spec.cohort and not self._lent_to(spec, theirs):
                continue
            if spec.reclaim_within_cohort == "LowerPriority" and other.priority >= job.priority:
                continue
            found.append((other.priority, -recency, other))
        found.sort(key=lambda f: f[:2])
        out = [f[2] for f in found]
        self._candidates[memo] = out
        return out

    def _lent_to(self, spec: QueueSpec, theirs: QueueSpec) -> bool:
        """Whether a queue of another cohort of `spec`'s tree holds what `spec` lent: its
        subtree under the cohort they share borrows there (`CohortTree.lent_to`)."""
        assert spec.cohort is not None and theirs.cohort is not None
        profiles = set(spec.nominal) | set(theirs.nominal)
        return self.tree.lent_to(spec.cohort, theirs.cohort, self.used, sorted(profiles))

    def reclaim_failed(self, job: QueuedJob) -> None:
        """No plan frees a domain for `job` now: spare its like a second try this cycle."""
        self._no_reclaim.add(self._reclaim_key(job))

    def may_preempt(self, job: QueuedJob) -> bool:
        if self._reclaim_key(job) in self._no_reclaim:
            return False
        return bool(self.victims(job))

    def _reclaim_key(self, job: QueuedJob) -> tuple[object, ...]:
        queue = self.queue_of(job)
        used = self._total.get(queue, 0) if queue is not None else 0
        # (the jobs admitted this cycle are no victims in it, but are in the next)
        return (queue, job.priority, job.request, used, self._grow, self._freed,
                self._free_at_start, len(self._fresh))
