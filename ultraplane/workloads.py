"""A job as the scheduling cycle and its policies see it: a request, a priority, an order.

Why a module of its own, below the cycle and the policies: the cycle queues `QueuedJob`s and the
policies (tenant queues, power budgets) rank, count and refuse them, so both read this type and
neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ultraplane.ids import JobKey
from ultraplane.placement.placements import PlacementRequest

__all__ = ["QueuedJob", "replica_key"]


def replica_key(job: JobKey, index: int) -> JobKey:
    """The allocator key of replica `index` of a replicated job."""
    return JobKey(f"{job}#{index}")


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for chips, tried by priority, then `rank`, then `seq` (smaller = older).

    `rank` is the job's target start (`ultraplane.scheduling.queueorder`: set from `created_s` and
    `expected_s` by `Admissions`); 0 for every job keeps arrival order.

    `replicas=None` is one gang held under `key`; `replicas=n` is n gangs of `request` each,
    held under `key#0` .. `key#n-1` and admitted all together or not at all.
    """

    key: JobKey
    request: PlacementRequest
    priority: int = 0
    seq: int = 0
    preemptible: bool = True
    replicas: int | None = None
    expected_s: float | None = None  # predicted run time at the tightest placement, if known
    created_s: float | None = None  # creation time (seconds), which the rank counts from
    rank: float = 0.0
    launches: bool = False  # admitted, it starts pods: one per server (a cycle's launch budget)
    queue: str | None = None  # the tenant queue whose quota it uses (`ultraplane.policies.quotas`)
    # Moves (`ultraplane.scheduling.moves`): whether a running job may be taken off its
    # UltraServer and placed at once elsewhere (None: when it is preemptible), how often it
    # checkpoints (None: never, a move or a preemption loses all its work; fair-sharing
    # preemption prefers victims that lose least) and, when it checkpoints on notice,
    # how long the save takes (a move then loses only that).
    movable: bool | None = None
    checkpoint_s: float | None = None
    notice_s: float | None = None

    def __post_init__(self) -> None:
        if self.replicas is not None and self.replicas < 1:
            raise ValueError(f"job {self.key}: replicas must be at least 1, got {self.replicas}")

    @property
    def may_move(self) -> bool:
        """Whether the job allows a move (`movable`, by default when preemptible)."""
        return self.preemptible if self.movable is None else self.movable

    def order(self) -> tuple[int, float, int, str]:
        """Sort key: highest priority first, then lowest rank, then oldest, then key."""
        return self._order

    @cached_property
    def _order(self) -> tuple[int, float, int, str]:  # sorted on every full cycle
        return (-self.priority, self.rank, self.seq, self.key)

    def parts(self) -> tuple[JobKey, ...]:
        """The allocator keys holding the job's chips, in replica order."""
        if self.replicas is None:
            return (self.key,)
        return tuple(replica_key(self.key, i) for i in range(self.replicas))
