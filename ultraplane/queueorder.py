"""The order of waiting jobs inside one priority: a target start for each, not arrival alone.

Why: arrival order (best-effort FIFO) lets a queue of long jobs keep a short one waiting for
days, so the mean completion time of a busy fleet is dominated by short jobs stuck behind long
ones, while ordering shortest-first starves long jobs. A job's *rank* is its target start,

    rank = created + stretch x predicted run time,

and the queue is tried by priority, then rank, then arrival. A short job may pass older, longer
ones, but only by a bounded amount: a job is never passed by one created more than
`stretch` x its own predicted run time after it. `stretch = 0` is arrival order (FIFO).

Gangs of whole UltraServers (`large_chips` or more: 144, one Gen2 UltraServer) rank by
creation alone. They are the jobs fragmentation starves; the EASY reservation holds a domain
for the first of them, and the jobs behind it backfill around it by their predicted run time.

A job whose run time is unknown counts as running `unknown_run_s` (24 h), so leaving out an
estimate never moves a job forward. A job without a creation time (tests, tools that queue
jobs by hand) ranks 0: such queues keep their arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ultraplane.scheduling import QueuedJob

__all__ = ["DEFAULT_STRETCH", "FIFO", "LARGE_GANG_CHIPS", "TARGET_START", "UNKNOWN_RUN_S", "QueueOrder"]

LARGE_GANG_CHIPS = 144  # one Gen2 UltraServer
DEFAULT_STRETCH = 10.0
UNKNOWN_RUN_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class QueueOrder:
    """How jobs of one priority rank (see the module docstring)."""

    stretch: float = DEFAULT_STRETCH
    unknown_run_s: float = UNKNOWN_RUN_S
    large_chips: int = LARGE_GANG_CHIPS

    def __post_init__(self) -> None:
        if not self.stretch >= 0 or self.stretch == float("inf"):
            raise ValueError(f"queue stretch must be a finite number >= 0, got {self.stretch!r}")
        if not self.unknown_run_s >= 0:
            raise ValueError(f"unknown run time must be >= 0, got {self.unknown_run_s!r}")

    def rank(self, created_s: float | None, chips: int, run_s: float | None) -> float:
        """The target start of a job created at `created_s` (seconds, any epoch shared by the
        queue) needing `chips`, predicted to run `run_s` seconds at its tightest placement."""
        if created_s is None:
            return 0.0
        if chips >= self.large_chips or self.stretch == 0:
            return created_s
        run = self.unknown_run_s if run_s is None else max(run_s, 0.0)
        return created_s + self.stretch * run

    def ranked(self, job: QueuedJob) -> QueuedJob:
        """`job` with its rank set (the same object when it already has it)."""
        rank = self.rank(job.created_s, job.request.chips, job.expected_s)
        return job if rank == job.rank else dc_replace(job, rank=rank)


TARGET_START = QueueOrder()
FIFO = QueueOrder(stretch=0.0)
