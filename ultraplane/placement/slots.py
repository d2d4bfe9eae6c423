"""Mutable usage of each UltraServer, and per-pool indexes that answer best-fit queries fast.

Why bitmasks and buckets: at 1M chips (6,945 Gen2 UltraServers, 250,020 servers) a query must
never scan chips, and should not scan UltraServers either. Each server keeps one int whose bits
are its free usable chips; each UltraServer (a `Slot`) keeps incremental counters: free chips,
the most free chips in one server and in one rack, whole free servers. A `Pool` (all
UltraServers of one profile and size) files every slot in buckets keyed by
(most free in one domain of a level, total free), with one bitmask per key saying which totals
are non-empty, so "the fullest UltraServer that still has a rack with c free chips" is a few
integer operations. Whole free ("idle") UltraServers are also filed per network block, for
multi-UltraServer gangs. Counters are updated only for the servers an operation touches,
and a full UltraServer is not filed at all (no query can use it; most are full at high load).

The pool's two indexes live in their own modules, `ultraplane.placement.buckets` (the rank
buckets) and `ultraplane.placement.blocks` (blocks by idle and mixed UltraServers); `Pool` here
decides when and at which rank a slot is re-filed in both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ultraplane.hardware.topology import Level, UltraServer
from ultraplane.ids import JobKey, parse_local_ref
from ultraplane.placement.blocks import IDLE_CAP, BlockIndex
from ultraplane.placement.buckets import RankBuckets

__all__ = ["IDLE_CAP", "Pool", "Slot"]

_ALL_PAIRS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}

# What a slot is filed under: most free chips in one server, in one rack, free chips, idle,
# network block, mixed (see `Slot.mixed`).
Keys = tuple[int, int, int, bool, tuple[str, ...], bool]


class Slot:
    """One UltraServer's static shape and mutable usage (free chips, owners, counters)."""

    __slots__ = (
        "all_pairs",
        "alloc",
        "block",
        "cpr",
        "cps",
        "cpu",
        "domains",
        "free",
        "full",
        "hist",
        "indexed",
        "jobs",
        "n",
        "nfree",
        "nracks",
        "order",
        "rack_free",
        "rack_sizes",
        "rack_whole",
        "rank",
        "sound",
        "spr",
        "total",
        "us",
        "usable",
        "whole",
        "whole_parts",
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
        # Every chip of every server, (server, mask) in order: what a gang taking the whole
        # UltraServer holds. One shared tuple per shape; `take`/`give` recognise it by identity.
        shape = (self.n, self.full)
        if shape not in _ALL_PAIRS:
            _ALL_PAIRS[shape] = tuple((s, self.full) for s in range(self.n))
        self.all_pairs = _ALL_PAIRS[shape]
        self.rack_sizes = [min(self.n, (r + 1) * self.spr) - r * self.spr
                           for r in range(self.nracks)]
        # `Placement.parts` of the whole UltraServer, built the first time a gang takes it
        # whole and shared by every later such placement (fewer objects for the GC to scan).
        self.whole_parts: tuple[tuple[str, int, int], ...] | None = None
        self.alloc = [0] * self.n
        self.jobs: dict[JobKey, int] = {}
        self.indexed: Keys | None = None
        self.rank = -1  # position in the pool's buckets; -1 = not filed
        self.us = us
        self.set_health(us)

    # -- health and shape --------------------------------------------------------------
    def set_health(self, us: UltraServer) -> None:
        """Adopt `us` (same shape); recompute usable and free chips from health and `alloc`."""
        self.us = us
        self.domains = [us.domain(Level(2 + d)) for d in range(1, len(us.network) + 1)]
        self.block = self.domains[0] if self.domains else ("cluster",)
        usable = [0 if s in us.cordoned_servers else self.full for s in range(self.n)]
        for ref in us.failed_chips:
            server, chip = parse_local_ref(ref)
            usable[server] &= ~(1 << chip)
        self.usable = usable
        self.sound = all(u == self.full for u in usable)  # no failed chip, no cordon
        self.free = [u & ~a for u, a in zip(usable, self.alloc, strict=True)]
        self.whole_parts = None
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
    def take(self, pairs: Sequence[tuple[int, int]], job: JobKey) -> None:
        """Hold `(server, mask)` pairs for `job`. Taking a whole idle slot is O(1)-ish."""
        if pairs is self.all_pairs and self.total == self.cpu:
            n = self.n
            self.alloc = [self.full] * n
            self.free = [0] * n
            self.nfree = [0] * n
            self.hist = [n] + [0] * self.cps
            self.rack_free = [0] * self.nracks
            self.rack_whole = [0] * self.nracks
            self.total = self.whole = 0
            count = self.cpu
        else:
            # set_free, inlined: this loop runs for every server a gang touches.
            alloc, free, nfree, hist, spr = self.alloc, self.free, self.nfree, self.hist, self.spr
            rack_free, rack_whole, full = self.rack_free, self.rack_whole, self.full
            count = taken = 0  # chips held; chips that were free (not a failed one held again)
            for s, m in pairs:
                alloc[s] |= m
                k = m.bit_count()
                count += k
                old = free[s]
                if old & m == m:  # the usual case: every chip was free
                    new = old ^ m
                    k_old = nfree[s]
                    k_new = k_old - k
                else:
                    new = old & ~m
                    if new == old:
                        continue
                    k_old = nfree[s]
                    k_new = new.bit_count()
                free[s] = new
                nfree[s] = k_new
                hist[k_old] -= 1
                hist[k_new] += 1
                rack_free[s // spr] -= k_old - k_new
                taken += k_old - k_new
                if old == full:
                    rack_whole[s // spr] -= 1
                    self.whole -= 1
            self.total -= taken
        self.jobs[job] = self.jobs.get(job, 0) + count

    def give(self, pairs: Sequence[tuple[int, int]], job: JobKey) -> None:
        """Return `(server, mask)` pairs held by `job`; failed chips do not become free."""
        count = self.cpu if pairs is self.all_pairs else sum(m.bit_count() for _, m in pairs)
        if count == self.cpu:
            n = self.n
            self.alloc = [0] * n
            self.free = list(self.usable)
            if self.sound:  # the idle state, without counting
                self.nfree = [self.cps] * n
                self.hist = [0] * self.cps + [n]
                self.rack_free = [k * self.cps for k in self.rack_sizes]
                self.rack_whole = list(self.rack_sizes)
                self.total, self.whole = self.cpu, n
            else:
                self._recount()
        else:
            alloc, free, usable, set_free = self.alloc, self.free, self.usable, self.set_free
            for s, m in pairs:
                alloc[s] &= ~m
                set_free(s, free[s] | (m & usable[s]))
        left = self.jobs.get(job, 0) - count
        if left > 0:
            self.jobs[job] = left
        else:
            self.jobs.pop(job, None)

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

    @property
    def mixed(self) -> bool:
        """Holds a gang smaller than the whole UltraServer (or several gangs): the mark of an
        UltraServer that small gangs use, which will not come back idle soon."""
        jobs = self.jobs
        if len(jobs) != 1:
            return len(jobs) > 1
        for held in jobs.values():
            return held < self.cpu
        return False

    def keys(self) -> tuple[int, int, int, bool, tuple[str, ...], bool] | None:
        if not self.us.schedulable:
            return None
        hist = self.hist
        ms = self.cps
        while ms and not hist[ms]:
            ms -= 1
        rack_free = self.rack_free
        mr = rack_free[0] if len(rack_free) == 1 else max(rack_free)
        jobs = self.jobs  # `mixed`, inlined: keys() runs on every operation
        mixed = next(iter(jobs.values())) < self.cpu if len(jobs) == 1 else len(jobs) > 1
        return (ms, mr, self.total, self.total == self.cpu, self.block, mixed)


class Pool(RankBuckets, BlockIndex):
    """Indexes of the schedulable slots of one (profile, servers) shape.

    Slots are filed by a *rank* = (idle UltraServers in the slot's network block) x band +
    (free chips of the slot), so the lowest rank is "the fullest UltraServer in the block with
    the fewest idle UltraServers". Steering small gangs to blocks that are already broken lets
    the partly used UltraServers of idle-rich blocks drain, so whole blocks come free for large
    gangs (see docs/allocator.md). `block_weight=0` gives plain best fit on free chips.

    The two indexes are mixins (`RankBuckets`, `BlockIndex`) rather than objects the pool
    holds: every allocate and release re-files slots in both, so a held object would cost an
    attribute hop per slot on the hot path, and the searches read their masks and dicts as
    the pool's own attributes.
    """

    def __init__(self, profile: str, cps: int, cpr: int, cpu: int, block_weight: int = 1) -> None:
        self.profile, self.cps, self.cpr, self.cpu = profile, cps, cpr, cpu
        RankBuckets.__init__(self, (cpu + 1) * block_weight)
        BlockIndex.__init__(self)
        self.slots: dict[Slot, None] = {}

    def add(self, slot: Slot) -> None:
        self.slots[slot] = None
        self.block_slots.setdefault(slot.block, {})[slot] = None
        self.block_idle.setdefault(slot.block, {})
        self.reindex(slot)

    def remove(self, slot: Slot) -> None:
        before = len(self.block_idle[slot.block])
        self._unfile(slot)
        del self.slots[slot]
        del self.block_slots[slot.block][slot]
        if min(len(self.block_idle[slot.block]), IDLE_CAP) != min(before, IDLE_CAP):
            self._refile_block(slot.block)

    def reindex(self, slot: Slot) -> None:
        """Re-file `slot` after its counters or health changed (no-op if keys are equal)."""
        self.reindex_many((slot,))

    def reindex_one(self, slot: Slot) -> None:
        """`reindex_many` for one slot (most operations), without its bookkeeping."""
        keys = slot.keys()
        indexed = slot.indexed
        if keys == indexed:
            return
        block = slot.block
        members = self.block_idle[block]
        before = len(members)
        if indexed is not None and slot.rank >= 0:
            self._pull(slot)
        idle = keys is not None and keys[3]
        if idle != (indexed is not None and indexed[3]):
            self._set_idle(block, slot, idle)
        mixed = keys is not None and keys[5]
        if mixed != (indexed is not None and indexed[5]):
            self._count_mixed(block, mixed)
        slot.indexed = keys
        after = len(members)
        if self.band and after != before and (after < IDLE_CAP or before < IDLE_CAP):
            self._refile_block(block)  # the idle band changed; files this slot too
        elif keys is not None and keys[2]:
            self._put(slot)

    def reindex_many(self, slots: Iterable[Slot]) -> None:
        """Re-file several slots; each block whose idle band changed is re-filed once."""
        bands: dict[tuple[str, ...], int] = {}
        pending: list[Slot] = []
        block_idle = self.block_idle
        for slot in slots:
            keys = slot.keys()
            indexed = slot.indexed
            if keys == indexed:
                continue
            block = slot.block
            if block not in bands:
                bands[block] = min(len(block_idle[block]), IDLE_CAP)
            if indexed is not None:
                if slot.rank >= 0:
                    self._pull(slot)
                if indexed[3] and not (keys is not None and keys[3]):
                    self._set_idle(block, slot, False)
                elif keys is not None and keys[3] and not indexed[3]:
                    self._set_idle(block, slot, True)
            elif keys is not None and keys[3]:
                self._set_idle(block, slot, True)
            mixed = keys is not None and keys[5]
            if mixed != (indexed is not None and indexed[5]):
                self._count_mixed(block, mixed)
            slot.indexed = keys
            if keys is not None:
                pending.append(slot)
        changed = [b for b, before in bands.items()
                   if self.band and min(len(block_idle[b]), IDLE_CAP) != before]
        for block in changed:
            self._refile_block(block)  # files its pending slots too, in block (id) order
        for slot in pending:
            if slot.rank < 0 and slot.total:
                self._put(slot)

    def _unfile(self, slot: Slot) -> None:
        if slot.indexed is None:
            return
        if slot.rank >= 0:
            self._pull(slot)
        if slot.indexed[3]:
            self._set_idle(slot.block, slot, False)
        if slot.indexed[5]:
            self._count_mixed(slot.block, False)
        slot.indexed = None

    def _refile_block(self, block: tuple[str, ...]) -> None:
        """The block's idle count changed: every slot in it gets a new rank."""
        if not self.band:
            return
        base = min(len(self.block_idle[block]), IDLE_CAP) * self.band
        pull, put = self._pull, self._put
        for other in self.block_slots.get(block, ()):
            indexed = other.indexed
            if indexed is not None and indexed[2]:
                rank = base + indexed[2]
                if other.rank != rank:
                    if other.rank >= 0:
                        pull(other)
                    put(other, rank)
