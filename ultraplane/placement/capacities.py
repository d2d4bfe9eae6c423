"""Capacity reports: what is used, what is free, and which standard gang sizes still fit.

Why "fits per size" and not just free chips: free chips scattered one per server cannot host a
72-chip job; operators and the simulator need to see fragmentation, so for each standard size
the report counts how many such jobs would fit now, each size on its own: inside one UltraServer
for sizes up to an UltraServer, whole idle UltraServers in one network block above that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ultraplane.placement.slots import Slot

__all__ = ["STANDARD_SIZES", "CapacityReport", "DomainCapacity", "capacity_report"]

STANDARD_SIZES = (1, 4, 16, 36, 72, 144, 288, 576, 1152)


@dataclass(frozen=True)
class DomainCapacity:
    """Chips of one domain (an UltraServer or a network domain). `unusable` = failed,
    cordoned or unschedulable chips that no job holds."""

    name: str
    level: str
    total: int = 0
    allocated: int = 0
    free: int = 0
    unusable: int = 0
    free_whole_servers: int = 0
    free_whole_racks: int = 0
    free_whole_ultraservers: int = 0

    def __add__(self, other: DomainCapacity) -> DomainCapacity:
        return DomainCapacity(
            self.name, self.level, self.total + other.total, self.allocated + other.allocated,
            self.free + other.free, self.unusable + other.unusable,
            self.free_whole_servers + other.free_whole_servers,
            self.free_whole_racks + other.free_whole_racks,
            self.free_whole_ultraservers + other.free_whole_ultraservers,
        )


@dataclass(frozen=True)
class CapacityReport:
    """The fleet (`cluster`), each UltraServer, each network domain by level, and fits."""

    cluster: DomainCapacity
    ultraservers: tuple[DomainCapacity, ...]
    levels: dict[str, tuple[DomainCapacity, ...]] = field(default_factory=dict)
    fits: dict[int, int] = field(default_factory=dict)

    @property
    def utilization(self) -> float:
        usable = self.cluster.total - self.cluster.unusable
        return self.cluster.allocated / usable if usable else 0.0


def _of(slot: Slot) -> DomainCapacity:
    allocated = sum(m.bit_count() for m in slot.alloc)
    live = slot.us.schedulable
    free = slot.total if live else 0
    racks = sum(
        1 for r in range(slot.nracks)
        if slot.rack_whole[r] == min(slot.n, (r + 1) * slot.spr) - r * slot.spr
    )
    return DomainCapacity(
        slot.us.name, "ultraserver", slot.cpu, allocated, free, slot.cpu - allocated - free,
        slot.whole if live else 0, racks if live else 0, int(live and slot.idle),
    )


def capacity_report(slots: Sequence[Slot], sizes: Sequence[int] = STANDARD_SIZES) -> CapacityReport:
    per_us = tuple(_of(s) for s in slots)
    cluster = sum(per_us, DomainCapacity("cluster", "cluster"))
    levels: dict[str, dict[tuple[str, ...], DomainCapacity]] = {}
    for slot, cap in zip(slots, per_us, strict=True):
        for depth, key in enumerate(slot.domains, start=1):
            level = f"network-{depth}"
            named = DomainCapacity("/".join(key), level)
            bucket = levels.setdefault(level, {})
            bucket[key] = bucket.get(key, named) + DomainCapacity(
                named.name, level, *[getattr(cap, f) for f in (
                    "total", "allocated", "free", "unusable", "free_whole_servers",
                    "free_whole_racks", "free_whole_ultraservers")])
    fits: dict[int, int] = {}
    for size in sizes:
        count = 0
        idle_by_block: dict[tuple[tuple[str, ...], int], int] = {}
        for slot in slots:
            if not slot.us.schedulable:
                continue
            if size <= slot.cpu:
                count += slot.total // size
            elif slot.idle:
                where = (slot.block, slot.cpu)
                idle_by_block[where] = idle_by_block.get(where, 0) + 1
        for (_, cpu), idle in idle_by_block.items():
            count += idle // -(-size // cpu)
        fits[size] = count
    return CapacityReport(
        cluster, per_us, {k: tuple(v.values()) for k, v in levels.items()}, fits)
