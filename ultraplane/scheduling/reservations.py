"""Backfill reservations: where the first large job that does not fit will start.

Why: best-effort FIFO alone starves large gangs, because the small jobs behind them keep
taking the chips that free up. So the first job of a cycle that needs whole UltraServers and
still does not fit (after any preemption) reserves where it would start soonest: the k
UltraServers its gang needs, inside one domain its required level allows, with the most free
chips between them (`Allocator.reservation`; a replicated job gets such a set per replica).
With a clock, "soonest" is by the running jobs' predicted ends (EASY, `_soonest_domain`).
For the rest of the cycle, jobs behind it are placed (and preempt) only elsewhere (the
reserved UltraServers are `fenced`), or there if predicted to end before it starts
(`backfills`). Running jobs there keep their chips; as they end, the UltraServers drain and
the gang starts. One reservation per cycle (Slurm's backfill reservation for the top job);
the cost is the reserved UltraServers' free chips while they drain. With tenant queues, each
queue also reserves for its first job that fits its unused nominal quota and finds no place,
so one queue's reservation never leaves another's guarantee to be nibbled away.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from ultraplane.placement.allocator import Allocator, NoFit, PlacementRequest
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.predictions import drain_time, earliest_start, span
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["Reservations"]


class Reservations:
    """The reservations of one scheduler's cycles (`enabled`: the scheduler's `reservation`)."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 quotas: QuotaGate, *, enabled: bool) -> None:
        self._allocator = allocator
        self._roster = roster
        self._state = state
        self._quotas = quotas
        self.enabled = enabled
        self.fenced: list[str] = []  # UltraServers held back by this cycle's reservations
        # Fenced UltraServer -> predicted start of the reservation holding it (None: unknown);
        # with tenant queues a cycle may hold several (one per queue with guaranteed demand).
        self.shadows: dict[str, float | None] = {}
        # The cycle's first reservation: (index in its pending, the job's NoFit before it).
        self.first: tuple[int, NoFit] | None = None
        # For a cycle that carries this one over (`carryovers`): a tenant queue's reservation
        # beyond the first exists (a carried cycle makes the first again, not these, so it may
        # not try arrivals behind them), and the lead (start - now) from which a job the
        # backfill rule left waiting for ending after the start might end before it (inf:
        # none was; `backfills`).
        self.extra = False
        self.lead = math.inf
        self._reserving: set[str | None] = set()  # tenant queues that reserved this cycle
        # Requests no domain can be reserved for (gangs smaller than one UltraServer): this
        # depends on the inventory only, so it holds for the cycle and spares a deep queue of
        # small jobs one reservation attempt (and its scan of every allocation) each.
        self.unreservable: set[PlacementRequest] = set()
        self._fences = ExitStack()

    @contextmanager
    def fencing(self, *, carried: bool) -> Iterator[None]:
        """One cycle's reservations, held back until it ends. `carried`: a cycle that carries
        the last one over (`carryovers`) keeps its first reservation's place."""
        self.fenced, self.shadows = [], {}
        if not carried:
            self.first, self._reserving = None, set()
            self.extra, self.lead = False, math.inf
        self.unreservable.clear()
        with ExitStack() as self._fences:
            yield
        self.fenced = []

    def may_reserve(self, job: QueuedJob, result: CycleResult) -> bool:
        """Whether `job`, which does not fit, may try to reserve: the cycle's first
        reservation (for a gang of whole UltraServers, or a guaranteed job), and with tenant
        queues one more for the first guaranteed job of each queue that has none yet, so
        every queue below its nominal quota drains a place for its guarantee, not only the
        one whose job comes first."""
        if not self.enabled:
            return False
        if result.reserved is None:
            return job.request not in self.unreservable or self._quotas.guaranteed(job)
        quotas = self._quotas.book
        return (quotas is not None and quotas.queue_of(job) not in self._reserving
                and self._quotas.guaranteed(job))

    def reserve(self, job: QueuedJob, nofit: NoFit, result: CycleResult, *,
                behind: bool) -> NoFit:
        """Hold back, for the rest of this cycle, where `job` would start soonest: one domain
        per gang (each replica of a replicated job gets its own), or nothing unless every gang
        gets one. `behind` False: nothing is queued behind it, so nothing is held back.
        Returns `nofit`, or `nofit` saying what is reserved for it."""
        guaranteed = self._quotas.guaranteed(job)
        if job.request in self.unreservable and not guaranteed:
            return nofit
        if not self._allocator.reservation_domains(job.request) and not guaranteed:
            self.unreservable.add(job.request)
            return nofit
        picked: list[tuple[str, tuple[str, ...]]] = []
        starts: list[float] = []
        fenced_all: list[str] = []
        hold = ExitStack()
        with hold:
            for _ in range(job.replicas or 1):
                soonest = self._soonest_domain(job)
                found = (soonest[1:] if soonest is not None
                         else self._allocator.reservation(job.request))
                if found is None:
                    return nofit
                picked.append(found)
                if soonest is not None:
                    starts.append(soonest[0])
                fenced = hold.enter_context(self._allocator.held_back(found[1]))
                fenced_all.extend(fenced)
                if behind:
                    self.fenced.extend(fenced)
            if behind:
                self._fences.enter_context(hold.pop_all())
        names = tuple(n for _, members in picked for n in members)
        start = (max(starts) if starts and len(starts) == len(picked) and max(starts) < math.inf
                 else None)
        if behind:
            self.shadows.update(dict.fromkeys(fenced_all, start))
        quotas = self._quotas.book
        if guaranteed and quotas is not None:
            self._reserving.add(quotas.queue_of(job))
        if result.reserved is None:  # the cycle's first: the one it reports
            result.reserved = (job.key, ", ".join(d for d, _ in picked), names)
            self.first = (len(result.pending), nofit)
            if start is not None:
                result.reservation_start = start
        else:  # another tenant queue's (`may_reserve`)
            self.extra = True
        if len(names) == 1:
            what = f"UltraServer {names[0]}"
        elif len(picked) == 1:
            what = f"the {len(names)} UltraServers of {picked[0][0]}"
        else:
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            what = f"UltraServers {shown}"
        when = ""
        if start is not None and self._state.now is not None:
            when = f" (predicted to start in {span(start - self._state.now)})"
        return NoFit(nofit.kind, f"{nofit.message}; {what} reserved for it{when}: jobs queued "
                     "behind it are placed elsewhere until it starts, or there only if they are "
                     "predicted to end before it starts", nofit.blocking)

    def _soonest_domain(self, job: QueuedJob) -> tuple[float, str, tuple[str, ...]] | None:
        """EASY: among the domains the gang may use, the one whose k UltraServers drain
        soonest by predicted end times, as (start, domain, UltraServers); ties go to the
        most free chips, then fleet order. None without a clock (the caller then uses the
        allocator's freest-domain rule).

        A job within its queue's nominal quota (tenant queues) may drain an UltraServer even
        when its gang is smaller than one: its tenant's unused quota may be free chips spread
        over many UltraServers, and only a drained one (or one whose remaining jobs it may
        reclaim, counted as ending now) gives it a place."""
        if self._state.now is None:
            return None
        now = self._state.now
        domains = self._allocator.reservation_domains(job.request)
        releases = self._roster.releases()
        quotas = self._quotas.book
        if not domains and quotas is not None:
            domains = self._allocator.preemption_domains(job.request)
            evictable = {p for v in quotas.victims(job) for p in v.parts()}
            held = self._allocator.allocations()
            for part in evictable:
                for us, chips in held[part].chips_by_ultraserver if part in held else ():
                    releases[us] = [*releases.get(us, []), (now, chips)]
                    end = self._roster.ends.get(self._roster.owners.get(part, part), math.inf)
                    releases[us].remove((end, chips))
        drains = {us: drain_time(ends, now) for us, ends in releases.items()}  # else: now
        best: tuple[float, int, int, str, tuple[str, ...]] | None = None
        for order, (name, members) in enumerate(domains):
            per = self._allocator.chips_of(members[0])
            k = -(-job.request.chips // per)
            rem = job.request.chips - (k - 1) * per
            if len(members) < k:
                continue
            size = {m: self._allocator.free_chips([m]) for m in members}
            index = {m: i for i, m in enumerate(members)}
            ranked = sorted(members, key=lambda m: (drains.get(m, now), -size[m], index[m]))
            whole, rest = ranked[:k - 1], ranked[k - 1:]
            # The last UltraServer needs only the remainder free (searches: idle + partial).
            starts = {m: earliest_start({m: (size[m], releases.get(m, []))}, rem, now)
                      for m in rest}
            last = min(rest, key=lambda m: (starts[m], -size[m], index[m]))
            ranked = [*whole, last]
            start = max([drains.get(m, now) for m in whole] + [starts[last]])
            key = (start, -sum(size[m] for m in ranked), order, name, tuple(ranked))
            if best is None or key < best:
                best = key
        if best is None:
            return None
        if best[0] == math.inf:
            return None  # nothing predicted: the freest domain, as without a clock
        return best[0], best[3], best[4]
