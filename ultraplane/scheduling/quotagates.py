"""Tenant queues in the cycle: when they count, the order they give, whom they guarantee.

Why a policy of its own: the `QuotaBook` (`ultraplane.policies.quotas`) keeps the queues'
usage and answers questions; this is where the cycle asks them, so a scheduler without
queues, or whose book has none yet, runs exactly as if there were no book. While any queue
exists, a full cycle begins by letting the book count the fleet and arrange the waiting jobs
in fair-share order (`order`), refuses a job its queue has no room for before any placement
(the driver calls `book.refuse`), keeps borrowers apart from guaranteed jobs when placing
(`powergates`), picks the victims of a reclaim (`evictions`), and lets every queue below its
nominal quota reserve for its first guaranteed job (`reservations`).
"""

from __future__ import annotations

from ultraplane.placement.allocator import Allocator
from ultraplane.policies.quotas import QuotaBook
from ultraplane.workloads import QueuedJob

__all__ = ["QuotaGate"]


class QuotaGate:
    """The tenant queues of one scheduler, while any exist."""

    def __init__(self, book: QuotaBook | None, allocator: Allocator, *,
                 packing: bool = False) -> None:
        self._book = book
        self._allocator = allocator
        # A guaranteed job placed where its queue already holds chips, among UltraServers
        # about as good (`ultraplane.placement.packings`); off: the allocator's choice alone
        self.packing = packing

    @property
    def book(self) -> QuotaBook | None:
        """The tenant queues, while any exist (with none, a cycle is today's cycle)."""
        return self._book if self._book is not None and self._book.active else None

    def order(self, queue: list[QueuedJob], now: float | None = None) -> list[QueuedJob]:
        """`queue` (in admission order) as a full cycle tries it: in fair-share order, with
        the book's usage counted afresh (and decayed to `now`, the caller's clock, for
        cohorts that remember usage), while queues exist."""
        book = self.book
        if book is None:
            return queue
        book.begin_cycle(self._allocator)
        if now is not None:
            book.advance(now)
        return book.arrange(queue)

    def guaranteed(self, job: QueuedJob) -> bool:
        """Whether `job` fits its tenant queue's unused nominal quota (one gang, queues on)."""
        book = self.book
        return book is not None and job.replicas is None and book.within_nominal(job)
