"""The order of waiting jobs inside one priority: a target start for each, not arrival alone.

Why: arrival order (best-effort FIFO) lets a queue of long jobs keep a short one waiting for
days, so the mean completion time of a busy fleet is dominated by short jobs stuck behind long
ones, while ordering shortest-first starves long jobs. A job's *rank* is its target start,

    rank = created + stretch x predicted run time,

and the queue is tried by priority, then rank, then arrival. A short job may pass older, longer
ones, but only by a bounded amount: a job is never passed by one created more than
`stretch` x its own predicted run time after it. `stretch = 0` is arrival order (FIFO).

Gangs of more than half an UltraServer rank by creation alone: 73 chips or more on a fleet of
Gen2 UltraServers (144 chips), 33 or more on Trn2 or Trn3 Gen1 (64), always from the fleet's
largest UltraServer (`large_chips` sets a fixed threshold instead). At most one of them fits an
UltraServer, so each needs one drained (or several whole ones): they are the jobs fragmentation
starves, and ranking them by their run time too deferred them without bound (a 128-chip,
12-day job of the ITP traces waited 24 days behind a stream of small ones, then alone set the
makespan). The EASY reservation holds a domain for the first gang of whole UltraServers, and
the jobs behind it backfill around it by their predicted run time; a gang of more than half
an UltraServer but less than a whole one gets no reservation (holding an UltraServer for it
cost more than it gave on the ITP traces: mean JCT 0.97 -> 1.04 of the greedy baseline, useful
utilization 0.96 -> 0.95), but nothing smaller passes it by rank.

A job whose run time is unknown counts as running `unknown_run_s` (24 h), so leaving out an
estimate never moves a job forward. A job without a creation time (tests, tools that queue
jobs by hand) ranks 0: such queues keep their arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ultraplane.workloads import QueuedJob

__all__ = ["DEFAULT_STRETCH", "FIFO", "GEN2_ULTRASERVER_CHIPS", "LARGE_GANG_CHIPS", "TARGET_START",
           "UNKNOWN_RUN_S", "QueueOrder"]

GEN2_ULTRASERVER_CHIPS = 144  # the threshold's fleet when a queue knows none (an empty fleet)
LARGE_GANG_CHIPS = GEN2_ULTRASERVER_CHIPS // 2 + 1  # 73: at most one per Gen2 UltraServer
DEFAULT_STRETCH = 10.0
UNKNOWN_RUN_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class QueueOrder:
    """How jobs of one priority rank (see the module docstring)."""

    stretch: float = DEFAULT_STRETCH
    unknown_run_s: float = UNKNOWN_RUN_S
    large_chips: int | None = None  # None: more than half the fleet's largest UltraServer

    def __post_init__(self) -> None:
        if not self.stretch >= 0 or self.stretch == float("inf"):
            raise ValueError(f"queue stretch must be a finite number >= 0, got {self.stretch!r}")
        if not self.unknown_run_s >= 0:
            raise ValueError(f"unknown run time must be >= 0, got {self.unknown_run_s!r}")
        if self.large_chips is not None and self.large_chips < 1:
            raise ValueError(f"large gang threshold must be >= 1 chip, got {self.large_chips!r}")

    def large_from(self, ultraserver_chips: int) -> int:
        """The smallest gang that ranks by creation on a fleet whose largest UltraServer has
        `ultraserver_chips` chips (0: none known yet, a Gen2 fleet assumed)."""
        if self.large_chips is not None:
            return self.large_chips
        return (ultraserver_chips or GEN2_ULTRASERVER_CHIPS) // 2 + 1

    def rank(self, created_s: float | None, chips: int, run_s: float | None,
             ultraserver_chips: int = GEN2_ULTRASERVER_CHIPS) -> float:
        """The target start of a job created at `created_s` (seconds, any epoch shared by the
        queue) needing `chips`, predicted to run `run_s` seconds at its tightest placement, on
        a fleet whose largest UltraServer has `ultraserver_chips` chips."""
        if created_s is None:
            return 0.0
        if chips >= self.large_from(ultraserver_chips) or self.stretch == 0:
            return created_s
        run = self.unknown_run_s if run_s is None else max(run_s, 0.0)
        return created_s + self.stretch * run

    def ranked(self, job: QueuedJob,
               ultraserver_chips: int = GEN2_ULTRASERVER_CHIPS) -> QueuedJob:
        """`job` with its rank set (the same object when it already has it)."""
        rank = self.rank(job.created_s, job.request.chips, job.expected_s, ultraserver_chips)
        return job if rank == job.rank else dc_replace(job, rank=rank)


TARGET_START = QueueOrder()
FIFO = QueueOrder(stretch=0.0)
