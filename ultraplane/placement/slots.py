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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ultraplane.hardware.topology import Level, UltraServer
from ultraplane.ids import JobKey, parse_local_ref

__all__ = ["IDLE_CAP", "Pool", "Slot"]

_ALL_PAIRS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}

# Blocks are told apart by idle UltraServers 0, 1 and "2 or more": a single idle UltraServer
# cannot host a multi-UltraServer gang, two can. Measured: finer bands (up to 8) changed the
# large-gang rejections by less than the noise, while every band change re-files a block.
IDLE_CAP = 2
_KEY = 1 << 20  # bucket key stride: ranks stay far below it

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


class Pool:
    """Indexes of the schedulable slots of one (profile, servers) shape.

    Slots are filed by a *rank* = (idle UltraServers in the slot's network block) x band +
    (free chips of the slot), so the lowest rank is "the fullest UltraServer in the block with
    the fewest idle UltraServers". Steering small gangs to blocks that are already broken lets
    the partly used UltraServers of idle-rich blocks drain, so whole blocks come free for large
    gangs (see docs/allocator.md). `block_weight=0` gives plain best fit on free chips.
    """

    def __init__(self, profile: str, cps: int, cpr: int, cpu: int, block_weight: int = 1) -> None:
        self.profile, self.cps, self.cpr, self.cpu = profile, cps, cpr, cpu
        self.band = (cpu + 1) * block_weight
        self.slots: dict[Slot, None] = {}
        self.server_masks = [0] * (cps + 1)
        self.rack_masks = [0] * (cpr + 1)
        # Bit k set = some slot has k as its most free chips in one server (rack): a query
        # for >= c chips visits only the counts that exist, not every count from c up.
        self.server_keys = 0
        self.rack_keys = 0
        # key = (most free in one server | rack) * _KEY + rank
        self.server_buckets: dict[int, dict[Slot, None]] = {}
        self.rack_buckets: dict[int, dict[Slot, None]] = {}
        self.us_mask = 0
        self.us_buckets: dict[int, dict[Slot, None]] = {}
        self.block_slots: dict[tuple[str, ...], dict[Slot, None]] = {}
        self.block_idle: dict[tuple[str, ...], dict[Slot, None]] = {}
        self.blocks_by_idle: dict[int, dict[tuple[str, ...], None]] = {}
        self._patterns: dict[int, int] = {}
        # Mixed UltraServers (`Slot.mixed`) per block: where small gangs live. Not part of the
        # rank (changing it would re-file a block on every small gang), only read when
        # choosing which block's idle UltraServers to use.
        self.block_mixed: dict[tuple[str, ...], int] = {}
        # Blocks with at least one idle slot, by their mixed count (for `block_to_break`).
        self.idle_by_mixed: dict[int, dict[tuple[str, ...], None]] = {}

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

    def _put(self, slot: Slot, rank: int | None = None) -> None:
        ms, mr, total, _, _, _ = slot.indexed  # type: ignore[misc]
        if not total:
            # A full UltraServer can host nothing, so no query needs it: it stays out of the
            # buckets (rank -1). At 90% load most UltraServers are full, so block re-files and
            # whole takes skip them.
            slot.rank = -1
            return
        if rank is None:
            rank = min(len(self.block_idle[slot.block]), IDLE_CAP) * self.band + total
        slot.rank = rank
        bit = 1 << rank
        key = ms * _KEY + rank
        bucket = self.server_buckets.get(key)
        if bucket is None:
            self.server_buckets[key] = {slot: None}
            masks = self.server_masks
            if not masks[ms]:
                self.server_keys |= 1 << ms
            masks[ms] |= bit
        else:
            bucket[slot] = None
        key = mr * _KEY + rank
        bucket = self.rack_buckets.get(key)
        if bucket is None:
            self.rack_buckets[key] = {slot: None}
            masks = self.rack_masks
            if not masks[mr]:
                self.rack_keys |= 1 << mr
            masks[mr] |= bit
        else:
            bucket[slot] = None
        bucket = self.us_buckets.get(rank)
        if bucket is None:
            self.us_buckets[rank] = {slot: None}
            self.us_mask |= bit
        else:
            bucket[slot] = None

    def _pull(self, slot: Slot) -> None:
        ms, mr, _, _, _, _ = slot.indexed  # type: ignore[misc]
        rank = slot.rank
        slot.rank = -1
        bit = 1 << rank
        key = ms * _KEY + rank
        bucket = self.server_buckets[key]
        del bucket[slot]
        if not bucket:
            del self.server_buckets[key]
            masks = self.server_masks
            masks[ms] ^= bit
            if not masks[ms]:
                self.server_keys ^= 1 << ms
        key = mr * _KEY + rank
        bucket = self.rack_buckets[key]
        del bucket[slot]
        if not bucket:
            del self.rack_buckets[key]
            masks = self.rack_masks
            masks[mr] ^= bit
            if not masks[mr]:
                self.rack_keys ^= 1 << mr
        bucket = self.us_buckets[rank]
        del bucket[slot]
        if not bucket:
            del self.us_buckets[rank]
            self.us_mask ^= bit

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

    def _count_mixed(self, block: tuple[str, ...], mixed: bool) -> None:
        old = self.block_mixed.get(block, 0)
        new = old + (1 if mixed else -1)
        if new:
            self.block_mixed[block] = new
        else:
            del self.block_mixed[block]
        if self.block_idle[block]:
            self._file_idle_block(block, old, None)
            self._file_idle_block(block, None, new)

    def _file_idle_block(self, block: tuple[str, ...], old: int | None, new: int | None) -> None:
        if old is not None:
            bucket = self.idle_by_mixed[old]
            del bucket[block]
            if not bucket:
                del self.idle_by_mixed[old]
        if new is not None:
            self.idle_by_mixed.setdefault(new, {})[block] = None

    def _set_idle(self, block: tuple[str, ...], slot: Slot, idle: bool) -> None:
        members = self.block_idle[block]
        old = len(members)
        if idle:
            members[slot] = None
        else:
            del members[slot]
        new = len(members)
        if old > 0:
            bucket = self.blocks_by_idle[old]
            del bucket[block]
            if not bucket:
                del self.blocks_by_idle[old]
        if new > 0:
            self.blocks_by_idle.setdefault(new, {})[block] = None
        if (old > 0) != (new > 0):
            mixed = self.block_mixed.get(block, 0)
            self._file_idle_block(block, mixed if old else None, mixed if new else None)

    def _pattern(self, c: int) -> int:
        """Bits of every rank whose free-chip part is >= c, across all idle-count bands;
        `c < 0` means >= -1 - c and not a whole idle UltraServer (cached: a handful of c)."""
        found = self._patterns.get(c)
        if found is None:
            low = c if c >= 0 else -1 - c
            bands, width = (IDLE_CAP + 1, self.band) if self.band else (1, self.cpu + 1)
            top = self.cpu + 1 if c >= 0 else self.cpu
            one = ((1 << top) - 1) >> low << low
            found = 0
            for b in range(bands):
                found |= one << (b * width)
            self._patterns[c] = found
        return found

    # -- queries -----------------------------------------------------------------------
    def fullest(self, level: int, c: int, idle_ok: bool = True) -> Slot | None:
        """The lowest-ranked schedulable slot that has a level-domain with >= c free chips
        (and is not idle, unless `idle_ok`)."""
        pattern = self._pattern(c) if idle_ok else self._pattern(-1 - c)
        if level == 2:
            m = self.us_mask & pattern
            if not m:
                return None
            return next(iter(self.us_buckets[(m & -m).bit_length() - 1]))
        if level == 0:
            masks, buckets, keys = self.server_masks, self.server_buckets, self.server_keys
        else:
            masks, buckets, keys = self.rack_masks, self.rack_buckets, self.rack_keys
        # The lowest rank over every count k >= c that exists; on a tie the smallest k.
        keys = keys >> c << c
        best = best_k = -1
        while keys:
            low = keys & -keys
            keys ^= low
            k = low.bit_length() - 1
            m = masks[k] & pattern
            if m:
                rank = (m & -m).bit_length() - 1
                if best < 0 or rank < best:
                    best, best_k = rank, k
        if best < 0:
            return None
        return next(iter(buckets[best_k * _KEY + best]))

    def block_with_idle(self, need: int) -> tuple[str, ...] | None:
        """The network block with the fewest idle slots that still has >= need (best fit);
        on a tie the one with the most mixed UltraServers, then the first filed."""
        top = max(self.blocks_by_idle, default=0)
        for count in range(need, top + 1):
            bucket = self.blocks_by_idle.get(count)
            if bucket:
                if len(bucket) == 1:
                    return next(iter(bucket))
                mixed = self.block_mixed.get
                return max(bucket, key=lambda b: mixed(b, 0))
        return None

    def block_to_break(self) -> tuple[str, ...] | None:
        """The network block whose idle slot a gang smaller than one UltraServer should break:
        the one with the most mixed UltraServers (where small gangs already live, so its
        idle ones are the least likely to join a whole free block), then the fewest idle."""
        if not self.idle_by_mixed:
            return None
        bucket = self.idle_by_mixed[max(self.idle_by_mixed)]
        if len(bucket) == 1:
            return next(iter(bucket))
        idle = self.block_idle
        fewest = min(len(idle[b]) for b in bucket)
        ties = [b for b in bucket if len(idle[b]) == fewest]
        if len(ties) == 1:
            return ties[0]
        # Several: the first in the filing order of blocks by idle count (deterministic).
        return next(b for b in self.blocks_by_idle[fewest] if b in bucket)

