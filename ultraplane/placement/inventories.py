"""What the allocator's fleet holds and what of it may be placed on: UltraServers added,
reshaped and removed, chips failed, servers cordoned, UltraServers fenced for a while.

Why apart from placing: these change the inventory, not who holds which chip; each one moves
`room_epoch` (free room may have grown), forgets the search plans (they depend on the inventory)
and re-files only the UltraServers it touched, so placing never rescans the fleet.
`held_back`/`lifted` are the cheap form of `set_schedulable` the scheduler's reservations use:
they flip the flag and re-file, nothing else.

Why a mixin of `Allocator` (`ultraplane.placement.allocator`) and not an object it holds: the
methods are part of the allocator's public API that the adapters and the scheduler call, and the
lookups here (`_get`, `_locate`, `_pool`) run on every placing call; held, each would need a
forwarding method on the allocator and an attribute hop on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING

from ultraplane.hardware.topology import Topology, UltraServer
from ultraplane.ids import ChipId, JobKey, local_ref, parse_chip_id
from ultraplane.placement.placements import AllocationConflict
from ultraplane.placement.searchplans import SearchPlans
from ultraplane.placement.slots import Pool, Slot

__all__ = ["Inventory"]


class Inventory:
    """The allocator's UltraServers: lookups, health, inventory and fencing."""

    # the allocator's state (`ultraplane.placement.allocator`)
    _slots: dict[str, Slot]
    _pools: dict[tuple[str, int], Pool]
    _plans: SearchPlans
    _next_order: int
    _largest: int | None
    room_epoch: int

    if TYPE_CHECKING:  # the allocator's, from `ultraplane.placement.allocator`
        def release(self, job: JobKey) -> frozenset[ChipId]: ...

    @property
    def topology(self) -> Topology:
        return Topology(tuple(s.us for s in sorted(self._slots.values(), key=lambda s: s.order)))

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

    # -- health, inventory and fencing ---------------------------------------------------
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
        self._plans.clear()

    def _update(self, us: UltraServer) -> None:
        slot = self._get(us.name)
        pool = self._pool(slot)
        pool.remove(slot)
        slot.set_health(us)
        pool.add(slot)
        self._inventory_changed()

    # -- lookups -----------------------------------------------------------------------
    def _get(self, name: str) -> Slot:
        slot = self._slots.get(name)
        if slot is None:
            raise KeyError(f"no UltraServer named {name!r}")
        return slot

    def _locate(self, chip: ChipId | str) -> tuple[Slot, int, int]:
        us, s, c = parse_chip_id(chip)
        slot = self._slots.get(us)
        if slot is None or s >= slot.n or c >= slot.cps:
            raise AllocationConflict(f"chip {chip} does not exist in this topology")
        return slot, s, 1 << c

    def _pool(self, slot: Slot) -> Pool:
        return self._pools[(slot.us.profile, slot.n)]
