"""Mutable usage of each UltraServer, and per-pool indexes that answer best-fit queries fast.

Why bitmasks and buckets: at 1M chips (6,945 Gen2 UltraServers, 250,020 servers) a query must
never scan chips, and should not scan UltraServers either. Each server keeps one int whose bits
are its free usable chips; each UltraServer (a `Slot`) keeps incremental counters: free chips,
the most free chips in one server and in one rack, whole free servers. A `Pool` (all
UltraServers of one profile and size) files every slot in buckets keyed by
(most free in one domain of a level, total free), with one bitmask per key saying which totals
are non-empty, so "the fullest UltraServer that still has a rack with c free chips" is a few
integer operations. Whole free ("idle") UltraServers are also filed per network block, for
multi-UltraServer gangs. Counters are updated only for the servers an operation touches.
"""

from __future__ import annotations

from ultraplane.ids import JobKey, parse_local_ref
from ultraplane.topology import Level, UltraServer

__all__ = ["Pool", "Slot"]


class Slot:
    """One UltraServer's static shape and mutable usage (free chips, owners, counters)."""

    __slots__ = (
        "alloc", "block", "cpr", "cps", "cpu", "domains", "free", "full", "hist", "indexed",
        "jobs", "n", "nfree", "nracks", "order", "owners", "rack_free", "rack_whole", "spr",
        "total", "us", "usable", "whole",
    )

    def __init__(self, us: UltraServer, order: int) -> None:
        spec = us.spec
        self.order = order
        self.cps = spec.chips_per_server
        self.n = us.server_count
        self.spr = spec.servers_per_rack
        self.nracks = -(-self.n // self.spr)
        self.cpr = self.spr * self.cps
        self.cpu = self.n * self.cps
        self.full = (1 << self.cps) - 1
        self.alloc = [0] * self.n
        self.owners: list[dict[JobKey, int] | None] = [None] * self.n
        self.jobs: dict[JobKey, int] = {}
        self.indexed: tuple[int, int, int, bool, tuple[str, ...]] | None = None
        self.us = us
        self.set_health(us)

    # -- health and shape --------------------------------------------------------------
    def set_health(self, us: UltraServer) -> None:
        """Adopt `us` (same shape); recompute usable and free chips from health and owners."""
        self.us = us
        self.domains = [us.domain(Level(2 + d)) for d in range(1, len(us.network) + 1)]
        self.block = self.domains[0] if self.domains else ("cluster",)
        usable = [0 if s in us.cordoned_servers else self.full for s in range(self.n)]
        for ref in us.failed_chips:
            server, chip = parse_local_ref(ref)
            usable[server] &= ~(1 << chip)
        self.usable = usable
        self.free = [u & ~a for u, a in zip(usable, self.alloc, strict=True)]
        self._recount()

    def _recount(self) -> None:
        self.nfree = [m.bit_count() for m in self.free]
        self.hist = [0] * (self.cps + 1)
        for k in self.nfree:
            self.hist[k] += 1
        self.rack_free = [0] * self.nracks
        self.rack_whole = [0] * self.nracks
        for s, k in enumerate(self.nfree):
            self.rack_free[s // self.spr] += k
            if self.free[s] == self.full:
                self.rack_whole[s // self.spr] += 1
        self.total = sum(self.nfree)
        self.whole = sum(self.rack_whole)

    def set_free(self, s: int, mask: int) -> None:
        """Set server `s`'s free mask, updating every counter incrementally."""
        old, new = self.free[s], mask
        if old == new:
            return
        k_old, k_new = self.nfree[s], new.bit_count()
        self.free[s] = new
        self.nfree[s] = k_new
        self.hist[k_old] -= 1
        self.hist[k_new] += 1
        r = s // self.spr
        self.rack_free[r] += k_new - k_old
        self.total += k_new - k_old
        dw = (new == self.full) - (old == self.full)
        self.rack_whole[r] += dw
        self.whole += dw

    # -- ownership ---------------------------------------------------------------------
    def take(self, s: int, mask: int, job: JobKey) -> None:
        self.alloc[s] |= mask
        owners = self.owners[s]
        if owners is None:
            owners = self.owners[s] = {}
        owners[job] = owners.get(job, 0) | mask
        self.jobs[job] = self.jobs.get(job, 0) + mask.bit_count()
        self.set_free(s, self.free[s] & ~mask)

    def give(self, s: int, mask: int, job: JobKey) -> None:
        self.alloc[s] &= ~mask
        owners = self.owners[s]
        if owners is not None:
            left = owners.get(job, 0) & ~mask
            if left:
                owners[job] = left
            else:
                owners.pop(job, None)
                if not owners:
                    self.owners[s] = None
        left_here = self.jobs.get(job, 0) - mask.bit_count()
        if left_here > 0:
            self.jobs[job] = left_here
        else:
            self.jobs.pop(job, None)
        self.set_free(s, self.free[s] | (mask & self.usable[s]))

    # -- keys --------------------------------------------------------------------------
    @property
    def max_server_free(self) -> int:
        hist = self.hist
        for k in range(self.cps, 0, -1):
            if hist[k]:
                return k
        return 0

    @property
    def idle(self) -> bool:
        """All chips healthy and free: the slot can join a multi-UltraServer gang."""
        return self.total == self.cpu

    def keys(self) -> tuple[int, int, int, bool, tuple[str, ...]] | None:
        if not self.us.schedulable:
            return None
        return (self.max_server_free, max(self.rack_free), self.total, self.idle, self.block)


class Pool:
    """Indexes of the schedulable slots of one (profile, servers) shape."""

    def __init__(self, profile: str, cps: int, cpr: int, cpu: int) -> None:
        self.profile, self.cps, self.cpr, self.cpu = profile, cps, cpr, cpu
        self.slots: dict[Slot, None] = {}
        self.server_masks = [0] * (cps + 1)
        self.rack_masks = [0] * (cpr + 1)
        self.server_buckets: dict[tuple[int, int], dict[Slot, None]] = {}
        self.rack_buckets: dict[tuple[int, int], dict[Slot, None]] = {}
        self.us_mask = 0
        self.us_buckets: dict[int, dict[Slot, None]] = {}
        self.block_idle: dict[tuple[str, ...], dict[Slot, None]] = {}
        self.blocks_by_idle: dict[int, dict[tuple[str, ...], None]] = {}
        self.block_size: dict[tuple[str, ...], int] = {}

    def add(self, slot: Slot) -> None:
        self.slots[slot] = None
        self.block_size[slot.block] = self.block_size.get(slot.block, 0) + 1
        self.block_idle.setdefault(slot.block, {})
        self.reindex(slot)

    def remove(self, slot: Slot) -> None:
        self._unfile(slot)
        del self.slots[slot]
        self.block_size[slot.block] -= 1

    def reindex(self, slot: Slot) -> None:
        """Re-file `slot` after its counters or health changed (no-op if keys are equal)."""
        keys = slot.keys()
        if keys == slot.indexed:
            return
        self._unfile(slot)
        if keys is None:
            return
        ms, mr, total, idle, block = keys
        _put(self.server_buckets, (ms, total), slot)
        self.server_masks[ms] |= 1 << total
        _put(self.rack_buckets, (mr, total), slot)
        self.rack_masks[mr] |= 1 << total
        self.us_buckets.setdefault(total, {})[slot] = None
        self.us_mask |= 1 << total
        if idle:
            members = self.block_idle.setdefault(block, {})
            members[slot] = None
            self._file_block(block, len(members) - 1, len(members))
        slot.indexed = keys

    def _unfile(self, slot: Slot) -> None:
        keys = slot.indexed
        if keys is None:
            return
        ms, mr, total, idle, block = keys
        if _drop(self.server_buckets, (ms, total), slot):
            self.server_masks[ms] &= ~(1 << total)
        if _drop(self.rack_buckets, (mr, total), slot):
            self.rack_masks[mr] &= ~(1 << total)
        bucket = self.us_buckets[total]
        del bucket[slot]
        if not bucket:
            del self.us_buckets[total]
            self.us_mask &= ~(1 << total)
        if idle:
            members = self.block_idle[block]
            del members[slot]
            self._file_block(block, len(members) + 1, len(members))
        slot.indexed = None

    def _file_block(self, block: tuple[str, ...], old: int, new: int) -> None:
        if old == new:
            return
        if old > 0:
            bucket = self.blocks_by_idle[old]
            del bucket[block]
            if not bucket:
                del self.blocks_by_idle[old]
        if new > 0:
            self.blocks_by_idle.setdefault(new, {})[block] = None

    # -- queries -----------------------------------------------------------------------
    def fullest(self, level: int, c: int) -> Slot | None:
        """The schedulable slot with the fewest free chips that has a level-domain with >= c."""
        if level == 2:
            m = self.us_mask >> c << c
            if not m:
                return None
            return next(iter(self.us_buckets[(m & -m).bit_length() - 1]))
        masks, buckets = (
            (self.server_masks, self.server_buckets) if level == 0
            else (self.rack_masks, self.rack_buckets)
        )
        m = 0
        for k in range(c, len(masks)):
            m |= masks[k]
        if not m:
            return None
        total = (m & -m).bit_length() - 1
        for k in range(c, len(masks)):
            if masks[k] >> total & 1:
                return next(iter(buckets[(k, total)]))
        return None  # pragma: no cover - the mask said some k has it

    def block_with_idle(self, need: int) -> tuple[str, ...] | None:
        """The network block with the fewest idle slots that still has >= need (best fit)."""
        top = max(self.blocks_by_idle, default=0)
        for count in range(need, top + 1):
            bucket = self.blocks_by_idle.get(count)
            if bucket:
                return next(iter(bucket))
        return None


def _put(buckets: dict[tuple[int, int], dict[Slot, None]], key: tuple[int, int], slot: Slot) -> None:
    buckets.setdefault(key, {})[slot] = None


def _drop(buckets: dict[tuple[int, int], dict[Slot, None]], key: tuple[int, int], slot: Slot) -> bool:
    """Remove `slot`; True when the bucket became empty (its mask bit must be cleared)."""
    bucket = buckets[key]
    del bucket[slot]
    if bucket:
        return False
    del buckets[key]
    return True
