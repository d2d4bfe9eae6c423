"""The gang allocator: holds the usage of a topology and places jobs all-or-nothing.

Why a class around pure searches: the searches (`ultraplane.placement.searches`) are pure functions of the
usage in `ultraplane.placement.slots`; this class owns that usage, keeps jobs' chips, and applies health
and inventory changes incrementally, so a placement on a 1M-chip cluster costs microseconds and
never rescans the fleet. It does no I/O and reads no clock; the same sequence of calls always
gives the same placements.

The class is one object in four modules: here placing, releasing and repairing jobs (who holds
which chip); `ultraplane.placement.searchplans` the cached plan of each request's search (held);
`ultraplane.placement.inventories` health, inventory and fencing, and
`ultraplane.placement.domains` the what-if queries for preemption and reservations (mixins: they
are the allocator's public API and read its state directly).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace as dc_replace
from types import MappingProxyType

from ultraplane.hardware.topology import CLUSTER, Level, Topology
from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.capacities import CapacityReport, capacity_report
from ultraplane.placement.domains import DomainQueries
from ultraplane.placement.inventories import Inventory
from ultraplane.placement.placements import AllocationConflict, NoFit, Placement, PlacementRequest
from ultraplane.placement.searches import Held, Parts, group, level_of, nearby, score_of
from ultraplane.placement.searchplans import Policy, SearchPlans
from ultraplane.placement.slots import Pool, Slot

__all__ = [
    "AllocationConflict", "Allocator", "CapacityReport", "NoFit", "Placement", "PlacementRequest",
]


class _Job:
    __slots__ = ("held", "placement", "request")

    def __init__(self, held: Held, placement: Placement, request: PlacementRequest | None):
        self.held, self.placement, self.request = held, placement, request


class Allocator(Inventory, DomainQueries):
    """Usage state of one topology; see docs/core-api.md for the contract."""

    def __init__(self, topology: Topology, *, policy: Policy = "ultraplane") -> None:
        if policy not in ("ultraplane", "first-fit"):
            raise ValueError(f"policy must be 'ultraplane' or 'first-fit', got {policy!r}")
        self._slots = {}
        self._pools = {}
        self._plans = SearchPlans(self._pools, policy)
        self._jobs: dict[JobKey, _Job] = {}
        self._placements: dict[JobKey, Placement] = {}
        self._next_order = 0
        # Moves whenever free room may have grown (chips given back, inventory or health
        # changed): while it stands still, a request that did not fit still does not.
        self.room_epoch = 0
        self._largest = None  # chips of the largest UltraServer, once asked
        for us in topology.ultraservers:
            self.upsert_ultraserver(us)

    @property
    def policy(self) -> Policy:
        """`ultraplane` (best fit, blocks kept whole) or `first-fit` (the bench's baseline)."""
        return self._plans.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._plans.policy = policy

    # -- queries -----------------------------------------------------------------------
    def allocations(self) -> Mapping[JobKey, Placement]:
        return MappingProxyType(self._placements)

    def request_of(self, job: JobKey) -> PlacementRequest | None:
        """The request `job` was placed for, when it was given (None for an unknown job)."""
        rec = self._jobs.get(job)
        return None if rec is None else rec.request

    def job_of(self, chip: ChipId | str) -> JobKey | None:
        slot, s, bit = self._locate(chip)
        for job in slot.jobs:
            if any(srv == s and m & bit for srv, m in self._jobs[job].held.get(slot, ())):
                return job
        return None

    def capacity(self) -> CapacityReport:
        return capacity_report(sorted(self._slots.values(), key=lambda s: s.order))

    # -- placing -----------------------------------------------------------------------
    def place(self, request: PlacementRequest) -> Placement | NoFit:
        """Where `request` would go now (nothing changes)."""
        found = self._plans.search(request)
        if isinstance(found, NoFit):
            return found
        return self._placement(found[1], found[0], score_of(found[1]))

    def allocate(self, job: JobKey, request: PlacementRequest) -> Placement | NoFit:
        """Place `request` and hold its chips for `job` (all or nothing)."""
        if job in self._jobs:
            raise AllocationConflict(f"job {job} already holds chips; release it first")
        found = self._plans.search(request)
        if isinstance(found, NoFit):
            return found
        level, held = found
        placement = self._placement(held, level, score_of(held))
        self._hold(job, held, placement, request)
        return placement

    def assign(self, job: JobKey, chip_ids: Iterable[ChipId | str],
               request: PlacementRequest | None = None) -> Placement:
        """Re-adopt a known allocation (recovery). Chips may have failed since; none may be
        unknown or held by another job (AllocationConflict)."""
        if job in self._jobs:
            raise AllocationConflict(f"job {job} already holds chips; release it first")
        masks: dict[tuple[str, int], int] = {}
        for cid in chip_ids:
            slot, s, bit = self._locate(cid)
            if slot.alloc[s] & bit or masks.get((slot.us.name, s), 0) & bit:
                raise AllocationConflict(f"chip {cid} is already held by {self.job_of(cid) or job}")
            masks[(slot.us.name, s)] = masks.get((slot.us.name, s), 0) | bit
        if not masks:
            raise AllocationConflict(f"job {job}: no chips to assign")
        held = group([(self._slots[us], s, m) for (us, s), m in masks.items()])
        placement = self._placement(held, level_of(held), 0.0)
        self._hold(job, held, placement, request)
        return placement

    def release(self, job: JobKey) -> frozenset[ChipId]:
        """Free a job's chips; returns exactly the chips it held (empty if unknown)."""
        rec = self._jobs.pop(job, None)
        if rec is None:
            return frozenset()
        del self._placements[job]
        self._give(job, rec.held)
        return frozenset(rec.placement.chip_ids)

    # -- what-if, for preemption planning (the rest in `ultraplane.placement.domains`) ----
    def place_without(self, request: PlacementRequest, victims: Iterable[JobKey],
                      within: Iterable[str]) -> Placement | NoFit:
        """Where `request` would go inside `within` if `victims` were released (no change)."""
        saved = [(job, self._jobs[job]) for job in dict.fromkeys(victims) if job in self._jobs]
        for job, rec in saved:
            del self._jobs[job]
            del self._placements[job]
            self._give(job, rec.held)
        try:
            found = self._plans.search(request, [self._get(n) for n in within])
            if not isinstance(found, NoFit):
                found_placement = self._placement(found[1], found[0], score_of(found[1]))
        finally:
            for job, rec in reversed(saved):
                self._hold(job, rec.held, rec.placement, rec.request)
        return found if isinstance(found, NoFit) else found_placement

    # -- internals ---------------------------------------------------------------------
    def _placement(self, held: Held, level: Level, score: float) -> Placement:
        parts: list[tuple[str, int, int]] = []
        for slot in sorted(held, key=_name) if len(held) > 1 else held:
            pairs = held[slot]
            name = slot.us.name
            if pairs is slot.all_pairs:
                whole = slot.whole_parts
                if whole is None:
                    whole = slot.whole_parts = tuple((name, s, m) for s, m in pairs)
                if len(held) == 1:
                    return Placement(whole, level.name, score)
                parts += whole
            elif len(pairs) == 1:
                s, m = pairs[0]
                parts.append((name, s, m))
            else:
                parts += [(name, s, m) for s, m in sorted(pairs)]
        return Placement(tuple(parts), level.name, score)

    def _hold(self, job: JobKey, held: Held, placement: Placement,
              request: PlacementRequest | None) -> None:
        for slot, pairs in held.items():
            slot.take(pairs, job)
        self._reindex(held)
        self._jobs[job] = _Job(held, placement, request)
        self._placements[job] = placement

    def _give(self, job: JobKey, held: Held) -> None:
        self.room_epoch += 1
        for slot, pairs in held.items():
            slot.give(pairs, job)
        self._reindex([s for s in held if self._slots.get(s.us.name) is s])

    def _reindex(self, slots: Collection[Slot]) -> None:
        if len(slots) == 1:
            for slot in slots:
                self._pools[(slot.us.profile, slot.n)].reindex_one(slot)
            return
        by_pool: dict[int, tuple[Pool, list[Slot]]] = {}
        for slot in slots:
            pool = self._pools[(slot.us.profile, slot.n)]
            entry = by_pool.get(id(pool))
            if entry is None:
                by_pool[id(pool)] = (pool, [slot])
            else:
                entry[1].append(slot)
        for pool, members in by_pool.values():
            pool.reindex_many(members)

    # -- repair ------------------------------------------------------------------------
    def replace(self, job: JobKey, lost: Iterable[ChipId | str]) -> Placement | NoFit:
        """ReplaceAffected: swap the `lost` chips for free ones, keeping the job's other chips
        and its required level, nearest to the kept chips first. All or nothing: on NoFit the
        job keeps every chip it had."""
        rec = self._jobs.get(job)
        if rec is None:
            raise AllocationConflict(f"job {job} holds no chips")
        gone: dict[tuple[int, int], int] = {}
        for cid in lost:
            slot, s, bit = self._locate(cid)
            if not any(srv == s and m & bit for srv, m in rec.held.get(slot, ())):
                raise AllocationConflict(f"chip {cid} is not held by job {job}")
            gone[(id(slot), s)] = gone.get((id(slot), s), 0) | bit
        if not gone:
            return rec.placement
        need = sum(m.bit_count() for m in gone.values())
        kept = [(sl, s, m & ~gone.get((id(sl), s), 0)) for sl, pairs in rec.held.items()
                for s, m in pairs]
        kept = [p for p in kept if p[2]]
        request = rec.request or PlacementRequest(chips=rec.placement.chips)
        required = self._plans.required(request)
        if kept:
            near = nearby(kept, self._pool(kept[0][0]).slots, required, need)
            found: tuple[Level, Held] | NoFit = (
                (CLUSTER, group(near)) if near is not None else
                NoFit("NoCapacity", f"no {need} free chips within the {required.name} of job {job}"))
        else:
            found = self._plans.search(dc_replace(request, chips=need))
        if isinstance(found, NoFit):
            return found
        new: Parts = [(sl, s, m) for sl, pairs in found[1].items() for s, m in pairs]
        merged: dict[tuple[int, int], tuple[Slot, int, int]] = {}
        for sl, s, m in kept + new:
            old = merged.get((id(sl), s))
            merged[(id(sl), s)] = (sl, s, m | (old[2] if old else 0))
        held = group(list(merged.values()))
        placement = self._placement(held, level_of(held), score_of(found[1]))
        del self._jobs[job]
        self._give(job, rec.held)
        self._hold(job, held, placement, request)
        return placement


def _name(slot: Slot) -> str:
    return slot.us.name
