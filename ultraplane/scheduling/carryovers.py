"""Deep queues: a cycle that tries only the new arrivals, carrying the last cycle over.

Why: with the fleet full, jobs keep arriving behind a queue of thousands that all wait, and
a full cycle would search for each of them again only to decide the same. A cycle that has
nothing to try but new arrivals queued behind every job the last cycle tried (the usual
case: same-priority jobs created while the fleet is full) tries only those. Everything the
last cycle left waiting still waits, because the fleet has only filled up since
(`Allocator.room_epoch` has not moved), so a full cycle would decide the same; the
reservation is recomputed and must come out on the same UltraServers for the same job; its
predicted start may move (running jobs' predicted ends are re-estimated every cycle) as long
as it stays too close for any job left waiting by the backfill rule to end before it. With
tenant queues, the arrivals must also come after every job tried in the queues' fair-share
order, counted on quota usage that has not moved since (`QuotaBook.arrange_after`). Anything
else (chips freed, an admission under queues, an edit, a cancel, a requeue, a preemption, a
waiting job that could now preempt, a moved reservation, a second queue's reservation, a
clock turned on or off, a `SplitWhenItPays` job waiting on a clock, books turned on or off,
power budgets) makes the next cycle a full one. Pending messages of the jobs carried over
are the last full cycle's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.evictions import Evictions
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.reservations import Reservations
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["CarryOver", "Standing"]


@dataclass(frozen=True, slots=True)
class Standing:
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
    # A tenant queue's reservation beyond the first (`Reservations.may_reserve`): a carried
    # cycle makes the first again, not these, so it may not try arrivals behind them.
    extra: bool
    # The reservation's lead (start - now) from which a job it left waiting by the backfill
    # rule (predicted to end after the start) might end before it: inf when none was.
    lead: float
    books: tuple[bool, bool]  # whether tenant queues and power budgets were on


class CarryOver:
    """What one scheduler's last cycle left standing, and carrying it into the next."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 evictions: Evictions, reservations: Reservations, quotas: QuotaGate,
                 power: PowerGate) -> None:
        self._allocator = allocator
        self._quotas = quotas
        self._power = power
        self._roster = roster
        self._state = state
        self._evictions = evictions
        self._reservations = reservations
        self._standing: Standing | None = None
        self._last: tuple[int, float, int, str] | None = None  # order of the last job tried

    def forget(self) -> None:
        """The next cycle is a full one."""
        self._standing = None

    def stands(self) -> bool:
        """Whether what the last cycle decided may still stand (nothing it tried changed)."""
        return self._standing is not None and self._standing.epoch == self._roster.epoch

    def resume(self, result: CycleResult) -> list[QueuedJob] | None:
        """The arrivals to try, in order, after the last cycle's pending carried into
        `result` and its reservation made again; None when a full cycle is needed instead
        (then `result` is to be dropped). After `Evictions.begin`, inside
        `Reservations.fencing(carried=True)`."""
        st = self._standing
        assert st is not None
        queued = self._roster.queued
        arrivals = sorted((j for k, j in self._roster.arrivals.items() if k in queued),
                          key=QueuedJob.order)
        now = self._state.now
        if (st.room != self._allocator.room_epoch or st.timed != (now is not None)
                or (st.volatile and now is not None) or st.books != self._books()
                or (arrivals and (st.extra or (st.last is not None
                                               and arrivals[0].order() <= st.last)))):
            return None
        book = self._quotas.book
        if book is not None:
            # in fair-share order, and only if that puts them after every job tried
            after = book.arrange_after(arrivals)
            if after is None:
                return None
            arrivals = after
        if st.top is not None and self._evictions.outranks(st.top):
            return None  # a job left waiting could preempt what was admitted since
        result.pending, result.carried = list(st.pending), len(st.pending)
        if st.reserved is not None and st.reserved_at is not None:
            index, base = st.reserved_at
            key, said, position = result.pending[index]
            outcome = self._reservations.reserve(queued[key], base, result,
                                                 behind=bool(arrivals))
            if not self._kept(st, result):
                return None  # the reservation moved: jobs behind it may fit elsewhere now
            if outcome.message != said.message:  # its predicted start is counted from now
                result.pending[index] = (key, outcome, position)
                result.changed.append(index)
        elif st.reserved is not None:
            return None
        self._reservations.first = st.reserved_at
        self._reservations.extra, self._reservations.lead = st.extra, st.lead
        return arrivals

    def _kept(self, st: Standing, result: CycleResult) -> bool:
        """Whether the reservation recomputed by a carrying cycle leaves every carried job's
        outcome as it was: the same job on the same UltraServers, and a predicted start either
        unchanged or too close for a job the backfill rule left waiting (`Standing.lead`) to
        end before it now."""
        if (result.reserved is None or st.reserved is None or result.reserved[0] != st.reserved[0]
                or set(result.reserved[2]) != set(st.reserved[2])):
            return False
        start, before, now = result.reservation_start, st.reservation_start, self._state.now
        if start == before:
            return True
        return (start is not None and before is not None and now is not None
                and start - now < st.lead)

    def _books(self) -> tuple[bool, bool]:
        return self._quotas.book is not None, self._power.book is not None

    def tried(self, queue: Sequence[QueuedJob], result: CycleResult) -> None:
        """A cycle tried `queue` (a full cycle: every waiting job; a carried one: the
        arrivals) and decided `result`."""
        # the last in queue order (not in the queues' fair-share order): arrivals after it
        # are last in their own tenant queue too
        last = max((j.order() for j in queue), default=None)
        if result.carried is not None:
            result.changed += range(result.carried, len(result.pending))
            if last is not None:
                self._last = last
        else:
            self._last = last

    def settle(self, result: CycleResult) -> None:
        """After the cycle that decided `result` (its reservations let go): what stands."""
        # a deferred job was never tried: the next cycle must try it (a carried one would not)
        self._standing = None if result.preempted or result.deferred else self._stand(result)

    def _stand(self, result: CycleResult) -> Standing:
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
        return Standing(
            pending=result.pending, last=self._last, room=self._allocator.room_epoch,
            timed=self._state.now is not None, top=top,
            volatile=(before is not None and before.volatile)
            or any(j.request.mode == "SplitWhenItPays" for j in waiting),
            reserved=result.reserved, reservation_start=result.reservation_start,
            reserved_at=self._reservations.first, epoch=self._roster.epoch,
            extra=self._reservations.extra, lead=self._reservations.lead, books=self._books())
