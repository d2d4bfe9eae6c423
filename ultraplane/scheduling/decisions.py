"""Every decision the core makes about a job, one type per consequence, for every trigger.

Why one set of types: a cycle, a job observed, a chip failed, a job finished and a job deleted
each lead to consequences (admit, wait, evict, restart, replace, fail, release) that the
operator, the embedded REST backend and the trace replay persist. When each adapter worked out
those consequences itself the copies drifted (one restarted a `ReplaceAffected` job whole).
`ultraplane.scheduling.admissions.Admissions` answers each trigger with these values; an adapter persists
them (a status document through `ultraplane.documents.jobstatuses`, a row, an event on its heap) and
never re-interprets them. A cycle's decisions come together as one `Decisions`, in the order
they are persisted.

    trigger (adapter)           Admissions method          decisions
    --------------------------  -------------------------  ---------------------------------------
    scheduling cycle            cycle(now)                 Decisions: Preempted, Moved, Failed,
                                                           Admitted, Pending, Reserved
    job observed                observe(job)               Observed
    spec cannot be read         invalid(key, error)        Failed (InvalidSpec)
    chip failed under a job     chip_failed(...)           Replaced | Restarted | Failed
    pods of a job failed        pods_failed(...)           Replaced | Restarted | Failed
    pods cannot be made         launch_failed(...)         Failed
    UltraServer drained         drained(key, name, ...)    Restarted | Evicted
    job finished                finished(key, phase)       Finished
    job deleted                 deleted(key)               Deleted
    admission not persisted     unwritten(key)             (nothing to write; it waits again)
    restart of the adapter      readopt(job, chips)        Readopted | Requeued
    replica count changed       rescale(key, replicas)     ScaledDown | ScalingUp | Observed
    (the cycle, after it)       cycle(now)                 Decisions.scaled_up: ScaledUp
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Placement

__all__ = [
    "Admitted",
    "Decision",
    "Decisions",
    "Deleted",
    "Evicted",
    "Failed",
    "Finished",
    "Moved",
    "Observed",
    "Pending",
    "Preempted",
    "Readopted",
    "Replaced",
    "Requeued",
    "Reserved",
    "Restarted",
    "ScaledDown",
    "ScaledUp",
    "ScalingUp",
]


@dataclass(frozen=True, slots=True)
class Admitted:
    """`key` holds chips now: one placement, or one per replica in index order."""

    key: JobKey
    placements: tuple[Placement, ...]
    replicated: bool = False
    # Why it was placed so, when a prediction decided it (a split that pays, a backfill onto
    # reserved UltraServers), with the numbers; empty otherwise.
    message: str = ""

    @property
    def chip_ids(self) -> tuple[ChipId, ...]:
        return tuple(c for p in self.placements for c in p.chip_ids)


@dataclass(frozen=True, slots=True)
class Preempted:
    """`key` lost its chips to `by` and waits again (with its original FIFO rank)."""

    key: JobKey
    by: JobKey
    message: str = ""  # why, in words (the status message); `preempted_message` if empty
    fair_sharing: bool = False  # its queue held more than its fair share (not a reclaim)

    def __post_init__(self) -> None:
        if not self.message:
            object.__setattr__(self, "message", preempted_message(self.by))


def preempted_message(by: str, scaling_to: int | None = None) -> str:
    """`scaling_to`: the replica count a running service is growing to, when its added
    replicas took the chips (so the victim reads that a scale-up, not a new job, did)."""
    if scaling_to is not None:
        return (f"Preempted by higher-priority job {by}, scaling up to {scaling_to} "
                "replicas; requeued.")
    return f"Preempted by higher-priority job {by}; requeued."


@dataclass(frozen=True, slots=True)
class Moved:
    """The running job `key` was taken off `origin` (UltraServers) and holds `placement` now,
    to make room for `by`, a job within its queue's unused quota; it restarts there from its
    checkpoint at once (it does not wait), losing about `lost_s` seconds of work plus the
    restart. `message` says so in words (its status message)."""

    key: JobKey
    by: JobKey
    placement: Placement
    origin: tuple[str, ...]
    lost_s: float
    message: str

    @property
    def chip_ids(self) -> tuple[ChipId, ...]:
        return self.placement.chip_ids


def moved_message(by: str, queue: str | None, origin: tuple[str, ...], to: tuple[str, ...],
                  lost_s: float) -> str:
    whose = f" of queue {queue}" if queue else ""
    return (f"Moved from UltraServer {', '.join(origin)} to {', '.join(to)} to make room for "
            f"job {by}{whose}, which is within its queue's unused quota and fits no "
            f"UltraServer otherwise; restarted from its checkpoint (about {lost_s:.0f} s of "
            f"work lost).")


@dataclass(frozen=True, slots=True)
class Pending:
    """`key` waits: `reason` is the NoFit kind (`NoCapacity`), `position` is 1-based."""

    key: JobKey
    reason: str
    message: str
    position: int


@dataclass(frozen=True, slots=True)
class Failed:
    """`key` left the queue for good (`reason` `Unsatisfiable`: it can never fit the fleet;
    `InvalidSpec`; `ChipFailed` or `PodFailed` under the `Fail` policy; a launch refused)."""

    key: JobKey
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Evicted:
    """`key` lost its chips to the fleet, not to another job (its UltraServer or server was
    cordoned under the `Requeue` drain policy), and waits again with its rank; it is written
    as a preemption is (phase `Preempted`, a preemption counts), `reason` says why."""

    key: JobKey
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Reserved:
    """The UltraServers held back for the waiting job `key` until it starts."""

    key: JobKey
    domains: str
    ultraservers: tuple[str, ...]
    start: float | None = None  # predicted start (EASY), when the cycle had a clock



@dataclass(frozen=True, slots=True)
class Readopted:
    """`key` holds its persisted chips again."""

    key: JobKey
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Requeued:
    """`key`'s persisted chips could not be re-adopted (`message` says why); it waits again,
    written as a restart (`AllocationLost`: it resumes from its checkpoint)."""

    key: JobKey
    message: str


@dataclass(frozen=True, slots=True)
class Observed:
    """A job was seen (created, or its waiting spec edited): `queued` when it is now in the
    queue, False when it holds chips (a running job's spec edit changes nothing)."""

    key: JobKey
    queued: bool


@dataclass(frozen=True, slots=True)
class Replaced:
    """A failed chip under a `ReplaceAffected` job: only the affected gang (or replica) moved;
    `placements` are the job's placements now (one per replica), `reason` is `ChipReplaced`."""

    key: JobKey
    placements: tuple[Placement, ...]
    replicated: bool
    reason: str
    message: str
    lost: tuple[ChipId, ...]

    @property
    def chip_ids(self) -> tuple[ChipId, ...]:
        return tuple(c for p in self.placements for c in p.chip_ids)


@dataclass(frozen=True, slots=True)
class Restarted:
    """`key` lost its chips (a failed chip under `RestartAll`, or no replacement fit, or its
    UltraServer was drained) and waits again, resuming from its checkpoint; a restart counts."""

    key: JobKey
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Finished:
    """`key` ended on its own (`phase` Succeeded or Failed, said by the runtime or its pods);
    its chips are free."""

    key: JobKey
    phase: str
    message: str


@dataclass(frozen=True, slots=True)
class Deleted:
    """`key` was deleted: it is out of the queue and `released` are the chips it gave back.
    Its status is not rewritten (there is no `Deleted` phase): the object goes."""

    key: JobKey
    released: frozenset[ChipId]


@dataclass(frozen=True, slots=True)
class ScaledDown:
    """The running replicated job `key` shrank: `removed` (its highest-index replica keys)
    gave back `released`; `placements` are the remaining replicas', unchanged (index order)."""

    key: JobKey
    removed: tuple[JobKey, ...]
    placements: tuple[Placement, ...]
    released: frozenset[ChipId]
    reason: str = ""  # why the count changed (the planner's reason), when the caller said

    @property
    def replicas(self) -> int:
        return len(self.placements)


@dataclass(frozen=True, slots=True)
class ScalingUp:
    """The running replicated job `key` wants `desired` replicas and holds `replicas`: the
    next cycles place the added ones (`ScaledUp`); the running ones are not touched."""

    key: JobKey
    replicas: int
    desired: int
    reason: str = ""  # why the count changed (the planner's reason), when the caller said


@dataclass(frozen=True, slots=True)
class ScaledUp:
    """A cycle placed `added` replicas of the running job `key` ((index, placement) each,
    possibly none), leaving the others where they were; `placements` are all its replicas'
    now (index order). `message` says why the rest of the `desired` replicas wait (a
    Pending-like reason: `NoCapacity: ...`), empty when the scale-up is complete."""

    key: JobKey
    added: tuple[tuple[int, Placement], ...]
    placements: tuple[Placement, ...]
    desired: int
    message: str = ""

    @property
    def replicas(self) -> int:
        return len(self.placements)


Decision = (Admitted | Preempted | Moved | Evicted | Pending | Failed | Replaced | Restarted | Finished
            | Deleted | Observed | Readopted | Requeued | ScaledDown | ScalingUp | ScaledUp)


@dataclass
class Decisions:
    """What one cycle decided, each list in queue order; iterate for the persist order
    (preempted, failed, admitted, pending)."""

    preempted: list[Preempted] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    admitted: list[Admitted] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    # The `pending` entries that are new or differ from the last cycle's (an adapter that
    # writes only what changed iterates these; the rest are the very same objects as before).
    fresh: list[Pending] = field(default_factory=list)
    reservation: Reserved | None = None
    deferred: list[JobKey] = field(default_factory=list)  # not tried: the launch budget was spent
    # Running replicated jobs whose added replicas this cycle placed, or that still wait for
    # them (persisted after `preempted`: a replica may reuse a victim's chips).
    scaled_up: list[ScaledUp] = field(default_factory=list)
    # Running jobs moved to make room for an admitted job (persisted after `preempted` and
    # before `admitted`: the admitted job takes their old chips). Only with moves on
    # (`Admissions(moves=...)`), which the adapter that asks for them persists.
    moved: list[Moved] = field(default_factory=list)

    def __iter__(self) -> Iterator[Admitted | Preempted | Pending | Failed]:
        yield from self.preempted
        yield from self.failed
        yield from self.admitted
        yield from self.pending

    def held_for(self) -> dict[str, JobKey]:
        """UltraServer -> the job it is reserved for (empty without a reservation)."""
        if self.reservation is None:
            return {}
        return dict.fromkeys(self.reservation.ultraservers, self.reservation.key)
