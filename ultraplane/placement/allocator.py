"""The gang allocator: holds the usage of a topology and places jobs all-or-nothing.

Why a class around pure searches: the searches (`ultraplane.placement.searches`) are pure functions of the
usage in `ultraplane.placement.slots`; this class owns that usage, keeps jobs' chips, and applies health
and inventory changes incrementally, so a placement on a 1M-chip cluster costs microseconds and
never rescans the fleet. It does no I/O and reads no clock; the same sequence of calls always
gives the same placements.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace as dc_replace
from types import MappingProxyType
from typing import Literal

from ultraplane.hardware.topology import (
    CLUSTER,
    ULTRASERVER,
    Level,
    Topology,
    UltraServer,
    parse_level,
)
from ultraplane.ids import ChipId, JobKey, local_ref, parse_chip_id
from ultraplane.placement.capacities import CapacityReport, capacity_report
from ultraplane.placement.placements import AllocationConflict, NoFit, Placement, PlacementRequest
from ultraplane.placement.searches import (
    Held,
    Parts,
    best_fit,
    first_fit,
    group,
    level_of,
    nearby,
    score_of,
)
from ultraplane.placement.slots import Pool, Slot

__all__ = [
    "AllocationConflict", "Allocator", "CapacityReport", "NoFit", "Placement", "PlacementRequest",
]

Policy = Literal["ultraplane", "first-fit"]


class _Job:
    __slots__ = ("held", "placement", "request")

    def __init__(self, held: Held, placement: Placement, request: PlacementRequest | None):
        self.held, self.placement, self.request = held, placement, request


class Allocator:
    """Usage state of one topology; see docs/core-api.md for the contract."""

    def __init__(self, topology: Topology, *, policy: Policy = "ultraplane") -> None:
        if policy not in ("ultraplane", "first-fit"):
            raise ValueError(f"policy must be 'ultraplane' or 'first-fit', got {policy!r}")
        self.policy = policy
        self._slots: dict[str, Slot] = {}
        self._pools: dict[tuple[str, int], Pool] = {}
        self._jobs: dict[JobKey, _Job] = {}
        self._placements: dict[JobKey, Placement] = {}
        self._next_order = 0
        self._domain_counts: dict[tuple[int, int], int] = {}
        self._plans: dict[
            PlacementRequest, tuple[Level, Level | None, list[Pool], list[str | None]]] = {}
        # Moves whenever free room may have grown (chips given back, inventory or health
        # changed): while it stands still, a request that did not fit still does not.
        self.room_epoch = 0
        self._largest: int | None = None  # chips of the largest UltraServer, once asked
        for us in topology.ultraservers:
            self.upsert_ultraserver(us)

    # -- queries -----------------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return Topology(tuple(s.us for s in sorted(self._slots.values(), key=lambda s: s.order)))

    def allocations(self) -> Mapping[JobKey, Placement]:
        return MappingProxyType(self._placements)

    def job_of(self, chip: ChipId | str) -> JobKey | None:
        slot, s, bit = self._locate(chip)
        for job in slot.jobs:
            if any(srv == s and m & bit for srv, m in self._jobs[job].held.get(slot, ())):
                return job
        return None

    def capacity(self) -> CapacityReport:
        return capacity_report(sorted(self._slots.values(), key=lambda s: s.order))

    def place(self, request: PlacementRequest) -> Placement | NoFit:
        """Where `request` would go now (nothing changes)."""
        found = self._search(request)
        if isinstance(found, NoFit):
            return found
        return self._placement(found[1], found[0], score_of(found[1]))

    def allocate(self, job: JobKey, request: PlacementRequest) -> Placement | NoFit:
        """Place `request` and hold its chips for `job` (all or nothing)."""
        if job in self._jobs:
            raise AllocationConflict(f"job {job} already holds chips; release it first")
        found = self._search(request)
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

    # -- what-if, for preemption planning ----------------------------------------------
    def preemption_domains(self, request: PlacementRequest) -> list[tuple[str, tuple[str, ...]]]:
        """Domains a preemption may clear for `request`, as (name, UltraServer names): each
        schedulable UltraServer for gangs that fit in one, else the network domains (tightest
        level that can hold enough whole UltraServers) for larger gangs."""
        return self._domains(request, whole_only=False)

    def reservation(self, request: PlacementRequest) -> tuple[str, tuple[str, ...]] | None:
        """Where a gang of whole UltraServers that does not fit now would start soonest, as
        (domain name, UltraServer names): inside the domains of `reservation_domains`, the k
        sound UltraServers the gang needs with the most free chips between them (the freest first,
        then id order; the first domain on a tie). None for gangs smaller than one UltraServer
        (they need no UltraServer to drain) and when no domain can ever hold the request.

        The scheduler holds these back from the jobs queued behind the request, so they backfill
        elsewhere instead of nibbling at the chips the large gang waits for.
        """
        best: tuple[int, str, tuple[str, ...]] | None = None
        for name, members in self.reservation_domains(request):
            slots = [self._slots[n] for n in members]
            k = -(-request.chips // slots[0].cpu)
            top = sorted(slots, key=lambda s: (-s.total, s.order))[:k]
            free = sum(s.total for s in top)
            if best is None or free > best[0]:
                best = (free, name, tuple(s.us.name for s in top))
        return None if best is None else best[1:]

    def reservation_domains(self, request: PlacementRequest) -> list[tuple[str, tuple[str, ...]]]:
        """The domains `reservation` chooses among (gangs of at least one UltraServer), each
        with its sound UltraServers only (no failed chip, no cordon: a gang of whole
        UltraServers only ever starts on those, so one with a failed chip is never worth
        holding), and only those with enough of them. The scheduler's EASY pass ranks the same
        candidates by predicted drain time, so whether a gang gets a reservation never depends
        on the predictions, only where."""
        out: list[tuple[str, tuple[str, ...]]] = []
        for name, members in self._domains(request, whole_only=True):
            sound = tuple(n for n in members if self._slots[n].sound)
            if sound and len(sound) >= -(-request.chips // self._slots[sound[0]].cpu):
                out.append((name, sound))
        return out

    def largest_ultraserver(self) -> int:
        """Chips of the fleet's largest UltraServer (0 for an empty fleet)."""
        if self._largest is None:
            self._largest = max((s.cpu for s in self._slots.values()), default=0)
        return self._largest

    def profile_of(self, ultraserver: str) -> str:
        return self._get(ultraserver).us.profile

    def chips_of(self, ultraserver: str) -> int:
        """Chips of an UltraServer (healthy or not)."""
        return self._get(ultraserver).cpu

    def free_by_ultraserver(self, request: PlacementRequest) -> dict[str, int]:
        """Free chips of each schedulable UltraServer that could hold `request` alone (its
        profile, at least its size), in fleet order."""
        slots = sorted(self._slots.values(), key=lambda s: s.order)
        return {s.us.name: s.total for s in slots
                if s.us.schedulable and request.profile in (None, s.us.profile)
                and s.cpu >= request.chips}

    def _domains(self, request: PlacementRequest, *, whole_only: bool
                 ) -> list[tuple[str, tuple[str, ...]]]:
        required = self._required(request)
        out: list[tuple[str, tuple[str, ...]]] = []
        for pool in self._pools.values():
            if request.profile not in (None, pool.profile) or self._never(pool, request, required):
                continue
            if whole_only and request.chips < pool.cpu:
                continue
            live = sorted((s for s in pool.slots if s.us.schedulable), key=lambda s: s.order)
            if request.chips <= pool.cpu:
                out += [(s.us.name, (s.us.name,)) for s in live]
                continue
            k = -(-request.chips // pool.cpu)
            deepest = max((len(s.domains) for s in live), default=0)
            last = deepest + 1 if required == CLUSTER else required.network_depth
            for depth in range(1, last + 1):
                groups: dict[tuple[str, ...], list[str]] = {}
                for s in live:
                    key = s.domains[depth - 1] if depth <= len(s.domains) else ("cluster",)
                    groups.setdefault(key, []).append(s.us.name)
                fitting = [("/".join(key), tuple(names)) for key, names in groups.items()
                           if len(names) >= k]
                if fitting:
                    out += fitting
                    break
        return out

    def jobs_in(self, ultraservers: Iterable[str]) -> dict[JobKey, int]:
        """Jobs holding chips on these UltraServers, with how many chips they hold there."""
        held: dict[JobKey, int] = {}
        for name in ultraservers:
            for job, n in self._get(name).jobs.items():
                held[job] = held.get(job, 0) + n
        return held

    def free_chips(self, ultraservers: Iterable[str]) -> int:
        return sum(self._get(n).total for n in ultraservers if self._get(n).us.schedulable)

    def place_without(self, request: PlacementRequest, victims: Iterable[JobKey],
                      within: Iterable[str]) -> Placement | NoFit:
        """Where `request` would go inside `within` if `victims` were released (no change)."""
        saved = [(job, self._jobs[job]) for job in dict.fromkeys(victims) if job in self._jobs]
        for job, rec in saved:
            del self._jobs[job]
            del self._placements[job]
            self._give(job, rec.held)
        try:
            found = self._search(request, [self._get(n) for n in within])
            if not isinstance(found, NoFit):
                found_placement = self._placement(found[1], found[0], score_of(found[1]))
        finally:
            for job, rec in reversed(saved):
                self._hold(job, rec.held, rec.placement, rec.request)
        return found if isinstance(found, NoFit) else found_placement

    # -- internals ---------------------------------------------------------------------
    def _locate(self, chip: ChipId | str) -> tuple[Slot, int, int]:
        us, s, c = parse_chip_id(chip)
        slot = self._slots.get(us)
        if slot is None or s >= slot.n or c >= slot.cps:
            raise AllocationConflict(f"chip {chip} does not exist in this topology")
        return slot, s, 1 << c

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

    def _pool(self, slot: Slot) -> Pool:
        return self._pools[(slot.us.profile, slot.n)]

    def _search(self, request: PlacementRequest,
                within: Iterable[Slot] | None = None) -> tuple[Level, Held] | NoFit:
        plan = self._plans.get(request)
        if plan is None:
            # Levels, candidate pools and "can never fit" depend only on the request and the
            # inventory: cached until the inventory changes.
            if len(self._plans) > 4096:
                self._plans.clear()
            preferred = parse_level(request.preferred_level) if request.preferred_level else None
            pools = [p for p in self._pools.values()
                     if p.slots and request.profile in (None, p.profile)]
            required = self._required(request, pools)
            plan = self._plans[request] = (
                required, preferred, pools, [self._never(p, request, required) for p in pools])
        required, preferred, pools, reasons = plan
        if not pools:
            what = f"{request.profile} " if request.profile else ""
            return NoFit("Unsatisfiable", f"this cluster has no {what}UltraServers")
        if all(reasons):
            return NoFit("Unsatisfiable", str(reasons[0]))
        members = list(within) if within is not None else None
        found: list[tuple[int, int, tuple[Level, Held]]] = []
        for i, (pool, never) in enumerate(zip(pools, reasons, strict=True)):
            if never:
                continue
            mine = None if members is None else [s for s in members if self._pool(s) is pool]
            if self.policy == "first-fit":
                hit = first_fit(pool, request.chips, required, request.whole_servers, mine)
            else:
                hit = best_fit(pool, request.chips, required, preferred,
                               request.whole_servers, mine)
            if hit is not None:
                if len(pools) == 1:
                    return hit
                found.append((hit[0].rank, i, hit))
        if found:
            return min(found, key=lambda f: f[:2])[2]
        pool = next(p for p, never in zip(pools, reasons, strict=True) if not never)
        return self._no_capacity(pool, request, required)

    def _required(self, request: PlacementRequest, pools: Iterable[Pool] | None = None) -> Level:
        """The level the search never crosses. Locality by default: a gang that fits in one
        UltraServer (of some pool it may use) stays inside one NeuronSwitch domain unless its
        mode is `Unconstrained`; pools whose UltraServers are too small for it are then
        ruled out by `_never`, so it never spans several small UltraServers either."""
        required = parse_level(request.required_level) if request.required_level else CLUSTER
        if request.mode == "Unconstrained" or required <= ULTRASERVER:
            return required
        if pools is None:
            pools = [p for p in self._pools.values()
                     if p.slots and request.profile in (None, p.profile)]
        if request.chips <= max((p.cpu for p in pools), default=0):
            return ULTRASERVER
        return required

    def _domain_count(self, pool: Pool, depth: int) -> int:
        """Most UltraServers of `pool` in one network domain at `depth` (healthy or not)."""
        key = (id(pool), depth)
        if key not in self._domain_counts:
            counts: dict[tuple[str, ...], int] = {}
            for slot in pool.slots:
                d = slot.domains[depth - 1] if depth <= len(slot.domains) else ("cluster",)
                counts[d] = counts.get(d, 0) + 1
            self._domain_counts[key] = max(counts.values(), default=0)
        return self._domain_counts[key]

    def _never(self, pool: Pool, request: PlacementRequest, required: Level) -> str | None:
        c, name = request.chips, pool.profile
        if request.whole_servers and c % pool.cps:
            return (f"chips {c} is not a multiple of the {pool.cps} chips per {name} server, "
                    "so whole servers cannot hold it")
        if required <= ULTRASERVER:
            cap = (pool.cps, pool.cpr, pool.cpu)[required.rank]
        elif required == CLUSTER:
            cap = len(pool.slots) * pool.cpu
        else:
            cap = self._domain_count(pool, required.network_depth) * pool.cpu
        if c > cap:
            where = "the whole fleet" if required == CLUSTER else f"one {required.name}"
            return f"chips {c} is more than {where} of {name} UltraServers holds ({cap} chips)"
        return None

    def _no_capacity(self, pool: Pool, request: PlacementRequest, required: Level) -> NoFit:
        c = request.chips
        if c > pool.cpu:
            k = -(-c // pool.cpu)
            most = max(pool.blocks_by_idle, default=0)
            block = next(iter(pool.blocks_by_idle[most])) if most else None
            busy = [s for s in (pool.block_slots[block] if block else ()) if s.indexed and not s.idle]
            where = "network block" if required.rank <= 3 else required.name
            return NoFit("NoCapacity", (
                f"{c} chips need {k} idle {pool.profile} UltraServers inside one {where}; the "
                f"most idle in one block now is {most}; releasing the jobs on the busy "
                "UltraServers of that block would free space"), _jobs_on(busy))
        if pool.us_buckets:
            width = pool.band or (pool.cpu + 1)
            rank = max(pool.us_buckets, key=lambda r: (r % width, -r))
            best = next(iter(pool.us_buckets[rank]))
        else:  # every schedulable UltraServer is full (full ones are not filed): the first
            live = [s for s in pool.slots if s.indexed is not None]
            if not live:
                return NoFit("NoCapacity", f"no {pool.profile} UltraServer is schedulable now")
            best = min(live, key=lambda s: s.order)
        inside = "" if required == CLUSTER else f" inside one {required.name}"
        holders = _jobs_on([best])
        # Name a remedy only where there is one: an UltraServer with no jobs is short of
        # healthy, uncordoned chips, and no release would help.
        remedy = ("releasing its jobs would free space" if holders else
                  "it runs no jobs: the rest of its chips are failed or cordoned")
        return NoFit("NoCapacity", (
            f"no room for {c} chips{inside} on {pool.profile} UltraServers now; the freest, "
            f"{best.us.name}, has {best.total} free chips; {remedy}"
        ), holders)

    # -- health and inventory ------------------------------------------------------------
    def set_chip_failed(self, chip: ChipId | str, failed: bool) -> None:
        slot, s, bit = self._locate(chip)
        ref = local_ref(s, bit.bit_length() - 1)
        chips = slot.us.failed_chips | {ref} if failed else slot.us.failed_chips - {ref}
        self._update(dc_replace(slot.us, failed_chips=frozenset(chips)))

    def set_server_cordoned(self, ultraserver: str, server: int, cordoned: bool) -> None:
        us = self._get(ultraserver).us
        if not 0 <= server < us.server_count:
            raise ValueError(f"UltraServer {ultraserver} has no server {server}")
        cordons = us.cordoned_servers | {server} if cordoned else us.cordoned_servers - {server}
        self._update(dc_replace(us, cordoned_servers=frozenset(cordons)))

    def set_schedulable(self, ultraserver: str, schedulable: bool) -> None:
        self._update(dc_replace(self._get(ultraserver).us, schedulable=schedulable))

    @contextmanager
    def held_back(self, ultraservers: Iterable[str]) -> Iterator[tuple[str, ...]]:
        """Take these UltraServers out of placement (and preemption) while the block runs, and
        give back exactly the ones this turned off: an UltraServer already unschedulable stays
        so, and names this allocator does not know are ignored. Jobs on them keep their chips;
        releases inside the block return chips as usual."""
        turned = tuple(n for n in dict.fromkeys(ultraservers)
                       if n in self._slots and self._slots[n].us.schedulable)
        self._fence(turned, schedulable=False)
        try:
            yield turned
        finally:
            self._fence(tuple(n for n in turned if n in self._slots), schedulable=True)

    @contextmanager
    def lifted(self, ultraservers: Iterable[str]) -> Iterator[None]:
        """Inside a `held_back` block: make these held-back UltraServers placeable again while
        this block runs (a backfill that ends before the reservation starts), then hold them
        back again."""
        names = tuple(n for n in dict.fromkeys(ultraservers)
                      if n in self._slots and not self._slots[n].us.schedulable)
        self._fence(names, schedulable=True)
        try:
            yield
        finally:
            self._fence(tuple(n for n in names if n in self._slots), schedulable=False)

    def _fence(self, names: tuple[str, ...], *, schedulable: bool) -> None:
        """Flip `schedulable` and re-file only: health and free counts are unchanged, so
        neither the recount of `_update` nor the inventory caches are needed."""
        by_pool: dict[int, tuple[Pool, list[Slot]]] = {}
        for name in names:
            slot = self._slots[name]
            slot.us = dc_replace(slot.us, schedulable=schedulable)
            pool = self._pool(slot)
            by_pool.setdefault(id(pool), (pool, []))[1].append(slot)
        for pool, slots in by_pool.values():
            pool.reindex_many(slots)

    def upsert_ultraserver(self, us: UltraServer) -> None:
        """Add an UltraServer, or adopt new health/network for a known one (same shape)."""
        slot = self._slots.get(us.name)
        if slot is not None and (slot.us.profile, slot.n) != (us.profile, us.server_count):
            if slot.jobs:
                raise AllocationConflict(
                    f"UltraServer {us.name} changed shape while jobs hold chips: {sorted(slot.jobs)}")
            self.remove_ultraserver(us.name)
            slot = None
        if slot is None:
            slot = Slot(us, self._next_order)
            self._next_order += 1
            self._slots[us.name] = slot
            spec = us.spec
            key = (us.profile, slot.n)
            if key not in self._pools:
                self._pools[key] = Pool(us.profile, spec.chips_per_server, slot.cpr, slot.cpu)
            self._pools[key].add(slot)
            self._inventory_changed()
        else:
            self._update(us)

    def remove_ultraserver(self, name: str) -> tuple[JobKey, ...]:
        """Forget an UltraServer; jobs holding chips on it are released whole (returned)."""
        slot = self._slots.get(name)
        if slot is None:
            return ()
        victims = tuple(sorted(slot.jobs))
        for job in victims:
            self.release(job)
        self._pool(slot).remove(slot)
        del self._slots[name]
        self._inventory_changed()
        return victims

    def _inventory_changed(self) -> None:
        self.room_epoch += 1
        self._largest = None
        self._domain_counts.clear()
        self._plans.clear()

    def _get(self, name: str) -> Slot:
        slot = self._slots.get(name)
        if slot is None:
            raise KeyError(f"no UltraServer named {name!r}")
        return slot

    def _update(self, us: UltraServer) -> None:
        slot = self._get(us.name)
        pool = self._pool(slot)
        pool.remove(slot)
        slot.set_health(us)
        pool.add(slot)
        self._inventory_changed()

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
        required = self._required(request)
        if kept:
            near = nearby(kept, self._pool(kept[0][0]).slots, required, need)
            found: tuple[Level, Held] | NoFit = (
                (CLUSTER, group(near)) if near is not None else
                NoFit("NoCapacity", f"no {need} free chips within the {required.name} of job {job}"))
        else:
            found = self._search(dc_replace(request, chips=need))
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


def _jobs_on(slots: Iterable[Slot]) -> tuple[JobKey, ...]:
    jobs: dict[JobKey, None] = {}
    for slot in slots:
        for job in sorted(slot.jobs, key=lambda j: (-slot.jobs[j], j)):
            jobs[job] = None
    return tuple(jobs)
