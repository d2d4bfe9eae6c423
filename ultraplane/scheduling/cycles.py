"""What one scheduling cycle decides, and what its policies share while they decide it.

Why a module of its own: the cycle's policies (`evictions`, `reservations`, `backfills`,
`splits`, `powergates`, `replicas`, `elasticity`, `carryovers`) each write into the one
`CycleResult` and read the one clock and no-fit memo of `CycleState`; the driver
(`scheduler`) creates both, and every policy imports them from here, below the driver, so no
policy imports the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import NoFit, Placement, PlacementRequest

__all__ = ["DEFERRED", "CycleResult", "CycleState"]

# A job the cycle did not try because its launch budget was spent (`Scheduler.cycle`).
DEFERRED = NoFit("Deferred", "Waiting for the pods of the jobs admitted before it to be "
                 "created (the launch backlog).")


@dataclass
class CycleResult:
    """What one cycle decided. The caller must persist `preempted` before `admitted`.

    `admitted` holds single-gang jobs; `admitted_replicas` replicated jobs, one placement per
    replica in index order. `preempted` names whole jobs (victim, preemptor), never replicas.
    """

    admitted: list[tuple[JobKey, Placement]] = field(default_factory=list)
    admitted_replicas: list[tuple[JobKey, tuple[Placement, ...]]] = field(default_factory=list)
    preempted: list[tuple[JobKey, JobKey]] = field(default_factory=list)
    # Victims preempted for fair sharing (`fairsharing`): victim -> why, naming both queues.
    fair_preempted: dict[JobKey, str] = field(default_factory=dict)
    pending: list[tuple[JobKey, NoFit, int]] = field(default_factory=list)
    reserved: tuple[JobKey, str, tuple[str, ...]] | None = None
    # Why an admitted job was placed as it was, when a prediction decided it (a split that
    # pays, a backfill onto reserved UltraServers); pending jobs carry theirs in the NoFit.
    notes: dict[JobKey, str] = field(default_factory=dict)
    reservation_start: float | None = None  # predicted start of the reserved job, if known
    # A cycle that tried only new arrivals: its first `carried` pending entries are the last
    # cycle's (the same objects), except those at `changed`, which come after them or were
    # said anew (the reserved job's). None: a full cycle, where anything may have changed.
    carried: int | None = None
    changed: list[int] = field(default_factory=list)
    deferred: int = 0  # pending entries of kind `Deferred` (the launch budget was spent)
    # Running replicated jobs that grew (`elasticity`): (key, (index, placement) of each
    # replica added this cycle, why the rest of the scale-up waits or None when it is done).
    scaled_up: list[tuple[JobKey, tuple[tuple[int, Placement], ...], str | None]] = field(
        default_factory=list)
    # Running jobs moved to make room for a guaranteed job (`moves`): (key, the job it made
    # room for, its new placement, its old UltraServers, seconds of work it loses). Persisted
    # before `admitted`: the job it made room for takes its old chips.
    moved: list[tuple[JobKey, JobKey, Placement, tuple[str, ...], float]] = field(
        default_factory=list)

    def held_for(self) -> dict[str, JobKey]:
        """UltraServer -> the job its chips are reserved for (empty without a reservation)."""
        if self.reserved is None:
            return {}
        return dict.fromkeys(self.reserved[2], self.reserved[0])


@dataclass(slots=True)
class CycleState:
    """The clock, launch allowance and no-fit memos of the current cycle, shared by its policies.

    One object for the scheduler's lifetime, updated by each cycle: between cycles `now` is
    the last cycle's clock (the power book counts a job cancelled between cycles as ending
    then), and the memo stays valid for a cycle that carries the last one over.
    """

    now: float | None = None  # the clock of the current cycle, when the caller gave one
    budget: int | None = None  # pods this cycle may still launch (None: no limit)
    # Requests that did not fit this cycle. Within a cycle the fleet only fills up
    # (admissions, the reservation's hold) until an eviction frees chips: a request that did
    # not fit still does not, so thousands of same-shaped jobs cost one search per shape, not
    # one per job. Cleared by a full cycle and by every eviction.
    failed: dict[PlacementRequest, NoFit] = field(default_factory=dict)
    # Requests that did not fit even with these reserved UltraServers lifted (`backfills`):
    # like `failed`, true until an eviction, so a deep queue of jobs that backfill cannot
    # place costs one lifted search per shape, not one per job.
    no_backfill: set[tuple[PlacementRequest, frozenset[str]]] = field(default_factory=set)

    def forget_failures(self) -> None:
        """The no-fit memos, dropped when room may have been freed (a full cycle, an eviction)."""
        self.failed.clear()
        self.no_backfill.clear()
