"""Power budgets in the cycle: placing on powered UltraServers, and admitting within headroom.

Why a policy of its own: the `PowerBook` (`ultraplane.policies.powerbook`) keeps the budgets'
draw and answers questions; this is where the cycle asks them, so a scheduler without
budgets, or whose book has none and powers nothing down, runs exactly as if there were no
book. A part is placed on powered UltraServers if it fits there, else anywhere (waking one),
so idle UltraServers can stay powered down (`allocate`; with tenant queues, borrowers apart
from guaranteed jobs first). A placed job is admitted only if every budget covering its
placements can hold it (`refuses`): a job that may preempt first evicts lower-priority jobs
from its short budgets (`evictions`), the first job refused reserves the headroom (EASY, as
`reservations` does for chips), and a job refused by a budget over part of the fleet is
placed once more beside it (`place_beside`).
"""

from __future__ import annotations

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.policies.powerbook import NO_POWER, PowerBook
from ultraplane.scheduling.cycles import CycleState
from ultraplane.scheduling.evictions import Evicted, Evictions
from ultraplane.scheduling.predictions import span
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.reservations import Reservations
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["PowerGate"]


class PowerGate:
    """The power budgets and powered-down UltraServers of one scheduler (the book is bound
    to its allocator here)."""

    def __init__(self, book: PowerBook | None, allocator: Allocator, roster: Roster,
                 state: CycleState, quotas: QuotaGate, evictions: Evictions,
                 reservations: Reservations) -> None:
        self._book = book
        self._allocator = allocator
        self._roster = roster
        self._state = state
        self._quotas = quotas
        self._evictions = evictions
        self._reservations = reservations
        if book is not None:
            book.bind(allocator)

    @property
    def book(self) -> PowerBook | None:
        """The power budgets, while any exist or UltraServers power down (with neither, a
        cycle is today's cycle)."""
        return self._book if self._book is not None and self._book.active else None

    def begin(self) -> None:
        """At a full cycle's start: the book forgets last cycle's headroom reservation."""
        book = self.book
        if book is not None:
            book.begin_cycle()

    def place_beside(self, job: QueuedJob, placed: list[tuple[JobKey, Placement]],
                     refused: NoFit) -> list[tuple[JobKey, Placement]]:
        """A job its first placement's budgets cannot hold, placed once more away from the
        UltraServers of those budgets (a budget over part of the fleet leaves the rest
        free to use): every part placed there and held within its budgets, or nothing held
        (an empty list)."""
        book = self.book
        if book is None or refused.kind != NO_POWER:
            return []
        short = book.short(job.key, job.priority, tuple(p for _, p in placed))
        for key, _ in placed:
            self._allocator.release(key)
        if not short or len(short) >= len(self._allocator.topology.ultraservers):
            return []  # (a fleet-wide budget: there is nowhere beside it)
        again: list[tuple[JobKey, Placement]] = []
        with self._allocator.held_back(short):
            for part in job.parts():  # (powered UltraServers and queues' rules first, as ever)
                got = self.allocate(part, job)
                if not isinstance(got, Placement):
                    break
                again.append((part, got))
        if len(again) == len(job.parts()) and self.refuses(
                job, tuple(p for _, p in again)) is None:
            if book.reserved is not None and book.reserved.job.key == job.key:
                book.reserved = None  # it reserved headroom where it no longer goes
            return again
        for key, _ in again:
            self._allocator.release(key)
        return []

    def allocate(self, part: JobKey, job: QueuedJob) -> Placement | NoFit:
        """Place a part on powered UltraServers if it fits there, else anywhere (waking a
        powered-down one), so idle UltraServers stay idle and can stay powered down."""
        down = self._book.states.down() if self._book is not None else ()
        quotas = self._quotas.book
        if quotas is not None:  # borrowers apart from guaranteed jobs, if it fits so
            kept = quotas.allocate_apart(job, part, self._allocator, avoid=down,
                                         pack=self._quotas.packing)
            if kept is not None:
                return kept
        if down:
            with self._allocator.held_back(down):
                got = self._allocator.allocate(part, job.request)
            if isinstance(got, Placement):
                return got
        return self._allocator.allocate(part, job.request)

    def refuses(self, job: QueuedJob, placements: tuple[Placement, ...],
                evicted: Evicted | None = None) -> NoFit | None:
        """A `NoPower` NoFit when a budget covering `placements` cannot hold `job`, or its
        headroom is reserved for a job ahead (EASY: the first job refused for headroom
        reserves it, with reservations on; `PowerBook.reserve`). With `evicted` (the
        preemptions of this placement), a job that may preempt first evicts lower-priority
        jobs from its budgets, lowest first, if that makes it fit (`PowerBook.to_evict`)."""
        book = self.book
        if book is None or not placements:
            return None
        end = self._roster.predicted_end(job, placements)
        refused = book.refuse(job.key, job.priority, placements, end)
        if refused is not None and evicted is not None and self._evictions.may_preempt(job):
            pool = [j.key for j in self._evictions.victims(job)]
            victims = book.to_evict(job.key, job.priority, placements, pool)
            if victims:
                self._evictions.evict(victims, evicted)
                refused = book.refuse(job.key, job.priority, placements, end)
        if refused is None or not self._reservations.enabled or book.reserved is not None:
            return refused
        now = self._state.now
        start = book.reserve(job.key, job.priority, placements, self._roster.ends, now)
        if book.reserved is None:
            return refused
        when = "" if start is None or now is None else \
            f" (predicted in {span(max(start - now, 0.0))})"
        return NoFit(refused.kind, f"{refused.message}; the headroom is reserved for it until "
                     f"it frees{when}: jobs queued behind it draw from the budget only if "
                     "predicted to end before it starts", refused.blocking)
