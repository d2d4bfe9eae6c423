"""What each tenant queue's running jobs hold, per hardware profile and per UltraServer, and
how much more each queue may take.

Why apart from the admission rules (`ultraplane.policies.quotas`): the scheduler calls
`hold`/`unhold` for every job that gets or gives back chips, whatever the rules say, and every
rule reads the same figures (`used`, `borrowed`, `room`); this is the ledger they read, and the
one place that says when their memos go stale (`_moved`).

Why a mixin of `QuotaBook` and not an object it holds: the scheduler and the adapters call
`begin_cycle`, `hold`, `unhold`, `used`, `borrowed` and `room` on the book and read its `usage`;
the book is a dataclass whose fields (`usage` among them) compare and print as one, and the
reclaim memos that each hold or release moves are the book's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit

if TYPE_CHECKING:
    from ultraplane.policies.cohorts import CohortTree
    from ultraplane.policies.quotas import QueueSpec
    from ultraplane.workloads import QueuedJob

__all__ = ["QueueUsage"]


@dataclass
class _Held:
    """One running job's chips, against the queue it uses now."""

    queue: str | None
    chips: dict[str, int]  # profile -> chips
    job: QueuedJob
    on: dict[str, int]  # UltraServer -> chips


class QueueUsage:
    """The quota book's ledger: what running jobs hold against each queue (fields declared on
    `QuotaBook`)."""

    # the book's fields (`ultraplane.policies.quotas`)
    queues: dict[str, QueueSpec]
    usage: dict[tuple[str, str], int]
    _held: dict[JobKey, _Held]
    _members: dict[str, list[QueueSpec]]
    tree: CohortTree
    _profiles: tuple[str, ...]
    _no_reclaim: set[tuple[object, ...]]
    _grow: int
    _freed: int
    _free_at_start: int
    _names: tuple[str, ...]
    _fleet_epoch: int
    _total: dict[str, int]
    _rooms: dict[tuple[str, str], int]
    _refusals: dict[tuple[str, int], NoFit | None]
    _candidates: dict[tuple[str | None, int, bool], list[QueuedJob]]
    _epoch: int
    _fresh: set[JobKey]
    _on: dict[str, dict[str | None, int]]
    _decayed_at: float | None
    _released: dict[str, int]

    if TYPE_CHECKING:  # the book's, from `ultraplane.policies.quotas`
        def queue_of(self, job: QueuedJob) -> str | None: ...

    # -- accounting (called by Scheduler) ------------------------------------------------
    def begin_cycle(self, allocator: Allocator) -> None:
        if self._fleet_epoch != allocator.room_epoch:  # only the inventory changes these
            ultraservers = allocator.topology.ultraservers
            self._profiles = tuple(sorted({us.profile for us in ultraservers}))
            self._names = tuple(us.name for us in ultraservers)
        self._free_at_start = allocator.free_chips(self._names)
        self._fleet_epoch = allocator.room_epoch
        if len(self._no_reclaim) > 100_000:
            self._no_reclaim.clear()
        self._fresh.clear()

    def hold(self, job: QueuedJob, allocator: Allocator) -> None:
        held = allocator.allocations()
        chips: dict[str, int] = {}
        on: dict[str, int] = {}
        for part in job.parts():
            placement = held.get(part)
            if placement is None:
                continue
            for us, n in placement.chips_by_ultraserver:
                profile = allocator.profile_of(us)
                chips[profile] = chips.get(profile, 0) + n
                on[us] = on.get(us, 0) + n
        self.unhold(job.key)
        queue = self.queue_of(job)
        self._held[job.key] = _Held(queue, chips, job, on)
        for us, n in on.items():
            here = self._on.setdefault(us, {})
            here[queue] = here.get(queue, 0) + n
        self._fresh.add(job.key)
        if queue is not None:
            for profile, n in chips.items():
                self.usage[(queue, profile)] = self.usage.get((queue, profile), 0) + n
            self._total[queue] = self._total.get(queue, 0) + sum(chips.values())
        self._moved()
        if queue in self.queues and self.borrowed(queue):
            self._grow += 1

    def unhold(self, key: JobKey) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        if held.queue is not None:
            for profile, n in held.chips.items():
                self.usage[(held.queue, profile)] -= n
            self._total[held.queue] -= sum(held.chips.values())
            if self._decayed_at is not None:  # held until now, as `usagedecays` counts it
                self._released[held.queue] = (self._released.get(held.queue, 0)
                                              + sum(held.chips.values()))
        for us, n in held.on.items():
            here = self._on[us]
            here[held.queue] -= n
            if not here[held.queue]:
                del here[held.queue]
        self._freed += 1
        self._moved()

    def _moved(self) -> None:
        self._epoch += 1
        self._candidates.clear()
        self._rooms.clear()
        self._refusals.clear()

    # -- queries -------------------------------------------------------------------------
    @property
    def usage_epoch(self) -> int:
        """A number that moves whenever a job gets or gives back chips (memos key on it)."""
        return self._epoch

    def used(self, queue: str, profile: str | None = None) -> int:
        if profile is not None:
            return self.usage.get((queue, profile), 0)
        return self._total.get(queue, 0)

    def borrowed(self, queue: str, profile: str | None = None) -> int:
        spec = self.queues[queue]
        profiles = [profile] if profile is not None else self._all_profiles(spec)
        return sum(max(0, self.used(queue, p) - spec.nominal.get(p, 0)) for p in profiles)

    def _all_profiles(self, spec: QueueSpec) -> set[str]:
        return set(spec.nominal) | {p for (q, p) in self.usage if q == spec.name}

    def room(self, spec: QueueSpec, profile: str) -> int:
        """Chips `spec`'s queue may still take on `profile`: all of its unused nominal quota
        (lent chips come back by reclaim) plus what the rest of its cohort's pool has idle
        (and, up a tree of cohorts, each parent's within each level's borrowing limit:
        `ultraplane.policies.cohorts`), capped by its borrowing limit."""
        memo = self._rooms.get((spec.name, profile))
        if memo is not None:
            return memo
        used = self.used(spec.name, profile)
        nominal = spec.nominal.get(profile, 0)
        idle = self.tree.available(spec.cohort or f"/{spec.name}", profile, self.used)
        # its own unused lendable chips are in the pool's idle part: not counted twice
        guaranteed = nominal - spec.lends(profile)
        own_lendable = max(0, spec.lends(profile) - max(0, used - guaranteed))
        room = max(0, nominal - used) + max(0, idle - own_lendable)
        if spec.borrowing_limit is not None:
            room = min(room, nominal + spec.borrowing_limit - used)
        self._rooms[(spec.name, profile)] = room = max(0, room)
        return room
